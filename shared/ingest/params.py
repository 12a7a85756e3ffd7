"""What ingestion allows and how it chunks (`Settings.ingest`): sizes, parser limits, URL rules, waiting.

Defaults are the architecture seed's ingestion config (§5: chunk_size 2048 tokens, overlap 256, 25 MB uploads).
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024 * 1024


@dataclass(frozen=True)
class IngestParams:
    max_bytes: int = 25 * MIB  # the largest upload or fetched body
    # What one document may become (docs/ingestion.md#limits-per-document). 10 million characters is ~5,000 pages
    # of dense text, far more than a book, and planning it costs the worker +40 MB (+0.17 GB in CJK); 10,000 chunks
    # cover that text down to chunk_size 512 (~1,400 chunks at the default 2048), each one a memory.
    max_chars: int = 10_000_000
    max_chunks: int = 10_000
    chunk_size: int = 2048  # estimated tokens per chunk
    chunk_overlap: int = 256  # estimated tokens repeated between chunks
    # Parser limits per document (a sandboxed child each); audio and video get their own, transcription is slow.
    parse_timeout_seconds: float = 120.0
    parse_memory_mb: int = 2048
    media_timeout_seconds: float = 1800.0
    # The longest audio or video transcribed, read from its header before decoding: with silence skipped, a
    # file's transcription is bounded by this (~1 s of CPU per 10 s of speech with tiny.en on two cores: 3 h is
    # ~18 minutes, inside media_timeout_seconds).
    max_media_seconds: float = 10_800.0
    media_memory_mb: int = 4096
    # The parser child's sandbox (shared/ingest/sandbox.py): the largest file it may write, the largest answer it may
    # send, how many tasks (processes and threads) its uid may run; the uids it runs as when the worker is root
    # (one drawn per child from sandbox_uids uids starting at sandbox_uid; 1 means that one uid for every child);
    # sandbox_strict refuses to parse where the child cannot get a uid of its own or an isolated network.
    parse_file_mb: int = 256
    parse_output_mb: int = 64
    parse_processes: int = 128
    sandbox_uid: int = 2_000_000_000
    sandbox_uids: int = 16_777_216
    sandbox_strict: bool = False
    # Small uploads are claimed several at a time (one tenant's, never tried before) and parsed in one sandboxed
    # child, which pays the child's fork and confinement once for the group: up to group_documents documents of
    # at most group_max_kb each. 1 turns grouping off.
    group_documents: int = 8
    group_max_kb: int = 256
    fetch_timeout_seconds: float = 60.0
    # URL fetching refuses private, loopback, link-local and metadata addresses unless told otherwise:
    # allow_private_urls turns the check off (tests, a trusted single-tenant box); allowed_networks admits only
    # the listed CIDRs ("10.1.0.0/16,fd00::/8", e.g. an intranet wiki).
    allow_private_urls: bool = False
    allowed_networks: tuple[str, ...] = ()
    wait_max_seconds: float = 30.0  # ?wait=true on an ingest route waits at most this long before answering 202
    # The most documents a tenant may have waiting (queued or being ingested): past it a new one is refused 429
    # until some finish. This, not the ingest rate limit, is what holds a bulk upload to the workers' pace and
    # bounds the bytes staged in PostgreSQL; the rate limit only stops a client that sends faster than any
    # pipeline parses. Documents asked for again are answered whatever the backlog (nothing new is queued).
    max_queued: int = 1_000

    @property
    def longest_parse_seconds(self) -> float:
        """The longest any parser may run (documents or media)."""
        return max(self.parse_timeout_seconds, self.media_timeout_seconds)
