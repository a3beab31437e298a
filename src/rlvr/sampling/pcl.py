"""Prompt Curriculum Learning: a small value model picks prompts of intermediate predicted pass rate before any
rollout, and is trained online on the pass rates the rollouts then show."""

from __future__ import annotations

from typing import Annotated, Any

import torch
from pydantic import Field

from rlvr.sampling.base import SAMPLERS, BatchSampler, StepContext
from rlvr.sampling.common import RolloutMeter, is_useful, pass_rate, sampling_metrics
from rlvr.types import Group


@torch.no_grad()
def prompt_features(policy: Any, prompts: list[list[int]], chunk: int = 64) -> torch.Tensor:
    """[P, H] mean-pooled last hidden states of `policy` over each prompt's tokens (one no-grad forward)."""
    decoder = policy.get_decoder() if hasattr(policy, "get_decoder") else None
    device = next(policy.parameters()).device
    was_training = policy.training
    policy.eval()
    feats = []
    try:
        for start in range(0, len(prompts), chunk):
            part = prompts[start : start + chunk]
            width = max(len(p) for p in part)
            ids = torch.zeros((len(part), width), dtype=torch.long)
            attn = torch.zeros_like(ids)
            for b, p in enumerate(part):
                ids[b, : len(p)] = torch.tensor(p, dtype=torch.long)
                attn[b, : len(p)] = 1
            ids, attn = ids.to(device), attn.to(device)
            if decoder is not None and decoder is not policy:
                hidden = decoder(input_ids=ids, attention_mask=attn).last_hidden_state
            else:
                hidden = policy(input_ids=ids, attention_mask=attn, output_hidden_states=True).hidden_states[-1]
            w = attn.unsqueeze(-1).to(hidden.dtype)
            feats.append(((hidden * w).sum(1) / w.sum(1).clamp(min=1)).float().cpu())
    finally:
        policy.train(was_training)
    return torch.cat(feats)


class RidgeValueModel:
    r"""p^(x) = clamp(w . phi(x) + b, 0, 1), fit by ridge regression on the last `capacity` observations.

        [w; b] = argmin sum_i (w . phi_i + b - p_i)^2 + l2 * |w|^2        (closed form; b is not penalized)
    """

    def __init__(self, l2: float = 1.0, capacity: int = 1024):
        self.l2, self.capacity = l2, capacity
        self.x: torch.Tensor | None = None
        self.y: torch.Tensor | None = None
        self.w: torch.Tensor | None = None

    @property
    def size(self) -> int:
        return 0 if self.y is None else int(self.y.numel())

    def add(self, x: torch.Tensor, y: torch.Tensor) -> None:
        x, y = x.to(torch.float64), y.to(torch.float64)
        self.x = x if self.x is None else torch.cat([self.x, x])[-self.capacity :]
        self.y = y if self.y is None else torch.cat([self.y, y])[-self.capacity :]
        self.fit()

    def fit(self) -> None:
        assert self.x is not None and self.y is not None
        design = torch.cat([self.x, torch.ones(len(self.x), 1, dtype=torch.float64)], dim=1)
        reg = self.l2 * torch.eye(design.shape[1], dtype=torch.float64)
        reg[-1, -1] = 0.0
        self.w = torch.linalg.solve(design.T @ design + reg + 1e-9 * torch.eye(design.shape[1], dtype=torch.float64),
                                    design.T @ self.y)

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        if self.w is None:
            return torch.full((len(x),), 0.5, dtype=torch.float64)
        design = torch.cat([x.to(torch.float64), torch.ones(len(x), 1, dtype=torch.float64)], dim=1)
        return (design @ self.w).clamp(0.0, 1.0)

    def state_dict(self) -> dict[str, Any]:
        return {"x": self.x, "y": self.y}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.x, self.y, self.w = state["x"], state["y"], None
        if self.y is not None and self.y.numel():
            self.fit()


@SAMPLERS.register("pcl")
class PromptCurriculumSampler(BatchSampler):
    r"""Prompt Curriculum Learning: choose the prompts whose predicted pass rate is closest to a target,
    from a larger candidate pool, before any rollout; train the value model on what the rollouts show.

        candidates  = the next k * m prompts (m = prompts_per_step, k = `pool_factor`)
        phi(x)      = mean-pooled last hidden state of the current policy over x's prompt tokens (no grad)
        p^(x)       = V(phi(x)), a ridge-regression value head (`RidgeValueModel`) on recent (phi, pass rate)
        chosen      = the m candidates with the smallest |p^(x) - tau|            (the first m until V has
                                                                                  `warmup` observations)
        rollout(chosen, n); V <- refit with (phi(x), observed pass rate of x) for the chosen x

    Metrics: `value_mae` (|p^ - observed| on the chosen prompts, before the refit), `predicted_pass_rate`,
    `observed_pass_rate`, `effective_ratio` (fraction of chosen groups with non-equal rewards).

    Source: Gao et al., "Prompt Curriculum Learning for Efficient LLM Post-Training", arXiv:2510.01135 (a value
    model updated on-policy alongside the policy selects prompts with p(x) ~ 0.5 from a pool of k * m; the
    paper's value model is a separate language model trained with squared error). Here V is a ridge head on the
    policy's own prompt features, refit each step on a window of the last `capacity` observations (older
    features come from older policies).
    """

    def __init__(self, prompts, seed: int = 0, *,
                 pool_factor: Annotated[int, Field(ge=1)] = 4,
                 target: Annotated[float, Field(ge=0.0, le=1.0)] = 0.5,
                 l2: Annotated[float, Field(gt=0.0)] = 1.0,
                 capacity: Annotated[int, Field(ge=1)] = 1024,
                 warmup: Annotated[int, Field(ge=1)] = 16):
        super().__init__(prompts, seed)
        self.pool_factor, self.target, self.warmup = pool_factor, target, warmup
        self.value = RidgeValueModel(l2, capacity)

    def next_batch(self, ctx: StepContext) -> tuple[list[Group], dict[str, float]]:
        if ctx.policy is None or ctx.renderer is None:
            raise ValueError("the 'pcl' sampler needs the step context's policy and renderer (run it under the "
                             "trainer)")
        m = ctx.prompts_per_step
        candidates = self.take(m * self.pool_factor)
        feats = prompt_features(ctx.policy, [list(ctx.renderer.render(r)[0]) for r in candidates])
        predicted = self.value.predict(feats)
        if self.value.size >= self.warmup:
            order = sorted(range(len(candidates)), key=lambda i: (abs(float(predicted[i]) - self.target), i))[:m]
        else:
            order = list(range(m))
        meter = RolloutMeter(ctx.rollout)
        groups = meter([candidates[i] for i in order], ctx.n)
        observed = torch.tensor([pass_rate(g) for g in groups[: len(order)]], dtype=torch.float64)
        chosen_pred = predicted[order]
        mae = float((chosen_pred - observed).abs().mean())
        self.value.add(feats[order], observed)
        return groups, sampling_metrics(
            groups, 0, meter, candidates_scored=len(candidates), value_mae=mae,
            predicted_pass_rate=float(chosen_pred.mean()), observed_pass_rate=float(observed.mean()),
            effective_ratio=sum(is_useful(g) for g in groups) / max(len(groups), 1), value_fit_n=self.value.size)

    def state_dict(self) -> dict[str, Any]:
        return {"order": self.order.state_dict(), "value": self.value.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.order.load_state_dict(state["order"])
        self.value.load_state_dict(state["value"])
