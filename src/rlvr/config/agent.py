"""The `agent:` section (multi-turn rollouts). It imports no plug-in package: the registered environments,
tools and turn budgets are looked up only when components are bound, by `rlvr.config.registries`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from rlvr.config.base import ComponentSpec, binding
from rlvr.config.registries import bind_environment, bind_tools, check_agent


class ToolSpec(ComponentSpec):
    """A tool of the `tools` environment: `calculator`, or `{name: sql, path: data.db}`."""


class EnvironmentSpec(ComponentSpec):
    """The environment: `tools`, or `{name: guess_number, high: 50}`."""


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
    turn_budget_params: dict[str, Any] = Field(default_factory=dict, description="Parameters of the turn budget "
                                               "(e.g. start, increment, every for scaling_inter_rl).")
    harness: str | None = Field(None, description="rollout.mode=openai_server: an agent function `module:function` "
                                "or `path/to/file.py:function`, called once per episode with base_url, api_key, "
                                "model and the task record; it returns a reward, or None for the task's verifier.")
    harness_params: dict[str, Any] = Field(default_factory=dict, description="Extra keyword arguments of the harness.")
    harness_timeout: float = Field(120.0, gt=0, description="Seconds per episode; a harness past it is scored 0.")
    harness_workers: int = Field(64, ge=1, description="Episodes in flight at once (threads running the harness).")

    @field_validator("environment")
    @classmethod
    def _environment(cls, spec: EnvironmentSpec, info: ValidationInfo) -> EnvironmentSpec:
        return bind_environment(spec) if binding(info) else spec

    @field_validator("tools")
    @classmethod
    def _tools(cls, specs: list[ToolSpec], info: ValidationInfo) -> list[ToolSpec]:
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"each tool may appear once; got {names}")
        return bind_tools(specs) if binding(info) else specs

    @model_validator(mode="after")
    def _checks(self, info: ValidationInfo) -> AgentConfig:
        if binding(info):
            check_agent(self)
        return self
