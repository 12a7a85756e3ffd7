"""Decompression and expansion bombs in every container format, through a real ingest worker.

Each bomb ends as a failed document with a reason a person can read, or a small success; the worker's pool
processes survive them all and still ingest a normal document afterwards; the sandbox children stay under
their memory cap and the worker's own processes do not grow. The worker here is this module's own (its own
Redis database, so nothing else takes its jobs), with a 1 GiB parser cap so bombs hit it quickly.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import re
import secrets
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from sqlalchemy import text

from shared.config import Settings
from shared.ingest import intake, sniff
from shared.jobs import ALL_QUEUES, IngestDocument
from shared.queueing import make_celery, send
from shared.storage import jobs as job_store
from tests.conftest import running, service_env, worker_args
from tests.security import bombs
from tests.security.canary import Canary
from tests.unit.ingest import samples

pytestmark = pytest.mark.integration

MIB = 1024 * 1024
PARSER_MEMORY_MB = 1024
WORKER = "tests-bombs"
TOKEN = f"xxe-{secrets.token_hex(8)}"  # in a file an external entity points at: must never be ingested


@dataclass
class Case:
    make: Callable[[Path], Path]
    failure: str | None  # the failed document's error must match this; None: it succeeds, small


def _cases(secret_file: Path, canary_port: int) -> dict[str, Case]:
    laughs = (bombs.LAUGHS_DTD, bombs.LAUGHS)
    xxe = f'<!ENTITY xxe SYSTEM "file://{secret_file}"><!ENTITY net SYSTEM "http://127.0.0.1:{canary_port}/x">'
    outside = (xxe, "&xxe; &net;")
    memory = r"exceeded the memory limit of 1 GiB|crashed \(signal \w+\), most likely at the memory limit"
    unresolved = r"could not be parsed \(RuntimeError: Pandoc died .*UnresolvedEntity"
    return {
        "docx zip bomb": Case(lambda d: bombs.docx_zip_bomb(d / "bomb.docx", 300), memory),
        "xlsx zip bomb": Case(lambda d: bombs.xlsx_zip_bomb(d / "bomb.xlsx", 300), memory),
        "epub zip bomb": Case(lambda d: bombs.epub_zip_bomb(d / "bomb.epub", 300), memory),
        "odt zip bomb": Case(lambda d: bombs.odt_zip_bomb(d / "bomb.odt", 300), memory),
        "pdf stream bomb": Case(lambda d: bombs.pdf_stream_bomb(d / "bomb.pdf", 300), memory),
        "pdf nested 100,000 deep": Case(lambda d: bombs.pdf_nested(d / "nested.pdf", 100_000), None),
        "docx billion laughs": Case(
            lambda d: bombs.docx_with_entities(d / "laughs.docx", *laughs),
            r"could not be parsed \(XMLSyntaxError: .*amplification",
        ),
        "odt billion laughs": Case(lambda d: bombs.odt_with_entities(d / "laughs.odt", *laughs), unresolved),
        "epub billion laughs": Case(lambda d: bombs.epub_with_entities(d / "laughs.epub", *laughs), None),
        "html billion laughs": Case(lambda d: bombs.html_with_entities(d / "laughs.html", *laughs), None),
        "xml billion laughs": Case(lambda d: bombs.xml_with_entities(d / "laughs.xml", *laughs), None),
        "docx external entities": Case(lambda d: bombs.docx_with_entities(d / "xxe.docx", *outside), None),
        "odt external entities": Case(lambda d: bombs.odt_with_entities(d / "xxe.odt", *outside), unresolved),
        "epub external entities": Case(lambda d: bombs.epub_with_entities(d / "xxe.epub", *outside), None),
        "html external entities": Case(lambda d: bombs.html_with_entities(d / "xxe.html", *outside), None),
        "xml external entities": Case(lambda d: bombs.xml_with_entities(d / "xxe.xml", *outside), None),
    }


def _own_redis_database(url: str, number: int) -> str:
    base, _, last = url.rpartition("/")
    return f"{base}/{number}" if last.isdigit() else f"{url.rstrip('/')}/{number}"


@dataclass
class Stack:
    settings: Settings
    process: psutil.Process
    app: object


@pytest.fixture(scope="module")
def stack(servers, tmp_path_factory) -> Iterator[Stack]:
    redis_url = _own_redis_database(servers["redis_url"], 11)
    settings = Settings(
        database_url=servers["database_url"], redis_url=redis_url, environment="test", embedding_provider="synthetic"
    )
    env = service_env(
        servers,
        REDIS_URL=redis_url,
        MNEMOFLOW_INGEST_PARSE_MEMORY_MB=str(PARSER_MEMORY_MB),
        MNEMOFLOW_INGEST_PARSE_TIMEOUT_SECONDS="60",
    )
    log = tmp_path_factory.mktemp("logs") / "bomb-worker.log"
    from infra.processes import wait_for_worker

    with running(worker_args(WORKER, ALL_QUEUES), env, log) as proc:
        wait_for_worker(settings, WORKER, proc, log_path=log)
        app = make_celery(settings, "tests.bombs")
        try:
            yield Stack(settings, psutil.Process(proc.pid), app)
        finally:
            app.close()


def _stage(db, tenant: str, path: Path) -> intake.Accepted:
    data = path.read_bytes()
    with db.session(tenant) as s:
        return intake.accept_upload(
            s,
            user_id=tenant,
            source=io.BytesIO(data),
            digest=hashlib.sha256(data).hexdigest(),
            size=len(data),
            fmt=sniff(data),
            filename=path.name,
            declared_type=None,
            params={},
        )


def _wait(db, job_ids: list[uuid.UUID], timeout: float = 600.0) -> dict[uuid.UUID, dict]:
    deadline = time.monotonic() + timeout
    ended: dict[uuid.UUID, dict] = {}
    while time.monotonic() < deadline and len(ended) < len(job_ids):
        with db.session() as s:
            for job_id in job_ids:
                job = job_store.get_job(s, job_id)
                if job is not None and job["status"] in ("succeeded", "failed"):
                    ended[job_id] = job
        time.sleep(0.25)
    assert len(ended) == len(job_ids), f"{len(job_ids) - len(ended)} jobs did not end in {timeout:.0f} s"
    return ended


class _Peaks:
    """Peak RSS of the worker's own processes (main, pool, forkservers) and of any one sandbox child, sampled."""

    def __init__(self, worker: psutil.Process) -> None:
        self.worker = worker
        self._settle()
        self.own_peak = self.own_now()
        self.own_start = self.own_peak
        self.child_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _split(self) -> tuple[list[psutil.Process], list[psutil.Process]]:
        own, children = [self.worker], []
        for pool in self.worker.children():
            own.append(pool)
            for helper in pool.children():  # the forkserver and the resource tracker
                own.append(helper)
                children.extend(helper.children(recursive=True))  # the forkserver's: sandbox children
        return own, children

    def own_now(self) -> int:
        return sum(_rss(p) for p in self._split()[0])

    def _settle(self, timeout: float = 180) -> None:
        """Wait until every pool process has started its parser forkserver and their memory holds still: the
        forkserver imports the parsers in the background (seconds, more on a loaded machine), and a baseline taken
        before that counted its imports as the bombs' doing."""
        deadline = time.monotonic() + timeout
        recent: list[int] = []
        while time.monotonic() < deadline:
            with contextlib.suppress(psutil.Error):
                pools = self.worker.children()
                if pools and all(pool.children() for pool in pools):
                    recent = [*recent[-5:], self.own_now()]
                    if len(recent) == 6 and max(recent) - min(recent) < 16 * MIB:
                        return
            time.sleep(0.5)
        raise AssertionError(f"the worker's memory did not settle within {timeout:.0f} s: {recent}")

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                own, children = self._split()
            except psutil.Error:
                continue
            self.own_peak = max(self.own_peak, sum(_rss(p) for p in own))
            self.child_peak = max([self.child_peak, *(_rss(p) for p in children)])
            self._stop.wait(0.1)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def _rss(process: psutil.Process) -> int:
    try:
        return process.memory_info().rss
    except psutil.Error:
        return 0


