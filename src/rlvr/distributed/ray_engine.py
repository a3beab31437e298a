"""Rollout on a Ray cluster: a group of rollout-worker actors behind the ordinary `RolloutEngine` interface.

Each worker is a Ray actor holding its own copy of the policy and a local engine (`rollout.engine`). The
trainer's loop does not change: `generate` splits the prompts into contiguous chunks, one per worker, and
gathers the samples back in order; `sync_weights` is a versioned broadcast (the state dict is put in the Ray
object store once and every worker loads it). A worker that dies is replaced (Ray restarts the actor), gets the
latest weights again, and its chunk is retried once; if it dies again the step fails and the run stops with its
newest complete checkpoint intact.

`submit` returns a handle instead of waiting, which the asynchronous loop uses to keep workers busy while the
learner trains (see `rlvr/trainer/async_loop.py`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from rlvr import faults
from rlvr.errors import ConfigError, RoleLost
from rlvr.models.lora import plain_state_dict
from rlvr.rollout.base import RolloutEngine, SamplingParams
from rlvr.types import Sample

PLACEMENT_TIMEOUT_S = 120.0  # how long an actor may wait for the cluster to place it before a clear error

log = logging.getLogger("rlvr.distributed")

WEIGHT_GROUP_TIMEOUT_S = 300.0


def _require_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RuntimeError("distributed.backend=ray needs Ray: pip install 'rlvr[ray]'") from None
    return ray


def kill_actor(ray: Any, actor: Any) -> None:
    """Kill an actor; one that is already gone has nothing left to release."""
    with contextlib.suppress(Exception):
        ray.kill(actor)


def cpu_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A state dict's tensors detached and on the CPU: what goes into Ray's object store."""
    return {k: v.detach().to("cpu") for k, v in state.items()}


