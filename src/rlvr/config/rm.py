"""The schema of reward-model training (`RMConfig`, for `rlvr rm`): preference pairs, a Bradley–Terry loss."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from rlvr.config.base import Strict
from rlvr.config.model import ModelConfig
from rlvr.config.run import CheckpointConfig, LoggingConfig, RunConfig
from rlvr.config.train import OptimConfig


class RMDataConfig(Strict):
    path: Path = Field(..., description="JSONL/Parquet preference pairs (chosen, rejected, optional prompt and "
                       "margin), or a run's rollouts.jsonl (or its run directory) to mine pairs from.")
    format: Literal["auto", "pairs", "rollouts"] = Field(
        "auto", description="auto: 'rollouts' for a run directory or a file named rollouts.jsonl, else 'pairs'.")
    prompt_column: str = "prompt"
    chosen_column: str = "chosen"
    rejected_column: str = "rejected"
    margin_column: str = Field("margin", description="Optional per-pair margin (Llama 2); absent means 0.")
    eval_path: Path | None = Field(None, description="Held-out pairs (same format); default: a seeded "
                                   "eval_fraction of data.path's prompts.")
    eval_fraction: float = Field(0.1, ge=0, lt=1, description="Share of prompts held out when eval_path is "
                                 "not given (split by prompt, so no prompt is in both splits).")
    max_length: int = Field(512, ge=2, description="Pairs whose longer side exceeds this (tokens) are dropped.")
    max_pairs_per_prompt: int = Field(8, ge=1, description="Rollout mining: at most this many (correct, "
                                      "incorrect) pairs per prompt, drawn with run.seed.")


class RMTrainConfig(Strict):
    steps: int = Field(200, ge=1)
    batch_size: int = Field(32, ge=1, description="Preference pairs per optimizer step.")
    micro_batch_size: int = Field(32, ge=1, description="Pairs per forward/backward (grad accumulation).")
    eval_every: int = Field(0, ge=0, description="Held-out pair accuracy every N steps (0: before and after "
                            "training only).")


class RMLossConfig(Strict):
    use_margin: bool = Field(True, description="Subtract each pair's margin inside the sigmoid (Llama 2).")
    center_coef: float = Field(0.0, ge=0, description="Reward-centering weight: adds coef * mean((r_c + r_r)^2) "
                               "(Eisenstein et al. 2023; TRL's center_rewards_coefficient). 0 disables.")


class RMConfig(Strict):
    """A discriminative (Bradley–Terry) reward model: a sequence-classification head on a causal LM."""

    run: RunConfig = Field(default_factory=RunConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    data: RMDataConfig
    train: RMTrainConfig = Field(default_factory=RMTrainConfig)
    loss: RMLossConfig = Field(default_factory=RMLossConfig)
    optim: OptimConfig = Field(default_factory=lambda: OptimConfig(lr=1e-4))
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
