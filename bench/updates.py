"""Facts that change: does a query return the current fact first, and nothing for a question about nothing?

    python -m bench.updates [--cases PATH] [--url URL] [--verbose]

The protocol of ../shared/data/updates-dev (its README): each case is one tenant, stored as a plain client stores
a conversation, turn by turn through `POST /memory/add` with only `content` and `metadata: {session_id,
timestamp}`. 30 everyday turns (case n takes filler[(7n + i) % 40], i = 0..29) in five sessions of six, dated
90, 75, 60, 30 and 15 days before now, each turn 2 minutes after the last; the case's `old` statement is the
3rd turn of session 1 and its `new` statement (the one that replaces it) the 4th turn of session 4. Once every
memory is settled, the case's question is asked at the defaults (k = 5, reinforcement on: a plain client sends
only `query`, `k` and `user_id`), then one off-topic question (off_topic[n % 10]).

Printed, each out of the cases: newest first (the new memory is rank 1), newest above the stale (returned, and
above the old one or the old one not returned), newest in the top 5, stale first, blind (nothing returned) and
off-topic injected (anything returned). `--cases` scores another cases file of the same shape (the filler and
off-topic questions stay those of updates-dev unless `--context` names others). `--link`: before the questions,
each case's client links its new memory to its old one (`POST /memory/link`, `supersedes`), as a client that knows
the update would: what the read path makes of the link, apart from finding it.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from bench.common import gateway_at
from bench.embedding_quality import DATA, read_jsonl
from shared.memory.updates import change_cue

K = 5
SESSION_DAYS_AGO = (90, 75, 60, 30, 15)
TURNS_PER_SESSION = 6
OLD_AT = (0, 2)  # (session, index in it): the 3rd turn of session 1
NEW_AT = (3, 3)  # the 4th turn of session 4
TURN_GAP = timedelta(minutes=2)


@dataclass
class Case:
    id: str
    old: str
    new: str
    question: str


@dataclass
class Outcome:
    case: Case
    new_rank: int | None  # 1-based; None: not returned
    old_rank: int | None
    returned: int
    off_topic: str
    off_topic_returned: int
    decided: dict[str, Any] | None = None  # the write-time decision that superseded the old statement, if one did

    @property
    def newest_first(self) -> bool:
        return self.new_rank == 1

    @property
    def newest_above_stale(self) -> bool:
        return self.new_rank is not None and (self.old_rank is None or self.new_rank < self.old_rank)

    @property
    def newest_in_top(self) -> bool:
        return self.new_rank is not None and self.new_rank <= K

    @property
    def stale_first(self) -> bool:
        return self.old_rank == 1


def conversation(n: int, case: Case, filler: list[str], now: datetime) -> list[tuple[str, str, datetime]]:
    """Case n's turns in order: (content, session id, when)."""
    turns: list[tuple[str, str, datetime]] = []
    fill = iter(filler[(7 * n + i) % len(filler)] for i in range(len(SESSION_DAYS_AGO) * TURNS_PER_SESSION))
    for s, days_ago in enumerate(SESSION_DAYS_AGO):
        texts = [next(fill) for _ in range(TURNS_PER_SESSION)]
        for at, text in ((OLD_AT, case.old), (NEW_AT, case.new)):
            if at[0] == s:
                texts.insert(at[1], text)
        start = now - timedelta(days=days_ago)
        turns += [(text, f"{case.id}-session-{s + 1}", start + i * TURN_GAP) for i, text in enumerate(texts)]
    return turns


def store_case(
    base_url: str, tenant: str, turns: list[tuple[str, str, datetime]], timings: list[tuple[bool, float]] | None = None
) -> dict[str, str]:
    """Add the turns one by one as a plain client; returns content -> memory id. `timings` gets each add's
    (whether its text has a change cue, milliseconds)."""
    ids: dict[str, str] = {}
    with httpx.Client(base_url=base_url, timeout=300) as client:
        for content, session, when in turns:
            metadata = {"session_id": session, "timestamp": when.isoformat()}
            body = {"content": content, "user_id": tenant, "metadata": metadata}
            started = time.perf_counter()
            response = client.post("/memory/add", json=body)
            response.raise_for_status()
            if timings is not None:
                timings.append((change_cue(content) is not None, (time.perf_counter() - started) * 1000))
            ids.setdefault(content, response.json()["id"])
    return ids


def add_latency(timings: list[tuple[bool, float]]) -> str:
    """p50 / p95 of the adds with and without a change cue (only those pay for the update check)."""
    parts = []
    for cue, name in ((False, "without a change cue"), (True, "with one")):
        ms = sorted(t for c, t in timings if c is cue)
        if ms:
            parts.append(f"{name} p50 {ms[len(ms) // 2]:.1f} / p95 {ms[int(len(ms) * 0.95)]:.1f} ms ({len(ms)})")
    return "add latency: " + ", ".join(parts)


