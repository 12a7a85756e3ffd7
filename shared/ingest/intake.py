"""Accepting a document for ingestion (the gateway's half): check it, give it one identity, stage it, queue it.

Nothing is parsed here. Uploaded bytes are sniffed (415 when unsupported or mislabelled), URLs are checked
(scheme, host, public address), and the document, its job and its staged bytes are written in one
transaction, so a refused request writes nothing and an accepted one is complete. The same bytes (content
hash) or the same normalised URL of the same user is one document: asking again returns it ("existing"),
and only a document that failed or was cancelled is started again ("retried").
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from typing import IO, Any

import httpx
from sqlalchemy.orm import Session

from shared.errors import Conflict, InvalidInput, RateLimited, UnsupportedMedia, UpstreamFailed
from shared.ingest import Format, Kind, check_declared, check_url, extras
from shared.ingest.formats import SUPPORTED
from shared.ingest.params import IngestParams
from shared.jobs import IngestDocument, JobKind
from shared.model.statuses import DocumentStatus, JobPhase
from shared.storage import backlog
from shared.storage import documents as document_store
from shared.storage import jobs as job_store

# the size an upload is read in, as its staging keeps it (re-exported for the route that reads it)
from shared.storage.documents import UPLOAD_PART_BYTES as UPLOAD_PART_BYTES

MAX_URL_CHARS = 2048
BACKLOG_RETRY_SECONDS = 5  # Retry-After when the tenant's backlog is full: a few documents' parsing
# OpenMemory's content_type values are short names ("pdf", "txt"); MIME types work too.
_ALIASES = {"text": Format.TEXT, "markdown": Format.MARKDOWN, "htm": Format.HTML, "mpeg": Format.MP3}
_TEXTUAL = frozenset({Format.TEXT, Format.MARKDOWN, Format.HTML})


@dataclass(frozen=True)
class Accepted:
    """What an ingest request led to: the document, the job that (re)processes it, and which case it was."""

    document_id: uuid.UUID
    job_id: uuid.UUID | None
    status: str  # queued: new; existing: already known; retried: a failed document started again
    document_status: str
    fmt: str | None


def declared_format(content_type: str | None) -> tuple[str | None, frozenset[Format] | None]:
    """A request's content_type as (MIME type for check_declared, or the formats a short name allows)."""
    value = (content_type or "").strip().lower()
    if not value or "/" in value:
        return value or None, None
    if value in ("audio", "video"):
        return None, frozenset(f for f in Format if f.kind is Kind(value))
    fmt = _ALIASES.get(value) or next((f for f in Format if f.value == value), None)
    if fmt is None:
        raise UnsupportedMedia(
            f"content_type {content_type!r} is not a format ingestion handles; use one of {SUPPORTED} or a MIME type",
            details={"declared": content_type, "supported": SUPPORTED.split(", ")},
        )
    lenient = _TEXTUAL - {Format.HTML} if fmt in (Format.TEXT, Format.MARKDOWN) else frozenset()
    return None, frozenset({fmt}) | lenient


def is_textual(content_type: str | None) -> bool:
    """Whether OpenMemory's JSON route carries this type's data as plain text (else base64)."""
    value = (content_type or "").strip().lower()
    if value.startswith("text/") or value in ("application/xhtml+xml", "text", "markdown", "htm"):
        return True
    return value in {f.value for f in _TEXTUAL}


def check_format(detected: Format, content_type: str | None) -> None:
    """Refuse bytes whose declared type (MIME type or short name) names another format, or whose format needs an
    extra this install lacks (415, naming the `pip install` that adds it)."""
    mime, allowed = declared_format(content_type)
    if allowed is not None and detected not in allowed:
        names = ", ".join(sorted(f.value for f in allowed))
        raise UnsupportedMedia(
            f"declared as {content_type} but the content is {detected.value}; declare its real type or none",
            details={"declared": content_type, "detected": detected.value, "expected": names},
        )
    check_declared(detected, mime)
    extras.require(detected)


def normalize_url(url: str) -> str:
    """One spelling per resource: lowercase scheme and host, no default port, no fragment, '/' for no path."""
    if len(url) > MAX_URL_CHARS:
        raise InvalidInput(f"the URL is {len(url):,} characters long; the limit is {MAX_URL_CHARS:,}")
    try:
        parsed = httpx.URL(url.strip())
    except httpx.InvalidURL as exc:
        raise InvalidInput(f"not a valid URL: {url!r} ({exc})", details={"url": url}) from exc
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise InvalidInput(f"only http and https URLs with a host can be ingested, not {url!r}", details={"url": url})
    if parsed.userinfo:
        raise InvalidInput("URLs with a user name or password are not accepted", details={"url": parsed.host})
    host = parsed.raw_host.decode("ascii").lower()
    host = f"[{host}]" if ":" in host else host
    default_port = 443 if parsed.scheme == "https" else 80
    port = "" if parsed.port in (None, default_port) else f":{parsed.port}"
    return f"{parsed.scheme}://{host}{port}{parsed.raw_path.decode('ascii') or '/'}"


