"""Asynchronous training: rollout workers generate the next batches while the learner trains on this one.

With `distributed.max_staleness = k`, up to k batches beyond the current one are in flight. A batch submitted while
the learner is at policy version v is consumed at version <= v + k, so every sample's staleness (learner version
minus the version that generated it) is at most k by construction; k = 0 submits the next batch only after the
update, which is exactly synchronous training (same prompts, same seeds, same samples). The stale-sample rule
(`distributed.stale: drop | requeue`) still guards the bound, e.g. after a worker was replaced.

Off-policy correction: the learner recomputes the proximal old log-probs and weights each token by
min(pi_old / pi_behaviour, cap) (`distributed.off_policy_correction`: tis, cap 2; decoupled, no cap; none).

Metrics: `async/staleness_<d>` (fraction of samples d versions old), `async/queue_depth`, `async/learner_wait_s`
(time the learner waited for rollouts), `async/rollout_idle_frac` (share of worker time not spent generating),
`async/samples_per_s`, `async/dropped_samples`, `async/requeued_groups`.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from typing import Any

import torch

from rlvr.runtime import step_seed
from rlvr.types import Group


class AsyncBatches:
    """Batches for steps start..N from a pipelined rollout engine (`RayEngine.submit` / `result`)."""

    def __init__(self, run: Any):
        self.run = run
        self.k = run.cfg.distributed.max_staleness
        self.pending: deque[tuple[int, list[Any], list[tuple[list[int], str]], list[Any] | None, Any]] = deque()
        self.next_submit = run.start_step + 1
        self.last_busy = 0.0
        self.last_time = time.perf_counter()

    def _submit(self, step: int) -> None:
        run = self.run
        torch.manual_seed(step_seed(run.cfg.run.seed, step))  # the same draws as a synchronous step
        records = run.sampler.take(run.cfg.train.prompts_per_step)
        if run.renderer.multimodal:  # image prompts travel with their processor outputs; undecodable ones skipped
            kept = [(r, out) for r in records if (out := run.renderer.render_or_skip(r)) is not None]
            records = [r for r, _ in kept]
            rendered = [(ids, text) for _, (ids, text, _) in kept]
            mm = [m for _, (_, _, m) in kept]
            handle = run.engine.submit([ids for ids, _ in rendered], run.params, mm_inputs=mm) if kept else None
        else:
            rendered = [run.renderer.render(r) for r in records]
            mm = None
            handle = run.engine.submit([ids for ids, _ in rendered], run.params)
        self.pending.append((step, records, rendered, mm, handle))

    def next(self, step: int, last_step: int) -> tuple[list[Group], dict[str, float]]:
        run = self.run
        while self.next_submit <= last_step and len(self.pending) <= self.k:
            self._submit(self.next_submit)
            self.next_submit += 1
        submitted_step, records, rendered, mm, handle = self.pending.popleft()
        assert submitted_step == step, (submitted_step, step)
        waited = time.perf_counter()
        samples = run.engine.result(handle) if handle is not None else []
        waited = time.perf_counter() - waited
        groups = [Group(record=r, prompt_ids=ids, samples=s, prompt_text=text)
                  for r, (ids, text), s in zip(records, rendered, samples)]
        if mm is not None:
            for g, m in zip(groups, mm):
                for s in g.samples:
                    s.mm_inputs = m  # shared by the group's samples, as in `rollout_groups`
        learner_version = run.engine.policy_version
        dropped, requeued = 0, 0
        fresh: list[Group] = []
        stale: list[Group] = []
        for g in groups:  # split by identity: comparing groups would compare their image tensors
            (fresh if learner_version - g.samples[0].policy_version <= self.k else stale).append(g)
        if stale and run.cfg.distributed.stale == "requeue":  # regenerate them with the current weights
            if mm is not None:
                stale_mm = [g.samples[0].mm_inputs for g in stale]
                regen = run.engine.generate_multimodal([g.prompt_ids for g in stale], stale_mm, run.params)
                for m, group in zip(stale_mm, regen):
                    for s in group:
                        s.mm_inputs = m
            else:
                regen = run.engine.generate([g.prompt_ids for g in stale], run.params)
            for g, s in zip(stale, regen):
                g.samples = s
            fresh += stale
            requeued = len(stale)
        else:
            dropped = sum(len(g.samples) for g in stale)
        run.reward_fn(fresh, run.task)
        ages = Counter(learner_version - s.policy_version for g in fresh for s in g.samples)
        total = sum(ages.values()) or 1
        now = time.perf_counter()
        busy = run.engine.busy_seconds()
        workers = max(1, len(getattr(run.engine, "workers", [])) or 1)
        span = max(now - self.last_time, 1e-9)
        metrics: dict[str, float] = {f"staleness_{d}": c / total for d, c in sorted(ages.items())}
        metrics.update(
            queue_depth=float(len(self.pending)), learner_wait_s=waited,
            rollout_idle_frac=max(0.0, 1.0 - (busy - self.last_busy) / (span * workers)),
            samples_per_s=total / span, dropped_samples=float(dropped), requeued_groups=float(requeued),
        )
        self.last_busy, self.last_time = busy, now
        return fresh, {f"async/{k}": v for k, v in metrics.items()}
