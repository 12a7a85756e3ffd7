"""infra/grafana: the dashboard's PromQL reads only metrics the gateway and the workers export (names read from
their registries and collectors, against a real database and broker), and its provisioning fits together."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import redis
import yaml
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY
from prometheus_client.metrics_core import Metric

import workers.metrics  # noqa: F401  (declares the workers' metrics in the default registry)
from services.gateway.app import create_app
from shared.jobs import ALL_QUEUES
from shared.monitoring.metrics import QueueDepths

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "infra" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "mnemoflow.json"

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGES = re.compile(r"\[[^\]]*\]")
_OFFSETS = re.compile(r"\boffset\s+-?[0-9a-z]+")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENTIFIER = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool", "and", "or", "unless"}


def metric_names(expr: str) -> set[str]:
    """The metric (sample) names a PromQL expression reads: identifiers that are not functions, keywords, labels,
    strings or durations."""
    for pattern in (_STRINGS, _MATCHERS, _RANGES, _OFFSETS, _GROUPING):
        expr = pattern.sub(" ", expr)
    return {
        match.group()
        for match in _IDENTIFIER.finditer(expr)
        if match.group() not in _KEYWORDS and not expr[match.end() :].lstrip().startswith("(")
    }


def sample_names(families: list[Metric]) -> set[str]:
    """Every sample name a family can expose, whether or not it has samples yet (a labelled counter before its
    first increment has none)."""
    suffixes = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created")}
    names: set[str] = set()
    for family in families:
        names |= {family.name + suffix for suffix in suffixes.get(family.type, ("",))}
        names |= {sample.name for sample in family.samples}
    return names


def panels() -> list[dict]:
    return [p for p in json.loads(DASHBOARD.read_text())["panels"] if p["type"] != "row"]


def test_the_metric_name_extraction_finds_names_and_only_names() -> None:
    expr = (
        'histogram_quantile(0.95, sum by (le, task) (rate(mnemoflow_a_bucket{route="/memory/query",x=~"b|c"}'
        "[$__rate_interval]))) / on (task) group_left max(mnemoflow_b) offset 5m"
    )
    assert metric_names(expr) == {"mnemoflow_a_bucket", "mnemoflow_b"}


def test_every_metric_the_dashboard_reads_is_exported(settings) -> None:
    with TestClient(create_app(settings)):  # the gateway's lifespan registers its collectors (documents, tiers, …)
        exported = sample_names(list(REGISTRY.collect()))
    depths = QueueDepths(lambda: redis.Redis.from_url(settings.redis_url), ALL_QUEUES, {})
    exported |= sample_names(list(depths.collect()))
    used = {name for panel in panels() for target in panel["targets"] for name in metric_names(target["expr"])}
    assert used, "no PromQL found in the dashboard"
    assert used - exported == set()
    # the panels the brief asks for read what they say: ingest, query latency, queue depth, tiers, the fresh tier's
    # backlog, task latency
    for needed in (
        "mnemoflow_worker_chunk_items_total",
        "mnemoflow_http_request_seconds_bucket",
        "mnemoflow_queue_depth",
        "mnemoflow_memories",
        "mnemoflow_fresh_vectors",
        "mnemoflow_worker_task_seconds_bucket",
        "mnemoflow_worker_tasks_total",
    ):
        assert needed in used, needed


def test_the_dashboard_and_its_provisioning_fit_together() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    (variable,) = [v for v in dashboard["templating"]["list"] if v["type"] == "datasource"]
    for panel in panels():
        assert panel["targets"], panel["title"]
        assert panel["datasource"]["uid"] == "${" + variable["name"] + "}", panel["title"]
    sources = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "prometheus.yml").read_text())
    assert variable["current"]["value"] in {s["uid"] for s in sources["datasources"]}
    providers = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "mnemoflow.yml").read_text())["providers"]
    assert [p["type"] for p in providers] == ["file"]


def test_the_example_scrape_config_reaches_every_worker_of_compose() -> None:
    scrape = yaml.safe_load((GRAFANA / "prometheus.yml").read_text())["scrape_configs"]
    jobs = {job["job_name"]: job for job in scrape}
    assert jobs["mnemoflow-gateway"]["authorization"]["type"] == "Bearer"  # /metrics is the operator's
    (workers_sd,) = jobs["mnemoflow-workers"]["dns_sd_configs"]
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    compose_workers = {name for name, s in services.items() if "worker" in (s.get("command") or [])}
    assert set(workers_sd["names"]) == compose_workers
    for name in compose_workers:
        environment = services[name]["environment"]
        assert int(environment["MNEMOFLOW_WORKER_METRICS_PORT"]) == workers_sd["port"], name
        assert environment["MNEMOFLOW_WORKER_METRICS_HOST"] == "0.0.0.0", name  # reachable on Compose's network
