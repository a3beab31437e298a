"""The schema of a training run (`Config`): one field per section; the pluggable ones select registered
components, which are bound in the second validation pass (`rlvr.config.registries`)."""

from __future__ import annotations

import pydantic
from pydantic import Field, model_validator

from rlvr.config.agent import AgentConfig
from rlvr.config.algorithm import AlgorithmConfig
from rlvr.config.base import ComponentSpec, Strict, binding
from rlvr.config.coevolve import CoEvolveConfig
from rlvr.config.distributed import DistributedConfig
from rlvr.config.model import ModelConfig
from rlvr.config.registries import resolve_components
from rlvr.config.rollout import RolloutConfig
from rlvr.config.run import CheckpointConfig, EvalConfig, LoggingConfig, RunConfig
from rlvr.config.search import SearchConfig
from rlvr.config.train import OptimConfig, TrainConfig


class RewardSpec(ComponentSpec):
    weight: float = Field(1.0, description="This term's weight in the sample's reward.")
    gate: str | None = Field(None, description="Count this term only when reward `gate` >= gate_threshold (G-RA).")
    gate_threshold: float = Field(1.0, description="The gate's threshold.")
    # a step reward (rlvr.rewards.process) whose per-step scores feed only the token-level advantage
    # (e.g. process_grpo): its scalar value is logged but not added to the sample's reward
    process_only: bool = Field(False, description="A step reward that feeds only the token-level advantage; its "
                               "scalar is logged, not added to the reward.")


class Config(Strict):
    """A full training run."""

    run: RunConfig = Field(default_factory=RunConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    task: ComponentSpec = Field(default_factory=lambda: ComponentSpec(name="addition"))
    rewards: list[RewardSpec] = Field(default_factory=lambda: [RewardSpec(name="correctness")])
    sampling: ComponentSpec = Field(default_factory=lambda: ComponentSpec(name="uniform"),
                                    description="Which prompts, how many samples, which groups (a batch sampler).")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    distributed: DistributedConfig = Field(default_factory=DistributedConfig)
    agent: AgentConfig | None = Field(None, description="Multi-turn rollouts with tools or an environment "
                                      "(docs/agents.md); absent: single-turn.")
    search: SearchConfig | None = Field(None, description="Tree-search rollouts (docs/search.md): search.name=mcts, "
                                        "beam_prm or policy_guided with a budget; at evaluation also sampling.")
    coevolve: CoEvolveConfig | None = Field(None, description="A reward model that learns beside the policy "
                                            "(docs/reward-models.md, Co-evolution); absent: none.")
    plugins: list[str] = Field(default_factory=list, description="Python files or modules imported before the "
                               "config is validated, so the names they register can be used here "
                               "(docs/extending.md).")

    @model_validator(mode="after")
    def _bind_components(self, validation: pydantic.ValidationInfo) -> Config:
        if not binding(validation):
            return self
        if self.agent is not None and self.agent.harness is not None and "rewards" not in self.model_fields_set:
            self.rewards = [RewardSpec(name="harness")]  # the default reward of a harness run: its own
        problems = resolve_components(self)
        if problems:
            raise ValueError("\n".join(problems))
        return self