def free_port() -> int:
    """A TCP port that is free on this node now (the rendezvous of a process group)."""
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def wait_for_room(ray: Any, need: dict[str, float], timeout: float) -> dict[str, float] | None:
    """Wait up to `timeout` s until the cluster has `need` free (CPU, GPU, custom resources): None when it has,
    else what was free at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        free = ray.available_resources()
        if all(v <= 0 or free.get(k, 0.0) + 1e-9 >= v for k, v in need.items()):
            return None
        if time.monotonic() > deadline:
            return free
        time.sleep(1.0)


def connect_ray(cfg: Any) -> Any:
    """The `ray` module, connected: to `distributed.address`, or to a local runtime started here."""
    ray = _require_ray()
    dist = cfg.distributed
    if not ray.is_initialized():
        from rlvr.plugins import worker_env

        # every worker imports this run's plugins at start-up, before it unpickles a config or a task
        env = worker_env(getattr(cfg, "plugins", None) or [])
        runtime_env = {"env_vars": env, "worker_process_setup_hook": "rlvr.plugins.load_from_env"} if env else None
        if dist.address:
            ray.init(address=dist.address, include_dashboard=False, log_to_driver=False, runtime_env=runtime_env)
        else:
            ray.init(num_cpus=dist.num_cpus, include_dashboard=False, log_to_driver=False, runtime_env=runtime_env)
    return ray


class RolloutNodeLost(RoleLost):
    """A rollout worker died (its node lost) and no replacement could be placed in time."""


class RolloutWorker:
    """The actor body: a policy copy and a local engine. Plain class; wrapped with ray.remote at start-up.

    The model and tokenizer arrive as files through Ray's object store (`rlvr.distributed.shipping`), so nothing
    on the controller's disk has to exist on this worker's node."""

    def __init__(self, model_files: dict[str, bytes], tokenizer_files: dict[str, bytes] | None, engine: str,
                 batch_size: int, dtype: str, device: str, trust_remote_code: bool, threads: int | None = None,
                 engine_options: dict[str, Any] | None = None):
        from rlvr.distributed.shipping import local_model_dir, write_model_dir
        from rlvr.models import load_tokenizer, resolve_device, resolve_dtype
        from rlvr.models.vision import load_lm_or_vlm
        from rlvr.rollout import build_engine

        if threads:
            torch.set_num_threads(threads)
        dev = resolve_device(device)
        # the vllm engine loads the policy from its directory, so this worker keeps its copy until `close`
        self.model_dir: str | None = write_model_dir(model_files)
        self.model = load_lm_or_vlm(self.model_dir, dtype=resolve_dtype(dtype, dev), device=dev,
                                    trust_remote_code=trust_remote_code, trainable=False)
        if tokenizer_files is None:
            self.tokenizer = load_tokenizer(self.model_dir, trust_remote_code=trust_remote_code)
        else:
            with local_model_dir(tokenizer_files) as tokenizer_path:
                self.tokenizer = load_tokenizer(tokenizer_path, trust_remote_code=trust_remote_code)
        self.engine = build_engine(engine, engine_options or {}, batch_size, self.model, self.tokenizer)
        if engine != "vllm":
            self._drop_model_dir()  # the other engines hold the weights in memory
        self.version = 0
        self.busy_s = 0.0

    def set_weights(self, state: dict[str, torch.Tensor], version: int) -> int:
        self.model.load_state_dict(state)
        self.engine.sync_weights(self.model, version)
        self.version = version
        return version

    def join_weight_group(self, host: str, port: int, rank: int, world_size: int, backend: str,
                          timeout_s: float) -> None:
        from rlvr.distributed.weight_broadcast import open_group

        self.weight_group = open_group(host, port, rank, world_size, backend, timeout_s)
        self.weight_device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" \
            else torch.device("cpu")

    def leave_weight_group(self) -> None:
        self.weight_group = None

    def receive_weights(self, layout: Any, version: int) -> int:
        """Take part in the controller's broadcast of the new weights (distributed.weight_sync: broadcast)."""
        from rlvr.distributed.weight_broadcast import receive

        return self.set_weights(receive(self.weight_group[1], layout, self.weight_device), version)

    def generate(self, prompts: list[list[int]], params: SamplingParams, seed: int,
                 mm_inputs: list[dict[str, Any]] | None = None) -> tuple[list[list[Sample]], float]:
        """Samples for `prompts`; vision-language prompts come with their processor outputs (`mm_inputs`), and
        their samples go back without them (the controller still holds them)."""
        started = time.perf_counter()
        torch.manual_seed(seed)
        if mm_inputs is not None:
            out = self.engine.generate_multimodal(prompts, mm_inputs, params)
            for group in out:
                for sample in group:
                    sample.mm_inputs = None
        else:
            out = self.engine.generate(prompts, params)
        seconds = time.perf_counter() - started
        self.busy_s += seconds
        return out, seconds

    def pid(self) -> int:
        return os.getpid()

    def where(self) -> dict[str, Any]:
        from rlvr.distributed.shipping import where_am_i

        return where_am_i()

    def close(self) -> None:
        """Shut the engine down (vLLM's engine process and its temporary directories) and remove this worker's
        copy of the model directory, before the actor is killed."""
        self.engine.shutdown()
        self._drop_model_dir()

    def _drop_model_dir(self) -> None:
        import shutil

        if self.model_dir is not None:
            shutil.rmtree(self.model_dir, ignore_errors=True)
            self.model_dir = None

    def busy(self) -> float:
        return self.busy_s


@dataclass
class PendingRollout:
    """A `submit`ted generation: resolve it with `RayEngine.result`."""

    chunks: list[tuple[int, int, int, Any]]  # (worker index, start, end, object ref)
    prompts: list[list[int]]
    mm_inputs: list[dict[str, Any]] | None  # vision-language prompts' processor outputs, else None
    params: SamplingParams
    seed: int
    version: int
    submitted: float


