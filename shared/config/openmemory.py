"""Settings of OpenMemory's own endpoints: LangGraph memory (`/lgm/*`, OpenMemory's OM_LG_* names) and the user
summaries (`/users/{id}/summary`). Defaults live in the dataclasses the code takes (shared.memory.lgm,
shared.memory.digest)."""

from __future__ import annotations

from pydantic import BaseModel, Field, field_validator

from shared.api.lgm import NAME_MAX_CHARS, scope_name
from shared.config.parsing import env
from shared.memory.digest import SummaryParams
from shared.memory.lgm import LgmParams

_LGM = LgmParams()
_SUMMARY = SummaryParams()


class OpenMemorySettings(BaseModel):
    lgm_namespace: str = Field(
        default=_LGM.namespace,
        min_length=1,
        max_length=NAME_MAX_CHARS,
        validation_alias=env("MNEMOFLOW_LGM_NAMESPACE", "OM_LG_NAMESPACE"),
    )
    lgm_max_context: int = Field(
        default=_LGM.max_context, ge=1, le=1000, validation_alias=env("MNEMOFLOW_LGM_MAX_CONTEXT", "OM_LG_MAX_CONTEXT")
    )
    lgm_reflective: bool = Field(
        default=_LGM.reflective, validation_alias=env("MNEMOFLOW_LGM_REFLECTIVE", "OM_LG_REFLECTIVE")
    )
    user_summary_memories_per_sector: int = Field(default=_SUMMARY.memories_per_sector, ge=1, le=10_000)
    user_summary_highlights: int = Field(default=_SUMMARY.highlights, ge=0, le=20)
    user_summary_terms: int = Field(default=_SUMMARY.terms, ge=0, le=100)

    _namespace = field_validator("lgm_namespace")(lambda cls, value: scope_name(value))

    @property
    def lgm(self) -> LgmParams:
        return LgmParams(namespace=self.lgm_namespace, max_context=self.lgm_max_context, reflective=self.lgm_reflective)

    @property
    def user_summary(self) -> SummaryParams:
        return SummaryParams(
            memories_per_sector=self.user_summary_memories_per_sector,
            highlights=self.user_summary_highlights,
            terms=self.user_summary_terms,
        )
