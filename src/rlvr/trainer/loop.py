"""The synchronous RL controller. Read top to bottom, it is the algorithm:

    for each step:
        groups   = sampler.next_batch(...)                     which prompts, n samples each (behaviour log-probs),
                                                               rewarded by the reward components
        batch    = learner.prepare(Batch.from_groups(groups))  old/ref log-probs, values: only what is asked for
        adv      = learner.compute_advantages(batch)           the estimator, e.g. GRPO group normalization
        metrics  = learner.update(batch)                       policy loss over epochs x mini-batches
        engine.sync_weights(policy, version = step)            the sampler now uses the new policy
"""

from __future__ import annotations

import copy
import json
import logging
import math
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from rich.markup import escape

from rlvr import faults
from rlvr.config import Config, ConfigError
from rlvr.distributed import data_parallel as dp
from rlvr.distributed.ray_learner import LearnerWorkerLost, RayLearnerGroup
from rlvr.eval import evaluate, write_results
from rlvr.eval.report import write_report
from rlvr.models import (
    check_vocab,
    load_causal_lm,
    load_tokenizer,
    resolve_device,
    resolve_dtype,
    resolve_model_path,
)
from rlvr.models.lora import apply_lora, exportable, is_lora, load_lora_state, lora_state, lora_summary
from rlvr.rewards import RewardContext, RewardFunction, non_finite_metrics
from rlvr.rollout import (
    ENGINES,
    SamplingParams,
    agent_metrics,
    agent_rollout_groups,
    build_engine,
    build_env_factory,
    rollout_groups,
)
from rlvr.runtime import (
    ProgressReporter,
    StopSignals,
    announce_sandbox,
    attach_log_file,
    console,
    format_metrics,
    prepare_run_dir,
    seed_everything,
    step_seed,
)
from rlvr.sampling import SAMPLERS, BatchSampler, StepContext
from rlvr.tasks import PromptRenderer, build_task
from rlvr.tracking import RolloutWriter, build_sinks, check_sinks
from rlvr.trainer.async_loop import AsyncBatches
from rlvr.trainer.checkpoint import (
    CheckpointError,
    checkpoint_dir,
    latest_checkpoint,
    load_trainer_state,
    resume_checkpoint,
    save_checkpoint,
    save_hf_dir,
    set_rng_state,
)
from rlvr.trainer.critic import Critic
from rlvr.trainer.learner import Learner, needs_reference
from rlvr.trainer.memory import check_memory
from rlvr.trainer.watch import Heartbeat, ZeroSpreadWatch
from rlvr.types import Batch, Group, TaskRecord

log = logging.getLogger("rlvr.train")

CONSOLE_KEYS = ("reward", "acc", "len", "entropy", "kl", "clip", "step_s")


class TrainingError(RuntimeError):
    """The run cannot continue (e.g. repeated non-finite steps). A valid checkpoint has been written."""


class TrainingInterrupted(Exception):
    """SIGINT/SIGTERM stopped the run after a checkpoint; `exit_code` is 128 + the signal number."""

    def __init__(self, signum: int, step: int, run_dir: Path):
        self.exit_code = 128 + signum
        name = signal.Signals(signum).name
        super().__init__(f"stopped by {name} after step {step} (checkpoint written). Continue with: "
                         f"rlvr train --resume {run_dir}")


