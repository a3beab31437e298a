"""Placement: every role of a run built once, in this process or on Ray, from the config alone.

This is the only module that decides where a role runs (HybridFlow's single-controller idea: placement is data).
The controller gets a `Roles` and calls their protocols (`rlvr.roles.protocols`); it never imports Ray and never
reads `distributed.*`.

    role          in process                          on Ray (`distributed.*`)
    generator     build_engine(rollout.engine)        RayEngine (backend: ray; rollout_workers actors)
    scorer        RewardFunction(rewards)             its verifiers on RayVerifierPool (reward_workers)
    reference     LocalLogProbModel (in the learner)  RemoteReference (reference_worker), or one per learner rank
    teacher       LocalLogProbModel (in the learner)  RemoteReference (reference_worker), or one per learner rank
    teacher gen.  build_engine over the teacher         in the controller's process (GKD's teacher outputs)
    trainable     LocalTrainable(Learner), FSDP2      RayLearnerGroup (learner_workers ranks)
                  SparkTrainable around it (spark)    around the in-process learner or the RayLearnerGroup (each
                                                      rank trains its share of the judge examples)
    reward model  RewardModelLearner (co_evolve)      RemoteRewardLearner (reward_model_worker), with or without
                                                      Ray learner ranks, sync or async
    token RM      TokenRewardModel (in the learner)   not yet (a ConfigError names the fix)
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from rich.markup import escape

from rlvr.config import Config, ConfigError
from rlvr.learner import (
    Learner,
    LocalLogProbModel,
    LocalTrainable,
    build_critic,
    needs_reference,
    needs_teacher,
    needs_token_rm,
)
from rlvr.learner.reward_model import build_reward_learner
from rlvr.learner.spark import SparkTrainable
from rlvr.learner.token_rm import TokenRewardModel
from rlvr.models import check_vocab, load_causal_lm, resolve_dtype
from rlvr.models.lora import adapt_policy, lora_summary
from rlvr.models.reward_head import load_step_reward_model
from rlvr.models.vision import is_vision_checkpoint, load_lm_or_vlm, load_vlm_for_training
from rlvr.parallel import data_parallel as dp
from rlvr.rewards import RewardContext, RewardFunction
from rlvr.roles.protocols import Generator, LogProbModel, RewardLearner, Trainable
from rlvr.rollout import HarnessRunner, build_engine, build_env_factory
from rlvr.runtime import console
from rlvr.tasks.base import uses_chat_template

log = logging.getLogger("rlvr.train")


@dataclass
class Roles:
    """The placed roles of one run. `policy` is the controller's whole copy of the policy: checkpoints and
    reward terms read it, and the generator is synced from it."""

    policy: torch.nn.Module
    generator: Generator
    scorer: RewardFunction
    trainable: Trainable
    reference: LogProbModel | None = None  # inside the trainable; None when each Ray learner rank holds its own
    teacher: LogProbModel | None = None  # the same, for distillation (model.teacher_path)
    teacher_generator: Generator | None = None  # GKD's teacher outputs (sampling.off_policy=teacher): samples it
    reward_learner: RewardLearner | None = None  # co_evolve: the second trainable role, a reward model (or its actor)
    env_factory: Any = None  # agent runs: one environment per episode, tools built once; or the HarnessRunner
    _opened: list[Any] = field(default_factory=list, repr=False)  # everything to close, in creation order

    def publish(self, version: int) -> None:
        """Hand the updated policy to the generator: gather or fetch it from the trainable, then sync."""
        self.trainable.pull_weights(self.policy)
        self.generator.wake()
        self.generator.sync_weights(self.policy, version=version)

    def close(self) -> None:
        """Close every role, newest first; one that fails to close does not keep the others open."""
        while self._opened:
            role = self._opened.pop()
            try:
                role.shutdown() if hasattr(role, "shutdown") else role.close()
            except Exception as err:  # closing must not hide the run's own error
                log.warning("closing %s failed: %s", type(role).__name__, err)


def place_roles(cfg: Config, tokenizer: Any, device: torch.device, checkpoint: Path | None,
                task: Any = None) -> Roles:
    """Build the roles `cfg` asks for. Weights come from `checkpoint` when resuming (its trainer state is loaded
    by the caller), else from `model.path`. Ray reward workers get `task` itself (its data read here), not its
    file path. If building one role fails, those built so far are closed."""
    opened: list[Any] = []
    try:
        return _place(cfg, tokenizer, device, checkpoint, opened, task)
    except BaseException:
        Roles(policy=None, generator=None, scorer=None, trainable=None, _opened=opened).close()  # type: ignore[arg-type]
        raise


def _place(cfg: Config, tokenizer: Any, device: torch.device, checkpoint: Path | None, opened: list[Any],
           task: Any) -> Roles:
    d = cfg.distributed
    dtype = resolve_dtype(cfg.model.dtype, device)
    weights = str(checkpoint or cfg.model.path)
    policy = load_policy(cfg, tokenizer, device, dtype, checkpoint)
    # a Ray learner rank holds its own reference and teacher; otherwise the learner here holds these
    reference = None if d.learner_workers else place_reference(cfg, device, dtype)
    teacher = None if d.learner_workers else place_teacher(cfg, device, dtype)
    token_rm = place_token_rm(cfg, tokenizer, device, dtype)
    opened += [m for m in (reference, teacher, token_rm) if m is not None]

    if d.backend == "ray":  # rollout workers as Ray actors, behind the same engine interface
        from rlvr.distributed.ray_engine import RayEngine

        generator: Any = RayEngine(cfg, weights)
    else:
        generator = build_engine(cfg.rollout.engine, cfg.rollout.engine_options, cfg.rollout.batch_size, policy,
                                 tokenizer)
    opened.append(generator)
    teacher_generator = place_teacher_generator(cfg, tokenizer, device, dtype)
    if teacher_generator is not None:
        opened.append(teacher_generator)

    reward_learner = place_reward_learner(cfg, tokenizer, device, dtype)
    if reward_learner is not None:
        opened.append(reward_learner)
    scorer = RewardFunction.from_config(cfg.rewards, RewardContext(
        policy=policy, tokenizer=tokenizer, temperature=cfg.rollout.temperature,
        max_new_tokens=cfg.rollout.max_new_tokens, reward_learner=reward_learner))
    opened.append(scorer)
    if d.reward_workers:  # the verifiers run on Ray actors
        from rlvr.distributed.ray_groups import RayVerifierPool
        from rlvr.rewards.base import CorrectnessReward

        for term in scorer.terms:
            if isinstance(term.component, CorrectnessReward):
                term.component.use_pool(RayVerifierPool(cfg, term.component.workers, term.component.timeout, task))

    trainable: Any
    if d.learner_workers:  # data-parallel learner ranks as Ray actors, each with its own reference and critic
        from rlvr.distributed.ray_learner import RayLearnerGroup

        trainable = RayLearnerGroup(cfg, weights, tokenizer.pad_token_id)
        if cfg.coevolve is not None and cfg.coevolve.mode == "spark":  # judge examples dealt over the ranks;
            # label-free steps read the controller's copy of the policy, synced after every update
            trainable = SparkTrainable(trainable, cfg.coevolve, tokenizer, cfg.run.seed, judge_model=policy)
    else:
        learner_model = policy
        if d.learner == "fsdp2" and dp.world_size() > 1:  # a sharded copy trains; `policy` stays whole
            from rlvr.parallel.fsdp import shard_model

            learner_model = shard_model(copy.deepcopy(policy))
        elif d.learner == "fsdp2":
            log.warning("distributed.learner=fsdp2 shards over torchrun ranks; with one process it trains unsharded")
        learner = Learner(learner_model, cfg, reference, build_critic(cfg, policy, dtype, device), teacher=teacher,
                          token_rm=token_rm)
        trainable = LocalTrainable(learner, tokenizer.pad_token_id)
        if cfg.coevolve is not None and cfg.coevolve.mode == "spark":  # the policy also learns to judge
            if dp.world_size() > 1:
                raise ConfigError("coevolve.mode: spark's judge loss runs in one learner process only; run it "
                                  "without torchrun (data-parallel spark is not done yet)")
            trainable = SparkTrainable(trainable, cfg.coevolve, tokenizer, cfg.run.seed)
    opened.append(trainable)
    env_factory: Any = None
    if cfg.agent is not None and cfg.agent.harness is not None:  # the harness's endpoint in front of the generator
        env_factory = HarnessRunner.from_config(cfg, generator, tokenizer,
                                                context_length=context_length(policy, tokenizer),
                                                uses_chat=uses_chat_template(tokenizer, cfg.model.chat_template))
    elif cfg.agent is not None:
        env_factory = build_env_factory(cfg.agent)
    if env_factory is not None:
        opened.append(env_factory)
    return Roles(policy=policy, generator=generator, scorer=scorer, trainable=trainable, reference=reference,
                 teacher=teacher, env_factory=env_factory, reward_learner=reward_learner,
                 teacher_generator=teacher_generator, _opened=opened)


def uses_teacher_outputs(cfg: Config) -> bool:
    """GKD's off-policy steps sample the teacher (sampling gkd with off_policy=teacher)."""
    return cfg.sampling.name == "gkd" and cfg.sampling.params.get("off_policy") == "teacher"


