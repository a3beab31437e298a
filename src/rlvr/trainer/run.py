"""One training run's state: its placed roles, the task and sampler, the counters a checkpoint keeps, and the
operations the controller calls on them (rollout, evaluate, checkpoint). Built by `open_run`, which also
restores a checkpoint's state when resuming."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from rich.markup import escape

from rlvr.config import Config, ConfigError
from rlvr.models.lora import exportable, is_lora, load_lora_state, lora_state
from rlvr.models.vision import is_vision_checkpoint, load_processor
from rlvr.parallel import data_parallel as dp
from rlvr.rewards import RewardFunction
from rlvr.roles import Roles, place_roles
from rlvr.rollout import SamplingParams, agent_rollout_groups, rollout_groups
from rlvr.runtime import console, seed_everything
from rlvr.sampling import SAMPLERS, BatchSampler
from rlvr.sampling.search import load_search_prm
from rlvr.tasks import PromptRenderer
from rlvr.trainer.checkpoint import (
    CheckpointError,
    checkpoint_dir,
    latest_checkpoint,
    load_trainer_state,
    resume_checkpoint,
    save_checkpoint,
    set_rng_state,
)
from rlvr.trainer.evaluation import run_eval
from rlvr.trainer.stopping import TrainingError
from rlvr.types import Group, TaskRecord


@dataclass
class Run:
    """Everything one training run holds, built once by `open_run` and driven by the controller."""

    cfg: Config
    run_dir: Path
    task: Any
    prompts: Any  # the split training prompts are drawn from
    tokenizer: Any
    renderer: PromptRenderer
    roles: Roles
    sampler: BatchSampler
    params: SamplingParams
    start_step: int = 0
    faults: int = 0  # consecutive steps whose every optimizer step was skipped
    tokens_spent: int = 0  # response tokens sampled so far, kept or dropped (train.rollout_token_budget)
    processor: Any = None  # a vision-language policy's processor, saved with it even on a text-only task
    step: int = 0  # the step being sampled (the agent's turn-budget schedule reads it)

    @property
    def policy(self) -> torch.nn.Module:
        return self.roles.policy

    @property
    def saver(self) -> Any:
        """What a checkpoint saves beside the weights: the processor of a vision-language run (its tokenizer,
        image processor and chat template, so AutoProcessor loads the directory back), also when a vision-language
        model trains on a text-only task (LMM-R1's first stage: the next stage loads it back as a VLM), else the
        tokenizer."""
        if self.renderer.processor is not None:
            return self.renderer.processor
        return self.processor if self.processor is not None else self.tokenizer

    @property
    def engine(self) -> Any:
        return self.roles.generator

    @property
    def reward_fn(self) -> RewardFunction:
        return self.roles.scorer

    def rollout(self, records: Sequence[TaskRecord], n: int) -> list[Group]:
        """Sample n responses per record with the current policy and reward them."""
        records = list(records)
        if self.reward_fn.needs_paraphrases:  # Co-Reward scores each prompt against its paraphrase
            records = [r for rec in records for r in (rec, self.task.paraphrase(rec)) if r is not None]
        shuffled = []
        if self.reward_fn.needs_shuffled_frames:  # T-GRPO: each clip also answered with its frames shuffled
            rng = random.Random(f"{self.cfg.run.seed}-shuffle-{self.step}")
            shuffle = getattr(self.task, "shuffle_frames", None)
            shuffled = [r for r in (shuffle(rec, rng) for rec in records) if r is not None] if shuffle else []
        groups = self.generate(records + shuffled, self.params if n == self.params.n else replace(self.params, n=n))
        self.reward_fn(groups, self.task)
        if shuffled:  # the shuffled twins only set the contrast; the update trains on the ordered groups
            groups = [g for g in groups if not g.record.meta.get("shuffled_of")]
        return groups

    def teacher_rollout(self, records: Sequence[TaskRecord], n: int) -> list[Group]:
        """Sample n responses per record from the teacher (GKD's teacher outputs) and reward them (for logs)."""
        generator = self.roles.teacher_generator
        assert generator is not None, "no teacher generator was placed (sampling.off_policy=teacher places one)"
        groups = rollout_groups(generator, self.renderer, list(records),
                                self.params if n == self.params.n else replace(self.params, n=n))
        self.reward_fn(groups, self.task)
        return groups

    def generate(self, records: Sequence[TaskRecord], params: SamplingParams) -> list[Group]:
        """Unrewarded groups: multi-turn episodes in an agent run, else single-turn (training and evaluation)."""
        if self.cfg.agent is not None and self.cfg.agent.harness is not None:  # rollout.mode=openai_server
            return self.roles.env_factory.rollout_groups(self.renderer, records, params)
        if self.cfg.agent is not None:
            return agent_rollout_groups(self.engine, self.renderer, self.task, records, params, self.cfg.agent,
                                        step=self.step, total_steps=self.cfg.train.steps,
                                        env_factory=self.roles.env_factory)
        return rollout_groups(self.engine, self.renderer, records, params)

    def evaluate(self, tag: str) -> dict[str, Any]:
        result = run_eval(self.cfg, self.engine, self.renderer, self.task, self.run_dir, tag,
                          generate=self.generate) if dp.is_main() else None
        return dp.broadcast_object(result)

    def checkpoint(self, step: int) -> Path:
        learner_state = self.roles.trainable.state_dict()  # every rank: a collective when the learner is sharded
        if not dp.is_main():  # rank 0 writes; the others wait for it
            dp.barrier()
            return checkpoint_dir(self.run_dir, step)
        state = {"learner": learner_state, "sampler": self.sampler.state_dict(), "faults": self.faults,
                 "tokens_spent": self.tokens_spent}
        if is_lora(self.policy):
            state["lora"] = lora_state(self.policy)
        if self.roles.reward_learner is not None:  # co_evolve: the second trainable role, weights and optimizer
            state["reward_learner"] = self.roles.reward_learner.state_dict()
        try:
            path = self._save(step, state)
        finally:
            dp.barrier()
        return path

    def _save(self, step: int, state: dict[str, Any]) -> Path:
        try:
            return save_checkpoint(self.run_dir, step, exportable(self.policy), self.saver, state,
                                   self.cfg.checkpoint.keep_last)
        except OSError as err:  # e.g. a full disk: the previous checkpoint is untouched (atomic write)
            previous = latest_checkpoint(self.run_dir)
            raise TrainingError(
                f"could not write the checkpoint of step {step}: {err}. The previous checkpoint "
                f"({previous or 'none'}) is intact; free space and continue with: rlvr train --resume {self.run_dir}"
            ) from err


def _build_sampler(cfg: Config, prompts: Any, tokenizer: Any = None, task: Any = None) -> BatchSampler:
    """The configured batch sampler; a `search` section makes it the search rollout (docs/search.md)."""
    if cfg.search is None:
        return SAMPLERS.build(cfg.sampling.name, cfg.sampling.params, where="sampling", prompts=prompts,
                              seed=cfg.run.seed)
    if cfg.search.name == "sampling":
        raise ConfigError("search.name: 'sampling' is the evaluation baseline (rlvr eval); to train with plain "
                          "sampling remove the search section, or set search.name=mcts or beam_prm")
    if cfg.search.select != "verifier":
        raise ConfigError(f"search.select: '{cfg.search.select}' chooses an answer at evaluation (rlvr eval); a "
                          "training group keeps every leaf, rewarded by the run's reward; remove search.select")
    settings = cfg.search.settings()
    prm = None
    if settings.prm is not None:  # partial nodes valued by a `rlvr prm` PRM (ConfigErrors name search.prm)
        prm = load_search_prm(settings, tokenizer, task, device=cfg.model.device)
    return SAMPLERS.build("search", {}, where="sampling", prompts=prompts, seed=cfg.run.seed, search=settings,
                          prm=prm)


def open_run(cfg: Config, run_dir: Path, resume: bool, task: Any, tokenizer: Any, device: torch.device) -> Run:
    """Place the roles and build the run; when resuming, restore the newest checkpoint that verifies."""
    seed_everything(cfg.run.seed)
    checkpoint = _resume_point(run_dir) if resume else None
    roles = place_roles(cfg, tokenizer, device, checkpoint, task)
    try:
        visual = getattr(task, "visual", False)
        # a VLM on a text-only task trains through its language path (no images), but keeps its processor
        vision_model = visual or is_vision_checkpoint(cfg.model.path, trust_remote_code=cfg.model.trust_remote_code)
        processor = load_processor(cfg.model.path) if vision_model else None
        prompts = task.heldout if cfg.train.prompt_split == "heldout" else task.train  # heldout: test-time RL
        run = Run(
            cfg=cfg, run_dir=run_dir, task=task, prompts=prompts, tokenizer=tokenizer,
            renderer=PromptRenderer(task, tokenizer, cfg.model.chat_template, processor if visual else None),
            roles=roles, processor=processor, sampler=_build_sampler(cfg, prompts, tokenizer, task),
            params=SamplingParams(n=cfg.rollout.n, temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p,
                                  top_k=cfg.rollout.top_k, max_new_tokens=cfg.rollout.max_new_tokens,
                                  stop=list(cfg.rollout.stop)),
        )
        if checkpoint is not None:
            _restore(run, checkpoint)
        elif resume:
            console.print(escape(f"No complete checkpoint in {run_dir}; starting it from step 0"))
        roles.generator.sync_weights(roles.policy, version=run.start_step)
    except BaseException:
        roles.close()
        raise
    return run


def _restore(run: Run, checkpoint: Path) -> None:
    try:
        state = load_trainer_state(checkpoint)
    except CheckpointError as err:
        raise TrainingError(str(err)) from None
    if run.cfg.model.lora is not None:
        load_lora_state(run.policy, state["lora"])
    run.roles.trainable.load_state_dict(state["learner"])
    if run.roles.reward_learner is not None:
        if "reward_learner" not in state:
            raise TrainingError(f"{checkpoint} holds no reward model (it was written without coevolve.mode="
                                "co_evolve); resume it with the config it was written with")
        run.roles.reward_learner.load_state_dict(state["reward_learner"])
    run.sampler.load_state_dict(state["sampler"])
    set_rng_state(state["rng"])
    run.start_step, run.faults = int(state["step"]), int(state.get("faults", 0))
    run.tokens_spent = int(state.get("tokens_spent", 0))
    console.print(escape(f"Resuming {run.run_dir} from step {run.start_step} ({checkpoint.name})"))


def _resume_point(run_dir: Path) -> Path | None:
    """The newest checkpoint that verifies (rank 0 checks, moves damaged ones aside and tells every rank)."""
    found = None
    if dp.is_main():
        try:
            found = resume_checkpoint(run_dir, say=lambda m: console.print(m, style="yellow", markup=False))
        except CheckpointError as err:
            raise TrainingError(str(err)) from None
    found = dp.broadcast_object(str(found) if found is not None else None)
    return Path(found) if found is not None else None