def settled(client: httpx.Client, tenants: list[str], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    for tenant in tenants:
        while client.get("/sectors", params={"user_id": tenant}).json()["index"]["fresh_vectors"]:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{tenant}'s fresh vectors were not merged in {timeout:.0f} s")
            time.sleep(0.5)


def ask(client: httpx.Client, tenant: str, question: str) -> list[str]:
    """The ids a plain client's query returns: only `query`, `k` and `user_id`."""
    response = client.post("/memory/query", json={"query": question, "k": K, "user_id": tenant})
    response.raise_for_status()
    return [m["id"] for m in response.json()["matches"]]


def rank(ids: list[str], memory_id: str | None) -> int | None:
    return ids.index(memory_id) + 1 if memory_id in ids else None


def link_updates(client: httpx.Client, tenant: str, case: Case, ids: dict[str, str]) -> None:
    body = {"src_id": ids[case.new], "dst_id": ids[case.old], "kind": "supersedes", "user_id": tenant}
    client.post("/memory/link", json=body).raise_for_status()


def run(
    base_url: str, cases: list[Case], context: dict[str, list[str]], prefix: str, *, link: bool = False
) -> list[Outcome]:
    now = datetime.now(UTC)
    tenants = [f"{prefix}updates-{case.id}" for case in cases]
    conversations = [conversation(n, case, context["filler"], now) for n, case in enumerate(cases)]
    timings: list[tuple[bool, float]] = []
    with ThreadPoolExecutor(max_workers=4) as pool:
        stored = list(
            pool.map(lambda pair: store_case(base_url, *pair, timings), zip(tenants, conversations, strict=True))
        )
    print(add_latency(timings))
    outcomes = []
    with httpx.Client(base_url=base_url, timeout=300) as client:
        settled(client, tenants)
        if link:
            for case, tenant, ids in zip(cases, tenants, stored, strict=True):
                link_updates(client, tenant, case, ids)
        for n, (case, tenant, ids) in enumerate(zip(cases, tenants, stored, strict=True)):
            found = ask(client, tenant, case.question)
            off_topic = context["off_topic"][n % len(context["off_topic"])]
            outcomes.append(
                Outcome(
                    case,
                    rank(found, ids.get(case.new)),
                    rank(found, ids.get(case.old)),
                    len(found),
                    off_topic,
                    len(ask(client, tenant, off_topic)),
                    decision(client, tenant, ids.get(case.old)),
                )
            )
    return outcomes


def decision(client: httpx.Client, tenant: str, old_id: str | None) -> dict[str, Any] | None:
    """The detail (cue, cosine, margin) of the write-time decision that superseded `old_id`, if one did."""
    if old_id is None:
        return None
    history = client.get(f"/memory/{old_id}/history", params={"user_id": tenant}).json()["items"]
    return next((c["detail"] for c in history if c["event"] == "superseded" and c["detail"].get("by") == "write"), None)


def report(outcomes: list[Outcome], *, verbose: bool) -> None:
    n = len(outcomes)
    if verbose:
        print(f"{'case':8} {'new':>4} {'old':>4} {'got':>4} {'off':>4}  {'found by (cue cosine margin)':30} question")
        for o in outcomes:
            d = o.decided
            found = f"{d.get('cue')!r} {d.get('similarity')} {d.get('margin', '-')}" if d else "-"
            print(
                f"{o.case.id:8} {o.new_rank or '-':>4} {o.old_rank or '-':>4} {o.returned:>4} "
                f"{o.off_topic_returned:>4}  {found:30} {o.case.question}"
            )
        print()
    rows = (
        ("newest first", sum(o.newest_first for o in outcomes)),
        ("newest above the stale", sum(o.newest_above_stale for o in outcomes)),
        (f"newest in the top {K}", sum(o.newest_in_top for o in outcomes)),
        ("stale first", sum(o.stale_first for o in outcomes)),
        ("blind", sum(o.returned == 0 for o in outcomes)),
        ("off-topic injected", sum(o.off_topic_returned > 0 for o in outcomes)),
    )
    for name, count in rows:
        print(f"  {name:24} {count:>3} of {n}  ({count / n:.0%})")


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.updates", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cases", type=Path, default=DATA / "updates-dev" / "cases.jsonl", help="cases (JSON lines)")
    parser.add_argument(
        "--context",
        type=Path,
        default=DATA / "updates-dev" / "context.json",
        help="filler turns and off-topic questions",
    )
    parser.add_argument("--provider", default="local", choices=["synthetic", "local", "static"])
    parser.add_argument("--url", help="use this running gateway instead of a private stack (tenants get a run id)")
    parser.add_argument("--verbose", action="store_true", help="print each case's ranks")
    parser.add_argument("--link", action="store_true", help="link each new memory to its old one (supersedes) first")
    args = parser.parse_args()
    cases = [Case(**{k: row[k] for k in ("id", "old", "new", "question")}) for row in read_jsonl(args.cases)]
    context: dict[str, Any] = json.loads(args.context.read_text())
    prefix = f"u{uuid.uuid4().hex[:6]}-" if args.url else ""
    started = time.perf_counter()
    with (
        gateway_at(args.url, provider=args.provider, database="bench_updates") as base,
        httpx.Client(base_url=base, timeout=60) as client,
    ):
        health = client.get("/health").json()["embedding"]
        linked = ", each update linked by its client" if args.link else ""
        print(f"provider {health['provider']} ({health['model']}), {len(cases)} cases from {args.cases}{linked}")
        outcomes = run(base, cases, context, prefix, link=args.link)
    report(outcomes, verbose=args.verbose)
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
