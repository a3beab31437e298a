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

from rlvr.distributed.ray_engine import (
    PLACEMENT_TIMEOUT_S,
    _split,
    connect_ray,
    cpu_state,
    kill_actor,
    wait_for_room,
)
from rlvr.distributed.shipping import local_model_dir, log_placement, put_model_dir, where_am_i
from rlvr.errors import RoleLost
from rlvr.types import Batch

log = logging.getLogger("rlvr.distributed")


def start_actor(ray: Any, cls: type, args: tuple, *, num_cpus: float, num_gpus: float, what: str,
                knob: str, timeout: float = PLACEMENT_TIMEOUT_S, resources: dict[str, float] | None = None) -> Any:
    """Start one actor of `cls` (with custom `resources`, which pin it to the nodes that declare them). Raise a
    clear error when the cluster has no room for it within `timeout` (placement), or when it is not ready
    within `timeout` more, or PLACEMENT_TIMEOUT_S if that is longer (its start-up). Its node goes to the log."""
    need = {"CPU": num_cpus, "GPU": num_gpus, **dict(resources or {})}
    free = wait_for_room(ray, need, timeout)
    actor = None
    if free is None:
        actor = ray.remote(cls).options(num_cpus=num_cpus, num_gpus=num_gpus,
                                        resources=dict(resources or {}) or None, max_restarts=0).remote(*args)
        try:
            ray.get(actor.ready.remote(), timeout=max(timeout, PLACEMENT_TIMEOUT_S))
        except ray.exceptions.GetTimeoutError:
            ray.kill(actor)
            actor, free = None, ray.available_resources()
    if actor is None:
        extra = f" and {dict(resources)}" if resources else ""
        raise RuntimeError(
            f"could not start the {what} within {timeout:g}s (distributed.placement_timeout_s): it asks for "
            f"{num_cpus:g} CPU(s) and {num_gpus:g} GPU(s){extra}, and the cluster has {free} free. Lower {knob} "
            "or add resources (distributed.num_cpus for a local runtime; a node started with the custom resources "
            "it asks for)"
        ) from None
    if hasattr(cls, "where"):
        log_placement(ray, what, actor)
    return actor


# -- reward (verifier) workers -----------------------------------------------------------------------------


class RewardWorker:
    """Actor body: a local verifier pool over the controller's task object (sent through Ray, so a task's data
    file need not exist on this node), or over the task built here from its config when the task cannot be
    pickled."""

    def __init__(self, task: Any, task_name: str, task_params: dict[str, Any], processes: int, timeout: float):
        from rlvr.rewards.pool import VerifierPool
        from rlvr.tasks import build_task

        self.task = task if task is not None else build_task(task_name, task_params)
        self.pool = VerifierPool(self.task, max(1, processes), timeout)

    def ready(self) -> bool:
        return True

    def where(self) -> dict[str, Any]:
        return where_am_i()

    def verify(self, pairs: list[tuple[str, Any]]) -> list[Any]:
        return self.pool.map(pairs)

    def stats(self) -> dict[str, float]:
        out = self.pool.stats()
        self.pool.reset_stats()
        return out


class RayVerifierPool:
    """`VerifierPool`'s interface over `distributed.reward_workers` Ray actors: a batch is split into one
    contiguous chunk per actor and the results come back in order."""

    def __init__(self, cfg: Any, processes: int, timeout: float, task: Any = None):
        self.ray = connect_ray(cfg)
        self.cfg, self.processes, self.timeout = cfg, processes, timeout
        self.restarts = 0
        self._task = self._put_task(task)
        self.actors = [self._spawn() for _ in range(cfg.distributed.reward_workers)]
        self._seconds = 0.0

    def _put_task(self, task: Any) -> Any:
        """The task in the object store (its data travels with it), or None when it cannot be pickled: then each
        actor builds it from `task:`, and a data file must exist at the same path on its node."""
        if task is None:
            return None
        try:
            return self.ray.put(task)
        except Exception as err:  # e.g. an ecosystem environment holding a live handle
            log.warning("the task cannot be sent to the reward workers (%s: %s); each builds it from `task:`, so "
                        "its data file must exist at the same path on their nodes", type(err).__name__, err)
            return None

    def _spawn(self) -> Any:
        d = self.cfg.distributed
        return start_actor(self.ray, RewardWorker, (self._task, self.cfg.task.name, self.cfg.task.params,
                                                     self.processes, self.timeout),
                           num_cpus=d.cpus_per_reward_worker, num_gpus=0, what="reward worker",
                           knob="distributed.cpus_per_reward_worker, distributed.reward_worker_resources or "
                           "distributed.reward_workers", timeout=d.placement_timeout_s,
                           resources=d.reward_worker_resources)

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
                try:
                    self.actors[i] = self._spawn()
                except RuntimeError as placing:  # e.g. its node was lost and has not come back
                    raise RoleLost(f"reward worker {i} died and could not be replaced: {placing}") from None
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

    def __init__(self, files: dict[str, bytes], dtype: str, device: str, trust_remote_code: bool,
                 threads: int | None, micro_batch_size: int, pack_tokens: bool):
        from rlvr.learner.logprob_model import LocalLogProbModel
        from rlvr.models import resolve_device, resolve_dtype
        from rlvr.models.vision import load_lm_or_vlm

        if threads:
            torch.set_num_threads(threads)
        dev = resolve_device(device)
        with local_model_dir(files) as path:  # the controller's model directory, sent through Ray
            model = load_lm_or_vlm(path, dtype=resolve_dtype(dtype, dev), device=dev,
                                   trust_remote_code=trust_remote_code, trainable=False)
        self.model = LocalLogProbModel(model, micro_batch_size, pack_tokens)

    def ready(self) -> bool:
        return True

    def where(self) -> dict[str, Any]:
        return where_am_i()

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
        self._files = put_model_dir(self.ray, path)  # no shared filesystem: the model goes through Ray
        self.actor = self._spawn()

    def _spawn(self) -> Any:
        cfg, d = self.cfg, self.cfg.distributed
        threads = max(1, int(d.cpus_per_reference_worker)) if d.gpus_per_reference_worker == 0 else None
        actor = start_actor(self.ray, ReferenceWorker,
                            (self._files, cfg.model.dtype, "cuda" if d.gpus_per_reference_worker > 0 else "cpu",
                             cfg.model.trust_remote_code, threads, cfg.train.micro_batch_size,
                             cfg.train.pack_tokens),
                            num_cpus=d.cpus_per_reference_worker, num_gpus=d.gpus_per_reference_worker,
                            what="reference worker", knob="distributed.cpus_per_reference_worker or "
                            "distributed.reference_worker_resources", timeout=d.placement_timeout_s,
                            resources=d.reference_worker_resources)
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
