"""The Python client installs on its own: `pip install clients/python` into a fresh virtual environment brings the
client, httpx, pydantic and what they need, nothing of the server; its wheel holds the schemas themselves (not a
link back into the repository), and it talks to a live gateway from there."""

from __future__ import annotations

import json
import shutil
import subprocess
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SERVER_ONLY = {"sqlalchemy", "celery", "fastapi", "starlette", "numpy", "redis", "psycopg", "typer", "rich", "tenacity"}
# What pip cannot do without an index to reach: then the test is skipped, not failed.
OFFLINE = ("Could not find a version", "No matching distribution", "Failed to establish", "Network is unreachable")

# Run inside the fresh environment: what is installed, where the schemas come from, and a call to the gateway.
PROBE = """
import importlib.metadata as metadata, json, sys
import mnemoflow_client
from mnemoflow_client import Mnemoflow
from mnemoflow_client.schemas import common

from pip._vendor.packaging.requirements import Requirement  # pip is in every venv; packaging may not be

def closure(name, seen):
    key = name.lower().replace("_", "-")
    if key in seen:
        return seen
    seen.add(key)
    for text in metadata.requires(name) or []:
        requirement = Requirement(text)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            closure(requirement.name, seen)
    return seen

gateway, tenant = sys.argv[1], sys.argv[2]
with Mnemoflow(gateway, user_id=tenant) as client:
    added = client.add("installed on its own, the client still remembers")
    found = client.query("client remembers", min_score=0)
print(json.dumps({
    "installed": sorted(d.metadata["Name"].lower().replace("_", "-") for d in metadata.distributions()),
    "needed": sorted(closure("mnemoflow-client", set())),
    "package": mnemoflow_client.__file__,
    "schemas": common.__file__,
    "modules": sorted(m.split(".")[0] for m in sys.modules),
    "added": str(added.id),
    "found": [str(m.id) for m in found.matches],
}))
"""


def test_the_client_installs_alone_and_talks_to_the_gateway(gateway: str, tenant: str, tmp_path: Path):
    # The client's folder and the schemas it links to, as a checkout has them, and nothing else of the repository.
    source = tmp_path / "src"
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    shutil.copytree(ROOT / "clients" / "python", source / "clients" / "python", symlinks=True, ignore=skip)
    shutil.copytree(ROOT / "shared" / "api", source / "shared" / "api", ignore=skip)
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    python = env_dir / "bin" / "python"
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "--disable-pip-version-check", str(source / "clients" / "python")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if installed.returncode != 0 and any(sign in installed.stdout + installed.stderr for sign in OFFLINE):
        pytest.skip(f"pip cannot reach an index or its cache for httpx and pydantic: {installed.stderr[-500:]}")
    assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr[-2000:]

    probe = subprocess.run(
        [str(python), "-c", PROBE, gateway, tenant], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert probe.returncode == 0, probe.stderr
    found = json.loads(probe.stdout)
    extra = set(found["installed"]) - set(found["needed"]) - {"pip", "setuptools", "wheel"}
    assert extra == set(), f"installed beyond the client's dependencies: {extra}"
    assert {"mnemoflow-client", "httpx", "pydantic"} <= set(found["installed"])
    assert SERVER_ONLY.isdisjoint(found["installed"]) and SERVER_ONLY.isdisjoint(found["modules"])
    assert "shared" not in found["modules"] and "services" not in found["modules"]
    site = str(env_dir)
    assert found["package"].startswith(site) and found["schemas"].startswith(site)
    assert not Path(found["schemas"]).parent.is_symlink()  # the wheel holds the files themselves
    assert found["added"] in found["found"]
