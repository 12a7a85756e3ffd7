"""A Redis cache of hot-tier memory rows: what a query returns of a memory beyond what it scores with.

The read path scores from a lean fetch (ids, salience, tier, status, times, tags, cosine, links) and then
needs the payload (content, summary, metadata, document) of the few memories it returns. Hot memories
are the ones queries keep returning, so their payloads are kept here and the second round trip to
PostgreSQL is skipped when every returned memory is cached.

Invalidation needs no protocol: a key names the memory's `version`, which every write that changes the
payload raises (content, tags or metadata edits); only uncompressed rows are cached (compression and
regeneration rewrite the summary without a version), and a deleted memory is never asked for again
because the lean fetch no longer finds it. Stale entries simply expire. A Redis outage costs the cache,
never the query. Keys name their tenant, so erasing a tenant erases its entries (`forget_tenant`).

Each entry is sealed (shared/security/sealing.py) under its key: one written by anything without the key (a
process holding only the broker's password), or copied from another key, is read as a miss and counted, never
returned as a memory.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import redis

from shared.security.sealing import Sealer

log = logging.getLogger("mnemoflow.cache")

PAYLOAD_FIELDS = ("content", "summary", "metadata", "document_id")


def cacheable(row: Mapping[str, Any]) -> bool:
    """Hot-tier rows at full fidelity (a compressed row's summary changes without a new version)."""
    return row.get("tier") == "hot" and row.get("compression") == "full"


class HotRowCache:
    def __init__(
        self,
        client: redis.Redis,
        *,
        ttl_seconds: int,
        sealer: Sealer,
        prefix: str = "mnemoflow:row",
        on_lookup: Callable[[int, int], None] | None = None,
        on_bad_seal: Callable[[int], None] | None = None,
    ) -> None:
        self.client = client
        self.sealer = sealer
        self.on_bad_seal = on_bad_seal  # called with how many entries of a lookup failed their seal
        self.ttl_seconds = ttl_seconds
        self.prefix = prefix
        self.hits = 0
        self.misses = 0
        self.on_lookup = on_lookup  # called with each lookup's hits and misses (the gateway's metrics)

    def key(self, tenant: str, memory_id: uuid.UUID, version: int) -> str:
        # the tenant in braces (a user id has none), so its entries can be found and erased with it
        return f"{self.prefix}:{{{tenant}}}:{memory_id}:{version}"

    def get(self, rows: Sequence[Mapping[str, Any]]) -> dict[uuid.UUID, dict[str, Any]]:
        """The cached payloads of those `rows` (lean rows: user_id, id, version, tier, compression) that have one."""
        wanted = [r for r in rows if cacheable(r)]
        if not wanted:
            return {}
        keys = [self.key(r["user_id"], r["id"], r["version"]) for r in wanted]
        try:
            raw = self.client.mget(keys)
        except redis.RedisError as exc:
            log.warning("hot-row cache unavailable (%s); reading rows from the database", exc)
            return {}
        found: dict[uuid.UUID, dict[str, Any]] = {}
        broken = 0
        for row, key, value in zip(wanted, keys, raw, strict=True):
            if value is None:
                continue
            opened = self.sealer.open(key, value) if isinstance(value, bytes) else None
            if opened is None:
                broken += 1
                continue
            payload = json.loads(opened)
            if payload.get("document_id"):
                payload["document_id"] = uuid.UUID(payload["document_id"])
            found[row["id"]] = payload
        if broken:
            log.warning("hot-row cache: %d entries failed their seal; read from the database instead", broken)
            if self.on_bad_seal is not None:
                self.on_bad_seal(broken)
        self.hits += len(found)
        self.misses += len(wanted) - len(found)
        if self.on_lookup is not None:
            self.on_lookup(len(found), len(wanted) - len(found))
        return found

    def put(self, rows: Sequence[Mapping[str, Any]]) -> int:
        """Cache the payload of each cacheable full row (fetched from the database); how many were written."""
        fresh = [r for r in rows if cacheable(r)]
        if not fresh:
            return 0
        try:
            with self.client.pipeline(transaction=False) as pipe:
                for row in fresh:
                    payload = {name: row.get(name) for name in PAYLOAD_FIELDS}
                    key = self.key(row["user_id"], row["id"], row["version"])
                    value = json.dumps(payload, default=str).encode("utf-8")
                    pipe.set(key, self.sealer.seal(key, value), ex=self.ttl_seconds)
                pipe.execute()
        except redis.RedisError as exc:
            log.warning("hot-row cache unavailable (%s); rows not cached", exc)
            return 0
        return len(fresh)


def tenant_key_pattern(tenant: str, prefix: str = "mnemoflow:row") -> str:
    """A SCAN pattern matching every entry of `tenant` (a user id holds no glob character nor brace)."""
    return f"{prefix}:{{{tenant}}}:*"
