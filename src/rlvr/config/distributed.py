"""The `distributed` section: local or Ray placement of rollout, reward, reference, learner and reward-model
workers."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlvr.config.base import Strict


class DistributedConfig(Strict):
    """Where the stages run: in this process (local), or rollout workers as Ray actors (ray)."""

    backend: Literal["local", "ray"] = Field("local", description="local: one process; ray: rollout actors.")
    learner: Literal["ddp", "fsdp2"] = Field(
        "ddp", description="With torchrun ranks: ddp keeps the whole policy on every rank and sums gradients; "
        "fsdp2 shards the decoder layers' weights, gradients and optimizer state (docs/scaling.md).")
    address: str | None = Field(None, description="None: start a local Ray runtime; 'auto': join the cluster "
                                "started with `ray start`; or ray://host:port.")
    num_cpus: int | None = Field(None, ge=1, description="CPUs of a local Ray runtime; default: all.")
    placement_timeout_s: float = Field(
        120.0, gt=0, description="How long an actor may wait for the cluster to place it (at start-up, or for "
        "a lost node to come back) before the run stops with an error naming the knob; model loading is not "
        "bounded.")
    rollout_workers: int = Field(2, ge=1, description="Rollout engine replicas (Ray actors).")
    cpus_per_rollout_worker: float = Field(1.0, gt=0, description="CPUs Ray reserves for each rollout worker.")
    rollout_worker_resources: dict[str, float] = Field(
        default_factory=dict, description="Custom Ray resources each rollout worker asks for, e.g. "
        "{gpu_node: 1} pins it to the nodes started with `ray start --resources '{\"gpu_node\": 8}'`.")
    gpus_per_rollout_worker: float = Field(0.0, ge=0, description="> 0 places workers on GPUs (separate "
                                           "from the learner's unless fractions let them share).")
    weight_sync: Literal["object_store", "broadcast"] = Field(
        "object_store", description="How new weights reach the rollout workers: through Ray's object store, or "
        "broadcast over a process group of the controller and the workers (gloo; NCCL on GPUs).")
    reward_workers: int = Field(0, ge=0, description="Ray actors that run the correctness verifier (each with "
                                "its own process pool); 0: the controller's pool.")
    cpus_per_reward_worker: float = Field(1.0, gt=0, description="CPUs Ray reserves for each reward worker.")
    reward_worker_resources: dict[str, float] = Field(default_factory=dict, description="Custom Ray "
                                                      "resources each reward worker asks for (pins it to nodes).")
    reference_worker: bool = Field(False, description="Run the frozen reference model (KL terms) in its own Ray "
                                   "actor instead of beside the learner.")
    cpus_per_reference_worker: float = Field(1.0, gt=0, description="CPUs Ray reserves for each reference worker.")
    reference_worker_resources: dict[str, float] = Field(default_factory=dict, description="Custom Ray "
                                                         "resources the reference worker asks for.")
    gpus_per_reference_worker: float = Field(0.0, ge=0, description="> 0 puts the reference on a GPU of its own "
                                             "(or a fraction of one).")
    learner_workers: int = Field(0, ge=0, description="Data-parallel learner ranks as Ray actors (one process "
                                 "group; docs/scaling.md); 0: the learner runs in the controller.")
    cpus_per_learner_worker: float = Field(1.0, gt=0, description="CPUs Ray reserves for each learner worker.")
    learner_worker_resources: dict[str, float] = Field(default_factory=dict, description="Custom Ray "
                                                       "resources each learner rank asks for.")
    gpus_per_learner_worker: float = Field(0.0, ge=0, description="> 0 puts each learner rank on a GPU of its "
                                           "own (NCCL between ranks), or a fraction of one.")
    reward_model_worker: bool = Field(False, description="coevolve.mode=co_evolve: train and score the reward model "
                                      "in its own Ray actor instead of in the controller (docs/reward-models.md).")
    cpus_per_reward_model_worker: float = Field(1.0, gt=0, description="CPUs Ray reserves for each reward model worker.")
    gpus_per_reward_model_worker: float = Field(0.0, ge=0, description="> 0 puts the co-evolving reward model on "
                                                "a GPU of its own (or a fraction of one).")
    mode: Literal["sync", "async"] = Field("sync", description="async: workers generate the next batches while "
                                           "the learner trains (needs backend=ray).")
    max_staleness: int = Field(1, ge=0, description="async: a sample may be at most this many policy versions "
                               "old; 0 reproduces synchronous training.")
    stale: Literal["drop", "requeue"] = Field("drop", description="What to do with samples older than allowed.")
    off_policy_correction: Literal["none", "tis", "decoupled"] = Field(
        "tis", description="async: none (PPO against the behaviour policy), tis (truncated importance sampling "
        "with the learner's recomputed log-probs), decoupled (decoupled PPO: untruncated)."
    )
