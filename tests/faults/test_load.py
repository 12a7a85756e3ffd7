"""The load script's correctness checks on a shortened quick profile (the quick profile itself under
`make test-full`): under 64 concurrent queries and mixed clients no 5xx and no failed request, the queues drain
(every job succeeded, the broker's queues empty), and no acknowledged memory is lost or stored twice. Its figures
(latencies, batch times) are printed by `python -m bench.load --quick`, never asserted."""

from __future__ import annotations

import asyncio
import os
from dataclasses import replace

import pytest

from bench.load import QUICK, run_profile

pytestmark = pytest.mark.e2e

# The quick profile itself under `make test-full`; shortened (about 90 s here) otherwise.
SHORT = replace(QUICK, minutes=0.33, queries_per_client=5, seed_per_tenant=20, large_batch=2_000)
PROFILE = QUICK if os.environ.get("MNEMOFLOW_TEST_FULL") else SHORT


@pytest.mark.timeout(600)
def test_the_quick_load_profile_answers_everything_and_loses_nothing(gateway, worker, servers):
    report = asyncio.run(run_profile(gateway, servers["database_url"], servers["redis_url"], PROFILE))

    assert report.queries.requests == PROFILE.query_clients * PROFILE.queries_per_client
    assert (report.queries.server_errors, report.queries.errors) == (0, 0), report.queries
    for op, stats in report.mixed.items():
        assert stats.requests > 0, op
        assert (stats.server_errors, stats.errors, stats.throttled) == (0, 0, 0), (op, stats)
    drain = report.drain
    assert drain.drained, drain
    assert drain.expected_memories > 0 and (drain.lost, drain.duplicated) == (0, 0), drain
    assert set(drain.documents) == {"done"}, drain.documents
    assert report.merged  # nothing of the run is left for the background merge (and the tests after this one)
