"""The learner: prepares what the chosen algorithm asks for, then turns a Batch into optimizer steps.

    prepare(batch)      only what some function names as an input:
                          old log-probs   = the engine's, or one no-grad forward (recompute / TIS)
                          ref log-probs   = one no-grad forward of the frozen reference
                          values          = the critic (GAE)
                          entropy         = of the sampling policy (EAR, top-entropy token selection)
                          token_rewards   = outcome reward on the last token, minus a KL penalty if in reward
                          step_rewards    = process rewards on each step's last token (when a step reward ran)
    update(batch)       for each epoch, for each mini-batch (one optimizer step), for each micro-batch:
                          loss = aggregate(policy_loss(...) [* TIS weights])
                               + kl_coef * aggregate(kl(logp, ref))        (KL in the loss)
                               - entropy_coef * aggregate(entropy)          (entropy bonus)
                               + critic.coef * value_loss                   (critic)
                          + auxiliary (first epoch, its share per mini-batch: SPARK's judge loss)
                        a loss that asks for full logits (GKD: student_logits, teacher_logits) runs instead
                        on `_gkd_backward`: decoder states once, then LM heads and the loss chunk by chunk
                        (a teacher on a Ray actor ships its log-probs per micro-batch instead; top-k option)
                        KDRL's annealed coefficient: the loss is rebound each update (`scheduled_loss`)
A mini-batch whose loss or gradient is not finite is skipped: gradients are dropped, the optimizer and its state
are untouched, and the fault is counted.
"""

from __future__ import annotations

import functools
import logging
import math
from collections import defaultdict
from typing import Any

import torch

from rlvr import faults
from rlvr.algorithms import (
    ADVANTAGES,
    LOSSES,
    AdaptiveKLController,
    FixedKLController,
    TargetEntropyController,
    aggregate_loss,
    gae_returns,
    kl_penalty,
    masked_mean,
    top_entropy_mask,
    truncated_is_weights,
)
from rlvr.algorithms.distill import scheduled_loss, teacher_top_k, top_k_buckets
from rlvr.algorithms.inputs import broadcast_to_tokens, call_on_rows, call_with_inputs, tensor_inputs
from rlvr.config import Config
from rlvr.learner.compiled import compile_decoder
from rlvr.learner.critic import Critic, value_loss
from rlvr.learner.logprob_model import as_logprob_model
from rlvr.learner.optim import build_optimizer, build_scheduler
from rlvr.learner.packing import group_mini_batches, row_lengths
from rlvr.models.logprobs import _head_parts, decoder_hidden, forward_tokens
from rlvr.parallel import data_parallel as dp
from rlvr.parallel import fsdp
from rlvr.types import Batch

log = logging.getLogger("rlvr.learner")


def algorithm_inputs(cfg: Config) -> set[str]:
    """Tensor names the configured estimator and loss ask for."""
    alg = cfg.algorithm
    return set(tensor_inputs(ADVANTAGES.get(alg.advantage.name))) | set(tensor_inputs(LOSSES.get(alg.loss.name)))


def needs_reference(cfg: Config) -> bool:
    return cfg.algorithm.kl_coef > 0 or "ref_logprobs" in algorithm_inputs(cfg)


def needs_teacher(cfg: Config) -> bool:
    return bool({"teacher_logprobs", "teacher_logits"} & algorithm_inputs(cfg))


def needs_token_rm(cfg: Config) -> bool:
    return "token_rm_scores" in algorithm_inputs(cfg)



