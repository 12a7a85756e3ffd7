"""The Python client of Mnemoflow, long-term memory for AI agents: `Mnemoflow` (sync) and `AsyncMnemoflow` (async),
on httpx, whose results are the gateway's own pydantic schemas (`mnemoflow_client.schemas`).

    from mnemoflow_client import Mnemoflow

    with Mnemoflow(user_id="alice") as memory:
        memory.add("Alice prefers green tea in the morning", tags=["prefs"])
        for match in memory.query("what does Alice drink?", k=3).matches:
            print(match.score, match.content)
"""

from ._core import __version__
from .aio import AsyncMnemoflow
from .client import Mnemoflow
from .errors import (
    Conflict,
    Forbidden,
    InvalidInput,
    JobFailed,
    MnemoflowError,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    ServerError,
    TransportError,
    Unauthorized,
    Unavailable,
    UnsupportedMedia,
    UpstreamFailed,
    WaitTimeout,
)
from .jobs import JobGroup
from .retry import RetryPolicy
from .schemas.data import EraseAccepted, ImportAccepted
from .schemas.ingest import DocumentDetail, DocumentPage, DocumentPublic, IngestAccepted
from .schemas.jobs import DecayRun, JobPublic, ReembedAccepted
from .schemas.memories import (
    BatchAccepted,
    MemoriesLinked,
    MemoryAddResult,
    MemoryCreate,
    MemoryDeleted,
    MemoryPage,
    MemoryPublic,
    MemoryReinforced,
)
from .schemas.query import QueryMatch, QueryResponse, RetrievalOptions

__all__ = [
    "AsyncMnemoflow",
    "BatchAccepted",
    "Conflict",
    "DecayRun",
    "DocumentDetail",
    "DocumentPage",
    "DocumentPublic",
    "EraseAccepted",
    "Forbidden",
    "ImportAccepted",
    "IngestAccepted",
    "InvalidInput",
    "JobFailed",
    "JobGroup",
    "JobPublic",
    "MemoriesLinked",
    "MemoryAddResult",
    "MemoryCreate",
    "MemoryDeleted",
    "MemoryPage",
    "MemoryPublic",
    "MemoryReinforced",
    "Mnemoflow",
    "MnemoflowError",
    "NotFound",
    "PayloadTooLarge",
    "QueryMatch",
    "QueryResponse",
    "RateLimited",
    "ReembedAccepted",
    "RetrievalOptions",
    "RetryPolicy",
    "ServerError",
    "TransportError",
    "Unauthorized",
    "Unavailable",
    "UnsupportedMedia",
    "UpstreamFailed",
    "WaitTimeout",
    "__version__",
]