@dataclass
class Outcome:
    job: dict
    document: dict
    contents: list[str]


@pytest.fixture(scope="module")
def outcomes(stack: Stack, app_db) -> Iterator[tuple[dict[str, Outcome], dict]]:
    """Every bomb ingested at once by the bomb worker; what became of each, and how the worker fared."""
    folder = Path(tempfile.mkdtemp(prefix="mnemoflow-bombs-"))
    folder.chmod(0o755)  # the external entities' target must be readable by the parser's uid: it must still not leak
    secret_file = folder / "secret.txt"
    secret_file.write_text(TOKEN)
    secret_file.chmod(0o644)
    canary = Canary("::")
    tenant = f"t-bombs-{secrets.token_hex(4)}"
    db = app_db.bound(tenant)
    try:
        cases = _cases(secret_file, canary.port)
        staged = {name: _stage(db, tenant, case.make(folder)) for name, case in cases.items()}
        pool_before = sorted(p.pid for p in stack.process.children())
        peaks = _Peaks(stack.process)
        send(stack.app, *(IngestDocument(job_id=a.job_id, user_id=tenant) for a in staged.values()))
        jobs = _wait(db, [a.job_id for a in staged.values()])
        peaks.stop()
        results = {}
        with db.session() as s:
            for name, accepted in staged.items():
                ids = {"d": accepted.document_id}
                row = s.execute(text("SELECT status, error FROM documents WHERE id = :d"), ids).mappings().one()
                document = dict(row)
                contents = s.execute(
                    text("SELECT content FROM memories WHERE document_id = :d ORDER BY chunk_index"), ids
                ).scalars()
                results[name] = Outcome(jobs[accepted.job_id], document, list(contents))
        health = {
            "pool_before": pool_before,
            "pool_after": sorted(p.pid for p in stack.process.children()),
            "own_start": peaks.own_start,
            "own_peak": peaks.own_peak,
            "child_peak": peaks.child_peak,
            "canary": canary.connections,
        }
        yield results, health
    finally:
        canary.close()
        shutil.rmtree(folder, ignore_errors=True)


