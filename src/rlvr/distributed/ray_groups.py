"""Ray actor groups besides the rollout workers: verifier workers and the reference model.

- **Reward workers** (`distributed.reward_workers: N`): N actors, each building the task from `task:` and
  verifying responses in its own `VerifierPool` (forked processes, per-call timeout, crash replacement). The
  `correctness` reward hands them its batch instead of verifying in the controller: `RayVerifierPool` has the
  `VerifierPool` interface (`map`, `stats`, `reset_stats`, `close`). Verification is the reward work that is
  worth moving off the controller (code execution, slow checkers); shaping and label-free terms are cheap and
  need whole groups, so they stay where they are.
- **Reference worker** (`distributed.reference_worker: true`): the frozen reference model in its own actor, off
  the learner's device; `RemoteReference.token_logprobs(batch, temperature)` returns the reference log-probs the
  learner would have computed (the log-prob model role, `rlvr.roles.LogProbModel`). A distillation teacher is
  placed the same way; for GKD, `token_distributions` returns its next-token log-probs over the vocabulary at
  every response token (all V in fp32, or the top k plus a tail bucket). It also takes the ProRL reference reset (`load_state_dict`) and reports its weights for
  checkpoints (`state_dict`).

An actor that dies is replaced (and, for the reference, given its latest weights again) and the call is
retried once; `restarts` counts it. An actor that cannot be placed (not enough CPUs or GPUs left in the
cluster) stops the run at start-up with a message naming the knob, instead of waiting forever.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from rlvr.distributed.ray_engine import PLACEMENT_TIMEOUT_S, _split, connect_ray, cpu_state, kill_actor
from rlvr.types import Batch

log = logging.getLogger("rlvr.distributed")


def start_actor(ray: Any, cls: type, args: tuple, *, num_cpus: float, num_gpus: float, what: str,
                knob: str, timeout: float = PLACEMENT_TIMEOUT_S) -> Any:
    """Start one actor of `cls`; raise a clear error when the cluster cannot place it within `timeout`."""
    actor = ray.remote(cls).options(num_cpus=num_cpus, num_gpus=num_gpus, max_restarts=0).remote(*args)
    try:
        ray.get(actor.ready.remote(), timeout=timeout)
    except ray.exceptions.GetTimeoutError:
        ray.kill(actor)
        raise RuntimeError(
            f"could not start the {what} within {timeout:g}s: it asks for {num_cpus:g} CPU(s) and "
            f"{num_gpus:g} GPU(s), and the cluster has {ray.available_resources()} free. Lower {knob} or add "
            "resources (distributed.num_cpus for a local runtime)"
        ) from None
    return actor


# -- reward (verifier) workers -----------------------------------------------------------------------------


class RewardWorker:
    """Actor body: the task, built here from its config, and a local verifier pool."""

    def __init__(self, task_name: str, task_params: dict[str, Any], processes: int, timeout: float):
        from rlvr.rewards.pool import VerifierPool
        from rlvr.tasks import build_task

        self.task = build_task(task_name, task_params)
        self.pool = VerifierPool(self.task, max(1, processes), timeout)

    def ready(self) -> bool:
        return True

    def verify(self, pairs: list[tuple[str, Any]]) -> list[Any]:
        return self.pool.map(pairs)

    def stats(self) -> dict[str, float]:
        out = self.pool.stats()
        self.pool.reset_stats()
        return out


class RayVerifierPool:
    """`VerifierPool`'s interface over `distributed.reward_workers` Ray actors: a batch is split into one
    contiguous chunk per actor and the results come back in order."""

    def __init__(self, cfg: Any, processes: int, timeout: float):
        self.ray = connect_ray(cfg)
        self.cfg, self.processes, self.timeout = cfg, processes, timeout
        self.restarts = 0
        self.actors = [self._spawn() for _ in range(cfg.distributed.reward_workers)]
        self._seconds = 0.0

    def _spawn(self) -> Any:
        d = self.cfg.distributed
        return start_actor(self.ray, RewardWorker, (self.cfg.task.name, self.cfg.task.params, self.processes,
                                                     self.timeout),
                           num_cpus=d.cpus_per_reward_worker, num_gpus=0, what="reward worker",
                           knob="distributed.cpus_per_reward_worker or distributed.reward_workers")

    def map(self, pairs: list[tuple[str, Any]]) -> list[Any]:
        pairs = list(pairs)
        chunks = [(i, s, e, self.actors[i].verify.remote(pairs[s:e]))
                  for i, (s, e) in enumerate(_split(len(pairs), len(self.actors))) if s < e]
        out: list[Any] = [None] * len(pairs)
        for i, start, end, ref in chunks:
            try:
                results = self.ray.get(ref)
            except self.ray.exceptions.RayActorError as err:
                log.warning("reward worker %d died (%s); replacing it and retrying its %d responses", i, err,
                            end - start)
                self.restarts += 1
                self.actors[i] = self._spawn()
                results = self.ray.get(self.actors[i].verify.remote(pairs[start:end]))
            out[start:end] = results
        return out

    def stats(self) -> dict[str, float]:
        """The actors' pool counters summed (calls_per_s: their combined rate), plus actor restarts."""
        total: dict[str, float] = {}
        for s in self.ray.get([a.stats.remote() for a in self.actors]):
            for k, v in s.items():
                total[k] = total.get(k, 0.0) + float(v)
        total["actor_restarts"] = float(self.restarts)
        return total

    def reset_stats(self) -> None:
        self.restarts = 0  # the actors reset their own counters when `stats` reads them

    def close(self) -> None:
        for a in self.actors:
            kill_actor(self.ray, a)
        self.actors = []


