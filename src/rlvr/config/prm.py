"""The schema of process-reward-model training (`PRMConfig`, for `rlvr prm`): Monte Carlo step labels from the
initial policy's samples (ER-PRM's entropy-regularized aggregation), then a per-step scalar head."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from rlvr.config.base import ComponentSpec, Strict
from rlvr.config.model import ModelConfig
from rlvr.config.rollout import RolloutConfig
from rlvr.config.run import CheckpointConfig, LoggingConfig, RunConfig
from rlvr.config.train import OptimConfig


class PRMLabelConfig(Strict):
    path: Path | None = Field(None, description="Labelled steps (JSONL written by an earlier `rlvr prm`): skip "
                              "the labelling pass and train on these. Default: label now, into <run dir>/labels.jsonl.")
    prompts: int = Field(64, ge=1, description="Training prompts to sample solutions for (the task's train split, "
                         "from the start).")
    solutions: int = Field(4, ge=1, description="Solutions sampled per prompt with the initial policy (model.path); "
                           "every step prefix of each is labelled. Also the n of best-of-n.")
    rollouts: int = Field(8, ge=0, description="m: completions rolled out from each step prefix. 0: no step "
                          "rollouts, only the solutions and their outcomes (loss.type oreal needs nothing more).")
    eta: float = Field(2.0, ge=0, description="eta of the entropy-regularized value v = (1/eta) log mean exp(eta "
                       "r_j). 0: the mean (soft Monte Carlo label); .inf: the max (hard label). Default 2 (ER-PRM's main "
                       "setting as we recall it; not re-checked against the paper's text). With label.path: when it differs "
                       "from the file's eta, the file's stored rollout rewards are re-aggregated (no new sampling).")
    only: bool = Field(False, description="Stop after writing the labels (no PRM training).")

    @field_validator("eta")
    @classmethod
    def _eta(cls, v: float) -> float:
        if math.isnan(v):
            raise ValueError("label.eta: expected a number >= 0 (or .inf); got nan")
        return v


class PRMDataConfig(Strict):
    eval_fraction: float = Field(0.2, ge=0, lt=1, description="Share of the labelled prompts held out (all their "
                                 "solutions and steps), seeded by run.seed.")
    max_length: int = Field(512, ge=2, description="Solutions longer than this (prompt + response tokens) are "
                            "dropped.")
    threshold: float = Field(0.5, gt=0, lt=1, description="A step is 'good' when its label v exceeds this; step "
                             "accuracy compares sigmoid(score) > threshold with it.")


class PRMTrainConfig(Strict):
    steps: int = Field(200, ge=1)
    batch_size: int = Field(16, ge=1, description="Solutions (each with all its labelled steps) per optimizer step.")
    micro_batch_size: int = Field(16, ge=1)
    eval_every: int = Field(0, ge=0, description="Held-out metrics every N steps (0: before and after only).")


class PRMLossConfig(Strict):
    type: Literal["bce", "mse", "oreal"] = Field(
        "bce", description="bce: cross-entropy of sigmoid(score) against the soft step label v (ER-PRM, "
        "Math-Shepherd); mse: (sigmoid(score) - v)^2; oreal: OREAL's token-level reward model (arXiv:2502.06781), "
        "trained from outcome labels only: sigmoid(mean over the response's tokens of the score) against the "
        "verifier's 0/1 (no step labels; label.rollouts 0 skips the step rollouts).")


class PRMEvalConfig(Strict):
    aggregate: Literal["min", "last", "mean"] = Field("min", description="How best-of-n turns a solution's step "
                                                      "scores into one: the weakest step (min), the last, or mean.")


class PRMConfig(Strict):
    """A process reward model: step labels by Monte Carlo rollouts of the initial policy, a per-token head."""

    run: RunConfig = Field(default_factory=RunConfig)
    model: ModelConfig = Field(default_factory=ModelConfig, description="The initial policy (samples and rollouts) "
                               "and the PRM's backbone.")
    task: ComponentSpec = Field(default_factory=lambda: ComponentSpec(name="addition"),
                                description="A task with a `reasoning_steps` hook (steps to label).")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="engine, temperature, "
                                   "max_new_tokens of the solutions and of each prefix's completions (n unused).")
    label: PRMLabelConfig = Field(default_factory=PRMLabelConfig)
    data: PRMDataConfig = Field(default_factory=PRMDataConfig)
    train: PRMTrainConfig = Field(default_factory=PRMTrainConfig)
    loss: PRMLossConfig = Field(default_factory=PRMLossConfig)
    eval: PRMEvalConfig = Field(default_factory=PRMEvalConfig)
    optim: OptimConfig = Field(default_factory=lambda: OptimConfig(lr=3e-4))
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)

    @model_validator(mode="after")
    def _rollouts_for_step_labels(self) -> PRMConfig:
        if self.label.rollouts == 0 and self.loss.type != "oreal" and self.label.path is None:
            raise ValueError(f"label.rollouts: loss.type {self.loss.type} trains on step labels, which need m >= 1 "
                             "rollouts per step prefix; set label.rollouts (e.g. 8), or loss.type=oreal to train "
                             "on outcomes only")
        return self