EXPECTED = {name: case.failure for name, case in _cases(Path("/nonexistent"), 0).items()}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_a_bomb_fails_its_document_with_a_reason_or_yields_a_little_text(name, outcomes):
    results, _ = outcomes
    outcome = results[name]
    expected = EXPECTED[name]
    everything = "\n".join(outcome.contents)
    if expected is None:
        assert outcome.job["status"] == "succeeded" and outcome.document["status"] == "done", outcome.job["error"]
        assert 0 < len(everything) < 20_000  # a few sentences, nothing expanded
    else:
        assert outcome.job["status"] == "failed" and outcome.document["status"] == "failed", (name, outcome.job)
        assert outcome.job["attempts"] == 1, outcome.job  # a bomb is not retried
        assert re.search(expected, outcome.document["error"], re.S), outcome.document["error"]
        assert outcome.contents == []
    assert "lollollol" not in everything  # no entity was expanded
    assert TOKEN not in everything  # no external entity was read


def test_the_worker_survives_every_bomb_with_bounded_memory(outcomes, stack: Stack, db, tenant, tmp_path):
    _, health = outcomes
    assert health["canary"] == 0  # no external entity was fetched either
    # The same pool processes, none restarted: every bomb blew up in a sandbox child, not in the worker.
    assert health["pool_after"] == health["pool_before"]
    assert all(psutil.pid_exists(pid) for pid in health["pool_after"])
    assert 0 < health["child_peak"] <= PARSER_MEMORY_MB * MIB
    assert health["own_peak"] - health["own_start"] < 256 * MIB, health
    # And it still ingests a normal document.
    accepted = _stage(db, tenant, samples.docx_file(tmp_path / "report.docx"))
    send(stack.app, IngestDocument(job_id=accepted.job_id, user_id=tenant))
    assert _wait(db, [accepted.job_id])[accepted.job_id]["status"] == "succeeded"
