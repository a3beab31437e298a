"""Everything in the config that looks at the plug-in registries (tasks, rewards, rollout engines,
environments and tools, sampling, algorithms). Each registry is imported inside the function that needs
it, so neither `import rlvr.config` nor the schema-only first validation pass imports a registry, and
hence no torch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlvr.config.base import ComponentSpec
from rlvr.config.consistency import coevolve_problems, combination_problems, reward_list_problems
from rlvr.config.search import search_problems

if TYPE_CHECKING:
    from rlvr.config.agent import AgentConfig, EnvironmentSpec, ToolSpec
    from rlvr.config.schema import Config


def _fill(spec: ComponentSpec, registry: Any, where: str) -> ComponentSpec:
    """Check `spec` against its registry entry and set every default it leaves out (raises RegistryError)."""
    for k, v in registry.resolve(spec.name, spec.params, where).items():
        setattr(spec, k, v)
    return spec


def resolve_components(cfg: Config) -> list[str]:
    """Check each pluggable section against its registry and fill in its defaults. Returns problems."""
    from rlvr.algorithms import ADVANTAGES, LOSSES
    from rlvr.registry import RegistryError
    from rlvr.rewards import REWARDS
    from rlvr.rollout import ENGINES
    from rlvr.sampling import SAMPLERS
    from rlvr.tasks import TASKS

    problems: list[str] = []

    def fill(spec: ComponentSpec, registry: Any, where: str) -> None:
        try:
            _fill(spec, registry, where)
        except RegistryError as err:
            problems.extend(str(err).splitlines())

    fill(cfg.task, TASKS, "task")
    fill(cfg.sampling, SAMPLERS, "sampling")
    fill(cfg.algorithm.advantage, ADVANTAGES, "algorithm.advantage")
    fill(cfg.algorithm.loss, LOSSES, "algorithm.loss")
    for i, r in enumerate(cfg.rewards):
        fill(r, REWARDS, f"rewards[{i}]")
    if cfg.rollout.engine not in ENGINES:
        problems.append(f"rollout.engine: unknown engine '{cfg.rollout.engine}'. Available: "
                        f"{', '.join(ENGINES.names())}")
    elif cfg.rollout.engine_options:
        if "batch_size" in cfg.rollout.engine_options:
            problems.append("rollout.engine_options.batch_size: set rollout.batch_size instead")
        try:
            ENGINES.resolve(cfg.rollout.engine, cfg.rollout.engine_options, "rollout.engine_options")
        except RegistryError as err:
            problems.append(str(err))
    problems.extend(reward_list_problems(cfg))
    problems.extend(_algorithm_problems(cfg))
    problems.extend(_process_reward_problems(cfg))
    problems.extend(combination_problems(cfg))
    problems.extend(coevolve_problems(cfg))
    problems.extend(search_problems(cfg))
    return problems


def _process_reward_problems(cfg: Config) -> list[str]:
    """Step rewards: an estimator that reads step scores needs a step reward, a step reward needs a task whose
    steps it can read, and `process_only` only makes sense on a step reward."""
    from rlvr.algorithms import ADVANTAGES
    from rlvr.algorithms.inputs import tensor_inputs
    from rlvr.rewards.process import STEP_HOOKS
    from rlvr.tasks import TASKS

    problems: list[str] = []
    step_rewards = [r.name for r in cfg.rewards if r.name in STEP_HOOKS]
    for i, r in enumerate(cfg.rewards):
        if r.process_only and r.name not in STEP_HOOKS:
            problems.append(f"rewards[{i}].process_only: only a step reward ({', '.join(STEP_HOOKS)}) has step "
                            f"scores to feed the token-level advantage; '{r.name}' has none; remove process_only")
        if r.name in STEP_HOOKS and cfg.task.name in TASKS:
            missing = [h for h in STEP_HOOKS[r.name] if not callable(getattr(TASKS.get(cfg.task.name), h, None))]
            if missing:
                problems.append(f"rewards[{i}]: the '{r.name}' step reward reads reasoning steps through task "
                                f"methods {', '.join(missing)}, which task '{cfg.task.name}' does not have; use "
                                "task addition or add them (see docs/reward-models.md#process-rewards)")
    name = cfg.algorithm.advantage.name
    if name in ADVANTAGES and "step_rewards" in tensor_inputs(ADVANTAGES.get(name)) and not step_rewards:
        problems.append(f"rewards: the '{name}' advantage uses per-step scores; add a step reward "
                        f"({', '.join(STEP_HOOKS)}) to rewards, e.g. {{name: step_rvr, weight: 1.0, "
                        "process_only: true}")
    return problems


def _algorithm_problems(cfg: Config) -> list[str]:
    """Cross-checks between the estimator, the loss and the algorithm options."""
    from rlvr.algorithms import ADVANTAGES, KL_ESTIMATORS, LOSSES
    from rlvr.algorithms.inputs import ADVANTAGE_INPUTS, LOSS_INPUTS, check_inputs, tensor_inputs

    a = cfg.algorithm
    problems: list[str] = []
    adv_inputs: list[str] = []
    if a.advantage.name in ADVANTAGES:
        fn = ADVANTAGES.get(a.advantage.name)
        problems += check_inputs(fn, ADVANTAGE_INPUTS, f"algorithm.advantage '{a.advantage.name}'")
        adv_inputs = tensor_inputs(fn)
        if getattr(fn, "needs_group", False) and cfg.rollout.n < 2:
            problems.append(
                f"rollout.n: the '{a.advantage.name}' advantage compares samples within each group, so it needs "
                f"rollout.n >= 2; got {cfg.rollout.n}"
            )
    if a.loss.name in LOSSES:
        problems += check_inputs(LOSSES.get(a.loss.name), LOSS_INPUTS, f"algorithm.loss '{a.loss.name}'")
    # an algorithm that grades tokens by a teacher needs one (model.teacher_path): say so at load
    for key, reg, name in (("advantage", ADVANTAGES, a.advantage.name), ("loss", LOSSES, a.loss.name)):
        if (name in reg and {"teacher_logprobs", "teacher_logits"} & set(tensor_inputs(reg.get(name)))
                and cfg.model.teacher_path is None):
            problems.append(f"model.teacher_path: algorithm.{key} '{name}' scores tokens by a teacher model's "
                            "log-probs; set model.teacher_path to a local checkpoint that shares the policy's "
                            "tokenizer (or builtin-teacher); see docs/distillation.md")
    if "token_rm_scores" in adv_inputs and cfg.model.token_rm_path is None:
        problems.append(f"model.token_rm_path: the '{a.advantage.name}' advantage weights tokens by a token-level "
                        "reward model; set model.token_rm_path to one (final/ of `rlvr prm` with loss.type=oreal, "
                        "e.g. recipes/prm_oreal.yaml); see docs/reward-models.md")
    if a.loss.name in LOSSES and "teacher_logits" in tensor_inputs(LOSSES.get(a.loss.name)):
        problems += _full_logits_problems(cfg)
    if "values" in adv_inputs and a.critic is None:
        problems.append(f"algorithm.critic: the '{a.advantage.name}' advantage needs a value model; set "
                        "algorithm.critic.kind=separate (its own backbone) or head (a value head on the policy)")
    if a.critic is not None and a.advantage.name in ADVANTAGES and "values" not in adv_inputs:
        problems.append(f"algorithm.critic: the '{a.advantage.name}' advantage does not use values; remove "
                        "algorithm.critic or use advantage gae")
    if a.kl_estimator not in KL_ESTIMATORS:
        problems.append(f"algorithm.kl_estimator: expected one of {', '.join(KL_ESTIMATORS)}; got {a.kl_estimator!r}")
    if a.reference_reset_every and a.kl_coef == 0:
        problems.append("algorithm.reference_reset_every: resetting the reference needs a KL term; set "
                        "algorithm.kl_coef > 0")
    if a.kl_target is not None and a.kl_coef == 0:
        problems.append("algorithm.kl_target: the adaptive KL controller starts from kl_coef; set kl_coef > 0")
    if a.entropy_target is not None and a.entropy_coef == 0:
        problems.append("algorithm.entropy_target: the entropy controller starts from entropy_coef; set "
                        "entropy_coef > 0")
    return problems


def _full_logits_problems(cfg: Config) -> list[str]:
    """A loss on full next-token distributions (GKD) runs on the learner's own path: what it cannot combine."""
    a, d, name = cfg.algorithm, cfg.distributed, cfg.algorithm.loss.name
    fix = "; see docs/distillation.md"
    problems = []
    for key, on in (("algorithm.kl_coef", a.kl_coef > 0), ("algorithm.entropy_coef", a.entropy_coef > 0),
                    ("algorithm.critic", a.critic is not None), ("algorithm.tis_cap", a.tis_cap is not None),
                    ("algorithm.top_entropy_ratio", a.top_entropy_ratio is not None)):
        if on:
            problems.append(f"{key}: loss '{name}' is the whole objective (the generalized JSD to the teacher); "
                            f"it takes no extra KL, entropy, critic, TIS or token-selection term, so unset {key}{fix}")
    if d.learner == "fsdp2":
        problems.append(f"distributed.learner: loss '{name}' does not run on a sharded learner yet; use ddp or a "
                        f"single process{fix}")
    if d.mode == "async":
        problems.append(f"distributed.mode: loss '{name}' runs with distributed.mode=sync only{fix}")
    return problems


