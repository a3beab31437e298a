"""The schema of supervised fine-tuning (`SFTConfig`, for `rlvr sft`): prompt/completion data, a loop."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from rlvr.config.base import Strict
from rlvr.config.model import ModelConfig
from rlvr.config.run import CheckpointConfig, LoggingConfig, RunConfig
from rlvr.config.train import OptimConfig


class SFTDataConfig(Strict):
    path: Path = Field(..., description="JSONL (or Parquet) file with prompt and completion columns, or an RL "
                       "run's directory / rollouts.jsonl (re-distillation: SFT on the run's own answers).")
    format: Literal["auto", "prompt_completion", "rollouts"] = Field(
        "auto", description="auto: 'rollouts' for a run directory or a file named rollouts.jsonl, else "
        "'prompt_completion'.")
    prompt_column: str = "prompt"
    completion_column: str = "completion"
    max_length: int = Field(512, ge=2, description="Examples longer than this (tokens) are dropped.")
    correct_only: bool = Field(True, description="rollouts: keep only answers the verifier marked correct.")
    per_prompt: int | None = Field(1, ge=1, description="rollouts: at most this many distinct answers per prompt, "
                                   "the newest (latest step) first; None keeps all.")
    max_examples: int | None = Field(None, ge=1, description="Keep at most this many examples (rollouts: the "
                                     "newest first; otherwise the first rows).")


class SFTTrainConfig(Strict):
    steps: int = Field(1000, ge=1)
    batch_size: int = Field(32, ge=1)
    micro_batch_size: int = Field(64, ge=1)


class SFTConfig(Strict):
    """Supervised fine-tuning on prompt/completion pairs (loss on completion tokens only)."""

    run: RunConfig = Field(default_factory=RunConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    data: SFTDataConfig
    train: SFTTrainConfig = Field(default_factory=SFTTrainConfig)
    optim: OptimConfig = Field(default_factory=lambda: OptimConfig(lr=1e-4))
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
