"""What the broker's protections cost per operation: signing and verifying a task message, sealing and opening a
cache entry (a hot row's payload, a query embedding), each beside its baseline in the same run, the JSON encoding
(or, for a vector, the bytes copy) the same path does anyway.

    python -m bench.seal                    # ~10 s
    python -m bench.seal --rounds 30 --ops 20000

Each figure is the median over --rounds rounds of --ops operations, in µs per operation; p95 over the rounds too.
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import time
import uuid
from collections.abc import Callable

import numpy as np

from shared.security.sealing import Sealer, seal_key
from shared.security.signing import sign, verify

KEY = secrets.token_urlsafe(32).encode()
CONTENT = (
    "Met Dana at the harbour cafe; she moved the design review to Thursday and wants the latency figures "
    "split by tenant before then. Bring the printed floor plan. "
) * 3  # ~480 characters: a typical memory
ROW = {"content": CONTENT, "summary": None, "metadata": {"session_id": "s-42", "source": "chat"}, "document_id": None}
ROW_KEY = f"mnemoflow:row:{{alice}}:{uuid.uuid4()}:3"
VECTOR = np.random.default_rng(7).standard_normal(384).astype(np.float32).tobytes()
VECTOR_KEY = "mnemoflow:qemb:local:all-MiniLM-L6-v2:384:{alice}:" + "ab" * 32
TASK = "mnemoflow.store_chunk"
TASK_ID = str(uuid.uuid4())
KWARGS = {"job_id": str(uuid.uuid4()), "seq": 3, "sector": "semantic", "user_id": "alice"}


def per_op(step: Callable[[], object], ops: int, rounds: int) -> tuple[float, float]:
    """Median and p95 over `rounds` of the µs one `step` takes."""
    figures = []
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(ops):
            step()
        figures.append((time.perf_counter() - started) / ops * 1e6)
    figures.sort()
    return statistics.median(figures), figures[min(len(figures) - 1, int(0.95 * len(figures)))]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.seal", description=__doc__)
    parser.add_argument("--ops", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    sealer = Sealer(seal_key(KEY))
    row_bytes = json.dumps(ROW, default=str).encode()
    sealed_row = sealer.seal(ROW_KEY, row_bytes)
    sealed_vector = sealer.seal(VECTOR_KEY, VECTOR)
    signature = sign(KEY, TASK_ID, TASK, [], KWARGS)
    cases = [
        # (what, baseline's name, baseline, with the protection)
        (
            "hot row: write",
            "json.dumps",
            lambda: json.dumps(ROW, default=str).encode(),
            lambda: sealer.seal(ROW_KEY, json.dumps(ROW, default=str).encode()),
        ),
        (
            "hot row: read",
            "json.loads",
            lambda: json.loads(row_bytes),
            lambda: json.loads(sealer.open(ROW_KEY, sealed_row) or b""),
        ),
        ("query embedding: write", "bytes copy", lambda: bytes(VECTOR), lambda: sealer.seal(VECTOR_KEY, VECTOR)),
        (
            "query embedding: read",
            "np.frombuffer",
            lambda: np.frombuffer(VECTOR, dtype=np.float32),
            lambda: np.frombuffer(sealer.open(VECTOR_KEY, sealed_vector) or b"", dtype=np.float32),
        ),
        ("task: sign", "json.dumps", lambda: json.dumps(KWARGS), lambda: sign(KEY, TASK_ID, TASK, [], KWARGS)),
        (
            "task: verify",
            "json.dumps",
            lambda: json.dumps(KWARGS),
            lambda: verify(KEY, signature, TASK_ID, TASK, [], KWARGS),
        ),
    ]
    print(f"{args.rounds} rounds of {args.ops} operations; µs per operation, median (p95 over the rounds)")
    print(
        f"row payload {len(row_bytes)} bytes, vector {len(VECTOR)} bytes, task kwargs {len(json.dumps(KWARGS))} bytes"
    )
    print(f"{'':24} {'baseline':>14} {'':>18} {'protected':>18} {'added':>8} {'ratio':>6}")
    for what, name, baseline, protected in cases:
        base, base95 = per_op(baseline, args.ops, args.rounds)
        cost, cost95 = per_op(protected, args.ops, args.rounds)
        print(
            f"{what:24} {name:>14} {base:7.2f} ({base95:6.2f}) {cost:10.2f} ({cost95:6.2f}) "
            f"{cost - base:+7.2f} {cost / base:5.1f}x"
        )


if __name__ == "__main__":
    main()