def train(cfg: Config, *, resume: bool = False, stop_after: int | None = None) -> Path:
    """Run (or resume) GRPO-style training. Returns the run directory.

    `stop_after` ends this invocation after that many steps in total, as if interrupted (tests use it).
    """
    multi_rank = dp.init_from_env()  # torchrun: a data-parallel learner over the ranks
    if multi_rank and cfg.distributed.learner_workers:
        raise ConfigError("distributed.learner_workers: the learner ranks are Ray actors, so run this recipe with "
                          "`rlvr train`, not under torchrun (or set learner_workers=0)")
    # Everything that can fail on bad input is checked before the run directory or any compute exists.
    task = build_task(cfg.task.name, cfg.task.params)
    tokenizer = load_tokenizer(cfg.model.tokenizer_path or cfg.model.path,
                               trust_remote_code=cfg.model.trust_remote_code,
                               key="model.tokenizer_path" if cfg.model.tokenizer_path else "model.path")
    resolve_model_path(cfg.model.path)
    if needs_reference(cfg) and cfg.model.reference_path:
        resolve_model_path(cfg.model.reference_path, "model.reference_path")
    device = resolve_device(cfg.model.device)
    PromptRenderer(task, tokenizer, cfg.model.chat_template)
    check_sinks(cfg.logging.sinks)
    check_available = getattr(ENGINES.get(cfg.rollout.engine), "check_available", None)
    if callable(check_available):  # e.g. vllm without a GPU: say so now, not after loading the model
        check_available()
    if cfg.agent is not None:  # tools fail here on a missing corpus, database or library
        build_env_factory(cfg.agent).close()
        if cfg.distributed.mode == "async":
            raise ConfigError("agent: multi-turn rollouts run synchronously; set distributed.mode=sync")
    if cfg.train.memory_check:
        try:
            check_memory(cfg, device, resolve_dtype(cfg.model.dtype, device))
        except MemoryError as err:
            raise TrainingError(str(err)) from None

    if multi_rank and device.type == "cuda":
        device = torch.device("cuda", torch.cuda.current_device())
    run_dir = prepare_run_dir(cfg, resume) if dp.is_main() else None
    run_dir = Path(dp.broadcast_object(str(run_dir) if run_dir else None))
    cfg.run.dir = run_dir
    log_handler = attach_log_file(run_dir) if dp.is_main() else None
    try:
        if dp.is_main():
            announce_sandbox(cfg)
        return _train(cfg, run_dir, resume, stop_after, task, tokenizer, device)
    finally:
        if log_handler is not None:
            logging.getLogger("rlvr").removeHandler(log_handler)
            log_handler.close()


@dataclass
class Run:
    """Everything one training run holds, built once by `_build` and driven by `_loop`."""

    cfg: Config
    run_dir: Path
    task: Any
    prompts: Any  # the split training prompts are drawn from
    tokenizer: Any
    policy: Any
    engine: Any
    renderer: PromptRenderer
    reward_fn: RewardFunction
    learner: Learner | RayLearnerGroup
    sampler: BatchSampler
    params: SamplingParams
    start_step: int = 0
    faults: int = 0  # consecutive steps whose every optimizer step was skipped
    tokens_spent: int = 0  # response tokens sampled so far, kept or dropped (train.rollout_token_budget)
    env_factory: Any = None  # agent runs: one environment per episode, tools built once
    step: int = 0  # the step being sampled (the agent's turn-budget schedule reads it)
    sharded_policy: Any = None  # distributed.learner=fsdp2: the learner's sharded model (`policy` is a whole copy)

    def learn(self, groups: list[Group]) -> dict[str, float]:
        """One RL update on the step's groups: here, or on the Ray learner ranks (`distributed.learner_workers`)."""
        if isinstance(self.learner, Learner):
            return learn_on(self.learner, groups, self.tokenizer.pad_token_id)
        return self.learner.learn(groups)

    def publish_weights(self, version: int) -> None:
        """Hand the updated policy to the engine (with FSDP2: first gather the shards into the whole copy; with
        Ray learner ranks: first fetch rank 0's weights)."""
        if self.sharded_policy is not None:
            from rlvr.distributed.fsdp import gather_into

            gather_into(self.sharded_policy, self.policy)
        elif not isinstance(self.learner, Learner):
            self.learner.pull_weights(self.policy)
        self.engine.sync_weights(self.policy, version=version)

    def checkpoint(self, step: int) -> Path:
        learner_state = self.learner.state_dict()  # every rank: a collective when the learner is sharded
        if not dp.is_main():  # rank 0 writes; the others wait for it
            dp.barrier()
            return checkpoint_dir(self.run_dir, step)
        state = {"learner": learner_state, "sampler": self.sampler.state_dict(), "faults": self.faults,
                 "tokens_spent": self.tokens_spent}
        if is_lora(self.policy):
            state["lora"] = lora_state(self.policy)
        try:
            path = self._save(step, state)
        finally:
            dp.barrier()
        return path

    def _save(self, step: int, state: dict[str, Any]) -> Path:
        try:
            return save_checkpoint(self.run_dir, step, exportable(self.policy), self.tokenizer, state,
                                   self.cfg.checkpoint.keep_last)
        except OSError as err:  # e.g. a full disk: the previous checkpoint is untouched (atomic write)
            previous = latest_checkpoint(self.run_dir)
            raise TrainingError(
                f"could not write the checkpoint of step {step}: {err}. The previous checkpoint "
                f"({previous or 'none'}) is intact; free space and continue with: rlvr train --resume {self.run_dir}"
            ) from err

    @property
    def rollout_restarts(self) -> int:
        return int(getattr(self.engine, "restarts", 0))

    def evaluate(self, tag: str) -> dict[str, Any]:
        result = _evaluate(self.cfg, self.engine, self.renderer, self.task, self.run_dir, tag,
                           generate=self.generate) if dp.is_main() else None
        return dp.broadcast_object(result)

    def rollout(self, records: Sequence[TaskRecord], n: int) -> list[Group]:
        """Sample n responses per record with the current policy and reward them."""
        records = list(records)
        if self.reward_fn.needs_paraphrases:  # Co-Reward scores each prompt against its paraphrase
            records = [r for rec in records for r in (rec, self.task.paraphrase(rec)) if r is not None]
        groups = self.generate(records, self.params if n == self.params.n else replace(self.params, n=n))
        self.reward_fn(groups, self.task)
        return groups

    def generate(self, records: Sequence[TaskRecord], params: SamplingParams) -> list[Group]:
        """Unrewarded groups: multi-turn episodes in an agent run, else single-turn (training and evaluation)."""
        if self.cfg.agent is not None:
            return agent_rollout_groups(self.engine, self.renderer, self.task, records, params, self.cfg.agent,
                                        step=self.step, total_steps=self.cfg.train.steps,
                                        env_factory=self.env_factory)
        return rollout_groups(self.engine, self.renderer, records, params)


