"""OpenMemory's own endpoints' settings: LangGraph memory under OpenMemory's OM_LG_* names, the user summaries."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from shared.config import Settings
from shared.memory.digest import SummaryParams
from shared.memory.lgm import LgmParams


def test_defaults_are_openmemory_s(monkeypatch):
    for name in ("OM_LG_NAMESPACE", "OM_LG_MAX_CONTEXT", "OM_LG_REFLECTIVE"):
        monkeypatch.delenv(name, raising=False)
    s = Settings(_env_file=None)
    assert s.lgm == LgmParams() == LgmParams(namespace="default", max_context=50, reflective=True)
    assert s.user_summary == SummaryParams()


def test_openmemory_s_names_and_mnemoflow_s_are_read(monkeypatch):
    monkeypatch.setenv("OM_LG_NAMESPACE", "agents")
    monkeypatch.setenv("OM_LG_MAX_CONTEXT", "20")
    monkeypatch.setenv("OM_LG_REFLECTIVE", "false")
    monkeypatch.setenv("MNEMOFLOW_USER_SUMMARY_HIGHLIGHTS", "5")
    s = Settings(_env_file=None)
    assert s.lgm == LgmParams(namespace="agents", max_context=20, reflective=False)
    assert s.user_summary.highlights == 5
    monkeypatch.setenv("MNEMOFLOW_LGM_NAMESPACE", "mine")  # Mnemoflow's name first
    assert Settings(_env_file=None).lgm.namespace == "mine"


@pytest.mark.parametrize(("name", "value"), [("OM_LG_MAX_CONTEXT", "0"), ("OM_LG_NAMESPACE", "two\nlines")])
def test_a_bad_value_is_refused_with_its_name(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError, match="MNEMOFLOW_LGM_"):
        Settings(_env_file=None)
