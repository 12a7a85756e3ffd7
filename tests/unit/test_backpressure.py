"""The backpressure parameters: bucket arithmetic, and the settings that give them."""

from __future__ import annotations

from shared.backpressure import (
    Bucket,
    ConnectionBudget,
    DatabaseLimits,
    Quota,
    RateLimits,
    Timeouts,
    default_gateway_workers,
    gateway_pool_for,
)
from shared.config import Settings


def test_a_request_larger_than_the_burst_takes_a_full_bucket_and_none_takes_nothing():
    bucket = Bucket(burst=100, per_second=10)
    assert (bucket.cost_of(1), bucket.cost_of(40), bucket.cost_of(5_000), bucket.cost_of(0)) == (1, 40, 100, 1)


def test_retry_after_is_whole_seconds_until_the_cost_fits_and_at_least_one():
    bucket = Bucket(burst=100, per_second=10)
    assert bucket.seconds_until(cost=25, tokens=0) == 3  # 2.5 s, rounded up
    assert bucket.seconds_until(cost=1, tokens=0.99) == 1
    assert Bucket(burst=1000, per_second=50).seconds_until(cost=1, tokens=0) == 1


def test_the_default_buckets_leave_heavy_ordinary_use_alone():
    limits = RateLimits()
    assert limits.writes.burst >= 3_000 + 50_000  # 3,000 adds back to back, then a batch of the largest size
    assert limits.queries.burst >= 1_000 and limits.queries.per_second * 60 >= 1_000  # 1,000 queries a minute
    assert limits.bucket(Quota.INGEST) is limits.ingest


def test_the_settings_give_the_groups_with_the_defaults_declared_in_their_dataclasses():
    s = Settings(_env_file=None, gateway_workers=1)  # one gateway process: today's pool
    assert s.rate_limits == RateLimits() and s.database_limits == DatabaseLimits()


def test_gateway_processes_default_to_half_the_cores_up_to_four_and_share_one_process_pool():
    assert [default_gateway_workers(cores) for cores in (1, 2, 3, 4, 6, 16)] == [1, 1, 1, 2, 3, 4]
    assert [gateway_pool_for(workers) for workers in (1, 2, 3, 4, 8)] == [15, 8, 5, 5, 5]
    s = Settings(_env_file=None, gateway_workers=3)
    assert s.gateway_processes == 3 and s.database_limits.gateway_pool_size == 5
    assert Settings(_env_file=None, gateway_workers=3, gateway_pool_size=9).database_limits.gateway_pool_size == 9


def test_the_connection_budget_counts_every_pool_and_names_what_to_change():
    budget = ConnectionBudget(gateway_processes=4, gateway_pool=5, fulltext_threads=16, worker_processes=3)
    assert budget.per_gateway == 2 * 5 + 16 + 4 and budget.total == 4 * 30 + 3 * 8 + 10
    assert budget.refusal(max_connections=200, reserved=3) is None
    refusal = budget.refusal(max_connections=100, reserved=3)
    assert refusal is not None and "154 connections" in refusal and "allows 97" in refusal
    assert "MNEMOFLOW_GATEWAY_WORKERS" in refusal and "MNEMOFLOW_GATEWAY_POOL_SIZE" in refusal


def test_the_groups_read_their_environment_names(monkeypatch):
    monkeypatch.setenv("MNEMOFLOW_RATE_LIMIT_QUERY_BURST", "7")
    monkeypatch.setenv("MNEMOFLOW_RATE_LIMIT_INGESTS_PER_SECOND", "0.5")
    monkeypatch.setenv("MNEMOFLOW_RATE_LIMITS_ENABLED", "false")
    monkeypatch.setenv("MNEMOFLOW_GATEWAY_STATEMENT_TIMEOUT_MS", "2500")
    monkeypatch.setenv("MNEMOFLOW_MAINTENANCE_LOCK_TIMEOUT_MS", "0")
    monkeypatch.setenv("MNEMOFLOW_GATEWAY_POOL_SIZE", "4")
    s = Settings(_env_file=None)
    assert s.rate_limits.queries == Bucket(7, RateLimits().queries.per_second)
    assert s.rate_limits.ingest.per_second == 0.5 and not s.rate_limits.enabled
    assert s.database_limits.gateway == Timeouts(2500, DatabaseLimits().gateway.lock_ms)
    assert s.database_limits.maintenance.lock_ms == 0 and s.database_limits.gateway_pool_size == 4
