"""shared/monitoring/metrics.py: the multiprocess directory summing forked processes' counts, and queue depths when
the broker does not answer (the real broker's depths: tests/integration/test_worker_metrics.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import redis

from shared.monitoring.metrics import BROKER_UP, QUEUE_DEPTH, QueueDepths

ROOT = Path(__file__).resolve().parents[3]

FORKED = """
    import json, os, sys
    from pathlib import Path
    from prometheus_client import Counter, generate_latest
    from prometheus_client.parser import text_string_to_metric_families
    from shared.monitoring import metrics

    directory = Path(sys.argv[1])
    (directory).mkdir()
    (directory / "counter_999999.db").write_bytes(b"an earlier run's file")
    metrics.use_directory(directory)
    done = Counter("tests_done", "done", ["who"])  # labelled: no value (no file) before .labels()
    for _ in range(3):
        pid = os.fork()
        if pid == 0:
            done.labels("child").inc(2)
            os._exit(0)
        os.waitpid(pid, 0)
    done.labels("parent").inc()
    summed = text_string_to_metric_families(generate_latest(metrics.registry()).decode())
    values = {s.labels["who"]: s.value for f in summed for s in f.samples if s.name == "tests_done_total"}
    print(json.dumps({"values": values, "files": sorted(p.name for p in directory.iterdir())}))
"""


def test_forked_processes_counts_are_summed_and_an_earlier_runs_files_dropped(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(FORKED), str(tmp_path / "metrics")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["values"] == {"child": 6.0, "parent": 1.0}  # three children that exited, each counted
    assert "counter_999999.db" not in out["files"]
    assert len(out["files"]) == 4  # one file per process that counted


def test_a_broker_that_does_not_answer_gives_broker_up_0_and_no_depths() -> None:
    def unreachable() -> redis.Redis:
        raise redis.ConnectionError("connection refused")

    families = list(QueueDepths(unreachable, ["ingest"], {}).collect())
    assert [(f.name, [s.value for s in f.samples]) for f in families] == [(BROKER_UP, [0])]
    assert QUEUE_DEPTH not in {f.name for f in families}
