"""What the refusal of unstorable text (services/gateway/storable.py) costs a request: the walk over the decoded
body beside the JSON decoding FastAPI does for it anyway, measured on the same bodies in the same run.

    python -m bench.storable [--rounds 300]

Prints, per body shape, the p50/p95 (ms) of the decoding, of the scan of the bytes every JSON request gets, and of
the walk over the decoded body that a request whose bytes the scan flags gets (an escape of a NUL or a surrogate,
or a false alarm), with the ratio of each to the decoding. In process, no stack: the check reads no byte again
and makes no call.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

from bench.common import corpus, percentiles
from shared.memory.storable import check_storable, may_hold_unstorable


def _bodies() -> dict[str, bytes]:
    texts = corpus(2000)
    metadata = {f"key_{i}": {"note": texts[i], "n": i, "seen": [texts[i + 1][:20], True]} for i in range(10)}
    return {
        "add (one memory, 10 metadata keys)": json.dumps(
            {"content": texts[0], "tags": ["a", "b"], "metadata": metadata}
        ).encode(),
        "add (64 KB content)": json.dumps({"content": " ".join(texts)[:65536]}).encode(),
        "batch (1,000 items with tags and metadata)": json.dumps(
            {
                "items": [
                    {"content": t, "tags": ["x"], "metadata": {"i": i, "s": t[:16]}} for i, t in enumerate(texts[:1000])
                ]
            }
        ).encode(),
        "metadata (2,000 keys, nested)": json.dumps(
            {
                "content": "a note",
                "metadata": {f"k{i}": {"v": texts[i][:40], "l": [i, texts[i][:8]]} for i in range(2000)},
            }
        ).encode(),
    }


def _timed(step: Callable[[], Any], rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        step()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    print(
        f"{'body':44} {'bytes':>9} {'decode p50/p95':>16} {'scan p50/p95':>16} {'ratio':>6} "
        f"{'walk p50/p95':>16} {'ratio':>6}"
    )
    for name, raw in _bodies().items():
        decoded = json.loads(raw)
        decode = percentiles(_timed(lambda raw=raw: json.loads(raw), args.rounds))
        scan = percentiles(_timed(lambda raw=raw: may_hold_unstorable(raw), args.rounds))
        walk = percentiles(_timed(lambda decoded=decoded: check_storable(decoded), args.rounds))
        print(
            f"{name:44} {len(raw):>9,} {decode['p50']:>7.3f}/{decode['p95']:<8.3f} "
            f"{scan['p50']:>7.3f}/{scan['p95']:<8.3f} {scan['p50'] / decode['p50']:>6.2f} "
            f"{walk['p50']:>7.3f}/{walk['p95']:<8.3f} {walk['p50'] / decode['p50']:>6.2f}"
        )


if __name__ == "__main__":
    main()
