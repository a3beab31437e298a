"""Cross-section rules that need no registry: which combinations of sections a run supports."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rlvr.config.schema import Config


def reward_list_problems(cfg: Config) -> list[str]:
    """The reward list: at least one, each once, gates naming another reward."""
    problems: list[str] = []
    if not cfg.rewards:
        problems.append("rewards: at least one reward component is needed")
    names = [r.name for r in cfg.rewards]
    for i, r in enumerate(cfg.rewards):
        if r.gate is not None and (r.gate not in names or r.gate == r.name):
            problems.append(f"rewards[{i}].gate: must name another reward in this list ({', '.join(names)}); "
                            f"got {r.gate!r}")
    if len(set(names)) != len(names):
        problems.append(f"rewards: each component may appear once; got {names}")
    return problems


def combination_problems(cfg: Config) -> list[str]:
    """Distributed, batching and LoRA options that do not go together."""
    problems: list[str] = []
    d = cfg.distributed
    if d.backend != "ray":
        if d.reward_workers:
            problems.append("distributed.reward_workers: reward workers are Ray actors; set distributed.backend=ray "
                            "(or reward_workers=0)")
        if d.reference_worker:
            problems.append("distributed.reference_worker: the reference worker is a Ray actor; set "
                            "distributed.backend=ray (or reference_worker=false)")
        if d.weight_sync != "object_store":
            problems.append("distributed.weight_sync: only Ray rollout workers receive weights; set "
                            "distributed.backend=ray (or weight_sync=object_store)")
        if d.learner_workers:
            problems.append("distributed.learner_workers: learner workers are Ray actors; set distributed.backend=ray "
                            "(or learner_workers=0; for a data-parallel learner without Ray, use torchrun)")
        if d.reward_model_worker:
            problems.append("distributed.reward_model_worker: the reward model worker is a Ray actor; set "
                            "distributed.backend=ray (or reward_model_worker=false)")
    if d.reward_model_worker and (cfg.coevolve is None or cfg.coevolve.mode != "co_evolve"):
        problems.append("distributed.reward_model_worker: it places co_evolve's reward model, and this run has none "
                        f"(coevolve.mode={cfg.coevolve.mode if cfg.coevolve else None}); set "
                        "reward_model_worker=false, or coevolve.mode=co_evolve")
    if d.learner_workers and d.reference_worker:
        problems.append("distributed.reference_worker: with distributed.learner_workers every learner rank holds "
                        "its own reference; set reference_worker=false")
    if d.reward_workers and "correctness" not in [r.name for r in cfg.rewards]:
        problems.append("distributed.reward_workers: the reward workers run the `correctness` verifier, and "
                        f"rewards has none ({', '.join(r.name for r in cfg.rewards)}); set reward_workers=0")
    if d.mode == "async" and d.backend != "ray":
        problems.append("distributed.mode: async needs separate rollout workers; set distributed.backend=ray")
    if cfg.sampling.name == "gkd" and cfg.sampling.params.get("off_policy") == "teacher":
        fix = "; or set sampling.off_policy=dataset (see docs/distillation.md)"
        if cfg.model.teacher_path is None:
            problems.append("model.teacher_path: sampling 'gkd' with off_policy=teacher samples the teacher on its "
                            f"off-policy steps; set model.teacher_path{fix}")
        if cfg.agent is not None:
            problems.append(f"sampling.off_policy: the teacher's samples are single-turn; agent runs are not done{fix}")
        if cfg.rollout.engine == "vllm":
            problems.append("rollout.engine: the teacher's samples come from an engine over the teacher in the "
                            f"controller's process, fast or hf (vllm is not wired for it); set rollout.engine=fast{fix}")
    if d.mode == "async" and cfg.sampling.name != "uniform":
        problems.append(f"distributed.mode: async generates batches ahead, so it works with sampling=uniform only; "
                        f"got sampling {cfg.sampling.name!r}")
    harness = cfg.agent.harness if cfg.agent is not None else None
    if cfg.rollout.mode == "openai_server" and harness is None:
        problems.append("rollout.mode: openai_server serves the policy to an agent harness; set "
                        "agent.harness=module:function (see docs/environments.md)")
    if harness is not None and cfg.rollout.mode != "openai_server":
        problems.append("agent.harness: a harness talks to the policy over HTTP; set rollout.mode=openai_server")
    if harness is not None and "harness" not in [r.name for r in cfg.rewards]:
        problems.append("rewards: the harness's reward is paid by the `harness` reward component (the task's "
                        "verifier when the harness returns None); add {name: harness} to rewards")
    if harness is not None and d.mode == "async":
        problems.append("distributed.mode: harness rollouts run synchronously; set distributed.mode=sync")
    if cfg.train.mini_batches > cfg.train.prompts_per_step:
        problems.append(
            f"train.mini_batches: mini-batches hold whole groups, so there can be at most "
            f"train.prompts_per_step={cfg.train.prompts_per_step} of them; got {cfg.train.mini_batches}"
        )
    if d.learner == "fsdp2":
        for bad, why in ((cfg.model.lora is not None, "model.lora (adapters are not sharded)"),
                         (cfg.algorithm.critic is not None, "algorithm.critic (the critic is not sharded)"),
                         (bool(cfg.algorithm.reference_reset_every),
                          "algorithm.reference_reset_every (the reset copies whole policy weights)"),
                         (d.backend == "ray", "distributed.backend=ray (rollout workers are Ray actors; the "
                          "sharded learner runs under torchrun)")):
            if bad:
                problems.append(f"distributed.learner: fsdp2 does not support {why}; use distributed.learner=ddp")
    if cfg.model.lora is not None:
        if cfg.algorithm.reference_reset_every:
            problems.append("model.lora: the reference reset (ProRL) copies full policy weights; unset "
                            "algorithm.reference_reset_every or train without LoRA")
        if cfg.algorithm.critic is not None and cfg.algorithm.critic.kind == "head":
            problems.append("model.lora: a value head on the adapted policy is not supported; use "
                            "algorithm.critic.kind=separate")
    return problems


def coevolve_problems(cfg: Config) -> list[str]:
    """A reward model that learns beside the policy: its labels come from the verifier, the `learned_rm` reward
    needs it, and its placement (the controller, or a Ray actor for co_evolve) must fit the run's."""
    problems: list[str] = []
    names = [r.name for r in cfg.rewards]
    co = cfg.coevolve
    if "learned_rm" in names and (co is None or co.mode != "co_evolve"):
        problems.append(f"rewards[{names.index('learned_rm')}]: learned_rm reads the run's co-evolving reward model; "
                        "set coevolve.mode=co_evolve (or score with a trained one: {name: reward_model, path: ...})")
    if co is None:
        return problems
    if co.self_reward is not None and co.mode != "spark":
        problems.append("coevolve.self_reward: label-free steps read the policy's own judgement, which only "
                        "coevolve.mode=spark trains; set coevolve.mode=spark or remove coevolve.self_reward")
    if "correctness" not in names:
        problems.append(f"coevolve.mode: {co.mode} learns from the verifier's labels, and rewards has no "
                        f"`correctness` ({', '.join(names)}); add {{name: correctness, weight: 0}} to log them "
                        "without training on them")
    return problems