class Learner:
    def __init__(self, model: torch.nn.Module, cfg: Config, reference: Any = None, critic: Critic | None = None,
                 teacher: Any = None, token_rm: Any = None):
        self.model = model
        self.token_rm = token_rm  # OREAL's frozen token-level reward model (token_rm_scores), or None
        # the KL reference and the distillation teacher: log-prob models (here or on Ray); a bare module is
        # wrapped as one
        self.reference, self.teacher = (None if m is None else
                                        as_logprob_model(m, cfg.train.micro_batch_size, cfg.train.pack_tokens)
                                        for m in (reference, teacher))
        self.critic = critic
        self.cfg = cfg
        alg = cfg.algorithm
        self.device = next(model.parameters()).device
        # FSDP2 (distributed.learner=fsdp2): every forward/backward of the model is a collective over the ranks
        self.sharded = any(fsdp.is_sharded(p) for p in model.parameters())
        self.temperature = cfg.rollout.temperature
        self.advantage_fn = ADVANTAGES.bind(alg.advantage.name, alg.advantage.params, where="algorithm.advantage")
        self.loss_fn = LOSSES.bind(alg.loss.name, alg.loss.params, where="algorithm.loss")
        self.advantage_inputs = set(tensor_inputs(self.advantage_fn))
        self.loss_inputs = set(tensor_inputs(self.loss_fn))
        self.step_loss_fn = self.loss_fn  # this update's loss: KDRL's coefficient rebound per step
        self.full_logits = "teacher_logits" in self.loss_inputs
        # GKD's teacher: in this process (its logits chunk by chunk) or elsewhere (its distributions shipped)
        self.teacher_local = isinstance(getattr(self.teacher, "model", None), torch.nn.Module)
        if self.full_logits and self.teacher is not None and not self.teacher_local and not hasattr(
                self.teacher, "token_distributions"):
            raise ValueError(f"loss '{alg.loss.name}' compares full next-token distributions, and the teacher "
                             f"{type(self.teacher).__name__} cannot return them; place it in the learner's process "
                             "(distributed.reference_worker=false) or on a reference worker")
        self.total_optimizer_steps = cfg.train.steps * cfg.train.ppo_epochs * cfg.train.mini_batches
        # train.compile: not with FSDP2's sharded parameters (their collectives run inside the forward)
        if cfg.train.compile and self.sharded:
            log.warning("train.compile is ignored with distributed.learner=fsdp2: the sharded model runs eager")
        self.compiled = cfg.train.compile and not self.sharded and compile_decoder(model, cfg.train.compile_backend)
        head_group = []
        if critic is not None and not critic.separate:
            head_group = [{"params": list(critic.head.parameters()), "lr": critic.cfg.lr}]
        self.optimizer = build_optimizer(model, cfg.optim, head_group)
        self.scheduler = build_scheduler(self.optimizer, cfg.optim, self.total_optimizer_steps)
        self.generator = torch.Generator().manual_seed(cfg.run.seed + 17)  # mini-batch shuffling
        self.kl_ctl = (AdaptiveKLController(alg.kl_coef, alg.kl_target, alg.kl_horizon)
                       if alg.kl_target is not None else FixedKLController(alg.kl_coef))
        self.entropy_ctl = (TargetEntropyController(alg.entropy_coef, alg.entropy_target)
                            if alg.entropy_target is not None else FixedKLController(alg.entropy_coef))
        self.skipped_steps = 0
        self.updates = 0  # RL batches seen (critic warm-up counts them)
        self._reached_params: set[int] | None = None  # ids of the parameters the last backward gave a gradient
        # an extra loss that joins the first epoch's optimizer steps (SPARK's judge objective), set per update
        self.auxiliary: Any = None
        # Truncated IS against the engine's log-probs: asked for directly, or implied by asynchronous training.
        self.tis_cap = alg.tis_cap
        if self.tis_cap is None and cfg.distributed.mode == "async":
            self.tis_cap = {"none": None, "tis": 2.0, "decoupled": float("inf")}[cfg.distributed.off_policy_correction]

    # -- what the algorithm needs ------------------------------------------------------------------------

    @property
    def _recompute_old(self) -> bool:
        return self.cfg.train.recompute_old_logprobs or self.tis_cap is not None

    @property
    def _entropy_in_prepare(self) -> bool:
        return "entropy" in self.advantage_inputs or self.cfg.algorithm.top_entropy_ratio is not None

    @property
    def _entropy_in_loss(self) -> bool:
        return "entropy" in self.loss_inputs or self.cfg.algorithm.entropy_coef > 0

    @property
    def _skips_zero_advantage(self) -> bool:
        """Whether rows with all-zero advantages may be left out of the update: their policy loss and its
        gradient vanish (a loss marked `zero_grad_at_zero_advantage`), and no other term reads them: no KL in the
        loss, no adaptive KL or entropy controller fed by their diagnostics, no entropy term, no critic."""
        alg, cfg = self.cfg.algorithm, self.cfg
        return (cfg.train.skip_zero_advantage
                and getattr(LOSSES.get(alg.loss.name), "zero_grad_at_zero_advantage", False)
                and not (alg.kl_placement == "loss" and alg.kl_coef > 0) and alg.kl_target is None
                and not self._entropy_in_loss and alg.entropy_target is None and self.critic is None)

    @staticmethod
    def _live_micro_batches(micro_batches: list[torch.Tensor], live: torch.Tensor) -> list[torch.Tensor]:
        """The micro-batches without their dead rows (all-zero advantages), empty ones left out: none at all
        when no row of the mini-batch is live (`_zero_missing_grads` then stands in for its backward)."""
        kept = [rows[live[rows]] for rows in micro_batches]
        return [rows for rows in kept if len(rows)]

    def _zero_missing_grads(self) -> None:
        """A mini-batch that ran no backward (every row dead): give the parameters its backward would have
        reached an exact zero gradient, so the optimizer still steps as on the full update (moments decay,
        weight decay acts, the step count moves), without a forward or a backward. Those parameters are the ones
        the last backward reached (all trainable ones before the first); ones that already hold a gradient (a
        sharded rank's padding pass, an auxiliary loss) keep it."""
        reached = self._reached_params
        for p in self._trainable():
            if p.grad is None and (reached is None or id(p) in reached):
                p.grad = torch.zeros_like(p)

    @torch.no_grad()
    def _gap_without_backward(self, batch: Batch, rows: torch.Tensor) -> tuple[float, float]:
        """|log pi_learner - log pi_engine| summed over tokens (and the token count) for a dead first mini-batch,
        so `rollout/logprob_abs_diff` is still reported: free when the old log-probs were recomputed (they are the
        learner's), else from a no-grad forward of one row (not on a sharded model, where a forward is a
        collective the other ranks would not join)."""
        if not len(rows):
            return 0.0, 0.0
        if batch.behaviour_logprobs is not None:
            if not self._recompute_old or batch.old_logprobs is None:
                return 0.0, 0.0
            idx = rows.to(self.device)
            mask = batch.mask[idx]
            return float(((batch.old_logprobs[idx] - batch.behaviour_logprobs[idx]).abs() * mask).sum()), \
                float(mask.sum())
        if self._recompute_old or self.sharded or batch.old_logprobs is None:
            return 0.0, 0.0
        mb = batch.select(rows[:1])
        out = forward_tokens(self.model, mb.input_ids, mb.attention_mask, mb.mask, self.temperature,
                             pack_tokens=self.cfg.train.pack_tokens, mm_inputs=mb.mm_inputs)
        n = out.logprobs.shape[1]
        mask = mb.mask[:, :n]
        return float(((out.logprobs - mb.old_logprobs[:, :n]).abs() * mask).sum()), float(mask.sum())

    def _micro_batches(self, rows: torch.Tensor) -> list[torch.Tensor]:
        return list(torch.split(rows, self.cfg.train.micro_batch_size))

    def _split(self, batch: Batch) -> list[tuple[torch.Tensor, list[torch.Tensor]]]:
        """This update's shuffled mini-batches of whole groups and their micro-batches (see `group_mini_batches`)."""
        order = torch.randperm(int(batch.group_ids.max()) + 1, generator=self.generator)
        return group_mini_batches(batch.group_ids.cpu(), row_lengths(batch.attention_mask.cpu()), order,
                                  self.cfg.train.mini_batches, self.cfg.train.micro_batch_size,
                                  self.cfg.train.micro_batch_tokens, keep_empty=dp.world_size() > 1)

    @torch.no_grad()
    def _forward_all(self, batch: Batch, with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """No-grad log-probs (and entropy) of the whole batch under the policy, micro-batch by micro-batch."""
        logprobs = torch.zeros(batch.mask.shape, dtype=torch.float32, device=self.device)
        entropy = torch.zeros_like(logprobs) if with_entropy else None
        micro = self._micro_batches(torch.arange(len(batch)))
        # a sharded forward is a collective: run as many as the busiest rank (agreed before the first one)
        padding = fsdp.pad_count(len(micro)) - len(micro) if self.sharded else 0
        for rows in micro:
            mb = batch.select(rows).to(self.device)
            out = forward_tokens(self.model, mb.input_ids, mb.attention_mask, mb.mask, self.temperature,
                                 with_entropy=with_entropy, pack_tokens=self.cfg.train.pack_tokens,
                                 mm_inputs=mb.mm_inputs)
            idx = rows.to(self.device)
            logprobs[idx, : out.logprobs.shape[1]] = out.logprobs
            if entropy is not None and out.entropy is not None:
                entropy[idx, : out.entropy.shape[1]] = out.entropy
        for _ in range(padding):
            self._dummy_pass(batch)
        return logprobs, entropy

    def _dummy_pass(self, batch: Batch) -> None:
        """One forward (and, with grad enabled, a zero-weight backward) of the sharded model on one row: it
        contributes nothing, and lets this rank join the collectives of a rank with more micro-batches."""
        mb = batch.select(torch.zeros(1, dtype=torch.long)).to(self.device)
        hidden = self.model.get_decoder()(input_ids=mb.input_ids, attention_mask=mb.attention_mask).last_hidden_state
        if torch.is_grad_enabled():
            (hidden.sum() * 0.0).backward()

    @torch.no_grad()
    def _values_all(self, batch: Batch) -> torch.Tensor:
        assert self.critic is not None
        values = torch.zeros(batch.mask.shape, dtype=torch.float32, device=self.device)
        for rows in self._micro_batches(torch.arange(len(batch))):
            mb = batch.select(rows).to(self.device)
            if self.critic.separate:
                v = self.critic.values(mb)
            else:
                v = forward_tokens(self.model, mb.input_ids, mb.attention_mask, mb.mask, self.temperature,
                                   value_head=self.critic.head, pack_tokens=self.cfg.train.pack_tokens,
                                   mm_inputs=mb.mm_inputs).values
            values[rows.to(self.device), : v.shape[1]] = v
        return values

    # -- prepare -----------------------------------------------------------------------------------------

    def prepare(self, batch: Batch) -> tuple[Batch, dict[str, Any]]:
        """Compute what the estimator and the loss ask for. Returns the batch (on the learner's device, with
        those tensors filled in) and the inputs available to the advantage estimator."""
        alg = self.cfg.algorithm
        batch = batch.to(self.device)
        entropy = None
        if self._recompute_old or batch.old_logprobs is None or self._entropy_in_prepare:
            old, entropy = self._forward_all(batch, with_entropy=self._entropy_in_prepare)
            if self._recompute_old or batch.old_logprobs is None:
                batch.behaviour_logprobs = batch.old_logprobs
                batch.old_logprobs = old
        if needs_reference(self.cfg):
            assert self.reference is not None, "a reference model is needed but was not loaded"
            batch.ref_logprobs = self.reference.token_logprobs(batch, self.temperature).to(self.device)
        if "teacher_logprobs" in self.advantage_inputs | self.loss_inputs:
            assert self.teacher is not None, "a teacher model is needed but was not loaded"
            batch.teacher_logprobs = self.teacher.token_logprobs(batch, self.temperature).to(self.device)
        if self.critic is not None:
            batch.values = self._values_all(batch)
        token_rm_scores = None
        if "token_rm_scores" in self.advantage_inputs:
            assert self.token_rm is not None, "a token-level reward model is needed but was not loaded"
            token_rm_scores = self.token_rm.token_scores(batch).to(self.device)

        rewards = batch.rewards.to(self.device)
        token_rewards = torch.zeros_like(batch.mask)
        token_rewards[torch.arange(len(batch), device=self.device), batch.last_token_index.to(self.device)] = rewards
        if alg.kl_placement == "reward" and self.kl_ctl.value > 0 and batch.ref_logprobs is not None:
            kl_in_reward = kl_penalty(batch.old_logprobs, batch.ref_logprobs, alg.kl_estimator) * batch.mask
            token_rewards = token_rewards - self.kl_ctl.value * kl_in_reward
            rewards = rewards - self.kl_ctl.value * kl_in_reward.sum(dim=1)
        if alg.top_entropy_ratio is not None:
            assert entropy is not None
            batch.token_filter = top_entropy_mask(entropy, batch.mask, ratio=alg.top_entropy_ratio)
        return batch, {
            "rewards": rewards, "group_ids": batch.group_ids.to(self.device), "correct": batch.correct,
            "mask": batch.mask, "response_lengths": batch.response_lengths, "old_logprobs": batch.old_logprobs,
            "ref_logprobs": batch.ref_logprobs, "entropy": entropy, "values": batch.values,
            "token_rewards": token_rewards, "input_ids": batch.input_ids, "off_policy": batch.off_policy,
            "teacher_logprobs": batch.teacher_logprobs, "step_rewards": batch.step_rewards,
            "step_mask": batch.step_mask, "token_rm_scores": token_rm_scores,
            "tree_advantages": batch.advantages,  # as the samples brought them (Batch.from_groups)
        }

    def compute_advantages(self, batch: Batch, inputs: dict[str, Any]) -> torch.Tensor:
        """Run the estimator on the prepared inputs of the valid rows (`batch.valid`; the others get 0); set
        `batch.advantages` (and the critic's returns). Returns [N] per sample or [N, T] per token."""
        name = f"advantage '{self.cfg.algorithm.advantage.name}'"
        adv = call_on_rows(self.advantage_fn, inputs, batch.valid, name)  # excluded samples: left out, 0
        batch.advantages = broadcast_to_tokens(adv, batch.mask)
        if self.critic is not None:
            raw = adv
            if self.advantage_fn.keywords.get("whiten"):  # value targets use un-whitened advantages
                unwhitened = functools.partial(self.advantage_fn.func, **{**self.advantage_fn.keywords,
                                                                          "whiten": False})
                raw = call_on_rows(unwhitened, inputs, batch.valid, name)
            batch.returns = gae_returns(broadcast_to_tokens(raw, batch.mask), batch.values, batch.mask)
        return adv

    # -- update ------------------------------------------------------------------------------------------

    def update(self, batch: Batch) -> dict[str, float]:
        cfg = self.cfg
        batch = batch.to(self.device)
        critic_only = self.critic is not None and self.updates < self.critic.cfg.warmup_steps
        train_mask = batch.mask if batch.token_filter is None else batch.mask * batch.token_filter
        # KDRL: beta for this update (0-based RL step = updates so far), kd_coefficient(step, ...)
        self.step_loss_fn = scheduled_loss(self.loss_fn, self.updates, cfg.train.steps)

        sums: dict[str, float] = defaultdict(float)  # token-weighted sums of first-epoch diagnostics
        tokens_seen = 0.0
        grad_norms: list[float] = []
        skipped = 0
        train_tokens = 0
        gap_sum, gap_tokens = 0.0, 0.0  # |learner - engine| log-prob, on tokens seen before the first step
        # rows whose every trained token has advantage 0 add exactly nothing to the gradient: leave them out
        live = None
        if self._skips_zero_advantage and not critic_only and batch.advantages is not None:
            live = ((batch.advantages * train_mask) != 0).any(dim=1).cpu()
        rows_trained = 0
        self.model.train()
        for epoch in range(cfg.train.ppo_epochs):
            splits = self._split(batch)
            for mb_index, (mb_rows, micro_batches) in enumerate(splits):
                if live is not None:
                    micro_batches = self._live_micro_batches(micro_batches, live)
                if epoch == 0:
                    rows_trained += sum(len(rows) for rows in micro_batches)
                idx = mb_rows.to(self.device)
                # normalizers of the whole (global, over data-parallel ranks) mini-batch
                tokens, seqs, all_tokens = dp.sum_floats(
                    float(train_mask[idx].sum()), float((train_mask[idx].sum(1) > 0).sum()),
                    float(batch.mask[idx].sum()))
                norms = {"num_tokens": tokens, "num_seqs": seqs, "all_tokens": all_tokens}
                self.optimizer.zero_grad(set_to_none=True)
                if self.critic is not None and self.critic.optimizer is not None:
                    self.critic.optimizer.zero_grad(set_to_none=True)
                loss_total = 0.0
                # sharded: every rank runs as many forward/backward passes as the busiest one (agreed up front)
                padding = fsdp.pad_count(len(micro_batches)) - len(micro_batches) if self.sharded else 0
                for rows in micro_batches:
                    mb = batch.select(rows)
                    mb_filter = mb.mask if mb.token_filter is None else mb.mask * mb.token_filter
                    stats = self._backward(mb, mb_filter, norms, epoch == 0, critic_only,
                                           measure_gap=not grad_norms and not skipped)
                    loss_total += stats.pop("loss")
                    gap_sum += stats.pop("logprob_gap_sum", 0.0)
                    gap_tokens += stats.pop("logprob_gap_tokens", 0.0)
                    tokens = stats.pop("tokens")
                    if epoch == 0:
                        tokens_seen += tokens
                        for k, v in stats.items():
                            sums[k] += v * tokens
                    train_tokens += mb.num_tokens
                for _ in range(padding):
                    self._dummy_pass(batch)
                if self.auxiliary is not None and epoch == 0:  # its share of the extra loss, in this same step
                    loss_total += self.auxiliary.backward(self.model, mb_index, len(splits))
                if micro_batches:
                    self._reached_params = {id(p) for p in self._trainable() if p.grad is not None}
                else:  # nothing live in this mini-batch: its gradient is exactly zero
                    self._zero_missing_grads()
                    if not grad_norms and not skipped:  # still the sampling policy: the train/inference gap
                        g_sum, g_tokens = self._gap_without_backward(batch, mb_rows)
                        gap_sum, gap_tokens = gap_sum + g_sum, gap_tokens + g_tokens
                grad_norm = self._reduce_and_step(loss_total, critic_only)
                if grad_norm is None:
                    skipped += 1
                else:
                    grad_norms.append(grad_norm)
        metrics = self._finish({k: v / max(tokens_seen, 1.0) for k, v in sums.items()}, tokens_seen, len(batch),
                               grad_norms, skipped, train_tokens, critic_only)
        if gap_tokens > 0:
            metrics["rollout/logprob_abs_diff"] = gap_sum / gap_tokens
        if batch.token_filter is not None:
            metrics["trained_token_frac"] = float(train_mask.sum() / batch.mask.sum().clamp(min=1))
        if "kd_coef" in self.step_loss_fn.keywords:
            metrics["kd_coef"] = float(self.step_loss_fn.keywords["kd_coef"])
        if live is not None:
            metrics["zero_adv_rows_skipped_frac"] = 1.0 - rows_trained / max(len(batch), 1)
            if rows_trained == 0:  # every row dead: no token trained, the policy-gradient loss is exactly 0
                metrics.setdefault("pg_loss", 0.0)
        return metrics

    def idle_update(self) -> dict[str, float]:
        """`update` for a data-parallel rank that was dealt no groups this step: it joins every collective with
        zero contributions and so applies the same optimizer steps as the ranks that had data. Replicated
        (ddp) ranks only: a sharded model's ranks would also have to join every forward and backward."""
        assert not self.sharded, "idle_update is for replicated data-parallel ranks"
        critic_only = self.critic is not None and self.updates < self.critic.cfg.warmup_steps
        grad_norms: list[float] = []
        skipped = 0
        for _ in range(self.cfg.train.ppo_epochs * self.cfg.train.mini_batches):
            dp.sum_floats(0.0, 0.0, 0.0)  # the mini-batch normalizers
            self.optimizer.zero_grad(set_to_none=True)
            if self.critic is not None and self.critic.optimizer is not None:
                self.critic.optimizer.zero_grad(set_to_none=True)
            grad_norm = self._reduce_and_step(0.0, critic_only)
            if grad_norm is None:
                skipped += 1
            else:
                grad_norms.append(grad_norm)
        return self._finish({}, 0.0, 0, grad_norms, skipped, 0, critic_only)

    def _reduce_and_step(self, loss_total: float, critic_only: bool) -> float | None:
        """Sum gradients and loss over data-parallel ranks, clip, and step. Returns the gradient norm, or None
        when the loss or the gradient is not finite and the step was skipped."""
        # data-parallel ranks: sum, losses are globally normed (FSDP has summed the sharded ones)
        dp.all_reduce_gradients([p for p in self._trainable() if not fsdp.is_sharded(p)])
        if self.critic is not None and self.critic.separate:
            dp.all_reduce_gradients(self.critic.parameters())
        loss_total = dp.sum_floats(loss_total)[0]
        grad_norm = self._clip_and_norm()
        if not (math.isfinite(loss_total) and math.isfinite(grad_norm)):
            self.optimizer.zero_grad(set_to_none=True)
            log.warning("RL step %d: non-finite loss (%s) or gradient norm (%s); optimizer step skipped, "
                        "optimizer state untouched", self.updates + 1, loss_total, grad_norm)
            return None
        faults.kill_point("optimizer", self.updates + 1)
        if not critic_only:
            self.optimizer.step()
            self.scheduler.step()
        elif not self.critic.separate:  # warm-up of a head: step it alone
            self.optimizer.step()
        if self.critic is not None and self.critic.optimizer is not None:
            torch.nn.utils.clip_grad_norm_(self.critic.parameters(), 1.0)
            self.critic.optimizer.step()
        return grad_norm

    def _finish(self, metrics: dict[str, float], tokens_seen: float, rows: int, grad_norms: list[float],
                skipped: int, train_tokens: int, critic_only: bool) -> dict[str, float]:
        """Count the update, move the KL and entropy controllers (on the token-weighted mean over data-parallel
        ranks, so every rank keeps the same coefficients) and assemble the update's metrics."""
        self.updates += 1
        self.skipped_steps += skipped
        kl_sum, entropy_sum, tokens, all_rows = dp.sum_floats(
            metrics.get("kl", 0.0) * tokens_seen, metrics.get("entropy", 0.0) * tokens_seen, tokens_seen, rows)
        if tokens > 0:
            self.kl_ctl.update(kl_sum / tokens, int(all_rows))
            self.entropy_ctl.update(entropy_sum / tokens, int(all_rows))
        metrics.update(
            grad_norm=sum(grad_norms) / len(grad_norms) if grad_norms else float("nan"),
            lr=self.scheduler.get_last_lr()[0],
            skipped_optimizer_steps=float(skipped),
            train_tokens=float(train_tokens),
            kl_coef=float(self.kl_ctl.value),
            critic_only=float(critic_only),
        )
        if self.cfg.algorithm.entropy_coef > 0:
            metrics["entropy_coef"] = float(self.entropy_ctl.value)
        return metrics

    def _backward(self, mb: Batch, train_mask: torch.Tensor, norms: dict[str, float], first_epoch: bool,
                  critic_only: bool, measure_gap: bool = False) -> dict[str, float]:
        """Forward and backward of one micro-batch; returns its loss and first-epoch diagnostics. With
        `measure_gap` (no optimizer step yet in this update, so the learner is the policy that sampled) it also
        sums |log pi_learner - log pi_engine| over the response tokens: the train/inference mismatch."""
        alg = self.cfg.algorithm
        if self.full_logits:
            return self._gkd_backward(mb, train_mask, norms, first_epoch)
        head = None
        if self.critic is not None and not self.critic.separate:
            head = (lambda h: self.critic.head(h.detach())) if critic_only else self.critic.head
        out = forward_tokens(self.model, mb.input_ids, mb.attention_mask, mb.mask, self.temperature,
                             with_entropy=first_epoch or self._entropy_in_loss, entropy_grad=self._entropy_in_loss,
                             value_head=head, pack_tokens=self.cfg.train.pack_tokens, mm_inputs=mb.mm_inputs)
        logp = out.logprobs
        assert mb.old_logprobs is not None
        agg = dict(mode=alg.loss_agg, num_tokens=norms["num_tokens"], num_seqs=norms["num_seqs"])
        if alg.loss_agg == "seq_mean_token_sum_norm":
            agg["constant_length"] = float(alg.loss_agg_length or self.cfg.rollout.max_new_tokens)
        available = {
            "logprobs": logp, "old_logprobs": mb.old_logprobs, "advantages": mb.advantages, "mask": train_mask,
            "entropy": out.entropy, "ref_logprobs": mb.ref_logprobs, "behaviour_logprobs": mb.behaviour_logprobs,
            "rewards": mb.rewards, "correct": mb.correct, "group_ids": mb.group_ids,
            "response_lengths": mb.response_lengths, "off_policy": mb.off_policy,
            "teacher_logprobs": mb.teacher_logprobs,
        }
        per_token, diag = call_with_inputs(self.step_loss_fn, available, f"loss '{alg.loss.name}'")
        if self.tis_cap is not None and mb.behaviour_logprobs is not None:
            per_token = per_token * truncated_is_weights(mb.old_logprobs, mb.behaviour_logprobs, mb.mask,
                                                         cap=self.tis_cap)
        policy_loss = aggregate_loss(per_token, train_mask, **agg)
        if faults.nan_loss(self.updates + 1):
            policy_loss = policy_loss * float("nan")
        loss = torch.zeros((), device=self.device) if critic_only else policy_loss
        kl_value = 0.0
        if mb.ref_logprobs is not None and alg.kl_placement == "loss" and self.kl_ctl.value > 0:
            kl_tok = kl_penalty(logp, mb.ref_logprobs, alg.kl_estimator)
            if not critic_only:
                loss = loss + self.kl_ctl.value * aggregate_loss(kl_tok, mb.mask, "token_mean",
                                                                 num_tokens=norms["all_tokens"])
            kl_value = float(masked_mean(kl_tok.detach(), mb.mask))
        elif mb.ref_logprobs is not None:
            kl_value = float(masked_mean(kl_penalty(logp.detach(), mb.ref_logprobs, alg.kl_estimator), mb.mask))
        if self._entropy_in_loss and self.entropy_ctl.value > 0 and not critic_only:
            loss = loss - self.entropy_ctl.value * aggregate_loss(out.entropy, mb.mask, "token_mean",
                                                                  num_tokens=norms["all_tokens"])
        v_loss = None
        if self.critic is not None:
            values = out.values if out.values is not None else self.critic.values(mb)
            v_loss = value_loss(values, mb.values, mb.returns, mb.mask, self.critic.cfg.value_clip,
                                norms["all_tokens"])
            if self.critic.separate:
                (self.critic.cfg.coef * v_loss).backward()
            else:
                loss = loss + self.critic.cfg.coef * v_loss
        if loss.requires_grad:
            loss.backward()
        elif self.sharded:  # nothing to learn from here, but the other ranks wait in this backward's collectives
            self._dummy_pass(mb)
        stats: dict[str, float] = {"loss": float(loss.detach()) + (float(v_loss.detach()) if v_loss is not None else 0.0),
                                   "tokens": float(mb.mask.sum())}
        if first_epoch:
            log_ratio = (logp.detach() - mb.old_logprobs) * mb.mask
            stats.update(
                pg_loss=float(masked_mean(per_token.detach(), train_mask)),
                kl=kl_value,
                entropy=float(masked_mean(out.entropy.detach(), mb.mask)) if out.entropy is not None else float("nan"),
                clip_frac=float(masked_mean(diag["clipped"], train_mask)) if "clipped" in diag else 0.0,
                approx_kl_old=float(masked_mean(0.5 * log_ratio.square(), mb.mask)),
            )
            if "teacher_kl" in diag:  # KDRL: its reverse-KL estimate to the teacher, over every response token
                stats["teacher_kl"] = float(masked_mean(diag["teacher_kl"], mb.mask))
            if v_loss is not None:
                stats["value_loss"] = float(v_loss.detach())
        engine_logprobs = mb.behaviour_logprobs if mb.behaviour_logprobs is not None else \
            (None if self._recompute_old else mb.old_logprobs)
        if measure_gap and engine_logprobs is not None:
            stats["logprob_gap_sum"] = float(((logp.detach() - engine_logprobs).abs() * mb.mask).sum())
            stats["logprob_gap_tokens"] = float(mb.mask.sum())
        return stats

    def _token_weights(self, train_mask: torch.Tensor, norms: dict[str, float]) -> torch.Tensor:
        """d loss / d per_token[b, t] of this micro-batch's share of the aggregated loss: every aggregation mode
        is linear in the per-token loss, so sum(w * per_token) equals `aggregate_loss(per_token, ...)`."""
        alg = self.cfg.algorithm
        agg = dict(mode=alg.loss_agg, num_tokens=norms["num_tokens"], num_seqs=norms["num_seqs"])
        if alg.loss_agg == "seq_mean_token_sum_norm":
            agg["constant_length"] = float(alg.loss_agg_length or self.cfg.rollout.max_new_tokens)
        with torch.enable_grad():
            x = torch.zeros(train_mask.shape, dtype=torch.float32, device=train_mask.device, requires_grad=True)
            (w,) = torch.autograd.grad(aggregate_loss(x, train_mask.float(), **agg), x)
        return w

    def _gkd_backward(self, mb: Batch, train_mask: torch.Tensor, norms: dict[str, float],
                      first_epoch: bool) -> dict[str, float]:
        """Forward and backward of one micro-batch for a loss on full next-token distributions (GKD).

        The student's decoder runs once (with grad) and the teacher's once (no grad). Then, for each chunk of
        `logits_chunk` response tokens: the student's LM head on detached states, the teacher's logits, the
        loss weighted as `aggregate_loss` would weight it, and a backward into the states and the head; the
        states' summed gradient then flows through the decoder in one backward. Peak logits memory is
        2 * chunk * V floats, whatever the batch's N * T.
        """
        alg = self.cfg.algorithm
        teacher = getattr(self.teacher, "model", None) if self.teacher_local else None
        top_k = int(self.step_loss_fn.keywords.get("teacher_top_k", 0))  # 0: the teacher's full distribution
        parts = _head_parts(self.model)
        t_parts = _head_parts(teacher) if teacher is not None else None
        if parts is None or (self.teacher_local and t_parts is None):
            raise ValueError(f"loss '{alg.loss.name}' needs a student and a teacher whose logits are "
                             "lm_head(decoder(x))")
        if self.sharded:
            raise ValueError(f"loss '{alg.loss.name}' does not run on a sharded learner (distributed.learner=fsdp2)")
        decoder, head = parts
        T = max(self.temperature, 1e-6)
        select = mb.mask[:, 1:] > 0  # position t-1 predicts token t
        # image rows: each model merges the prompt's images into its own embeddings (its own vision tower)
        hidden = decoder_hidden(self.model, decoder, mb.input_ids, mb.attention_mask, mb.mm_inputs)[:, :-1][select]
        if self.teacher_local:
            t_device = next(teacher.parameters()).device
            with torch.no_grad():
                moved: dict[int, dict[str, Any]] = {}  # rows of one prompt keep sharing one dict (one tower call)
                t_mm = None if mb.mm_inputs is None else [
                    None if m is None else moved.setdefault(id(m), {k: v.to(t_device) if torch.is_tensor(v) else v
                                                           for k, v in m.items()})  # raw_images stay as they are
                    for m in mb.mm_inputs]
                t_hidden = decoder_hidden(teacher, t_parts[0], mb.input_ids.to(t_device),
                                          mb.attention_mask.to(t_device), t_mm)
                t_hidden = t_hidden[:, :-1][select.to(t_device)]
        else:  # a teacher on a Ray actor: its log-probs (all V, or top k + tail) for this micro-batch's tokens
            shipped = {k: v.to(self.device) for k, v in self.teacher.token_distributions(
                mb, T, top_k, self.cfg.train.logits_chunk).items()}
        weights = self._token_weights(train_mask, norms)[:, 1:][select]
        states = hidden.detach().requires_grad_(True)
        loss_total, jsd_sum, entropy_sum, chunk = 0.0, 0.0, 0.0, self.cfg.train.logits_chunk
        for start in range(0, states.shape[0], chunk):
            s_logits = head(states[start : start + chunk]).float() / T
            with torch.no_grad():
                if self.teacher_local:
                    t_logits = t_parts[1](t_hidden[start : start + chunk]).float().to(s_logits.device) / T
                    top = teacher_top_k(torch.log_softmax(t_logits, dim=-1), top_k) if top_k else None
                else:  # log-probs at temperature T already; the loss's log-softmax leaves them as they are
                    t_logits = shipped["logprobs"][start : start + chunk]
                    top = (t_logits, shipped["ids"][start : start + chunk],
                           shipped["tail"][start : start + chunk]) if top_k else None
            # top k: both models as distributions over the teacher's k most likely tokens and one tail bucket
            s_in, t_in = top_k_buckets(s_logits, *top) if top is not None else (s_logits, t_logits)
            per_token, _ = call_with_inputs(self.step_loss_fn, {"student_logits": s_in, "teacher_logits": t_in},
                                            f"loss '{alg.loss.name}'")
            part = (per_token * weights[start : start + chunk]).sum()
            part.backward()
            loss_total += float(part.detach())
            jsd_sum += float((per_token.detach() * (weights[start : start + chunk] != 0)).sum())
            if first_epoch:
                with torch.no_grad():
                    logp = torch.log_softmax(s_logits.detach(), dim=-1)
                    entropy_sum += float(-(logp.exp() * logp).sum())
        if states.grad is not None:
            hidden.backward(states.grad)
        stats: dict[str, float] = {"loss": loss_total, "tokens": float(mb.mask.sum())}
        if first_epoch:
            trained = float((weights != 0).sum())
            stats.update(pg_loss=jsd_sum / max(trained, 1.0), gkd_jsd=jsd_sum / max(trained, 1.0), kl=0.0,
                         entropy=entropy_sum / max(states.shape[0], 1), clip_frac=0.0, approx_kl_old=0.0)
        return stats

    def _trainable(self) -> list[torch.nn.Parameter]:
        params = [p for p in self.model.parameters() if p.requires_grad]
        if self.critic is not None and not self.critic.separate:
            params += list(self.critic.head.parameters())
        return params

    def _clip_and_norm(self) -> float:
        params = [p for p in self._trainable() if p.grad is not None]
        if not params:
            return 0.0
        max_norm = self.cfg.optim.grad_clip if self.cfg.optim.grad_clip is not None else float("inf")
        if self.sharded:
            return fsdp.clip_grad_norm(params, max_norm)
        return float(torch.nn.utils.clip_grad_norm_(params, max_norm))

    # -- reference reset (ProRL) -------------------------------------------------------------------------

    def reset_reference(self) -> None:
        """Copy the current policy into the reference and restart the optimizer's moments (ProRL)."""
        assert self.reference is not None
        self.reference.load_state_dict(self.model.state_dict())
        self.optimizer.state.clear()

    # -- state -------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The learner's state. With a sharded model this is a collective (every rank calls it) that gathers
        the optimizer's full state, keyed by parameter name, on rank 0."""
        state = {
            "optimizer": fsdp.optimizer_state(self.model, self.optimizer) if self.sharded
            else self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "generator": self.generator.get_state(),
            "skipped_steps": self.skipped_steps,
            "updates": self.updates,
            "kl_ctl": self.kl_ctl.state_dict(),
            "entropy_ctl": self.entropy_ctl.state_dict(),
        }
        if self.critic is not None:
            state["critic"] = self.critic.state_dict()
        if self.reference is not None and self.cfg.algorithm.reference_reset_every:
            state["reference"] = self.reference.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.sharded:
            fsdp.load_optimizer_state(self.model, self.optimizer, state["optimizer"])
        else:
            self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.generator.set_state(state["generator"])
        self.skipped_steps = int(state.get("skipped_steps", 0))
        self.updates = int(state.get("updates", 0))
        if "kl_ctl" in state:
            self.kl_ctl.load_state_dict(state["kl_ctl"])
            self.entropy_ctl.load_state_dict(state["entropy_ctl"])
        if self.critic is not None and "critic" in state:
            self.critic.load_state_dict(state["critic"])
        if self.reference is not None and "reference" in state:
            self.reference.load_state_dict(state["reference"])
