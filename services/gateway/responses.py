"""Responses that give back what they hold however the client goes: a stream read from a database session closes
that session when the download ends, errs or is abandoned."""

from __future__ import annotations

from collections.abc import Generator, Mapping

import anyio
from starlette.concurrency import iterate_in_threadpool
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send


class ClosingStream(StreamingResponse):
    """A StreamingResponse over a generator that is closed when the response ends, in every way it can end.

    Starlette iterates a sync generator from a thread and, when the client hangs up, cancels the iteration and
    leaves the generator to the garbage collector: a generator holding a session kept its connection "idle in
    transaction", with its snapshot, until then (34 abandoned exports held a gateway's whole pool for good)."""

    def __init__(
        self,
        content: Generator[bytes],
        status_code: int = 200,  # FastAPI reads a response class's default status from this parameter
        headers: Mapping[str, str] | None = None,
        media_type: str | None = None,
    ) -> None:
        self._source = content
        super().__init__(iterate_in_threadpool(content), status_code, headers=headers, media_type=media_type)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            # Shielded: the request's task may be cancelled (the client left), and this must still run. A thread
            # reading the generator is never abandoned (anyio waits for it), so the generator is not running here.
            with anyio.CancelScope(shield=True):
                await self.body_iterator.aclose()  # type: ignore[attr-defined]
                await anyio.to_thread.run_sync(self._source.close)