def place_teacher_generator(cfg: Config, tokenizer: Any, device: torch.device, dtype: torch.dtype) -> Any:
    """The engine that samples GKD's teacher outputs: `rollout.engine` (fast or hf; the config check refuses
    vllm) over a frozen copy of `model.teacher_path` in the controller's process, never synced. None when the
    sampler does not ask for it, or under torchrun (every sampler is bypassed there)."""
    if not uses_teacher_outputs(cfg) or dp.world_size() > 1:
        return None
    assert cfg.model.teacher_path is not None  # the config check asks for it
    model = load_causal_lm(cfg.model.teacher_path, dtype=dtype, device=device,
                           trust_remote_code=cfg.model.trust_remote_code, trainable=False, key="model.teacher_path")
    check_vocab(tokenizer, model)
    return build_engine(cfg.rollout.engine, cfg.rollout.engine_options, cfg.rollout.batch_size, model, tokenizer)


def place_reward_learner(cfg: Config, tokenizer: Any, device: torch.device, dtype: torch.dtype) -> RewardLearner | None:
    """co_evolve's reward model: a Ray actor (`distributed.reward_model_worker`), or in this process. Both are
    built by `build_reward_learner` (`coevolve.rm_path`, else `model.path`, with a scalar head seeded by run.seed
    on its own RNG stream). A resumed run loads its weights and optimizer from the checkpoint afterwards."""
    co = cfg.coevolve
    if co is None or co.mode != "co_evolve":
        return None
    if dp.world_size() > 1:
        raise ConfigError("coevolve.mode: co_evolve's reward model is placed in one process only; run it without "
                          "torchrun (data-parallel placement of the reward model is not done yet)")
    if cfg.distributed.reward_model_worker:
        from rlvr.distributed.ray_reward_model import RemoteRewardLearner

        return RemoteRewardLearner(cfg, tokenizer)
    learner = build_reward_learner(cfg, int(tokenizer.pad_token_id), device, dtype)
    check_vocab(tokenizer, learner.model, key="coevolve.rm_path" if co.rm_path else "model.path")
    return learner


