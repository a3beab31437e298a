"""The `algorithm` section: advantage estimator, loss, KL and entropy terms, and an optional critic."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlvr.config.base import ComponentSpec, Strict


class CriticConfig(Strict):
    """A learned value model, for estimators that ask for `values` (GAE)."""

    kind: Literal["separate", "head"] = Field(
        "separate", description="separate: its own backbone; head: a value head on the policy's backbone."
    )
    path: str | None = Field(None, description="Backbone checkpoint of a separate critic; default: model.path.")
    lr: float = Field(1e-5, gt=0, description="Learning rate of the critic (and of the head in head mode).")
    coef: float = Field(0.5, gt=0, description="Weight of the value loss.")
    value_clip: float | None = Field(0.2, gt=0, description="PPO value clipping range; null disables.")
    warmup_steps: int = Field(0, ge=0, description="RL steps that train only the critic before the policy.")


class AlgorithmConfig(Strict):
    advantage: ComponentSpec = Field(default_factory=lambda: ComponentSpec(name="grpo"))
    loss: ComponentSpec = Field(default_factory=lambda: ComponentSpec(name="ppo_clip"))
    loss_agg: Literal["token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm"] = Field(
        "token_mean", description="How token losses become one number: token_mean (over all tokens), "
        "seq_mean_token_mean (per response, then over responses: GRPO as published), seq_mean_token_sum, "
        "seq_mean_token_sum_norm (sum / a constant length: Dr.GRPO); docs/algorithms.md.")
    loss_agg_length: int | None = Field(
        None, ge=1, description="seq_mean_token_sum_norm's constant length (Dr.GRPO); default rollout.max_new_tokens."
    )
    kl_coef: float = Field(0.0, ge=0, description="Weight of the KL-to-reference term; 0 loads no reference.")
    kl_estimator: str = Field("k3", description="k1, k2, k3 (reverse KL) or a forward-KL estimator.")
    kl_placement: Literal["loss", "reward"] = Field(
        "loss", description="loss: a KL term in the loss; reward: a per-token penalty subtracted from the reward."
    )
    kl_target: float | None = Field(None, gt=0, description="Adaptive KL coefficient aiming at this KL.")
    kl_horizon: int = Field(10_000, ge=1, description="Adaptive KL controller horizon, in samples.")
    reference_reset_every: int = Field(
        0, ge=0, description="Every N steps, copy the policy into the reference and reset the optimizer (ProRL)."
    )
    entropy_coef: float = Field(0.0, ge=0, description="Entropy bonus weight (initial value with a target).")
    entropy_target: float | None = Field(None, gt=0, description="Adapt entropy_coef towards this entropy.")
    top_entropy_ratio: float | None = Field(
        None, gt=0, le=1, description="Policy gradient only on this fraction of highest-entropy tokens."
    )
    tis_cap: float | None = Field(
        None, gt=0, description="Truncated importance sampling against the engine's log-probs, capped here."
    )
    critic: CriticConfig | None = Field(None, description="A value model (needed by gae).")
