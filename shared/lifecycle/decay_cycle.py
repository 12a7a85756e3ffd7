"""The decay cycle (decay seed, "Decay Process Lifecycle"), run by a Celery beat job on the maintenance queue.

One cycle: take the cycle lock (never two at once), skip while queries are active or within the cooldown after
the last run (scheduled cycles only: an operator's request runs now), plan a batch of `decay_ratio` of each
sector segment from a random start, then walk each segment in id order, one committed step at a time: a
set-based UPDATE decays salience and re-tiers the rows, and the few rows whose factor fell below 0.7 are
compressed or fingerprinted in the same transaction. Each step also moves the segment's cursor in the run's
row, so a process killed mid-cycle leaves every row either decayed once or not at all, and the next cycle
finishes the interrupted plan before anything else. One log line per cycle in the seed's format.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from shared.config import Settings
from shared.db import Database, is_deadlock
from shared.lifecycle.compression import (
    COMPRESSED,
    FINGERPRINTED,
    compress_summary,
    compression_target,
    fingerprint_summary,
    fingerprint_vector,
    pool_to,
)
from shared.model.statuses import RUN_ENDED, RunStatus
from shared.storage import decay_runs, decay_steps, locks
from shared.storage.decay_steps import CompressedMemory, DecayParams, VectorRow
from shared.storage.locks import Lock

log = logging.getLogger("mnemoflow.decay")

STEP_ROWS = 20_000  # memories per committed step


@dataclass
class CycleOptions:
    trigger: str = "schedule"  # 'schedule' obeys activity and cooldown; 'operator' runs now
    ratio: float | None = None  # None: the setting (OM_DECAY_RATIO)
    now: datetime | None = None  # injected in tests; wall clock otherwise
    step_rows: int = STEP_ROWS
    after_step: Callable[[int], None] | None = None  # called after each committed step (tests stop here)


@dataclass
class Compressions:
    compressed: int = 0
    fingerprinted: int = 0
    memories: list[CompressedMemory] = field(default_factory=list)
    vectors: list[VectorRow] = field(default_factory=list)


class DecayCycle:
    """Runs decay cycles against one store. `full_dims`: each sector's model dimension (its ladder's top)."""

    def __init__(
        self,
        db: Database,
        settings: Settings,
        full_dims: Mapping[str, int],
        *,
        active_queries: Callable[[], int] | None = None,
    ) -> None:
        self.db = db
        self.settings = settings
        self.schedule = settings.decay
        self.compression = settings.compression
        self.full_dims = dict(full_dims)
        self.active_queries = active_queries or (lambda: 0)
        self.rules = settings.tiers
        self.ladders = {sector: self.compression.ladder(dim) for sector, dim in self.full_dims.items()}
        self.timeouts = settings.database_limits.maintenance  # a step decays 20,000 rows in one statement

    def run(self, run_id: uuid.UUID | None = None, options: CycleOptions | None = None) -> dict[str, Any]:
        """Run (or skip) one cycle; returns its decay_runs row. `run_id`: the run's id, created queued if it does not
        exist yet (an operator's request creates its row first; a scheduled message's id is its task's). A second
        delivery finds the run ended and leaves it, or running under the lock and skips; a run left running by a
        dead process is resumed from its last committed step by whichever delivery takes the lock next."""
        options = options or CycleOptions()
        ratio = options.ratio or self.schedule.ratio
        with self.db.session() as session:
            run_id = decay_runs.create_run(session, trigger=options.trigger, ratio=ratio, run_id=run_id)
            existing = decay_runs.get_run(session, run_id)
            if existing is not None and existing["status"] in RUN_ENDED:
                return existing
        with self.db.engine.connect() as lock_conn:
            if not locks.try_hold(lock_conn, Lock.DECAY_CYCLE):  # one cycle at a time, store-wide
                return self._skip(run_id, "another decay cycle is running")
            try:
                return self._run_locked(run_id, ratio, options)
            finally:
                locks.release(lock_conn, Lock.DECAY_CYCLE)

    def _skip(self, run_id: uuid.UUID, reason: str) -> dict[str, Any]:
        log.info("[decay] skipped: %s", reason)
        with self.db.session() as session:
            return decay_runs.skip_run(session, run_id, reason)

    def _run_locked(self, run_id: uuid.UUID, ratio: float, options: CycleOptions) -> dict[str, Any]:
        now = options.now or datetime.now(UTC)
        started = time.monotonic()
        with self.db.session(timeouts=self.timeouts) as session:
            current = decay_runs.get_run(session, run_id)
            if current is not None and current["status"] in RUN_ENDED:  # another delivery ran it while we waited
                return current
            interrupted = decay_runs.interrupted_run(session)
            if interrupted is None and options.trigger == "schedule":
                active = self.active_queries()
                if active > 0:
                    reason = f"{active} quer{'y is' if active == 1 else 'ies are'} active"
                else:
                    since = decay_runs.seconds_since_last_run(session, now)
                    cooling = since is not None and since < self.schedule.cooldown_seconds
                    reason = f"cooldown: the last cycle finished {since:.0f}s ago" if cooling else ""
                if reason:
                    session.rollback()
                    return self._skip(run_id, reason)
            if interrupted is not None and interrupted["id"] != run_id:
                plan = interrupted["plan"]
                decay_runs.mark_resumed(session, interrupted["id"], run_id)
                decay_runs.carry_counts(session, interrupted["id"], run_id)
                log.warning("[decay] finishing the plan of interrupted run %s", interrupted["id"])
            elif interrupted is not None:
                plan = interrupted["plan"]
            else:
                plan = self._plan(session, ratio)
            if not decay_runs.start_run(session, run_id, plan):  # ended meanwhile: left as it is
                session.rollback()
                ended = decay_runs.get_run(session, run_id)
                assert ended is not None
                return ended
        try:
            self._walk(run_id, plan, now, options)
        except Exception as exc:
            # The row stays 'running': the next cycle resumes the plan from the last committed step.
            log.exception("[decay] run %s stopped: %s", run_id, exc)
            raise
        duration_ms = (time.monotonic() - started) * 1000
        with self.db.session() as session:
            row = decay_runs.finish_run(session, run_id, status=RunStatus.SUCCEEDED, duration_ms=duration_ms)
        log.info(format_line(row))
        return row

    def _plan(self, session: Any, ratio: float) -> list[dict[str, Any]]:
        """Decay seed, "Batch Processing": floor(segment_size × ratio) rows per segment from a random start."""
        plan = []
        for sector, size in sorted(decay_steps.segment_sizes(session).items()):
            quota = size if ratio >= 1.0 else max(1, int(size * ratio))
            offset = random.randint(0, size - quota)
            start = decay_steps.id_before(session, sector, offset)
            plan.append({"sector": sector, "quota": quota, "done": 0, "start": start, "after": start, "wrapped": False})
        return plan

    def _walk(self, run_id: uuid.UUID, plan: list[dict[str, Any]], now: datetime, options: CycleOptions) -> None:
        """The segments, `decay_threads` at a time (decay seed: OM_DECAY_THREADS), sleeping between segments."""
        pending = [i for i, segment in enumerate(plan) if not segment.get("finished")]
        threads = max(1, min(self.schedule.threads, len(pending)))
        if threads == 1:
            for i in pending:
                self._segment(run_id, i, plan[i], now, options)
            return
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="decay") as pool:
            for future in [pool.submit(self._segment, run_id, i, plan[i], now, options) for i in pending]:
                future.result()

    def _segment(
        self, run_id: uuid.UUID, index: int, segment: dict[str, Any], now: datetime, options: CycleOptions
    ) -> None:
        sector = segment["sector"]
        full_dim = self.full_dims.get(sector)
        ladder = self.ladders.get(sector) or [full_dim or 0]
        params = DecayParams(
            rules=self.rules,
            sector_scaling=self.schedule.sector_scaling,
            compress_below=self.compression.compress_below,
            cold_threshold=self.compression.cold_threshold,
            full_dim=full_dim or 0,
            min_dim=min(ladder),
        )
        cursor = {k: segment[k] for k in ("done", "after", "wrapped")}
        while cursor["done"] < segment["quota"]:
            limit = min(options.step_rows, segment["quota"] - cursor["done"])
            upto = segment["start"] if cursor["wrapped"] else decay_steps.MAX_UUID
            moved = self._step(run_id, index, sector, cursor, upto, limit, now, params)
            if moved is None:  # nothing left on this side of the start: wrap around once, then stop
                if cursor["wrapped"]:
                    break
                cursor = {"done": cursor["done"], "after": decay_steps.MIN_UUID, "wrapped": True}
                continue
            cursor = moved
            if options.after_step:
                options.after_step(index)
        with self.db.session() as session:
            decay_runs.finish_segment(session, run_id, index)
        if self.schedule.sleep_ms:
            time.sleep(self.schedule.sleep_ms / 1000)

    def _step(
        self,
        run_id: uuid.UUID,
        index: int,
        sector: str,
        cursor: dict[str, Any],
        upto: str,
        limit: int,
        now: datetime,
        params: DecayParams,
    ) -> dict[str, Any] | None:
        """One transaction: decay a batch, compress what fell below 0.7, move the cursor; returns the cursor
        past the batch (None: nothing left before `upto`). Retried on deadlock (a query's reinforcement may
        hold some of the same rows)."""
        for attempt in range(1, 4):
            try:
                with self.db.session(timeouts=self.timeouts) as session:
                    step = decay_steps.decay_step(
                        session, sector, after=cursor["after"], upto=upto, limit=limit, now=now, params=params
                    )
                    if step.processed == 0:
                        return None
                    done = self._compress(session, step.to_compress)
                    decay_steps.write_compressed(session, done.memories, done.vectors)
                    moved = {
                        "done": cursor["done"] + step.processed,
                        "after": str(step.last_id),
                        "wrapped": cursor["wrapped"],
                    }
                    decay_runs.record_step(
                        session,
                        run_id,
                        index,
                        moved,
                        step,
                        compressed=done.compressed,
                        fingerprinted=done.fingerprinted,
                    )
                return moved
            except Exception as exc:
                if not is_deadlock(exc) or attempt == 3:
                    raise
                log.warning("[decay] step deadlocked with another writer; retrying (%d)", attempt)
        raise AssertionError("unreachable")

    def _compress(self, session: Any, candidates: list[tuple[uuid.UUID, float]]) -> Compressions:
        """Decay seed, "Compression Mechanics": f < 0.7 pools the vectors to a smaller rung and condenses the
        summary; f < the cold threshold fingerprints (32-d hash vector on the memory's row, its vectors dropped,
        3 keywords). Content is never touched."""
        out = Compressions()
        if not candidates:
            return out
        factors = dict(candidates)
        rules = self.compression
        pool = {memory_id for memory_id, f in candidates if f >= rules.cold_threshold}
        rows = decay_steps.lock_for_compression(session, list(factors), with_vectors=pool)
        for memory_id, row in rows.items():
            f = factors[memory_id]
            if f < rules.cold_threshold:
                summary = fingerprint_summary(row.content)
                fingerprint = fingerprint_vector(str(memory_id), summary, rules.fingerprint_dim)
                out.memories.append(CompressedMemory(memory_id, summary, FINGERPRINTED, fingerprint=fingerprint))
                out.fingerprinted += 1
            else:
                pooled = [p for p in (self._pooled(v, f) for v in row.vectors) if p is not None]
                if not pooled:
                    continue  # already on the rung this factor asks for
                out.vectors += pooled
                primary_dim = next((p.dim for p in pooled if p.sector == row.primary_sector), None)
                if primary_dim is None:
                    primary_dim = next(v.dim for v in row.vectors if v.sector == row.primary_sector)
                summary = compress_summary(row.content, f, layers=rules.summary_layers)
                out.memories.append(CompressedMemory(memory_id, summary, COMPRESSED, vector_dim=primary_dim))
                out.compressed += 1
        return out

    def _pooled(self, vector: VectorRow, factor: float) -> VectorRow | None:
        full = self.full_dims.get(vector.sector)
        ladder = self.ladders.get(vector.sector)
        if full is None or ladder is None or vector.dim not in ladder:
            return None  # another model's vector (a re-embed is under way): left for the re-embed
        target = compression_target(vector.dim, full, factor, ladder)
        if target >= vector.dim:
            return None
        return VectorRow(vector.memory_id, vector.sector, target, vector.model, pool_to(vector.embedding, target))


def format_line(run: Mapping[str, Any]) -> str:
    """Decay seed, "Decay Logs": `[decay] 87/2891 | tiers: hot=342 warm=1456 cold=1093 | compressed=12
    fingerprinted=3 | 1247.3ms across 15 segments`."""
    return (
        f"[decay] {run['changed']}/{run['processed']} | tiers: hot={run['hot']} warm={run['warm']} cold={run['cold']}"
        f" | compressed={run['compressed']} fingerprinted={run['fingerprinted']}"
        f" | {float(run['duration_ms'] or 0):.1f}ms across {run['segments']} segments"
    )