# -- reference model worker ------------------------------------------------------------------------------


class ReferenceWorker:
    """Actor body: the frozen reference model, a `LocalLogProbModel` in the actor's process."""

    def __init__(self, path: str, dtype: str, device: str, trust_remote_code: bool, threads: int | None,
                 micro_batch_size: int, pack_tokens: bool):
        from rlvr.learner.logprob_model import LocalLogProbModel
        from rlvr.models import resolve_device, resolve_dtype
        from rlvr.models.vision import load_lm_or_vlm

        if threads:
            torch.set_num_threads(threads)
        dev = resolve_device(device)
        model = load_lm_or_vlm(path, dtype=resolve_dtype(dtype, dev), device=dev,
                               trust_remote_code=trust_remote_code, trainable=False)
        self.model = LocalLogProbModel(model, micro_batch_size, pack_tokens)

    def ready(self) -> bool:
        return True

    def token_logprobs(self, batch: Batch, temperature: float) -> torch.Tensor:
        return self.model.token_logprobs(batch, temperature).cpu()

    def token_distributions(self, batch: Batch, temperature: float, top_k: int, chunk: int) -> dict[str, torch.Tensor]:
        return self.model.token_distributions(batch, temperature, top_k, chunk)

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.model.load_state_dict(state)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return cpu_state(self.model.state_dict())


class RemoteReference:
    """The reference model as a Ray actor: the log-prob model role placed remotely (see `Learner.prepare`)."""

    def __init__(self, cfg: Any, path: str):
        self.ray = connect_ray(cfg)
        self.cfg, self.path = cfg, path
        self.restarts = 0
        self._state: Any = None  # object ref of weights loaded after start (ProRL reset, resume)
        self.actor = self._spawn()

    def _spawn(self) -> Any:
        cfg, d = self.cfg, self.cfg.distributed
        threads = max(1, int(d.cpus_per_reference_worker)) if d.gpus_per_reference_worker == 0 else None
        actor = start_actor(self.ray, ReferenceWorker,
                            (self.path, cfg.model.dtype, "cuda" if d.gpus_per_reference_worker > 0 else "cpu",
                             cfg.model.trust_remote_code, threads, cfg.train.micro_batch_size,
                             cfg.train.pack_tokens),
                            num_cpus=d.cpus_per_reference_worker, num_gpus=d.gpus_per_reference_worker,
                            what="reference worker", knob="distributed.cpus_per_reference_worker")
        if self._state is not None:
            self.ray.get(actor.load_state_dict.remote(self._state))
        return actor

    def _call(self, method: str, *args: Any) -> Any:
        try:
            return self.ray.get(getattr(self.actor, method).remote(*args))
        except self.ray.exceptions.RayActorError as err:
            log.warning("reference worker died (%s); replacing it and retrying", err)
            self.restarts += 1
            self.actor = self._spawn()
            return self.ray.get(getattr(self.actor, method).remote(*args))

    def token_logprobs(self, batch: Batch, temperature: float) -> torch.Tensor:
        return self._call("token_logprobs", batch.to("cpu"), temperature)

    def token_distributions(self, batch: Batch, temperature: float, top_k: int = 0,
                            chunk: int = 1024) -> dict[str, torch.Tensor]:
        """GKD's teacher on this actor: full next-token log-probs per response token, or their top-k form
        (`LocalLogProbModel.token_distributions`)."""
        return self._call("token_distributions", batch.to("cpu"), temperature, top_k, chunk)

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self._state = self.ray.put(cpu_state(state))
        self._call("load_state_dict", self._state)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self._call("state_dict")

    def close(self) -> None:
        kill_actor(self.ray, self.actor)
