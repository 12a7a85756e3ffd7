"""Cache seals: a value opens only under the key it was sealed for and with the sealing key."""

from __future__ import annotations

from shared.security.sealing import SEAL_BYTES, Sealer, seal_key

SIGNING_KEY = b"the-deployment-signing-key-0123456789"


def test_a_sealed_value_opens_under_its_name_only():
    sealer = Sealer(seal_key(SIGNING_KEY))
    sealed = sealer.seal("mnemoflow:row:{alice}:m1:3", b'{"content": "the north door"}')
    assert len(sealed) == SEAL_BYTES + len(b'{"content": "the north door"}')
    assert sealer.open("mnemoflow:row:{alice}:m1:3", sealed) == b'{"content": "the north door"}'
    assert sealer.open("mnemoflow:row:{bob}:m1:3", sealed) is None  # moved under another tenant's key
    assert sealer.open("mnemoflow:row:{alice}:m1:4", sealed) is None  # or another version's


def test_a_forged_or_altered_value_does_not_open():
    sealer = Sealer(seal_key(SIGNING_KEY))
    name = "mnemoflow:qemb:synthetic:x:8:{alice}:abc"
    sealed = sealer.seal(name, b"\x00" * 32)
    assert sealer.open(name, b"\x00" * 32) is None  # written without a seal
    assert sealer.open(name, sealed[:SEAL_BYTES] + b"\x01" * 32) is None  # a genuine seal, other bytes
    assert sealer.open(name, sealed[: SEAL_BYTES - 1]) is None  # too short to hold a seal
    assert Sealer(seal_key(b"another-signing-key-0123456789")).open(name, sealed) is None
    assert seal_key(SIGNING_KEY) != SIGNING_KEY  # the cache's key is not the one that signs tasks
