"""The `train` (loop length and batching) and `optim` (AdamW and its schedule) sections."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlvr.config.base import Strict


class OptimConfig(Strict):
    lr: float = Field(1e-6, gt=0, description="AdamW learning rate (the peak, after warmup).")
    weight_decay: float = Field(0.0, ge=0, description="AdamW decoupled weight decay.")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW's moment decay rates.")
    eps: float = Field(1e-8, gt=0, description="AdamW's epsilon.")
    warmup_steps: int = Field(0, ge=0, description="Linear warm-up, in optimizer steps.")
    schedule: Literal["constant", "cosine", "linear"] = Field("constant", description="Learning-rate schedule after warmup.")
    min_lr_ratio: float = Field(0.0, ge=0, le=1, description="The schedule's final lr as a share of optim.lr.")
    grad_clip: float | None = Field(1.0, gt=0, description="Max global grad norm; null disables.")
    fused: bool = Field(True, description="torch's fused AdamW kernel (one pass per tensor) where the device "
                        "supports it; about 6x faster optimizer steps on a 0.5B model on CPU (make bench).")


class TrainConfig(Strict):
    steps: int = Field(100, ge=1, description="RL steps (one rollout batch each).")
    rollout_token_budget: int | None = Field(
        None, ge=1, description="Also stop once this many response tokens were sampled, counting groups a "
        "sampler dropped: compares samplers at equal rollout cost (train.steps stays the cap)."
    )
    max_time_s: float | None = Field(
        None, gt=0, description="Also stop after this many seconds of training in this invocation (a wall-time "
        "budget; the step in progress finishes, then the run ends normally)."
    )
    prompts_per_step: int = Field(16, ge=1, description="Prompts sampled per RL step (each gets rollout.n answers).")
    ppo_epochs: int = Field(1, ge=1, description="Passes over each rollout batch.")
    mini_batches: int = Field(1, ge=1, description="Optimizer steps per pass.")
    micro_batch_size: int = Field(64, ge=1, description="Sequences per forward/backward (grad accumulation).")
    micro_batch_tokens: int | None = Field(
        None, ge=1, description="Cut micro-batches by padded tokens (rows x longest row) instead, groups sorted "
        "by length: less compute on padding; micro_batch_size still caps the rows."
    )
    pack_tokens: int | None = Field(
        None, ge=1, description="Pack each micro-batch's rows into sequences of at most this many tokens (a "
        "block-diagonal causal mask, per-row positions): no compute on padding, at the price of attention over "
        "each packed sequence. For qwen2/qwen3/llama/mistral decoders; others run padded. None: padded rows."
    )
    logits_chunk: int = Field(
        1024, ge=1, description="Response tokens per chunk when a loss compares full next-token distributions "
        "(GKD: student and teacher logits, chunk x vocabulary floats each, at a time)."
    )
    compile: bool = Field(
        False, description="Run the policy's decoder (forward and backward) through torch.compile with dynamic "
        "shapes; if compiling fails at start, the learner runs eagerly with one warning. Costs a compile at start "
        "(tens of seconds on CPU); see docs/performance.md for when it pays."
    )
    compile_backend: str = Field("inductor", description="torch.compile backend for train.compile (inductor, "
                                 "zentorch with rlvr[zen], ...).")
    skip_zero_advantage: bool = Field(
        True, description="Leave out of the forward and backward the rows whose advantages are all zero (groups "
        "with all-equal rewards, dropped groups) when nothing else in the loss needs them: the policy loss "
        "vanishes there (ppo_clip, dcpo, gspo), no KL-in-loss, entropy term, entropy target or critic. The "
        "update is the same up to float rounding; first-epoch diagnostics (entropy, clip_frac, ...) are then "
        "over the trained rows."
    )
    recompute_old_logprobs: bool = Field(
        False, description="Recompute old log-probs with a learner forward instead of using the engine's."
    )
    max_fault_steps: int = Field(3, ge=1, description="Consecutive non-finite steps before the run stops.")
    memory_check: bool = Field(True, description="Estimate memory before training; stop if it cannot fit.")
    prompt_split: Literal["train", "heldout"] = Field(
        "train", description="Draw training prompts from this split; heldout is test-time RL (TTRL)."
    )
