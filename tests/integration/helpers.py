"""What the integration tests share: writing memories, asking the read path, reading BM25 statistics."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
from sqlalchemy import text

from shared.api.memories import MemoryCreate
from shared.api.query import QueryFilters, QueryRequest, RetrievalOptions
from shared.jobs import ChunkItem, ChunkSpec, SweepJobs
from shared.memory.engine import MemoryEngine
from shared.queueing import send
from shared.retrieval.service import QueryOutcome, Retriever
from shared.storage import jobs as job_store


def add(db, engine: MemoryEngine, tenant: str, content: str, **kw: Any) -> tuple[dict[str, Any], bool]:
    """Store one memory (a transaction of its own); (memory, deduplicated)."""
    with db.session(tenant) as s:
        memory, dedup = engine.add(s, tenant, MemoryCreate(content=content, **kw))
    return memory, dedup


def search(
    retriever: Retriever,
    session,
    tenant: str,
    query: str,
    *,
    k: int = 8,
    filters: QueryFilters | None = None,
    options: RetrievalOptions | None = None,
    now: datetime | None = None,
    side_session=None,
    **request: Any,
) -> QueryOutcome:
    """The read path asked as the gateway asks it: a QueryRequest (its other fields in `request`)."""
    asked = QueryRequest(
        query=query, k=k, filters=filters or QueryFilters(), retrieval=options or RetrievalOptions(), **request
    )
    return retriever.query(session, tenant, asked, now=now, side_session=side_session)


def query(db, retriever: Retriever, tenant: str, q: str, k: int = 8, **filters: Any) -> QueryOutcome:
    """`search` on a session of its own, with these filters."""
    with db.session(tenant) as s:
        return search(retriever, s, tenant, q, k=k, filters=QueryFilters(**filters))


def item(content: str, **fields: Any) -> dict[str, Any]:
    """A job chunk's item as the planners store it (`position`, `context`, `classified`, ...)."""
    return ChunkItem(content=content, **fields).stored()


def term_df(db, tenant: str, lexeme: str) -> int | None:
    with db.session(tenant) as s:
        return s.execute(
            text("SELECT df FROM term_stats WHERE user_id = :u AND lexeme = :l"), {"u": tenant, "l": lexeme}
        ).scalar_one_or_none()


def documents(db, tenant: str) -> int:
    with db.session(tenant) as s:
        return s.execute(text("SELECT documents FROM tenant_stats WHERE user_id = :u"), {"u": tenant}).scalar_one()


def contents(db, ids: list[uuid.UUID]) -> list[Any]:
    with db.session() as s:
        return s.execute(text("SELECT content FROM memories WHERE id = ANY(:ids)"), {"ids": ids}).all()


def stored_vector(db, memory_id):
    with db.session() as s:
        raw = s.execute(
            text("SELECT embedding::text FROM memory_vectors WHERE memory_id = :id ORDER BY sector LIMIT 1"),
            {"id": memory_id},
        ).scalar_one()
    return np.array(json.loads(raw), dtype=np.float32)


def embedded_after(engine, content, context):
    return engine.embedder.embed_in_context([content], [context])[0]


def make_job(db, tenant, items, sector="semantic"):
    with db.session(tenant) as s:
        job_id, _ = job_store.create_job(
            s, user_id=tenant, kind="batch", total=len(items), params={}, idempotency_key=None
        )
        job_store.add_chunks(s, job_id, [ChunkSpec(0, sector, items)])
    return job_id


def job_state(db, job_id):
    with db.session() as s:
        return job_store.get_job(s, job_id)


def wait_until(predicate, timeout=90.0, interval=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("condition not reached in time")


def memory_count(db, tenant):
    with db.session(tenant) as s:
        return s.execute(text("SELECT count(*) FROM memories WHERE user_id = :u"), {"u": tenant}).scalar_one()


@contextlib.contextmanager
def sweeping(app: Any, every: float = 1.0) -> Iterator[None]:
    """Beat's job, faster: send the sweeper's message every `every` s until the block ends (a send fails quietly
    while the broker is down, as beat's would)."""
    done = threading.Event()

    def loop() -> None:
        while not done.wait(every):
            with contextlib.suppress(Exception):
                send(app, SweepJobs())

    thread = threading.Thread(target=loop, name="test-sweeper", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(5)


@contextlib.contextmanager
def trickling(seconds: int) -> Iterator[str]:
    """A loopback site whose every page is served a paragraph a second for `seconds`: an extraction that is
    healthy, slow whatever the machine's speed, and renews its lease all along. Yields the site's base URL."""

    class Trickle(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.end_headers()
            for i in range(seconds):
                self.wfile.write(f"Slow ledger {self.path} line {i}: the tide gauge read {i} at dawn.\n\n".encode())
                self.wfile.flush()
                time.sleep(1)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
