"""The house rules that a reader relies on: layering contracts, pure modules, shareable schemas, the module map,
module sizes."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
IO_FRAMEWORKS = {
    "sqlalchemy",
    "psycopg",
    "pgvector",
    "redis",
    "celery",
    "kombu",
    "fastapi",
    "starlette",
    "httpx",
    "alembic",
}
PRODUCTION = ("shared", "services", "workers", "infra")
CLIENT = ROOT / "clients" / "python" / "src"  # the Python client, a distribution of its own (mnemoflow_client)


def _contracts() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_import_contracts_are_kept():
    lint_imports = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint_imports, "import-linter is a dev dependency; install with pip install -e '.[dev]'"
    result = subprocess.run([lint_imports], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_every_module_of_shared_that_imports_no_io_is_under_the_purity_contract():
    graph = grimp.build_graph("shared", include_external_packages=True)
    pure = {
        module
        for module in graph.modules
        if module.startswith("shared")
        and not (ROOT / module.replace(".", "/") / "__init__.py").exists()  # packages: their modules count
        and not any(m.split(".")[0] in IO_FRAMEWORKS for m in graph.find_upstream_modules(module))
    }
    (contract,) = [c for c in _contracts() if c["name"] == "pure domain code imports no IO frameworks"]
    listed = set(contract["source_modules"])
    assert pure - listed == set(), "pure modules missing from the contract in pyproject.toml"
    assert set(contract["forbidden_modules"]) == IO_FRAMEWORKS


def test_the_rest_schemas_import_only_pydantic_and_the_standard_library():
    """And each other relatively: the Python client ships these files as `mnemoflow_client.schemas`."""
    allowed = set(sys.stdlib_module_names) | {"pydantic", "typing_extensions", "__future__"}
    for path in sorted((ROOT / "shared" / "api").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert not name.startswith("shared"), f"{path.name} imports {name}: import it relatively (from .x)"
                assert name.split(".")[0] in allowed, f"{path.name} imports {name}"


def _packages() -> list[str]:
    found = [
        ".".join(init.parent.relative_to(ROOT).parts)
        for top in (*PRODUCTION, "bench")
        for init in (ROOT / top).rglob("__init__.py")
    ] + [".".join(init.parent.relative_to(CLIENT).parts) for init in CLIENT.rglob("__init__.py")]
    return [*sorted(found), "tests", "tests.unit", "tests.integration", "tests.e2e", "tests.security", "tests.faults"]


def test_every_package_is_in_the_module_map():
    text = (ROOT / "CONTRIBUTING.md").read_text()
    layout = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^- `([\w.]+)` — ", layout, flags=re.M))
    missing = [package for package in _packages() if package not in listed]
    assert not missing, f"add a line for each to the module map in CONTRIBUTING.md: {missing}"
    stale = listed - set(_packages())
    assert not stale, f"the module map names packages that do not exist: {sorted(stale)}"


def test_no_production_module_is_over_400_lines():
    sizes = {
        str(path.relative_to(ROOT)): len(path.read_text().splitlines())
        for top in (*PRODUCTION, CLIENT.relative_to(ROOT))
        for path in (ROOT / top).rglob("*.py")
        if "migrations" not in path.parts
    }
    assert {path: n for path, n in sizes.items() if n > 400} == {}


def test_the_root_of_shared_holds_few_modules_beside_its_packages():
    modules = [path.name for path in (ROOT / "shared").glob("*.py") if path.name != "__init__.py"]
    assert len(modules) <= 10, sorted(modules)
