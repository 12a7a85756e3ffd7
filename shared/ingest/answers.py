"""What a parser child sends back, as JSON: its result or its error, and how it was confined.

Never pickle: the child parses untrusted bytes and may be compromised, and unpickling what it sends would run
its code in the worker. JSON decodes to plain data; the parent rebuilds an `Extracted` from it and raises only
the error classes named here, whatever the child claims.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from shared.errors import (
    ExtractionFailed,
    InvalidInput,
    MnemoflowError,
    PayloadTooLarge,
    ServiceUnavailable,
    UnsupportedMedia,
)
from shared.ingest.confine import Report
from shared.ingest.elements import Element, Extracted
from shared.ingest.formats import Format

_ERRORS: dict[str, type[MnemoflowError]] = {
    cls.__name__: cls for cls in (ExtractionFailed, InvalidInput, UnsupportedMedia, PayloadTooLarge, ServiceUnavailable)
}


@dataclass(frozen=True, slots=True)
class Answer:
    """A decoded answer: a value, or an error to raise; with the child's confinement when it got that far."""

    value: Any = None
    error: MnemoflowError | None = None
    report: Report | None = None


def encode(value: Any, report: Report | None) -> bytes:
    """A child's result (an `Extracted`, or plain JSON data) with its confinement report."""
    result = {"extracted": _extracted(value)} if isinstance(value, Extracted) else {"value": value}
    return _dumps({**result, "report": _report(report)})


def item(outcome: Extracted | MnemoflowError | None) -> dict[str, Any]:
    """One document's outcome in a group's answer (plain JSON inside `value`): its elements, the error our parser
    raised, or None: to be parsed again alone (any other failure, whose cause a child of its own tells apart)."""
    if isinstance(outcome, Extracted):
        return {"extracted": _extracted(outcome)}
    if isinstance(outcome, MnemoflowError):
        details = outcome.details if isinstance(outcome.details, dict) else None
        return {"error": {"class": type(outcome).__name__, "message": outcome.message, "details": details}}
    return {"alone": True}


def read_items(value: Any, count: int) -> list[Extracted | MnemoflowError | None]:
    """A group's answer, one outcome per document in order (see `item`); TypeError when it is not one."""
    if not isinstance(value, list) or len(value) != count:
        raise TypeError("group answer")
    outcomes: list[Extracted | MnemoflowError | None] = []
    for body in value:
        if not isinstance(body, dict):
            raise TypeError("group item")
        if "extracted" in body:
            outcomes.append(_read_extracted(body["extracted"]))
        elif "error" in body:
            outcomes.append(_read_error(body["error"]))
        else:
            outcomes.append(None)
    return outcomes


def encode_error(error: type[MnemoflowError], message: str, details: Any, report: Report | None) -> bytes:
    """A child's failure, by class name, message and details."""
    body = {"class": error.__name__, "message": message, "details": details}
    return _dumps({"error": body, "report": _report(report)})


def decode(payload: bytes) -> Answer:
    """The answer in `payload`; an ExtractionFailed answer when it is not one a child of ours would send."""
    try:
        answer = json.loads(payload.decode("utf-8", "surrogatepass"))
        report = _read_report(answer.get("report"))
        if "error" in answer:
            return Answer(error=_read_error(answer["error"]), report=report)
        if "extracted" in answer:
            return Answer(value=_read_extracted(answer["extracted"]), report=report)
        return Answer(value=answer["value"], report=report)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        return Answer(error=ExtractionFailed(f"the parser sent a malformed answer ({type(exc).__name__})"))


def _extracted(value: Extracted) -> dict[str, Any]:
    return {
        "format": value.format.value,
        "elements": [[e.text, e.kind, e.metadata] for e in value.elements],
        "metadata": value.metadata,
    }


def _read_error(body: dict[str, Any]) -> MnemoflowError:
    details = body.get("details")
    return _ERRORS.get(str(body.get("class")), ExtractionFailed)(
        str(body["message"]), details=details if isinstance(details, dict) else None
    )


def _read_extracted(body: dict[str, Any]) -> Extracted:
    elements = []
    for text, kind, metadata in body["elements"]:
        if not (isinstance(text, str) and isinstance(kind, str) and isinstance(metadata, dict)):
            raise TypeError("element")
        elements.append(Element(text=text, kind=kind, metadata=metadata))
    metadata = body["metadata"]
    if not isinstance(metadata, dict):
        raise TypeError("metadata")
    return Extracted(format=Format(body["format"]), elements=elements, metadata=metadata)


def _report(report: Report | None) -> dict[str, Any] | None:
    if report is None:
        return None
    return {"network": report.network, "filtered": report.filtered, "uid": report.uid, "own_uid": report.own_uid}


def _read_report(body: Any) -> Report | None:
    if body is None:
        return None
    return Report(str(body["network"]), bool(body["filtered"]), int(body["uid"]), bool(body["own_uid"]))


def _dumps(body: dict[str, Any]) -> bytes:
    # Text extracted from a PDF may hold lone surrogates: carried as they are, as a pickle would have.
    return json.dumps(body, default=_plain, ensure_ascii=False).encode("utf-8", "surrogatepass")


def _plain(value: Any) -> Any:
    """What JSON cannot hold as such, as parsers' metadata may carry it (dates, sets, …)."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    return str(value)
