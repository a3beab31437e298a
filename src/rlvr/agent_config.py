"""The `agent:` config section (multi-turn rollouts), kept apart from `rlvr.rollout` so that reading a config
imports no torch: registered environments and tools are looked up only when components are bound (see
`rlvr.config.validate`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator


def _binding(info: ValidationInfo) -> bool:
    """False in the config's first, schema-only validation pass."""
    return not (info.context and info.context.get("bind_components") is False)


class ComponentSpec(BaseModel):
    """`name` of a registered component plus its parameters (all other keys). A bare string is a name.
    Every config section that selects a registered component uses it (`rlvr.config` imports it from here)."""

    model_config = ConfigDict(extra="allow")
    name: str

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, v: Any) -> Any:
        return {"name": v} if isinstance(v, str) else v

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class ToolSpec(ComponentSpec):
    """A tool of the `tools` environment: `calculator`, or `{name: sql, path: data.db}`."""


class EnvironmentSpec(ComponentSpec):
    """The environment: `tools`, or `{name: guess_number, high: 50}`."""


def _fill(spec: ComponentSpec, registry: Any, where: str) -> ComponentSpec:
    for k, v in registry.resolve(spec.name, spec.params, where).items():
        setattr(spec, k, v)
    return spec


class AgentConfig(BaseModel):
    """Multi-turn rollouts (the `agent:` section). Without it, rollouts are single-turn."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    environment: EnvironmentSpec = Field(default_factory=lambda: EnvironmentSpec(name="tools"), validate_default=True,
                                         description="tools (the model calls `tools`), guess_number, or a registered one.")
    tools: list[ToolSpec] = Field(default_factory=list,
                                  description="Tools of the environment: calculator, python, search, sql, ...")
    max_turns: int = Field(4, ge=1, description="Model turns per episode.")
    max_total_tokens: int = Field(512, ge=1, description="Response tokens per episode, observations included.")
    max_turn_tokens: int | None = Field(None, ge=1, description="New tokens per turn; default rollout.max_new_tokens.")
    max_obs_tokens: int = Field(256, ge=1, description="Tokens of one tool output (or observation); longer ones are cut.")
    tool_workers: int = Field(8, ge=1, description="Threads stepping environments (running tool calls) concurrently.")
    tools_in_prompt: bool = Field(True, description="Announce the tools' schemas in the prompt.")
    env_reward_scale: float = Field(1.0, description="Weight of the environment's own per-turn rewards.")
    tool_error_penalty: float = Field(0.0, ge=0, description="Per failed tool call, subtracted from env_reward.")
    turn_penalty: float = Field(0.0, ge=0, description="Per model turn, subtracted from env_reward.")
    turn_budget: str | None = Field(None, description="A TURN_BUDGETS schedule: max turns as a function of the step.")
    turn_budget_params: dict[str, Any] = Field(default_factory=dict)

    @field_validator("environment")
    @classmethod
    def _environment(cls, spec: EnvironmentSpec, info: ValidationInfo) -> EnvironmentSpec:
        if not _binding(info):
            return spec
        from rlvr.rollout.env import ENVIRONMENTS

        return _fill(spec, ENVIRONMENTS, "environment")

    @field_validator("tools")
    @classmethod
    def _tools(cls, specs: list[ToolSpec], info: ValidationInfo) -> list[ToolSpec]:
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"each tool may appear once; got {names}")
        if not _binding(info):
            return specs
        from rlvr.rollout.tools import TOOLS

        return [_fill(s, TOOLS, f"tools[{i}]") for i, s in enumerate(specs)]

    @model_validator(mode="after")
    def _checks(self, info: ValidationInfo) -> AgentConfig:
        if not _binding(info):
            return self
        from rlvr.rollout.tools import TOOLS

        if self.environment.name == "tools" and not self.tools:
            raise ValueError(f"tools: the 'tools' environment needs at least one tool; available: "
                             f"{', '.join(TOOLS.names())}")
        if self.turn_budget is not None:
            turn_budget_registry().resolve(self.turn_budget, self.turn_budget_params, "turn_budget")
        return self


def turn_budget_registry() -> Any:
    """The sampling stage's TURN_BUDGETS registry (`budget(step, total_steps) -> max turns`)."""
    import rlvr.sampling as sampling

    registry = getattr(sampling, "TURN_BUDGETS", None)
    if registry is None:
        raise ValueError("turn_budget: this rlvr has no turn-budget schedules (rlvr.sampling.TURN_BUDGETS); "
                         "remove agent.turn_budget")
    return registry