def check_fetchable(url: str, params: IngestParams) -> None:
    """Refuse a URL the worker would refuse to fetch: private addresses unless allowed, unresolvable hosts."""
    try:
        check_url(url, allow_private=params.allow_private_urls, allowed_networks=list(params.allowed_networks))
    except UpstreamFailed as exc:  # the name does not resolve: nothing to retry on the caller's behalf
        raise InvalidInput(exc.message, details=exc.details) from exc


def content_hash(source: IO[bytes]) -> tuple[str, int]:
    """SHA-256 (hex) and size of a stream, read in blocks; the stream is left at its start."""
    digest = hashlib.sha256()
    size = 0
    while block := source.read(1024 * 1024):
        digest.update(block)
        size += len(block)
    source.seek(0)
    return digest.hexdigest(), size


def url_hash(normalized_url: str) -> str:
    return hashlib.sha256(normalized_url.encode()).hexdigest()


def accept_upload(
    session: Session,
    *,
    user_id: str,
    source: IO[bytes],
    digest: str,
    size: int,
    fmt: Format,
    filename: str | None,
    declared_type: str | None,
    params: dict[str, Any],
    max_queued: int | None = None,
) -> Accepted:
    """The upload's document (new, existing or restarted) with its bytes staged when there is work to do.
    `max_queued`: refuse new work (429) while the tenant has this many documents waiting (None: unchecked)."""
    return _accept(
        session,
        user_id=user_id,
        max_queued=max_queued,
        fields={
            "source_type": "upload",
            "source_uri": None,
            "filename": filename,
            "mime_type": declared_type,
            "fmt": fmt.value,
            "byte_size": size,
            "content_hash": digest,
            "url_hash": None,
        },
        params=params,
        stage=lambda document_id: document_store.stage_upload(session, document_id, source),
    )


def accept_url(
    session: Session, *, user_id: str, url: str, params: dict[str, Any], max_queued: int | None = None
) -> Accepted:
    """The URL's document (new, existing or restarted); the worker fetches it. `max_queued` as accept_upload's."""
    return _accept(
        session,
        user_id=user_id,
        max_queued=max_queued,
        fields={
            "source_type": "url",
            "source_uri": url,
            "filename": None,
            "mime_type": None,
            "fmt": None,
            "byte_size": None,
            "content_hash": None,
            "url_hash": url_hash(url),
        },
        params=params,
        stage=None,
    )


def _accept(
    session: Session,
    *,
    user_id: str,
    fields: dict[str, Any],
    params: dict[str, Any],
    stage: Any,
    max_queued: int | None,
) -> Accepted:
    meta = {"metadata": params.get("metadata") or {}, "config": params.get("config") or {}}
    document_id = document_store.insert_document(session, user_id=user_id, meta=meta, **fields)
    restart = False
    if document_id is None:
        existing = document_store.find_existing(
            session, user_id, content_hash=fields["content_hash"], url_hash=fields["url_hash"]
        )
        if existing is None:  # deleted between our insert and our look-up
            raise Conflict("this document changed while it was being submitted; send it again")
        if existing["status"] not in (DocumentStatus.FAILED, DocumentStatus.CANCELLED):
            return Accepted(existing["id"], existing["job_id"], "existing", existing["status"], existing["format"])
        document_id, restart = existing["id"], True
    if max_queued is not None:
        check_backlog(session, user_id, max_queued)
    job_id, _ = job_store.create_job(
        session,
        user_id=user_id,
        kind=JobKind.INGEST,
        total=0,
        params={**params, "document_id": str(document_id), "source_type": fields["source_type"]},
        idempotency_key=None,
    )
    document_store.attach_job(session, document_id, job_id, restart=restart)
    job_store.merge_result(session, job_id, {"phase": JobPhase.QUEUED, "document_id": str(document_id)})
    if stage is not None:
        stage(document_id)
    return Accepted(document_id, job_id, "retried" if restart else "queued", DocumentStatus.QUEUED, fields["fmt"])


def check_backlog(session: Session, user_id: str, max_queued: int) -> None:
    """Refuse (429) a new document while the tenant has `max_queued` waiting: the queue's backpressure. A document
    already known was answered before this (nothing new to queue); the transaction rolls back, writing nothing.
    Concurrent requests may each see one place left: the bound holds to within the gateway's concurrency."""
    waiting = job_store.count_open(session, user_id, JobKind.INGEST, at_most=max_queued)
    if waiting >= max_queued:
        raise RateLimited(
            f"user_id {user_id!r} has {waiting:,} documents waiting to be ingested, the most a tenant may have "
            f"queued (MNEMOFLOW_INGEST_MAX_QUEUED); send this one again once some finish. "
            f"Retry in {BACKLOG_RETRY_SECONDS} s.",
            details={
                "limit": "queued_documents",
                "max_queued": max_queued,
                "retry_after_seconds": BACKLOG_RETRY_SECONDS,
            },
            retry_after=BACKLOG_RETRY_SECONDS,
        )


def ingest_message(session: Session, user_id: str, accepted: Accepted, *, fair: bool) -> IngestDocument | None:
    """The message that starts an accepted document's job (None when the document was already known), at the
    priority of its tenant's open work (this document's job, written, counted in it)."""
    if accepted.status == "existing" or accepted.job_id is None:
        return None
    priority = backlog.priority_of(session, user_id, 0, fair=fair)
    return IngestDocument(job_id=accepted.job_id, user_id=user_id, priority=priority)
