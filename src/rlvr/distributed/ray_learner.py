"""The learner as a Ray actor group (`distributed.learner_workers: N`, with `distributed.backend: ray`).

N actors form one torch.distributed process group (NCCL on GPUs, gloo on CPUs) and train as the torchrun
data-parallel learner does (`rlvr/parallel/data_parallel.py`): every rank holds the policy, gradients are
summed after each mini-batch, and losses are normalized by global token counts, so an update equals the
single-process update on the union of the ranks' groups (tested). What differs from torchrun is who drives:
the controller samples and rewards the whole batch, deals whole groups to the ranks (longest first, to the
least-loaded rank), and each rank prepares, estimates advantages and updates on its share. A rank dealt no
group (fewer groups than ranks) joins the collectives with zero contributions (`Learner.idle_update`).

Weights: after each update rank 0 returns its state dict through the Ray object store. The controller loads
it into its own copy of the policy (checkpoints, reward terms that read the policy) and broadcasts it to the
rollout workers (`RayEngine.sync_weights`). Checkpoints hold rank 0's learner state, which every rank shares.

spark (`coevolve.mode: spark`, `rlvr.learner.spark`): the controller builds the step's judge examples from the
whole batch (it has every group and label) and hands each rank that has groups its share: mini-batch j's examples
are the ones a single process would add to mini-batch j, dealt round-robin over the ranks (`deal_judge_examples`),
and each rank weighs them by the whole batch's per-kind counts, so the all-reduced gradient is the single
process's. The ranks send back each example's NLL and verdict, and the controller computes the `rm/` metrics.
The label-free judgement is read from the controller's copy of the policy (synced after every update).

A learner rank that dies leaves the others blocked in a collective, so there is no in-place recovery: the group
is torn down and the run stops with an error naming its newest complete checkpoint; `rlvr train --resume`
continues from it.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from rlvr import faults
from rlvr.distributed.ray_engine import connect_ray, cpu_state, free_port, kill_actor
from rlvr.distributed.ray_groups import start_actor
from rlvr.errors import RoleLost
from rlvr.models.lora import is_lora, load_lora_state, lora_state
from rlvr.types import Group

log = logging.getLogger("rlvr.distributed")


class LearnerWorkerLost(RoleLost):
    """A learner rank died; the group has been shut down."""


class LearnerWorker:
    """Actor body: one data-parallel rank (the policy, its optimizer, and the reference/critic if configured)."""

    def __init__(self, cfg_data: dict[str, Any], model_path: str, rank: int, world_size: int,
                 threads: int | None):
        from rlvr.config import Config

        if threads:
            torch.set_num_threads(threads)
        from rlvr.runtime import reuse_freed_memory

        self.cfg = Config.model_validate(cfg_data)
        reuse_freed_memory(self.cfg.run.reuse_memory)  # this rank's process, before it loads the model
        self.rank, self.world_size = rank, world_size
        self.model_path = model_path
        self.learner: Any = None

    def ready(self) -> bool:
        return True

    def address(self) -> str:
        """A rendezvous address on this actor's node (rank 0 is asked)."""
        import ray

        return f"tcp://{ray.util.get_node_ip_address()}:{free_port()}"

    def join(self, init_method: str) -> None:
        """Join the process group, then build the learner (every rank from the same seed: identical replicas)."""
        import torch.distributed as dist

        from rlvr.learner import Learner, build_critic, needs_reference, needs_teacher
        from rlvr.models import resolve_device, resolve_dtype
        from rlvr.models.lora import adapt_policy
        from rlvr.models.vision import load_lm_or_vlm
        from rlvr.runtime import seed_everything

        cfg = self.cfg
        device = resolve_device(cfg.model.device)
        if device.type == "cuda":
            device = torch.device("cuda", 0)  # Ray sets CUDA_VISIBLE_DEVICES to this actor's GPU
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", init_method=init_method,
                                rank=self.rank, world_size=self.world_size)
        seed_everything(cfg.run.seed)
        dtype = resolve_dtype(cfg.model.dtype, device)
        # a vision-language checkpoint (its vision tower and projector frozen as `model.freeze_*` say) or an LM;
        # with LoRA the base model.path gets fresh adapters (a resumed run restores them with load_state_dict)
        policy = load_lm_or_vlm(cfg.model.path if cfg.model.lora else self.model_path, dtype=dtype, device=device,
                                trust_remote_code=cfg.model.trust_remote_code,
                                gradient_checkpointing=cfg.model.gradient_checkpointing,
                                freeze_vision_tower=cfg.model.freeze_vision_tower,
                                freeze_projector=cfg.model.freeze_projector)
        if cfg.model.lora is not None:
            policy = adapt_policy(policy, cfg.model.lora, freeze_projector=cfg.model.freeze_projector)
        reference = None
        if needs_reference(cfg):
            reference = load_lm_or_vlm(cfg.model.reference_path or cfg.model.path, dtype=dtype, device=device,
                                       trust_remote_code=cfg.model.trust_remote_code, trainable=False)
        teacher = None
        if needs_teacher(cfg):
            teacher = load_lm_or_vlm(cfg.model.teacher_path, dtype=dtype, device=device, key="model.teacher_path",
                                     trust_remote_code=cfg.model.trust_remote_code, trainable=False)
        self.learner = Learner(policy, cfg, reference, build_critic(cfg, policy, dtype, device), teacher=teacher)

    def learn(self, groups: list[Group], pad_id: int, judge: dict[str, Any] | None = None,
              ) -> tuple[dict[str, float], list[Any], list[Any]]:
        """One RL update on this rank's groups; returns its metrics, each sample's advantage, in order, and
        (spark) the records of the judge examples it trained. `judge` holds this rank's share of spark's judge
        examples per mini-batch and the whole batch's per-kind counts (`SparkTrainable`, `deal_judge_examples`)."""
        from rlvr.learner import learn_on
        from rlvr.learner.spark import JudgeObjective

        if not groups:
            return self.learner.idle_update(), [], []
        objective = None
        if judge is not None:
            objective = JudgeObjective([], judge["pad_id"], judge["coef"], counts=judge["counts"],
                                       shares=judge["shares"])
        self.learner.auxiliary = objective
        try:
            stats = learn_on(self.learner, groups, pad_id)
        finally:
            self.learner.auxiliary = None
        return stats, [s.advantage for g in groups for s in g.samples], objective.records() if objective else []

    def weights(self) -> dict[str, torch.Tensor]:
        """What changed in an update: the adapters (and fully trained modules) with LoRA, else every weight."""
        if is_lora(self.learner.model):
            return lora_state(self.learner.model)
        return cpu_state(self.learner.model.state_dict())

    def state_dict(self) -> dict[str, Any]:
        state = _to_cpu(self.learner.state_dict())
        if is_lora(self.learner.model):  # the ranks rebuild base + adapters on resume, so the adapters go along
            state["lora"] = lora_state(self.learner.model)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if is_lora(self.learner.model):
            if "lora" not in state:
                raise ValueError("the checkpoint's learner state holds no LoRA adapters (it was written without "
                                 "model.lora); resume it with the config it was written with")
            load_lora_state(self.learner.model, state["lora"])
        self.learner.load_state_dict({k: v for k, v in state.items() if k != "lora"})

    def reset_reference(self) -> None:
        self.learner.reset_reference()

    def shutdown(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def _to_cpu(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu")
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cpu(v) for v in obj)
    return obj


def deal_groups(groups: list[Group], ranks: int) -> list[list[int]]:
    """Indices of the groups each rank trains on: longest group first, each to the rank with the fewest tokens
    so far (ties to the lower rank); each rank's indices in batch order."""
    sizes = [sum(len(s.prompt_ids) + len(s.response_ids) for s in g.samples) for g in groups]
    load = [0] * ranks
    dealt: list[list[int]] = [[] for _ in range(ranks)]
    for i in sorted(range(len(groups)), key=lambda i: (-sizes[i], i)):
        r = min(range(ranks), key=lambda r: (load[r], r))
        dealt[r].append(i)
        load[r] += sizes[i]
    return [sorted(d) for d in dealt]


def combine_stats(per_rank: list[dict[str, float]], weights: list[float]) -> dict[str, float]:
    """The ranks' metrics as one: `train_tokens` summed; everything else a mean weighted by each rank's response
    tokens, as the learner weights its micro-batches (values every rank shares, such as grad_norm and lr, come
    out unchanged)."""
    out: dict[str, float] = {"train_tokens": sum(float(s.get("train_tokens", 0.0)) for s in per_rank)}
    keys = sorted(set().union(*per_rank) - {"train_tokens"})
    for k in keys:
        pairs = [(s[k], w) for s, w in zip(per_rank, weights) if k in s and w > 0]
        if not pairs:
            pairs = [(s[k], 1.0) for s in per_rank if k in s]
        total = sum(w for _, w in pairs)
        out[k] = sum(v * w for v, w in pairs) / total
    return out


class RayLearnerGroup:
    """`distributed.learner_workers` learner ranks as Ray actors, driven by the controller (see module doc)."""

    def __init__(self, cfg: Any, model_path: str, pad_id: int):
        self.ray = connect_ray(cfg)
        self.cfg, self.pad_id = cfg, pad_id
        self.reference = None  # each rank holds its own
        self._calls = 0
        self.updates = 0  # rank 0's update count, mirrored (spark seeds its judge examples with it)
        d = cfg.distributed
        world = d.learner_workers
        threads = max(1, int(d.cpus_per_learner_worker)) if d.gpus_per_learner_worker == 0 else None
        data = cfg.model_dump(mode="json")
        self.actors: list[Any] = []
        try:
            for rank in range(world):
                self.actors.append(start_actor(
                    self.ray, LearnerWorker, (data, model_path, rank, world, threads),
                    num_cpus=d.cpus_per_learner_worker, num_gpus=d.gpus_per_learner_worker,
                    what=f"learner worker {rank}",
                    knob="distributed.cpus_per_learner_worker, distributed.learner_worker_resources or "
                    "distributed.learner_workers", timeout=d.placement_timeout_s,
                    resources=d.learner_worker_resources))
            init_method = self.ray.get(self.actors[0].address.remote())
            self._gather([a.join.remote(init_method) for a in self.actors], "starting")
        except BaseException:
            self.close()  # no half-started group holding resources
            raise

    def _gather(self, refs: list[Any], doing: str) -> list[Any]:
        """Results of one call per rank. If a rank dies the others would wait in a collective forever, so
        the first failure tears the whole group down."""
        out: dict[Any, Any] = {}
        pending = list(refs)
        while pending:
            ready, pending = self.ray.wait(pending, num_returns=1)
            try:
                out[ready[0]] = self.ray.get(ready[0])
            except self.ray.exceptions.RayActorError as err:
                self.close()
                why = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
                raise LearnerWorkerLost(f"learner worker {refs.index(ready[0])} died while {doing} ({why}); "
                                        "a data-parallel group cannot continue without it") from None
        return [out[r] for r in refs]

    def learn(self, groups: list[Group], judge: Any = None) -> dict[str, float]:
        """Deal the groups to the ranks, update, and write each sample's advantage back (for logs).

        `judge` (spark's `JudgeObjective` for this update): its examples are dealt over the ranks that have
        groups, mini-batch by mini-batch as one process slices them (`deal_judge_examples`), each rank weighing
        them by the whole batch's per-kind counts, so the summed gradient is the single process's; the ranks'
        records (loss, accuracy) come back into `judge`, in the single process's order."""
        if not groups:  # as the in-process learner: an update needs samples (idle ranks are for uneven deals)
            raise ValueError("cannot build a batch from zero samples")
        self._calls += 1
        if faults.armed("kill", "learner", self._calls):  # a learner node dying mid-run
            self.ray.kill(self.actors[-1], no_restart=True)
        dealt = deal_groups(groups, len(self.actors))
        shares: list[Any] = [None] * len(self.actors)
        mini_batches = min(self.cfg.train.mini_batches, len(groups))  # one process's non-empty mini-batches
        if judge is not None and judge.examples:
            from rlvr.learner.spark import deal_judge_examples

            active = [r for r, idx in enumerate(dealt) if idx]  # an idle rank runs no auxiliary loss
            for r, rank_share in zip(active, deal_judge_examples(len(judge.examples), mini_batches, len(active))):
                shares[r] = {"pad_id": judge.pad_id, "coef": judge.coef, "counts": judge.counts,
                             "shares": [[(i, judge.examples[i]) for i in part] for part in rank_share]}
        refs = [a.learn.remote([groups[i] for i in idx], self.pad_id, share)
                for a, idx, share in zip(self.actors, dealt, shares)]
        results = self._gather(refs, "training")
        self.updates += 1
        if judge is not None:
            judge.record([rec for _, _, records in results for rec in records], mini_batches)
        for idx, (_, advantages, _) in zip(dealt, results):
            samples = [s for i in idx for s in groups[i].samples]
            for sample, adv in zip(samples, advantages):
                sample.advantage = adv
        response_tokens = [sum(len(s.response_ids) for i in idx for s in groups[i].samples) for idx in dealt]
        return combine_stats([stats for stats, _, _ in results], [float(t) for t in response_tokens])

    def pull_weights(self, model: torch.nn.Module) -> None:
        """Load rank 0's weights into the controller's copy of the policy."""
        state = self._gather([self.actors[0].weights.remote()], "sending weights")[0]
        if is_lora(model):  # the adapters only; the controller's copy has the same base
            load_lora_state(model, state)
        else:
            model.load_state_dict(state)

    def state_dict(self) -> dict[str, Any]:
        return self._gather([self.actors[0].state_dict.remote()], "saving its state")[0]

    def load_state_dict(self, state: dict[str, Any]) -> None:
        ref = self.ray.put(state)
        self._gather([a.load_state_dict.remote(ref) for a in self.actors], "loading its state")
        self.updates = int(state.get("updates", 0))

    def reset_reference(self) -> None:
        self._gather([a.reset_reference.remote() for a in self.actors], "resetting the reference")

    def close(self) -> None:
        for a in self.actors:
            kill_actor(self.ray, a)
        self.actors = []
