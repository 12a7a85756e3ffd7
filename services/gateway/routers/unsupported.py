"""OpenMemory's routes that Mnemoflow does not serve: its IDE endpoints (/api/ide/*) and its compression endpoints
(/api/compression/*). They answer 404 with an error that says so, rather than the 404 of a mistyped path."""

from __future__ import annotations

from fastapi import APIRouter

from shared.errors import NotFound

router = APIRouter(include_in_schema=False)
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]
NOT_SERVED = {
    "ide": "OpenMemory's IDE endpoints (/api/ide/*) are not supported by Mnemoflow",
    "compression": "OpenMemory's compression endpoints (/api/compression/*) are not supported by Mnemoflow; "
    "decay compresses memories on its own (docs/lifecycle.md)",
}


@router.api_route("/api/ide/{rest:path}", methods=METHODS)
def ide(rest: str) -> None:
    raise NotFound(NOT_SERVED["ide"], details={"path": f"/api/ide/{rest}", "supported": False})


@router.api_route("/api/compression/{rest:path}", methods=METHODS)
def compression(rest: str) -> None:
    raise NotFound(NOT_SERVED["compression"], details={"path": f"/api/compression/{rest}", "supported": False})
