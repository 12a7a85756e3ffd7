"""Text the store can hold: no lone UTF-16 surrogate (it has no UTF-8 form, so psycopg cannot send it) and no NUL
(PostgreSQL text and jsonb cannot hold U+0000). Found anywhere in decoded JSON (keys too), with the field's path,
so a request or an import line is refused whole with a 422 naming it instead of failing in the database or being
stored altered. Pure: no IO."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from shared.errors import InvalidInput

# A surrogate can only reach a str through a JSON escape ("\ud800") or a decoder's "surrogatepass" (json.loads of
# bytes uses it); either way the string cannot be encoded to UTF-8.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
# What JSON text must hold for its decoded value to hold one: the escape of a NUL or a surrogate, a surrogate's bytes
# (decoded with "surrogatepass": ED A0..BF), or a zero byte (UTF-16 or UTF-32 text, which json.loads also reads). A
# match may be a false alarm (an escaped backslash before "u0000", a Hangul syllable's ED 9x): the walk decides.
_ESCAPE = re.compile(rb"\\u(?:0000|[dD][89a-fA-F][0-9a-fA-F]{2})")


@dataclass(frozen=True)
class Unstorable:
    """The first character the store cannot hold: where (the path of its field), which, and at what position."""

    path: tuple[str | int, ...]
    code_point: int
    character: int  # 1-based, within the string
    in_key: bool = False

    @property
    def field(self) -> str:
        return ".".join(printable(str(part)) for part in self.path)

    def message(self, where: str = "field") -> str:
        name = f"{where} `{self.field}`" if self.path else "the body"
        holder = f"{name} has a key that holds" if self.in_key else f"{name} holds"
        if self.code_point == 0:
            what, fix = "a NUL character (U+0000), which PostgreSQL text cannot store,", "remove it"
        else:
            what, fix = f"a lone surrogate (U+{self.code_point:04X})", "send valid UTF-8 text"
        return f"{holder} {what} at character {self.character}; {fix}"

    def details(self) -> dict[str, Any]:
        return {"field": self.field, "code_point": f"U+{self.code_point:04X}", "character": self.character}


def printable(text: str) -> str:
    """`text` with the characters a response cannot carry written as escapes (a name may hold one)."""
    return _UNSTORABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def may_hold_unstorable(raw: bytes) -> bool:
    """Whether JSON text `raw` could decode to a value `find_unstorable` finds something in (False: it cannot), by
    byte searches at memchr speed, the escapes' pattern only where the text has an escape."""
    if b"\x00" in raw or b"\xed" in raw:
        return True
    return b"\\u" in raw and _ESCAPE.search(raw) is not None


def find_unstorable(value: Any, path: tuple[str | int, ...] = ()) -> Unstorable | None:
    """The first string (value or key) in `value` the store cannot hold; None when every one is fine."""
    if isinstance(value, str):
        if value.isascii() and "\x00" not in value:  # isascii is a flag CPython keeps: no scan
            return None
        found = _UNSTORABLE.search(value)
        return None if found is None else Unstorable(path, ord(found.group()), found.start() + 1)
    if isinstance(value, dict):
        for key, item in value.items():
            key_text = str(key)
            found = _UNSTORABLE.search(key_text)
            if found is not None:
                return Unstorable((*path, key_text), ord(found.group()), found.start() + 1, in_key=True)
            inner = find_unstorable(item, (*path, key_text))
            if inner is not None:
                return inner
        return None
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            inner = find_unstorable(item, (*path, index))
            if inner is not None:
                return inner
    return None


def check_storable(value: Any, *, where: str = "field", prefix: str = "", line: int | None = None) -> None:
    """InvalidInput naming the first field of `value` the store cannot hold (`where` says what holds the field: a
    field of the body, a query parameter, a form field; `prefix` starts the message, e.g. 'line 5: ')."""
    found = find_unstorable(value)
    if found is not None:
        details = found.details() | ({"line": line} if line is not None else {})
        raise InvalidInput(prefix + found.message(where), details=details)


def check_pairs(pairs: Iterable[tuple[str, str]], *, where: str) -> None:
    """Like `check_storable` for name=value pairs (a query string, a form): the field is the pair's name."""
    for name, value in pairs:
        check_storable({name: value}, where=where)