def context_length(policy: torch.nn.Module, tokenizer: Any) -> int:
    """Prompt + completion tokens the policy takes: its position limit, or the tokenizer's if smaller."""
    limits = [getattr(getattr(policy, "config", None), "max_position_embeddings", None),
              getattr(tokenizer, "model_max_length", None)]
    sane = [int(x) for x in limits if isinstance(x, int) and 0 < x < 10**7]
    return min(sane) if sane else 2048


def load_policy(cfg: Config, tokenizer: Any, device: torch.device, dtype: torch.dtype,
                checkpoint: Path | None) -> torch.nn.Module:
    """The policy's weights: the checkpoint's, or `model.path`'s with LoRA adapters (restored by the caller)."""
    lora = cfg.model.lora
    path = checkpoint if checkpoint is not None and lora is None else cfg.model.path
    if is_vision_checkpoint(path):  # a vision-language checkpoint (e.g. builtin-vl): the vision tower comes along
        policy = load_vlm_for_training(path, dtype=dtype, device=device, trust_remote_code=cfg.model.trust_remote_code,
                                       freeze_vision_tower=cfg.model.freeze_vision_tower,
                                       freeze_projector=cfg.model.freeze_projector)
    else:
        policy = load_causal_lm(path, dtype=dtype, device=device, trust_remote_code=cfg.model.trust_remote_code,
                                gradient_checkpointing=cfg.model.gradient_checkpointing)
    if lora is not None:  # language layers only; a VLM's projector trains in full unless model.freeze_projector
        policy = adapt_policy(policy, lora, freeze_projector=cfg.model.freeze_projector)
        summary = lora_summary(policy, lora)
        log.info("%s", summary)
        if dp.is_main():
            console.print(escape(summary), highlight=False)
    check_vocab(tokenizer, policy)
    return policy