def _train(cfg: Config, run_dir: Path, resume: bool, stop_after: int | None, task: Any, tokenizer: Any,
           device: torch.device) -> Path:
    run = _build(cfg, run_dir, resume, task, tokenizer, device)
    resume_step = run.start_step if resume else None
    main = dp.is_main()
    sink = build_sinks(cfg.logging.sinks if main else [], run_dir, cfg.model_dump(mode="json"),
                       resume_from_step=resume_step, enabled=main)
    rollouts = RolloutWriter(run_dir, cfg.logging.rollouts_every if main else 0, cfg.logging.rollouts_per_step,
                             resume_from_step=resume_step)
    try:
        with StopSignals() as signals:
            return _loop(run, sink, rollouts, stop_after, signals)
    except LearnerWorkerLost as err:  # a Ray learner rank died (distributed.learner_workers)
        previous = latest_checkpoint(run_dir)
        raise TrainingError(f"{err}. Newest complete checkpoint: {previous or 'none'}; continue with: "
                            f"rlvr train --resume {run_dir}") from None
    finally:
        sink.close()
        run.reward_fn.close()
        if run.env_factory is not None:
            run.env_factory.close()
        for closing in (run.learner.reference, run.learner):  # a Ray reference worker, Ray learner ranks
            close = getattr(closing, "close", None)
            if callable(close):
                close()
        shutdown = getattr(run.engine, "shutdown", None)
        if callable(shutdown):
            shutdown()


