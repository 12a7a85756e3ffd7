"""The parser sandbox's settings: strict in production unless told otherwise, a uid range that exists."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from shared.config import Settings
from shared.ingest.formats import Kind
from shared.ingest.params import MIB
from shared.ingest.sandbox import limits_for

STRONG_KEY = "tk-9Hs2Lq8Xv3Wp6ZrA1b2"


@pytest.mark.parametrize(
    ("environment", "setting", "strict"),
    [
        ("production", None, True),
        ("development", None, False),
        ("test", None, False),
        ("production", False, False),
        ("development", True, True),
    ],
)
def test_the_sandbox_is_strict_in_production_unless_set(environment, setting, strict):
    given = {} if setting is None else {"ingest_sandbox_strict": setting}
    keys = {"api_keys": {STRONG_KEY: "tenant"}, "admin_api_key": STRONG_KEY + "-admin"}  # production wants keys
    s = Settings(_env_file=None, environment=environment, **keys, **given)
    assert s.ingest.sandbox_strict is strict
    assert limits_for(s.ingest, Kind.DOCUMENT).strict is strict


def test_sandbox_limits_reach_the_children(monkeypatch):
    monkeypatch.setenv("MNEMOFLOW_INGEST_PARSE_FILE_MB", "32")
    monkeypatch.setenv("MNEMOFLOW_INGEST_PARSE_OUTPUT_MB", "8")
    monkeypatch.setenv("MNEMOFLOW_INGEST_PARSE_PROCESSES", "64")
    monkeypatch.setenv("MNEMOFLOW_INGEST_SANDBOX_UID", "65534")
    monkeypatch.setenv("MNEMOFLOW_INGEST_SANDBOX_UIDS", "1")
    limits = limits_for(Settings(_env_file=None).ingest, Kind.AUDIO)
    assert (limits.file_bytes, limits.output_bytes, limits.processes) == (32 * MIB, 8 * MIB, 64)
    assert (limits.uid_first, limits.uid_count) == (65534, 1)


def test_a_uid_range_past_the_last_uid_is_explained():
    with pytest.raises(ValidationError, match="runs past the last uid"):
        Settings(_env_file=None, ingest_sandbox_uid=2**32 - 10, ingest_sandbox_uids=100)