def registry_for(path: tuple[str, ...]) -> Any:
    """The registry of a section that selects a component, by its path in `overrides._SWITCHABLE`."""
    from rlvr.algorithms import ADVANTAGES, LOSSES
    from rlvr.rewards import REWARDS
    from rlvr.rollout import ENGINES, ENVIRONMENTS, TOOLS
    from rlvr.sampling import SAMPLERS
    from rlvr.tasks import TASKS

    return {("task",): TASKS, ("sampling",): SAMPLERS, ("algorithm", "advantage"): ADVANTAGES,
            ("algorithm", "loss"): LOSSES, ("rewards", "*"): REWARDS, ("rollout",): ENGINES,
            ("agent", "environment"): ENVIRONMENTS, ("agent", "tools", "*"): TOOLS}[path]


# -- the agent section ----------------------------------------------------------------------------------


def bind_environment(spec: EnvironmentSpec) -> EnvironmentSpec:
    """Check `agent.environment` against ENVIRONMENTS and fill in its defaults (raises on a problem)."""
    from rlvr.rollout.env import ENVIRONMENTS

    return _fill(spec, ENVIRONMENTS, "environment")


def bind_tools(specs: list[ToolSpec]) -> list[ToolSpec]:
    """Check each of `agent.tools` against TOOLS and fill in its defaults (raises on a problem)."""
    from rlvr.rollout.tools import TOOLS

    return [_fill(s, TOOLS, f"tools[{i}]") for i, s in enumerate(specs)]


def check_agent(cfg: AgentConfig) -> None:
    """The agent section as a whole: the tools environment has tools, the turn budget is registered."""
    from rlvr.rollout.tools import TOOLS

    if cfg.environment.name == "tools" and not cfg.tools and cfg.harness is None:
        raise ValueError(f"tools: the 'tools' environment needs at least one tool; available: "
                         f"{', '.join(TOOLS.names())}")
    if cfg.turn_budget is not None:
        turn_budget_registry().resolve(cfg.turn_budget, cfg.turn_budget_params, "turn_budget")


def turn_budget_registry() -> Any:
    """The sampling stage's TURN_BUDGETS registry (`budget(step, total_steps) -> max turns`)."""
    import rlvr.sampling as sampling

    registry = getattr(sampling, "TURN_BUDGETS", None)
    if registry is None:
        raise ValueError("turn_budget: this rlvr has no turn-budget schedules (rlvr.sampling.TURN_BUDGETS); "
                         "remove agent.turn_budget")
    return registry