def _build(cfg: Config, run_dir: Path, resume: bool, task: Any, tokenizer: Any, device: torch.device) -> Run:
    seed_everything(cfg.run.seed)
    dtype = resolve_dtype(cfg.model.dtype, device)
    checkpoint = _resume_point(run_dir) if resume else None
    lora = cfg.model.lora
    # with LoRA the base weights come from model.path and the adapters from the checkpoint's trainer state
    policy = load_causal_lm(checkpoint if checkpoint is not None and lora is None else cfg.model.path, dtype=dtype,
                            device=device, trust_remote_code=cfg.model.trust_remote_code,
                            gradient_checkpointing=cfg.model.gradient_checkpointing)
    if lora is not None:
        policy = apply_lora(policy, lora)
        summary = lora_summary(policy, lora)
        log.info("%s", summary)
        if dp.is_main():
            console.print(escape(summary), highlight=False)
    check_vocab(tokenizer, policy)
    reference = None
    local_learner = not cfg.distributed.learner_workers  # else Ray learner ranks, each with its own reference
    if local_learner and needs_reference(cfg) and cfg.distributed.reference_worker:  # a Ray actor of its own
        from rlvr.distributed.ray_groups import RemoteReference

        reference = RemoteReference(cfg, str(cfg.model.reference_path or cfg.model.path))
    elif local_learner and needs_reference(cfg):
        reference = load_causal_lm(cfg.model.reference_path or cfg.model.path, dtype=dtype, device=device,
                                   trust_remote_code=cfg.model.trust_remote_code, trainable=False,
                                   key="model.reference_path" if cfg.model.reference_path else "model.path")
    if cfg.distributed.backend == "ray":  # rollout workers as Ray actors, behind the same engine interface
        from rlvr.distributed.ray_engine import RayEngine

        engine = RayEngine(cfg, str(checkpoint or cfg.model.path))
    else:
        engine = build_engine(cfg.rollout.engine, cfg.rollout.engine_options, cfg.rollout.batch_size, policy,
                              tokenizer)
    reward_fn = RewardFunction.from_config(cfg.rewards, RewardContext(
        policy=policy, tokenizer=tokenizer, temperature=cfg.rollout.temperature,
        max_new_tokens=cfg.rollout.max_new_tokens))
    if cfg.distributed.reward_workers:  # the verifier runs on Ray actors (distributed.reward_workers)
        from rlvr.distributed.ray_groups import RayVerifierPool
        from rlvr.rewards.base import CorrectnessReward

        for term in reward_fn.terms:
            if isinstance(term.component, CorrectnessReward):
                term.component.use_pool(RayVerifierPool(cfg, term.component.workers, term.component.timeout))
    sharded = None
    if cfg.distributed.learner == "fsdp2":
        if dp.world_size() > 1:  # the learner trains a sharded copy; `policy` stays whole for rollouts
            from rlvr.distributed.fsdp import shard_model

            sharded = shard_model(copy.deepcopy(policy))
        else:
            log.warning("distributed.learner=fsdp2 shards over torchrun ranks; with one process it trains unsharded")
    learner: Learner | RayLearnerGroup
    if not local_learner:  # data-parallel learner ranks as Ray actors
        learner = RayLearnerGroup(cfg, str(checkpoint or cfg.model.path), tokenizer.pad_token_id)
    else:
        learner = Learner(sharded if sharded is not None else policy, cfg, reference,
                          build_critic(cfg, policy, dtype, device))
    prompts = task.heldout if cfg.train.prompt_split == "heldout" else task.train  # heldout: test-time RL
    run = Run(
        cfg=cfg, run_dir=run_dir, task=task, prompts=prompts, tokenizer=tokenizer, policy=policy, engine=engine,
        renderer=PromptRenderer(task, tokenizer, cfg.model.chat_template), reward_fn=reward_fn, learner=learner,
        sampler=SAMPLERS.build(cfg.sampling.name, cfg.sampling.params, where="sampling", prompts=prompts,
                               seed=cfg.run.seed),
        params=SamplingParams(n=cfg.rollout.n, temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p,
                              top_k=cfg.rollout.top_k, max_new_tokens=cfg.rollout.max_new_tokens,
                              stop=list(cfg.rollout.stop)),
        env_factory=build_env_factory(cfg.agent) if cfg.agent is not None else None,
        sharded_policy=sharded,
    )
    if checkpoint is not None:
        try:
            state = load_trainer_state(checkpoint)
        except CheckpointError as err:
            raise TrainingError(str(err)) from None
        if lora is not None:
            load_lora_state(policy, state["lora"])
        learner.load_state_dict(state["learner"])
        run.sampler.load_state_dict(state["sampler"])
        set_rng_state(state["rng"])
        run.start_step, run.faults = int(state["step"]), int(state.get("faults", 0))
        run.tokens_spent = int(state.get("tokens_spent", 0))
        console.print(escape(f"Resuming {run_dir} from step {run.start_step} ({checkpoint.name})"))
    elif resume:
        console.print(escape(f"No complete checkpoint in {run_dir}; starting it from step 0"))
    engine.sync_weights(policy, version=run.start_step)
    return run


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


def _loop(run: Run, sink: Any, rollouts: RolloutWriter, stop_after: int | None, signals: StopSignals) -> Path:
    # off a terminal there is no live progress bar: a heartbeat line at least every 15 s says which step runs
    with Heartbeat(dp.is_main() and not console.is_terminal) as heartbeat:
        return _loop_body(run, sink, rollouts, stop_after, signals, heartbeat)


