"""Request dependencies as Annotated aliases: state, unit of work, caller."""

from __future__ import annotations

import hmac
import uuid
from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request

from services.gateway.state import GatewayState, UnitOfWork
from shared.errors import Forbidden, NotFound, Unauthorized
from shared.storage import memories as memory_store

# The dependencies that neither block nor wait are `async def`: FastAPI runs a plain `def` dependency on a
# worker thread, and each such hop costs a request two thread switches (~0.3 ms here, more under load).


async def get_state(request: Request) -> GatewayState:
    return request.app.state.mnemoflow


StateDep = Annotated[GatewayState, Depends(get_state)]


class Principal:
    """Who is calling: the tenant bound to their API key, or anyone when no keys are configured.

    What it allows is what the request's unit of work acts as: the tenant `tenant()` resolved (the app role, that
    tenant's rows only), else the whole store once `require_admin()` passed (the maintenance role), else nobody."""

    def __init__(self, bound_tenant: str | None, default_user_id: str, *, is_admin: bool = False) -> None:
        self.bound_tenant = bound_tenant
        self.default_user_id = default_user_id
        self.is_admin = is_admin
        self.acting_for: str | None = None
        self.store_wide = False

    def require_admin(self) -> None:
        """Store-wide actions need the operator key (MNEMOFLOW_ADMIN_API_KEY) once API keys are configured."""
        if not self.is_admin:
            raise Forbidden(
                "this action concerns the whole store: call it with the operator key (MNEMOFLOW_ADMIN_API_KEY)"
            )
        self.store_wide = True

    def acting(self) -> tuple[str | None, bool]:
        """(tenant, store-wide): whom the request's database work is for, as far as it was allowed."""
        return self.acting_for, self.store_wide and self.acting_for is None

    def tenant(self, *requested: str | None) -> str:
        """The tenant this request acts for; a key bound to another tenant gets 403."""
        asked = {r for r in requested if r}
        if len(asked) > 1:
            raise Forbidden(f"conflicting user_id values in one request: {', '.join(sorted(asked))}")
        wanted = next(iter(asked), None)
        if self.bound_tenant is None:
            tenant = wanted or self.default_user_id
        elif wanted is not None and wanted != self.bound_tenant:
            raise Forbidden(f"this API key belongs to user_id {self.bound_tenant!r}, not {wanted!r}")
        else:
            tenant = self.bound_tenant
        if self.acting_for not in (None, tenant):  # one request, one tenant
            raise Forbidden(f"conflicting user_id values in one request: {self.acting_for}, {tenant}")
        self.acting_for = tenant
        return tenant


def memory_tenant(state: GatewayState, principal: Principal, memory_id: uuid.UUID, requested: str | None) -> str:
    """The tenant a call naming a memory by id acts for: the key's, or the `user_id` named; or else, for a caller who
    may act for any tenant (no keys configured, or the operator key), the memory's own, looked up by id across the
    store (the maintenance role; the rest of the request acts for that tenant only). OpenMemory's clients send only
    the id to reinforce, change or delete a memory. NotFound when no tenant has it."""
    if requested or principal.bound_tenant is not None:
        return principal.tenant(requested)
    with state.maintenance.reading() as session:
        owner = memory_store.owner_of(session, memory_id)
    if owner is None:
        raise NotFound(f"memory {memory_id} not found")
    return principal.tenant(owner)


def _identify(request: Request, state: GatewayState) -> Principal | None:
    """The caller the request's key names; anyone is an operator when no keys are configured; None when keys are
    configured and the request sends none, or one that is not valid."""
    keys = state.settings.all_api_keys
    admin = state.settings.admin_api_key
    if not keys and admin is None:
        return Principal(None, state.settings.default_user_id, is_admin=True)
    presented = _presented_key(request)
    if not presented:
        return None
    if admin is not None and hmac.compare_digest(admin.get_secret_value().encode(), presented.encode()):
        return Principal(None, state.settings.default_user_id, is_admin=True)
    for key, tenant in keys.items():
        if hmac.compare_digest(key.encode(), presented.encode()):
            return Principal(tenant, state.settings.default_user_id)
    return None


def _presented_key(request: Request) -> str | None:
    presented = request.headers.get("x-api-key")
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        presented = auth[7:].strip()
    return presented or None


async def get_principal(request: Request, state: StateDep) -> Principal:
    principal = _identify(request, state)
    if principal is not None:
        return principal
    if _presented_key(request) is None:
        raise Unauthorized("this server requires an API key: send 'Authorization: Bearer <key>' or 'x-api-key'")
    raise Unauthorized("the API key is not valid")


async def get_caller(request: Request, state: StateDep) -> Principal | None:
    """Like `get_principal` for routes open to anyone (probes): None instead of 401 for a stranger."""
    return _identify(request, state)


PrincipalDep = Annotated[Principal, Depends(get_principal)]
CallerDep = Annotated[Principal | None, Depends(get_caller)]


async def require_operator(principal: PrincipalDep) -> None:
    """A route dependency: the operator key once keys are configured (401 without a key, 403 with a tenant's)."""
    principal.require_admin()


def get_work(state: StateDep, principal: PrincipalDep) -> Iterator[UnitOfWork]:
    """The request's unit of work, acting as the principal allowed by its first statement: it commits when the
    route returns, before the response is sent (the dependency's function scope), and its messages go out after
    the commit."""
    with state.unit_of_work(acting=principal.acting) as work:
        yield work


WorkDep = Annotated[UnitOfWork, Depends(get_work, scope="function")]
