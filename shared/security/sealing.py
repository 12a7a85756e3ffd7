"""Cache entries sealed with a key derived from the signing key: an entry written by anyone else reads as a miss.

The caches in Redis (hot-tier rows, query embeddings) are copies of what the database or the model said. A
process holding the broker's password could otherwise write an entry a query returns as a tenant's memory. The
seal covers the entry's key too, so a genuine entry moved under another key (another tenant's, another
memory's) does not verify either.
"""

from __future__ import annotations

import hashlib
import hmac

SEAL_BYTES = 32  # an HMAC-SHA256 digest, in front of the value
_PURPOSE = b"mnemoflow cache seal v1"


def seal_key(signing_key: bytes) -> bytes:
    """The sealing key: derived, so a leaked seal key does not sign tasks."""
    return hmac.new(signing_key, _PURPOSE, hashlib.sha256).digest()


class Sealer:
    """Seals values for the cache and opens them, refusing any that were not sealed with this key under this name."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    def _tag(self, name: str, value: bytes) -> bytes:
        mac = hmac.new(self._key, name.encode("utf-8"), hashlib.sha256)
        mac.update(b"\x00")  # a user id holds no NUL: the key's end is unambiguous
        mac.update(value)
        return mac.digest()

    def seal(self, name: str, value: bytes) -> bytes:
        """`value` with its seal in front, for the cache entry `name`."""
        return self._tag(name, value) + value

    def open(self, name: str, sealed: bytes) -> bytes | None:
        """The value sealed under `name`, or None if the seal does not hold (a forged or moved entry)."""
        if len(sealed) < SEAL_BYTES:
            return None
        tag, value = sealed[:SEAL_BYTES], sealed[SEAL_BYTES:]
        return value if hmac.compare_digest(tag, self._tag(name, value)) else None