class RayEngine(RolloutEngine):
    """`distributed.rollout_workers` rollout actors, colocated on one machine or spread over a cluster.

    Image prompts (`generate_multimodal`, or `submit(..., mm_inputs=...)`) travel with their processor outputs
    (pixel values) to the worker that samples them; it runs the same engine, so the vision tower still runs once
    per prompt. Each chunk is pickled once, so the samples of one prompt keep sharing one `mm_inputs` dict."""

    def __init__(self, cfg: Any, model_path: str):
        from rlvr.distributed.shipping import log_controller_placement, put_model_dir
        from rlvr.rollout import ENGINES

        self.multimodal = bool(getattr(ENGINES.get(cfg.rollout.engine), "multimodal", False))
        self.ray = connect_ray(cfg)
        self.cfg = cfg
        dist = cfg.distributed
        self.policy_version = 0
        self.workers: list[Any] = []
        self.model_path = model_path
        self._weights: Any = None  # object ref of the latest broadcast
        self.restarts = 0
        self._submits = 0
        # no shared filesystem: the weights, config and tokenizer go to every node through the object store
        self._model_files = put_model_dir(self.ray, model_path)
        tok = cfg.model.tokenizer_path
        self._tokenizer_files = put_model_dir(self.ray, tok, "model.tokenizer_path") \
            if tok and str(tok) != str(cfg.model.path) else None
        self._wait_for_room(dist.rollout_workers, "start")
        for _ in range(dist.rollout_workers):
            self.workers.append(self._spawn())
        log_controller_placement(self.ray)
        self._placement_logged = False  # the workers' nodes are logged at the first sync, once they are up
        self._group: Any = None  # (store, process group) with the workers, for weight_sync: broadcast
        self._source: Any = None  # the model last synced from (a replaced worker needs its weights)
        if dist.weight_sync == "broadcast":
            self._open_weight_group()

    def _need(self, workers: int) -> dict[str, float]:
        dist = self.cfg.distributed
        need = {"CPU": workers * dist.cpus_per_rollout_worker, "GPU": workers * dist.gpus_per_rollout_worker}
        for name, amount in dist.rollout_worker_resources.items():
            need[name] = need.get(name, 0.0) + workers * amount
        return need

    def _wait_for_room(self, workers: int, why: str) -> None:
        """Wait up to distributed.placement_timeout_s until the cluster has room for `workers` rollout workers
        (CPUs, GPUs, custom resources), then return; else raise a clear error instead of hanging at the first
        weight sync with a worker that is never placed (e.g. 2 workers x 1 CPU beside a reference worker on a
        2-CPU machine, or a worker pinned to a node that was lost). Model loading is not bounded."""
        dist = self.cfg.distributed
        need = self._need(workers)
        free = wait_for_room(self.ray, need, dist.placement_timeout_s)
        if free is None:
            return
        asks = " and ".join(f"{v:g} {k}(s)" if k in ("CPU", "GPU") else f"{v:g} of resource '{k}'"
                            for k, v in need.items() if v > 0 or k == "CPU")
        if why == "start":
            raise RuntimeError(
                f"the cluster has no room for {dist.rollout_workers} rollout worker(s): they ask for {asks} in all, "
                f"and {free} is free (other rlvr workers placed before them hold the rest). Lower "
                "distributed.rollout_workers or distributed.cpus_per_rollout_worker, check "
                "distributed.rollout_worker_resources, or add resources (distributed.num_cpus for a local runtime)")
        raise RolloutNodeLost(
            f"{why}, and no replacement could be placed within {dist.placement_timeout_s:g}s "
            f"(distributed.placement_timeout_s): it asks for {asks}, and the cluster has {free} free (a node that "
            "held it was lost and has not come back?). Bring the node back (ray start --address ... with the same "
            "--resources) or change distributed.rollout_worker_resources")

    def _spawn(self) -> Any:
        cfg, dist = self.cfg, self.cfg.distributed
        actor = self.ray.remote(RolloutWorker).options(
            num_cpus=dist.cpus_per_rollout_worker, num_gpus=dist.gpus_per_rollout_worker, max_restarts=0,
            resources=dict(dist.rollout_worker_resources) or None,
        )
        threads = max(1, int(dist.cpus_per_rollout_worker)) if dist.gpus_per_rollout_worker == 0 else None
        return actor.remote(self._model_files, self._tokenizer_files, cfg.rollout.engine,
                            cfg.rollout.batch_size, cfg.model.dtype,
                            "cuda" if dist.gpus_per_rollout_worker > 0 else "cpu", cfg.model.trust_remote_code,
                            threads, dict(cfg.rollout.engine_options))

    # -- weights -------------------------------------------------------------------------------------------

    def _open_weight_group(self) -> None:
        from rlvr.distributed.weight_broadcast import open_group

        d = self.cfg.distributed
        backend = "nccl" if d.gpus_per_rollout_worker > 0 and torch.cuda.is_available() else "gloo"
        host, port = self.ray.util.get_node_ip_address(), free_port()
        world = len(self.workers) + 1
        joins = [w.join_weight_group.remote(host, port, rank, world, backend, WEIGHT_GROUP_TIMEOUT_S)
                 for rank, w in enumerate(self.workers, start=1)]
        self._group = open_group(host, port, 0, world, backend, WEIGHT_GROUP_TIMEOUT_S)
        self._group_device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" \
            else torch.device("cpu")
        self.ray.get(joins)

    @property
    def broadcasting(self) -> bool:
        """Whether weights currently go over the workers' process group (weight_sync: broadcast)."""
        return self._group is not None

    def _leave_weight_group(self, why: str) -> None:
        """Back to the object store for the rest of the run (a replaced worker is not in the group)."""
        log.warning("weight broadcast group closed (%s); weights go through the object store from now on", why)
        self._group = None
        for w in self.workers:
            with contextlib.suppress(Exception):
                self.ray.get(w.leave_weight_group.remote(), timeout=10)
        if self._source is not None:
            self._weights = self.ray.put(cpu_state(plain_state_dict(self._source)))

    def sync_weights(self, model: Any, version: int) -> None:
        """Versioned broadcast: put the state dict in the object store once and every worker loads it, or
        (weight_sync: broadcast) send it over the workers' process group."""
        self.policy_version = version
        self._source = model
        state = plain_state_dict(model)  # a LoRA-wrapped policy's merged weights: the workers hold plain models
        if self._group is not None:
            from rlvr.distributed.weight_broadcast import layout_of, send

            refs = [w.receive_weights.remote(layout_of(state), version) for w in self.workers]
            try:
                send(self._group[1], state, self._group_device)
                self.ray.get(refs)
                self._log_placement()
                return
            except Exception as err:  # a worker died mid-broadcast: fall back, then sync through the store
                self._leave_weight_group(f"{type(err).__name__}: {str(err).strip().splitlines()[0]}")
                for i, w in enumerate(self.workers):
                    if _dead(self.ray, w):
                        self.restarts += 1
                        self.workers[i] = self._spawn()
        self._weights = self.ray.put(cpu_state(state))
        refs = [w.set_weights.remote(self._weights, version) for w in self.workers]
        for i, ref in enumerate(refs):
            try:
                self.ray.get(ref)
            except self.ray.exceptions.RayActorError as err:  # died (or lost its node) since the last call
                self._replace(i, f"rollout worker {i} died during a weight sync ({_first_line(err)})")
        self._log_placement()

    def _log_placement(self) -> None:
        """Record each worker's node in the log, once (not at start-up: waiting there for a worker to load its
        model would delay starting the reward and reference workers)."""
        from rlvr.distributed.shipping import log_placement

        if not self._placement_logged:
            self._placement_logged = True
            for i, w in enumerate(self.workers):
                log_placement(self.ray, f"rollout worker {i}", w)

    # -- generation ----------------------------------------------------------------------------------------

    def submit(self, prompts: Sequence[Sequence[int]], params: SamplingParams, seed: int | None = None,
               mm_inputs: Sequence[dict[str, Any]] | None = None) -> PendingRollout:
        """Start generating; returns at once. Prompts (and their `mm_inputs`, for image prompts) are split into
        one contiguous chunk per worker."""
        if mm_inputs is not None:
            if not self.multimodal:
                raise ConfigError(f"rollout.engine: the {self.cfg.rollout.engine} engine of the rollout workers "
                                  "does not take images; set rollout.engine=hf for vision-language tasks")
            if len(mm_inputs) != len(prompts):
                raise ValueError(f"{len(prompts)} prompts but {len(mm_inputs)} mm_inputs")
            mm_inputs = list(mm_inputs)
        self._submits += 1
        if seed is None:
            seed = int(torch.randint(0, 2**31 - 1, (1,)).item())
        prompts = [list(p) for p in prompts]
        faults.pause_point("worker", self._submits)  # e.g. a test kills a worker's node meanwhile
        if faults.armed("kill", "worker", self._submits):
            self.ray.kill(self.workers[0], no_restart=True)  # a node or process dying mid-run
        chunks = []
        bounds = _split(len(prompts), len(self.workers))
        for i, (start, end) in enumerate(bounds):
            if start == end:
                continue
            ref = self.workers[i].generate.remote(prompts[start:end], params, seed + i, _part(mm_inputs, start, end))
            chunks.append((i, start, end, ref))
        return PendingRollout(chunks, prompts, mm_inputs, params, seed, self.policy_version, time.perf_counter())

    def result(self, pending: PendingRollout) -> list[list[Sample]]:
        out: list[list[Sample]] = [[] for _ in pending.prompts]
        for i, start, end, ref in pending.chunks:
            try:
                samples, _ = self.ray.get(ref)
            except self.ray.exceptions.RayActorError as err:
                samples = self._retry(i, pending, start, end, err)
            for j, group in enumerate(samples):
                for s in group:
                    s.policy_version = pending.version
                out[start + j] = group
        return out

    def _replace(self, i: int, why: str) -> None:
        """A new worker `i` with the latest weights; waits up to distributed.placement_timeout_s for room (a lost
        node coming back), then stops the run with `RolloutNodeLost`."""
        from rlvr.distributed.shipping import log_placement

        log.warning("%s; replacing it", why)
        self.restarts += 1
        self._wait_for_room(1, why)
        self.workers[i] = self._spawn()
        if self._group is not None:
            self._leave_weight_group(f"rollout worker {i} was replaced")
        if self._weights is not None:
            self.ray.get(self.workers[i].set_weights.remote(self._weights, self.policy_version))
        log_placement(self.ray, f"rollout worker {i} (replacement)", self.workers[i])

    def _retry(self, i: int, pending: PendingRollout, start: int, end: int, err: Exception) -> list[list[Sample]]:
        self._replace(i, f"rollout worker {i} died ({_first_line(err)}) with {end - start} prompts to generate")
        samples, _ = self.ray.get(self.workers[i].generate.remote(pending.prompts[start:end], pending.params,
                                                                  pending.seed + i,
                                                                  _part(pending.mm_inputs, start, end)))
        return samples

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Sample]]:
        return self.result(self.submit(prompts, params))

    def generate_multimodal(self, prompts: Sequence[Sequence[int]], mm_inputs: Sequence[dict[str, Any]],
                            params: SamplingParams) -> list[list[Sample]]:
        return self.result(self.submit(prompts, params, mm_inputs=mm_inputs))

    def busy_seconds(self) -> float:
        """Seconds the workers have spent generating, summed over workers (for idle-time metrics)."""
        return float(sum(self.ray.get([w.busy.remote() for w in self.workers])))

    def metrics(self) -> dict[str, float]:
        return {"distributed/rollout_worker_restarts": float(self.restarts),
                "distributed/weight_broadcast": float(self.broadcasting)}

    def shutdown(self) -> None:
        with contextlib.suppress(Exception):  # a dead worker's node took its files with it
            self.ray.get([w.close.remote() for w in self.workers], timeout=30)
        for w in self.workers:
            kill_actor(self.ray, w)
        self.workers = []


def _first_line(err: Exception) -> str:
    return f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0]}"


def _dead(ray: Any, actor: Any) -> bool:
    try:
        ray.get(actor.pid.remote(), timeout=30)
        return False
    except Exception:
        return True


def _part(items: list[Any] | None, start: int, end: int) -> list[Any] | None:
    return None if items is None else items[start:end]


def _split(n: int, parts: int) -> list[tuple[int, int]]:
    """Contiguous, balanced [start, end) ranges of 0..n over `parts`."""
    base, extra = divmod(n, parts)
    out, start = [], 0
    for i in range(parts):
        end = start + base + (1 if i < extra else 0)
        out.append((start, end))
        start = end
    return out

