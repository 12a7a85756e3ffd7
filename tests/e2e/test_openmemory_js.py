"""OpenMemory's own JavaScript SDK, `openmemory-js@0.3.0` installed from npm and unmodified, against the live stack:
every call outside its IDE and compression endpoints, made by a Node script (openmemory_js/calls.cjs) that prints
what each returned; the assertions are on content. Skipped only when `node` or `npm` is missing; the npm install is
cached under .pytest_cache."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import wait_for_job

pytestmark = pytest.mark.e2e

PACKAGE = "openmemory-js@0.3.0"
SCRIPT = Path(__file__).parent / "openmemory_js" / "calls.cjs"
SDK_CALLS = {  # every call of the SDK but its IDE and compression ones: 19
    "health", "getSectors", "add", "query", "querySector", "reinforce", "getAll", "getBySector", "getUserMemories",
    "getUserSummary", "regenerateUserSummary", "delete", "update", "getStats", "lgmStore", "lgmRetrieve",
    "lgmGetContext", "lgmCreateReflection", "lgmGetConfig",
}  # fmt: skip


@pytest.fixture(scope="module")
def node_modules(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """openmemory-js installed with npm once, kept in pytest's cache directory for the next runs (in a temporary
    directory when the cache is off)."""
    if not (shutil.which("node") and shutil.which("npm")):
        pytest.skip("node and npm are needed to run OpenMemory's JavaScript SDK")
    cache = getattr(request.config, "cache", None)  # absent under -p no:cacheprovider
    prefix = Path(cache.mkdir("openmemory-js-0.3.0") if cache else tmp_path_factory.mktemp("openmemory-js"))
    installed = prefix / "node_modules" / "openmemory-js" / "package.json"
    if not installed.exists() or json.loads(installed.read_text())["version"] != "0.3.0":
        done = subprocess.run(
            ["npm", "install", "--prefix", str(prefix), "--no-save", "--no-audit", "--no-fund", PACKAGE],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, f"npm install {PACKAGE} failed:\n{done.stdout}\n{done.stderr}"
    return prefix / "node_modules"


@pytest.fixture(scope="module")
def run(node_modules: Path, gateway: str, worker) -> dict[str, Any]:
    """One run of every call: the script's output, with the names it used."""
    names = {
        "OM_BASE_URL": gateway,
        "OM_USER_ID": f"om-{uuid.uuid4().hex[:10]}",
        "OM_NAMESPACE": f"ns-{uuid.uuid4().hex[:10]}",
        "OM_TOKEN": f"tok{uuid.uuid4().hex[:10]}",
    }
    done = subprocess.run(
        ["node", str(SCRIPT), str(node_modules)],
        env={**os.environ, **names},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    output = json.loads(done.stdout)
    output["calls"] = {call["name"]: call for call in output["calls"]}
    return output | {"names": names}


def result(run: dict[str, Any], name: str) -> Any:
    call = run["calls"][name]
    assert call["ok"], f"{name}: {call['error']}"
    return call["result"]


def test_every_call_of_the_sdk_but_ide_and_compression_succeeds(run):
    failed = {name: call["error"] for name, call in run["calls"].items() if not call["ok"]}
    assert failed == {}
    assert {name.split("#")[0] for name in run["calls"]} == SDK_CALLS


def test_what_was_added_comes_back_in_query_get_all_and_the_user_s_memories(run):
    ids, user = run["ids"], run["names"]["OM_USER_ID"]
    assert result(run, "health")["ok"] is True
    assert result(run, "getSectors")["sectors"] == ["episodic", "semantic", "procedural", "emotional", "reflective"]
    stats = {s["sector"]: s["count"] for s in result(run, "getStats")["stats"]}  # the default tenant's
    assert set(stats) == set(result(run, "getSectors")["sectors"]) and stats["semantic"] >= 1
    added = result(run, "add#0")
    assert added["user_id"] == user and added["primary_sector"] == "semantic" and added["tags"] == ["prefs"]
    assert ids["user0"] in [m["id"] for m in result(run, "query")["matches"]]
    assert ids["plain"] in [m["id"] for m in result(run, "querySector")["matches"]]
    everything = result(run, "getAll")["items"]
    assert ids["plain"] in [m["id"] for m in everything]  # the SDK's getAll names no user: the default tenant's
    for name in ("getAll#sector", "getBySector"):
        items = result(run, name)["items"]
        assert ids["plain"] in [m["id"] for m in items] and all("semantic" in m["sectors"] for m in items)
    mine = result(run, "getUserMemories")
    assert mine["user_id"] == user and mine["total"] == 4
    assert {m["id"] for m in mine["items"]} == {ids[f"user{i}"] for i in range(4)}
    first, second = result(run, "getUserMemories#page1"), result(run, "getUserMemories#page2")
    assert len(first["items"]) == len(second["items"]) == 2 and (first["offset"], second["offset"]) == (0, 2)
    assert {m["id"] for m in first["items"] + second["items"]} == {m["id"] for m in mine["items"]}


def test_id_only_calls_find_a_memory_added_with_a_user_id(run):
    ids, token = run["ids"], run["names"]["OM_TOKEN"]
    before = result(run, "add#0")["salience"]
    reinforced = result(run, "reinforce")
    assert reinforced["ok"] is True and reinforced["id"] == ids["user0"]
    assert reinforced["salience"] > before
    updated = result(run, "update")
    assert updated["id"] == ids["user3"] and updated["content"].endswith("on Sunday and planned a sailing trip")
    assert result(run, "delete") == {"ok": True, "id": ids["user1"]}
    after = {m["id"]: m for m in result(run, "getUserMemories#after")["items"]}
    assert ids["user1"] not in after and len(after) == 3
    assert (
        after[ids["user3"]]["content"]
        == f"{token}: Alice met Bruno at the harbour cafe on Sunday and planned a sailing trip"
    )
    assert after[ids["user0"]]["salience"] >= reinforced["salience"]  # the query's reinforcement may add to it


def test_the_user_summary_names_what_the_memories_say_and_regenerates_in_a_job(run, http):
    user, token = run["names"]["OM_USER_ID"], run["names"]["OM_TOKEN"]
    summary = result(run, "getUserSummary")
    assert summary["user_id"] == user and summary["memory_count"] == 4 and summary["reflection_count"] == 0
    for i in range(4):  # each memory is the one of its sector, so each is quoted
        assert result(run, f"add#{i}")["content"] in summary["summary"]
    assert {"alice", token.lower()} <= set(summary["top_terms"])
    assert {s["sector"]: s["count"] for s in summary["sectors"]} == {
        "semantic": 1,
        "emotional": 1,
        "procedural": 1,
        "episodic": 1,
    }
    regenerating = result(run, "regenerateUserSummary")
    assert regenerating["ok"] is True and regenerating["user_id"] == user and regenerating["summary"]
    job = wait_for_job(http, regenerating["job_id"], user)
    assert job["status"] == "succeeded" and job["kind"] == "summary"
    now = http.get(f"/users/{user}/summary").json()  # after the update and the delete
    assert now["memory_count"] == 3 and "marathon" not in now["summary"]
    assert "planned a sailing trip" in now["summary"] and "green tea" in now["summary"]


def test_langgraph_memory_keeps_each_node_in_its_sector_and_namespace(run, http):
    ns, token = run["names"]["OM_NAMESPACE"], run["names"]["OM_TOKEN"]
    stored = {node: result(run, f"lgmStore#{node}") for node in ("observe", "plan", "act", "emotion")}
    sectors = {"observe": "episodic", "plan": "semantic", "act": "procedural", "emotion": "emotional"}
    for node, answer in stored.items():
        memory = answer["memory"]
        assert (memory["node"], memory["primary_sector"], memory["namespace"]) == (node, sectors[node], ns)
        assert f"lgm:namespace:{ns}" in memory["tags"] and memory["metadata"]["lgm"]["namespace"] == ns
        assert answer["reflection"]["primary_sector"] == "reflective"  # OM_LG_REFLECTIVE: on by default
    assert stored["plan"]["memory"]["graph_id"] == "g1" and "lgm:graph:g1" in stored["plan"]["memory"]["tags"]
    assert stored["act"]["memory"]["metadata"]["step"] == 3
    elsewhere = result(run, "lgmStore#elsewhere")["memory"]["id"]

    found = result(run, "lgmRetrieve#query")
    assert (found["node"], found["sector"], found["namespace"]) == ("observe", "episodic", ns)
    found_ids = [i["id"] for i in found["items"]]
    assert stored["observe"]["memory"]["id"] in found_ids and elsewhere not in found_ids
    assert all(i["metadata"] is None and isinstance(i["score"], float) for i in found["items"])
    recent = result(run, "lgmRetrieve#recent")
    assert [i["id"] for i in recent["items"]] == [stored["plan"]["memory"]["id"]] and recent["query"] is None
    graph = result(run, "lgmRetrieve#graph")
    assert [i["metadata"]["lgm"]["graph_id"] for i in graph["items"]] == ["g1"]

    context = result(run, "lgmGetContext")
    assert [(n["node"], n["sector"]) for n in context["nodes"]] == [
        ("observe", "episodic"),
        ("plan", "semantic"),
        ("reflect", "reflective"),
        ("act", "procedural"),
        ("emotion", "emotional"),
    ]
    by_node = {n["node"]: [i["id"] for i in n["items"]] for n in context["nodes"]}
    for node in ("observe", "plan", "act", "emotion"):
        assert by_node[node] == [stored[node]["memory"]["id"]]
    assert len(by_node["reflect"]) == 4  # the automatic reflections; the other namespace's stays out
    assert f"- [observe] {token}: the user opened the billing page twice" in context["summary"]
    assert "another namespace" not in context["summary"]

    reflection = result(run, "lgmCreateReflection")["memory"]
    assert (reflection["node"], reflection["primary_sector"], reflection["namespace"]) == ("reflect", "reflective", ns)
    text = http.get(f"/memory/{reflection['id']}").json()["content"]  # by its id alone: no keys here
    assert text.startswith(f"Reflection synthesized from LangGraph context (namespace={ns})")
    assert f"[plan] {token}: plan to offer the user a discount code at checkout" in text
    assert "another namespace" not in text and "Recurring: " in text
    given = result(run, "lgmCreateReflection#content")["memory"]
    assert (
        http.get(f"/memory/{given['id']}").json()["content"] == f"{token}: discounts calm frustrated users at checkout"
    )

    assert result(run, "lgmGetConfig") == {
        "mode": "standard",
        "namespace_default": "default",
        "max_context": 50,
        "reflective": True,
        "node_sector_map": {
            "observe": "episodic",
            "plan": "semantic",
            "reflect": "reflective",
            "act": "procedural",
            "emotion": "emotional",
        },
    }


@pytest.mark.parametrize(
    ("method", "path", "named"),
    [("POST", "/api/ide/events", "IDE endpoints"), ("GET", "/api/compression/stats", "compression endpoints")],
)
def test_the_ide_and_compression_endpoints_say_they_are_not_supported(http: httpx.Client, method, path, named):
    answer = http.request(method, path, json={})
    assert answer.status_code == 404
    error = answer.json()["error"]
    assert named in error["message"] and "not supported" in error["message"]
