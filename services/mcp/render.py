"""The short texts the MCP tools answer beside their structured results: what a model reads first."""

from __future__ import annotations

from mnemoflow_client import (
    IngestAccepted,
    JobPublic,
    MemoryAddResult,
    MemoryPage,
    MemoryPublic,
    QueryMatch,
    QueryResponse,
)

# Longer contents are cut in the text (the structured result has them whole).
PREVIEW_CHARS = 300


def preview(content: str, limit: int = PREVIEW_CHARS) -> str:
    """The content on one line, cut at `limit` characters with an ellipsis."""
    flat = " ".join(content.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def added_text(added: MemoryAddResult) -> str:
    how = "already stored as" if added.deduplicated else "remembered as"
    return f"{how} {added.id} ({added.primary_sector}, salience {added.salience:.2f})"


def _why(match: QueryMatch) -> str:
    trace = match.trace
    if trace is None:
        return ""
    parts = ", ".join(f"{name} {value:.2f}" for name, value in trace.components.items() if value)
    found = [
        f"{label} #{rank}"
        for label, rank in (("words", trace.lexical_rank), ("meaning", trace.dense_rank))
        if rank is not None
    ]
    if trace.hops:
        found.append(f"linked {trace.hops} hop{'s' if trace.hops > 1 else ''} via {trace.via}")
    return f"\n   why: {'; '.join(found) or 'found'}; score {parts}"


def recalled_text(answer: QueryResponse) -> str:
    if not answer.matches:
        return f"nothing recalled for {answer.query!r}"
    lines = [
        f"{n}. ({match.score:.3f}) {preview(match.content)}  [{match.id}, {match.primary_sector}]{_why(match)}"
        for n, match in enumerate(answer.matches, start=1)
    ]
    return "\n".join(lines)


def memory_text(memory: MemoryPublic) -> str:
    tags = f", tags {', '.join(memory.tags)}" if memory.tags else ""
    return (
        f"{memory.content}\n[{memory.id}: {memory.primary_sector}, salience {memory.salience:.3f}{tags}, "
        f"stored {memory.created_at:%Y-%m-%d %H:%M}]"
    )


def page_text(page: MemoryPage) -> str:
    if not page.items:
        return f"no memories here ({page.total} in all, offset {page.offset})"
    first, last = page.offset + 1, page.offset + len(page.items)
    lines = [f"memories {first}-{last} of {page.total}:"]
    lines += [f"- {preview(m.content, 160)}  [{m.id}, {m.primary_sector}]" for m in page.items]
    if last < page.total:
        lines.append(f"(more: offset {last})")
    return "\n".join(lines)


def accepted_text(source: str, accepted: IngestAccepted) -> str:
    if accepted.job_id is None:
        return f"{source} is already stored as document {accepted.document_id} ({accepted.document_status})"
    return (
        f"ingesting {source} ({accepted.format or 'format to be found'}): job {accepted.job_id}, "
        f"{accepted.status}; document {accepted.document_id}. Follow it with job_status."
    )


def job_text(job: JobPublic) -> str:
    done, total = job.progress.get("done"), job.progress.get("total")
    progress = f", {done} of {total} done" if done is not None and total else ""
    error = f": {job.error}" if job.error else ""
    return f"job {job.id} ({job.kind}): {job.status}{progress}{error}"
