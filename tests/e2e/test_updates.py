"""The updates protocol through the HTTP API, on a handful of the dev cases: a gateway process with the shipped
local model on a store of its own, each case stored turn by turn as a plain client would (`content` and
`metadata: {session_id, timestamp}`), then its question at the defaults. The update is found when it is stored,
the old statement answers as superseded, and its history says by what."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import httpx
import pytest

from bench.embedding_quality import DATA, read_jsonl
from bench.updates import Case, ask, conversation, rank, store_case
from infra.embedded import free_port
from infra.processes import gateway_command, wait_healthy
from tests.conftest import running, service_env

pytestmark = pytest.mark.e2e

CASES = ("upd-06", "upd-09", "upd-11", "upd-19")  # found and ranked first at the defaults


@pytest.fixture(scope="module")
def local_gateway(servers, make_store, tmp_path_factory):
    url, _ = make_store("e2e_updates")
    port = free_port()
    env = service_env(servers, DATABASE_URL=url, MNEMOFLOW_EMBEDDING_PROVIDER="local")
    log_path = tmp_path_factory.mktemp("logs") / "gateway-local.log"
    with running(gateway_command(host="127.0.0.1", port=port), env, log_path) as proc:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(base, proc, log_path=log_path)
        yield base


@pytest.mark.parametrize("case_id", CASES)
def test_the_current_fact_answers_and_the_stale_one_is_superseded(local_gateway, case_id):
    rows = read_jsonl(DATA / "updates-dev" / "cases.jsonl")
    n = next(i for i, row in enumerate(rows) if row["id"] == case_id)
    case = Case(**{k: rows[n][k] for k in ("id", "old", "new", "question")})
    filler = json.loads((DATA / "updates-dev" / "context.json").read_text())["filler"]
    tenant = f"e{uuid.uuid4().hex[:10]}"
    ids = store_case(local_gateway, tenant, conversation(n, case, filler, datetime.now(UTC)))
    with httpx.Client(base_url=local_gateway, timeout=60) as client:
        old = client.get(f"/memory/{ids[case.old]}", params={"user_id": tenant}).json()
        assert old["status"] == "superseded" and old["valid_to"] is not None
        history = client.get(f"/memory/{ids[case.old]}/history", params={"user_id": tenant}).json()["items"]
        assert [(c["event"], c["other_id"], c["detail"].get("by")) for c in history][-1] == (
            "superseded",
            ids[case.new],
            "write",
        )
        assert rank(ask(client, tenant, case.question), ids[case.new]) == 1
