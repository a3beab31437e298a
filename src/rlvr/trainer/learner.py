"""The learner: turns a Batch into optimizer steps (PPO-style epochs, mini-batches, gradient accumulation).

Per rollout batch:
    old log-probs  = the engine's behaviour log-probs, or one no-grad forward if recomputing
    ref log-probs  = one no-grad forward of the frozen reference (only when the KL term is on)
    for each epoch, for each mini-batch (one optimizer step), for each micro-batch (accumulate):
        loss = aggregate(policy_loss(logp, old, A)) + kl_coef * aggregate(kl(logp, ref))
A step whose loss or gradient is not finite is skipped: gradients are dropped, the optimizer and its state
are untouched, and the fault is counted.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import torch

from rlvr.algorithms import LOSSES, aggregate_loss, kl_penalty, masked_mean
from rlvr.config import Config
from rlvr.trainer.logprobs import token_logprobs
from rlvr.trainer.optim import build_optimizer, build_scheduler
from rlvr.types import Batch


class Learner:
    def __init__(self, model: torch.nn.Module, cfg: Config, reference: torch.nn.Module | None = None):
        self.model = model
        self.reference = reference
        self.cfg = cfg
        self.device = next(model.parameters()).device
        self.temperature = cfg.rollout.temperature
        self.loss_fn = LOSSES.bind(cfg.algorithm.loss.name, cfg.algorithm.loss.params, where="algorithm.loss")
        self.total_optimizer_steps = cfg.train.steps * cfg.train.ppo_epochs * cfg.train.mini_batches
        self.optimizer = build_optimizer(model, cfg.optim)
        self.scheduler = build_scheduler(self.optimizer, cfg.optim, self.total_optimizer_steps)
        self.generator = torch.Generator().manual_seed(cfg.run.seed + 17)  # mini-batch shuffling
        self.skipped_steps = 0

    # -- log-probs ---------------------------------------------------------------------------------------

    def _micro_batches(self, rows: torch.Tensor) -> list[torch.Tensor]:
        return list(torch.split(rows, self.cfg.train.micro_batch_size))

    @torch.no_grad()
    def logprobs_of(self, model: torch.nn.Module, batch: Batch) -> torch.Tensor:
        """No-grad log-probs of the batch's tokens under `model`, micro-batch by micro-batch, as [B, T]."""
        out = torch.zeros(batch.mask.shape, dtype=torch.float32, device=self.device)
        for rows in self._micro_batches(torch.arange(len(batch))):
            mb = batch.select(rows).to(self.device)
            lp, _ = token_logprobs(model, mb.input_ids, mb.attention_mask, mb.mask, self.temperature)
            out[rows.to(self.device), : lp.shape[1]] = lp
        return out

    # -- update ------------------------------------------------------------------------------------------

    def update(self, batch: Batch) -> dict[str, float]:
        cfg = self.cfg
        batch = batch.to(self.device)
        if cfg.train.recompute_old_logprobs or batch.old_logprobs is None:
            batch.old_logprobs = self.logprobs_of(self.model, batch)
        if self.reference is not None and cfg.algorithm.kl_coef > 0:
            batch.ref_logprobs = self.logprobs_of(self.reference, batch)

        sums: dict[str, float] = defaultdict(float)  # token-weighted sums of diagnostics
        tokens_seen = 0.0
        grad_norms: list[float] = []
        skipped = 0
        train_tokens = 0
        self.model.train()
        for epoch in range(cfg.train.ppo_epochs):
            order = torch.randperm(len(batch), generator=self.generator)
            for mb_rows in torch.tensor_split(order, cfg.train.mini_batches):
                if mb_rows.numel() == 0:
                    continue
                num_tokens = float(batch.mask[mb_rows.to(self.device)].sum())
                num_seqs = float((batch.mask[mb_rows.to(self.device)].sum(1) > 0).sum())
                self.optimizer.zero_grad(set_to_none=True)
                loss_total = 0.0
                for rows in self._micro_batches(mb_rows):
                    mb = batch.select(rows)
                    stats = self._backward(mb, num_tokens, num_seqs, with_entropy=epoch == 0)
                    loss_total += stats.pop("loss")
                    if epoch == 0:
                        tokens = stats.pop("tokens")
                        tokens_seen += tokens
                        for k, v in stats.items():
                            sums[k] += v * tokens
                    train_tokens += mb.num_tokens
                grad_norm = self._clip_and_norm()
                if not (math.isfinite(loss_total) and math.isfinite(grad_norm)):
                    self.optimizer.zero_grad(set_to_none=True)
                    skipped += 1
                    continue
                self.optimizer.step()
                self.scheduler.step()
                grad_norms.append(grad_norm)
        self.skipped_steps += skipped
        metrics = {k: v / max(tokens_seen, 1.0) for k, v in sums.items()}
        metrics.update(
            grad_norm=sum(grad_norms) / len(grad_norms) if grad_norms else float("nan"),
            lr=self.scheduler.get_last_lr()[0],
            skipped_optimizer_steps=float(skipped),
            train_tokens=float(train_tokens),
        )
        return metrics

    def _backward(self, mb: Batch, num_tokens: float, num_seqs: float, with_entropy: bool) -> dict[str, float]:
        cfg = self.cfg.algorithm
        logp, entropy = token_logprobs(self.model, mb.input_ids, mb.attention_mask, mb.mask, self.temperature,
                                       with_entropy=with_entropy)
        assert mb.old_logprobs is not None
        per_token, diag = self.loss_fn(logp, mb.old_logprobs, mb.advantages, mb.mask)
        agg = dict(mode=cfg.loss_agg, num_tokens=num_tokens, num_seqs=num_seqs)
        loss = aggregate_loss(per_token, mb.mask, **agg)
        kl_value = 0.0
        if mb.ref_logprobs is not None and cfg.kl_coef > 0:
            kl_tok = kl_penalty(logp, mb.ref_logprobs, cfg.kl_estimator)
            loss = loss + cfg.kl_coef * aggregate_loss(kl_tok, mb.mask, **agg)
            kl_value = _masked_mean(kl_tok.detach(), mb.mask)
        loss.backward()
        stats = {"loss": float(loss.detach()), "tokens": float(mb.mask.sum())}
        if with_entropy:
            log_ratio = (logp.detach() - mb.old_logprobs) * mb.mask
            stats.update(
                pg_loss=_masked_mean(per_token.detach(), mb.mask),
                kl=kl_value,
                entropy=_masked_mean(entropy, mb.mask) if entropy is not None else float("nan"),
                clip_frac=_masked_mean(diag["clipped"], mb.mask) if "clipped" in diag else 0.0,
                approx_kl_old=_masked_mean(0.5 * log_ratio.square(), mb.mask),
            )
        return stats

    def _clip_and_norm(self) -> float:
        params = [p for p in self.model.parameters() if p.grad is not None]
        if not params:
            return 0.0
        max_norm = self.cfg.optim.grad_clip if self.cfg.optim.grad_clip is not None else float("inf")
        return float(torch.nn.utils.clip_grad_norm_(params, max_norm))

    # -- state -------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "generator": self.generator.get_state(),
            "skipped_steps": self.skipped_steps,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.generator.set_state(state["generator"])
        self.skipped_steps = int(state.get("skipped_steps", 0))


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    return float(masked_mean(values, mask))