def place_reference(cfg: Config, device: torch.device, dtype: torch.dtype) -> LogProbModel | None:
    """The frozen KL reference, if the algorithm uses one: a Ray actor of its own, or a local copy."""
    if not needs_reference(cfg):
        return None
    path = str(cfg.model.reference_path or cfg.model.path)
    if cfg.distributed.reference_worker:
        from rlvr.distributed.ray_groups import RemoteReference

        return RemoteReference(cfg, path)
    key = "model.reference_path" if cfg.model.reference_path else "model.path"
    if is_vision_checkpoint(path, key=key):
        model = load_vlm_for_training(path, dtype=dtype, device=device, trust_remote_code=cfg.model.trust_remote_code,
                                      trainable=False, key=key)
    else:
        model = load_causal_lm(path, dtype=dtype, device=device, trust_remote_code=cfg.model.trust_remote_code,
                               trainable=False, key=key)
    return LocalLogProbModel(model, cfg.train.micro_batch_size, cfg.train.pack_tokens)


def place_token_rm(cfg: Config, tokenizer: Any, device: torch.device, dtype: torch.dtype) -> Any:
    """OREAL's frozen token-level reward model, if the estimator weights tokens by one: in this process only."""
    if not needs_token_rm(cfg):
        return None
    assert cfg.model.token_rm_path is not None  # the config check asks for it
    if cfg.distributed.learner_workers:
        raise ConfigError("model.token_rm_path: the token-level reward model runs in the learner's process only; "
                          "set distributed.learner_workers=0 (Ray learner ranks with a token RM are not done yet)")
    model = load_step_reward_model(cfg.model.token_rm_path, dtype=dtype, device=device,
                                   pad_token_id=int(tokenizer.pad_token_id),
                                   trust_remote_code=cfg.model.trust_remote_code, key="model.token_rm_path")
    check_vocab(tokenizer, model)
    return TokenRewardModel(model, int(tokenizer.pad_token_id), cfg.train.micro_batch_size)


def place_teacher(cfg: Config, device: torch.device, dtype: torch.dtype) -> LogProbModel | None:
    """The frozen distillation teacher, if the algorithm grades tokens by one: placed as the reference is."""
    if not needs_teacher(cfg):
        return None
    assert cfg.model.teacher_path is not None  # the config check asks for it
    if cfg.distributed.reference_worker:
        from rlvr.distributed.ray_groups import RemoteReference

        return RemoteReference(cfg, cfg.model.teacher_path)
    # a vision-language teacher (image tasks: it scores the sampled tokens given the same images) or an LM
    model = load_lm_or_vlm(cfg.model.teacher_path, dtype=dtype, device=device,
                           trust_remote_code=cfg.model.trust_remote_code, trainable=False, key="model.teacher_path")
    return LocalLogProbModel(model, cfg.train.micro_batch_size, cfg.train.pack_tokens)