def _loop_body(run: Run, sink: Any, rollouts: RolloutWriter, stop_after: int | None, signals: StopSignals,
               heartbeat: Heartbeat) -> Path:
    cfg, learner, reward_fn = run.cfg, run.learner, run.reward_fn
    fresh_before = cfg.eval.before and run.start_step == 0
    heartbeat.doing("evaluating the starting model (eval.before)" if fresh_before else "starting")
    before = run.evaluate("before") if fresh_before else saved_eval(run.run_dir, "before")
    spread = ZeroSpreadWatch()
    last_step = cfg.train.steps if stop_after is None else min(cfg.train.steps, stop_after)
    batches = AsyncBatches(run) if cfg.distributed.mode == "async" else SyncBatches(run)
    budget, budget_done = cfg.train.rollout_token_budget, False
    loop_start = time.perf_counter()
    with ProgressReporter("train", cfg.train.steps, cfg.logging.progress and dp.is_main(),
                          completed=run.start_step) as progress:
        for step in range(run.start_step + 1, last_step + 1):
            step_start = time.perf_counter()
            run.step = step
            heartbeat.doing(f"train step {step}/{cfg.train.steps} running")
            groups, sampler_metrics = batches.next(step, last_step)  # rollout + rewards (sampler's choice)
            rollout_s = time.perf_counter() - step_start
            faults.kill_point("rollout", step)

            train_start = time.perf_counter()
            stats = run.learn(groups)                        # prepare, advantages, update (see learn_on)
            train_s = time.perf_counter() - train_start
            if cfg.algorithm.reference_reset_every and step % cfg.algorithm.reference_reset_every == 0:
                learner.reset_reference()                    # ProRL: the reference moves to the policy
            run.publish_weights(step)

            metrics = {**rollout_metrics(groups, reward_fn), **stats,
                       **{k if k.startswith("async/") else f"sampling/{k}": v for k, v in sampler_metrics.items()}}
            if cfg.agent is not None:
                metrics.update(agent_metrics(groups))
            if cfg.distributed.backend == "ray":
                metrics["distributed/rollout_worker_restarts"] = float(run.rollout_restarts)
                metrics["distributed/weight_broadcast"] = float(run.engine.broadcasting)
            metrics.update(rollout_s=rollout_s, train_s=train_s, step_s=time.perf_counter() - step_start,
                           rollout_tokens_per_s=metrics["response_tokens"] / max(rollout_s, 1e-9),
                           train_tokens_per_s=stats["train_tokens"] / max(train_s, 1e-9))
            # every sampled token counts, including groups a sampler dropped (summed over ranks)
            spent = sampler_metrics.get("tokens_generated", metrics["response_tokens"])
            metrics = dp.mean_metrics(metrics)  # over data-parallel ranks (one rank: unchanged)
            run.tokens_spent += int(dp.sum_floats(spent)[0])
            metrics["rollout_tokens_total"] = float(run.tokens_spent)
            out_of_time = cfg.train.max_time_s is not None and \
                dp.sum_floats(float(time.perf_counter() - loop_start >= cfg.train.max_time_s))[0] > 0
            budget_done = (budget is not None and run.tokens_spent >= budget) or out_of_time
            run.faults = run.faults + 1 if math.isnan(stats["grad_norm"]) else 0  # all optimizer steps skipped
            if cfg.eval.every and step % cfg.eval.every == 0 and step < cfg.train.steps:
                metrics.update({f"eval/{k}": v for k, v in _eval_summary(run.evaluate(f"step_{step:06d}")).items()})
            rollouts.write(step, groups)
            sink.log(step, metrics)
            short = {"reward": metrics["reward_mean"], "acc": metrics["accuracy"],
                     "len": metrics["response_length_mean"], "entropy": metrics.get("entropy"),
                     "kl": metrics.get("kl"), "clip": metrics.get("clip_frac"), "step_s": metrics["step_s"]}
            line = format_metrics(short, CONSOLE_KEYS)
            progress.update(step, line, print_line=step % cfg.logging.console_every == 0)
            if step % cfg.logging.console_every == 0:
                heartbeat.printed()
            log.info("step %d %s", step, line)
            if dp.is_main():
                spread.observe(step, groups, chat=run.renderer.uses_chat)

            if run.faults >= cfg.train.max_fault_steps:
                path = run.checkpoint(step)
                raise TrainingError(
                    f"{run.faults} consecutive steps had a non-finite loss or gradient and were skipped; "
                    f"stopping. Checkpoint: {path}. Lower optim.lr or check the rewards for NaN"
                )
            saved = (cfg.checkpoint.every and step % cfg.checkpoint.every == 0) or step == cfg.train.steps \
                or budget_done
            if saved:
                run.checkpoint(step)
            if dp.sum_floats(float(signals.received is not None))[0] > 0:  # any rank was signalled
                if signals.received is None:
                    signals.received = signal.SIGTERM
                if not saved:
                    run.checkpoint(step)
                raise TrainingInterrupted(signals.received, step, run.run_dir)
            if budget_done:
                why = f"train.max_time_s={cfg.train.max_time_s}" if out_of_time else \
                    f"train.rollout_token_budget={budget}"
                console.print(escape(f"Budget reached at step {step} ({why}): {run.tokens_spent} tokens sampled"))
                break
    if last_step < cfg.train.steps and not budget_done:  # stopped early on request: leave a checkpoint to resume from
        if not (cfg.checkpoint.every and last_step % cfg.checkpoint.every == 0):
            run.checkpoint(last_step)
        return run.run_dir

    if dp.is_main():
        save_hf_dir(exportable(run.policy), run.tokenizer, run.run_dir / "final")
    dp.barrier()
    heartbeat.doing("evaluating the trained model (eval.after)" if cfg.eval.after else "finishing")
    after = run.evaluate("after") if cfg.eval.after else None
    if not dp.is_main():
        return run.run_dir
    if before is not None and after is not None:
        print_before_after(before, after, cfg.eval.ks)
    write_report(run.run_dir)
    console.print(f"Done. Run directory: [bold]{escape(str(run.run_dir))}[/bold]  "
                  + escape(f"(final model: {run.run_dir / 'final'}, report: {run.run_dir / 'report.html'})"))
    return run.run_dir


