"""The base every config section builds on: strict models that reject unknown keys, and `ComponentSpec`,
the one shape of every section that selects a registered component."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, model_validator


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def binding(info: ValidationInfo) -> bool:
    """False in the config's first, schema-only validation pass (see `rlvr.config.loading.validate`)."""
    return not (info.context and info.context.get("bind_components") is False)


class ComponentSpec(BaseModel):
    """`name` of a registered component plus its parameters (all other keys). A bare string is a name.
    Every config section that selects a registered component uses it."""

    model_config = ConfigDict(extra="allow")
    name: str = Field(description="The registered component's name; its parameters are the other keys "
                      "(docs/reference/components.md).")

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, v: Any) -> Any:
        return {"name": v} if isinstance(v, str) else v

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})
