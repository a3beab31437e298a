"""The run's bookkeeping sections: `run` (name, directory, seed, threads), `checkpoint`, `eval` and `logging`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import pydantic
from pydantic import Field, field_validator

from rlvr.config.base import Strict


class RunConfig(Strict):
    name: str | None = Field(None, description="Run name; default: the recipe's file name.")
    dir: Path | None = Field(None, description="Run directory; default: <output_dir>/<name>-<timestamp>.")
    output_dir: Path = Field(Path("runs"), description="Where run.dir is made when it is not given.")
    seed: int = Field(0, ge=0, description="Seeds every random choice: data order, sampling, init.")
    threads: Annotated[int, Field(ge=1)] | Literal["auto"] | None = Field(
        None, description="torch CPU threads of this process. None: torch's default (OMP_NUM_THREADS, else one "
        "per core); auto: the cores not busy with other processes at start (cores in this process's affinity "
        "minus the 1-minute load average, shared among the torchrun ranks on this node), at least 1. On a "
        "loaded machine a thread per core can be many times slower than one thread (docs/performance.md). "
        "The thread count changes float reduction order, so bit-exact resume needs the same integer."
    )
    reuse_memory: bool = Field(
        True, description="Linux/glibc: keep memory that freed tensors held in this process for the next ones "
        "(mallopt: no mmap for large blocks, no trimming), instead of returning it to the OS and page-faulting "
        "fresh zeroed pages each step: the learner 1.0-1.33x faster on the 0.5B architecture, most on a loaded machine "
        "(docs/performance.md); the process's resident memory then stays at its peak. false: glibc's default."
    )


class CheckpointConfig(Strict):
    every: int = Field(0, ge=0, description="Save every N steps; 0 saves only at the end.")
    keep_last: int = Field(2, ge=1, description="Checkpoints kept; the newest valid one is never deleted.")


class EvalConfig(Strict):
    before: bool = Field(False, description="Evaluate the starting model on the held-out split.")
    after: bool = Field(False, description="Evaluate the final model on the held-out split.")
    every: int = Field(0, ge=0, description="Also evaluate every N steps; 0 disables.")
    n: int = Field(8, ge=1, description="Samples per held-out prompt.")
    ks: list[int] = Field(default_factory=lambda: [1], description="k values for pass@k (each <= n).")
    size: int | None = Field(None, ge=1, description="Held-out prompts to use; default: all.")
    temperature: float | None = Field(None, gt=0, description="Default: rollout.temperature.")
    select_model: str | None = Field(None, description="A reward model directory (`rlvr rm`'s final/) that scores "
                                     "every sample: the result gets rm@k, the accuracy of the top-scored of k "
                                     "samples, beside maj@k (the majority vote's).")

    @field_validator("ks")
    @classmethod
    def _ks(cls, ks: list[int], info: pydantic.ValidationInfo) -> list[int]:
        n = info.data.get("n", 1)
        if not ks or any(k < 1 or k > n for k in ks):
            raise ValueError(f"each k must lie in 1..eval.n={n}")
        return ks


class LoggingConfig(Strict):
    console_every: int = Field(1, ge=1, description="Print a metrics line every N steps.")
    progress: bool = Field(True, description="Show a progress bar (off when not a terminal).")
    sinks: list[Literal["jsonl", "tensorboard", "wandb", "mlflow"]] = Field(
        default_factory=lambda: ["jsonl"],
        description="Metric sinks: jsonl (always on), tensorboard, wandb (offline), mlflow (local file store).",
    )
    rollouts_every: int = Field(10, ge=0, description="Store sample prompts/responses every N steps; 0 disables.")
    rollouts_per_step: int = Field(16, ge=0, description="At most this many samples per stored step.")