class SyncBatches:
    """Each step's batch, produced when it is needed by the configured batch sampler."""

    def __init__(self, run: Run):
        self.run = run

    def next(self, step: int, last_step: int) -> tuple[list[Group], dict[str, float]]:
        run, cfg = self.run, self.run.cfg
        if dp.world_size() > 1:  # every rank draws the same prompts and keeps every N-th one
            records = run.sampler.take(cfg.train.prompts_per_step)[dp.rank()::dp.world_size()]
            torch.manual_seed(step_seed(cfg.run.seed, step) + 7919 * dp.rank())
            return run.rollout(records, cfg.rollout.n), {}
        torch.manual_seed(step_seed(cfg.run.seed, step))
        ctx = StepContext(step=step, prompts_per_step=cfg.train.prompts_per_step, n=cfg.rollout.n,
                          rollout=run.rollout, score=lambda gs: run.reward_fn(gs, run.task), task=run.task,
                          engine=run.engine, renderer=run.renderer, params=run.params, policy=run.policy,
                          tokenizer=run.tokenizer, total_steps=cfg.train.steps)
        return run.sampler.next_batch(ctx)


def build_critic(cfg: Config, policy: Any, dtype: torch.dtype, device: torch.device) -> Critic | None:
    spec = cfg.algorithm.critic
    if spec is None:
        return None
    backbone = None
    if spec.kind == "separate":
        backbone = load_causal_lm(spec.path or cfg.model.path, dtype=dtype, device=device,
                                  trust_remote_code=cfg.model.trust_remote_code,
                                  key="algorithm.critic.path" if spec.path else "model.path")
    return Critic(spec, policy, backbone, device)


def learn_on(learner: Learner, groups: list[Group], pad_id: int) -> dict[str, float]:
    """The learner's part of a step: pad the groups into a batch, compute what the algorithm asks for (old/ref
    log-probs, values), the advantages (written back to each sample for logs) and the update."""
    batch = Batch.from_groups(groups, pad_id=pad_id)
    batch, inputs = learner.prepare(batch)
    advantages = learner.compute_advantages(batch, inputs)
    record_advantages(groups, advantages, batch)
    return learner.update(batch)


def record_advantages(groups: list[Group], advantages: torch.Tensor, batch: Batch) -> None:
    """Write each sample's advantage back (a float, or one value per response token) for logs and reports."""
    flat = [s for g in groups for s in g.samples]
    if advantages.dim() == 1:
        for sample, adv in zip(flat, advantages.tolist()):
            sample.advantage = adv
        return
    per_token = batch.advantages.detach().cpu()
    for row, sample in enumerate(flat):
        start = int(batch.prompt_lengths[row])
        sample.advantage = per_token[row, start : start + len(sample.response_ids)].tolist()


