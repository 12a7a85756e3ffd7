"""The client's public surface: the async client mirrors the sync one, every public method is documented, and the
package imports nothing but httpx, pydantic and the standard library (so it installs on its own)."""

from __future__ import annotations

import ast
import inspect
import sys
from pathlib import Path

import mnemoflow_client
from mnemoflow_client import AsyncMnemoflow, Mnemoflow

PACKAGE = Path(mnemoflow_client.__file__).parent
CLOSING = {"close", "__enter__", "__exit__"}  # the async client's are aclose, __aenter__, __aexit__


def _public(cls: type) -> dict[str, object]:
    return {name: getattr(cls, name) for name in dir(cls) if not name.startswith("_") and callable(getattr(cls, name))}


def test_the_async_client_has_the_sync_clients_methods_with_the_same_parameters():
    sync, aio = _public(Mnemoflow), _public(AsyncMnemoflow)
    assert set(sync) - CLOSING == set(aio) - {"aclose"}
    for name, method in sync.items():
        if name in CLOSING:
            continue
        twin = aio[name]
        assert inspect.signature(method).parameters.keys() == inspect.signature(twin).parameters.keys(), name
        for param, spec in inspect.signature(method).parameters.items():
            other = inspect.signature(twin).parameters[param]
            assert (spec.kind, spec.default, spec.annotation) == (other.kind, other.default, other.annotation), (
                f"{name}({param})"
            )
        assert inspect.iscoroutinefunction(twin) or inspect.isasyncgenfunction(twin), name


def test_every_public_method_has_a_docstring():
    for cls in (Mnemoflow, AsyncMnemoflow):
        undocumented = [name for name, method in _public(cls).items() if not (method.__doc__ or "").strip()]
        assert undocumented == [], f"{cls.__name__}: {undocumented}"
    assert Mnemoflow.wait.__doc__ == AsyncMnemoflow.wait.__doc__


# The modules of an optional extra (`mnemoflow-client[langgraph]`: langgraph and langchain-core) and what they may
# import besides; no other module imports them, so `import mnemoflow_client` works without the extra.
EXTRAS = {
    "langgraph.py": {"langgraph"},
    "_langgraph_map.py": {"langgraph"},
    "_langgraph_ops.py": {"langgraph"},
    "langchain.py": {"langchain_core"},
}


def test_the_package_imports_only_httpx_pydantic_and_the_standard_library():
    core = set(sys.stdlib_module_names) | {"httpx", "pydantic", "typing_extensions", "__future__"}
    extra_modules = {name.removesuffix(".py") for name in EXTRAS}
    for path in sorted(PACKAGE.rglob("*.py")):
        allowed = core | EXTRAS.get(str(path.relative_to(PACKAGE)), set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            elif isinstance(node, ast.ImportFrom) and path.name not in EXTRAS:
                imported = {node.module, *(alias.name for alias in node.names)}
                assert not imported & extra_modules, f"{path.relative_to(PACKAGE)} imports an extra's module"
                continue
            else:
                continue
            for name in names:
                assert name.split(".")[0] in allowed, f"{path.relative_to(PACKAGE)} imports {name}"


def test_the_schemas_are_the_gateways_own_files():
    shared_api = Path(__file__).resolve().parents[3] / "shared" / "api"
    linked = (PACKAGE / "schemas").resolve()
    assert linked == shared_api