def rollout_metrics(groups: list[Group], reward_fn: RewardFunction) -> dict[str, float]:
    samples = [s for g in groups for s in g.samples]
    rewards = torch.tensor([s.reward for s in samples], dtype=torch.float64)
    lengths = torch.tensor([len(s.response_ids) for s in samples], dtype=torch.float64)
    metrics: dict[str, float] = {
        "reward_mean": float(rewards.mean()),
        "reward_std": float(rewards.std()) if len(samples) > 1 else 0.0,
        "accuracy": sum(bool(s.correct) for s in samples) / len(samples),
        "response_length_mean": float(lengths.mean()),
        "response_length_max": float(lengths.max()),
        "truncated_frac": sum(s.truncated for s in samples) / len(samples),
        "zero_std_frac": sum(len({s.reward for s in g.samples}) == 1 for g in groups) / len(groups),
        "response_tokens": float(lengths.sum()),
    }
    for name, _, _ in reward_fn.components:
        metrics[f"reward/{name}"] = sum(s.rewards.get(name, 0.0) for s in samples) / len(samples)
    metrics.update(reward_fn.last_metrics)
    metrics.update(non_finite_metrics(groups))  # samples scored 0 and excluded this step
    for reason, count in sorted(reward_fn.failures.items()):
        metrics[f"reward_failures/{reason}"] = float(count)
    return metrics


def _evaluate(cfg: Config, engine: Any, renderer: Any, task: Any, run_dir: Path, tag: str,
              generate: Any = None) -> dict[str, Any]:
    records = list(task.heldout)[: cfg.eval.size] if cfg.eval.size else list(task.heldout)
    params = SamplingParams(n=cfg.eval.n, temperature=cfg.eval.temperature or cfg.rollout.temperature,
                            top_p=cfg.rollout.top_p, top_k=cfg.rollout.top_k,
                            max_new_tokens=cfg.rollout.max_new_tokens, stop=list(cfg.rollout.stop))
    rng_state = torch.get_rng_state()
    torch.manual_seed(step_seed(cfg.run.seed, 10**9))  # evals use their own seed; training RNG untouched
    with ProgressReporter(f"eval ({tag})", len(records), cfg.logging.progress) as progress:
        result = evaluate(engine, renderer, task, records, params, cfg.eval.ks, generate=generate,
                          on_progress=lambda done, total: progress.update(done))
    torch.set_rng_state(rng_state)
    result["tag"] = tag
    write_results(result, run_dir / f"eval_{tag}.json")
    console.print(f"eval ({tag}): " + format_metrics(_eval_summary(result), tuple(_eval_summary(result))))
    return result


def saved_eval(run_dir: Path, tag: str) -> dict[str, Any] | None:
    """An evaluation a previous invocation of this run wrote (eval_<tag>.json), e.g. `before` after --resume."""
    path = Path(run_dir) / f"eval_{tag}.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        log.warning("could not read %s (%s); the before/after table is not printed", path, err)
        return None


def _eval_summary(result: dict[str, Any]) -> dict[str, float]:
    out = {f"pass@{k}": v for k, v in result["pass@k"].items()}
    out.update({f"maj@{k}": v for k, v in result.get("maj@k", {}).items() if k != "1"})
    out["mean_length"] = result["mean_length"]
    return out


def print_before_after(before: dict[str, Any], after: dict[str, Any], ks: list[int]) -> None:
    from rich.table import Table

    table = Table(title="Held-out evaluation: before vs after training")
    table.add_column("metric")
    table.add_column("before", justify="right")
    table.add_column("after", justify="right")
    table.add_column("change", justify="right")
    rows = [("pass@k", k) for k in ks] + [("maj@k", k) for k in ks if k > 1]
    for kind, k in rows:
        b, a = before.get(kind, {}).get(str(k)), after.get(kind, {}).get(str(k))
        if b is None or a is None:
            continue
        label = kind.replace("k", str(k))
        table.add_row(label, f"{100 * b:.1f}%", f"{100 * a:.1f}%", f"{100 * (a - b):+.1f} pts")
    table.add_row("mean length (tokens)", f"{before['mean_length']:.1f}", f"{after['mean_length']:.1f}",
                  f"{after['mean_length'] - before['mean_length']:+.1f}")
    console.print(table)
