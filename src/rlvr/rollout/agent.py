"""Multi-turn agentic rollouts: the model acts, an environment (tools or a game) answers, until it is done.

    groups = agent_rollout_groups(engine, renderer, task, records, params, agent_cfg, step=s, total_steps=T)

Same output shape as `rollout_groups`: one Group per record with `params.n` Samples. Each turn, every
still-active episode of the batch generates together (one `engine.generate` call, n=1 each, stopping at the
environment's stop strings, e.g. `</tool_call>`, or EOS); then the environments step concurrently in a thread
pool (`tool_workers`), so one slow tool call costs at most its own timeout, not the sum over the batch.

Token in, token out: the model's tokens are appended exactly as sampled (with their behaviour log-probs,
loss mask 1); they are decoded only to let the environment read them, never re-encoded. Observations are
tokenized and appended with loss mask 0 and log-prob 0. The final Sample has
    prompt_ids   the original prompt
    response_ids every turn's tokens, observations included
    loss_mask    0 on observation tokens
    text         the model's last turn (what the task's verifier scores: the final answer)
    meta         tool_calls, tool_errors, turns, tool_latency_s, truncated (None, "max_turns",
                 "max_total_tokens" or "turn_tokens"), obs_truncated, env_reward, turn_rewards, calls,
                 turn_spans ([start, end) of each model turn in response_ids), transcript, and env_episode
                 (the `episode` dict of the environment's last `info`, e.g. a verifiers rubric's scores)
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from rlvr.rollout.base import RolloutEngine, SamplingParams
from rlvr.rollout.env import ENVIRONMENTS, Environment, StepResult
from rlvr.rollout.format import AgentFormat
from rlvr.rollout.tools import ToolSet, build_tool
from rlvr.types import Group, Sample, TaskRecord

if TYPE_CHECKING:
    from rlvr.config.agent import AgentConfig  # the schema lives above rollout; only its fields are read here

log = logging.getLogger(__name__)

TRUNCATION_REASONS = ("max_turns", "max_total_tokens", "turn_tokens")


# -- configuration ---------------------------------------------------------------------------------------


# The `agent:` config section (AgentConfig, EnvironmentSpec, ToolSpec) lives in rlvr/config/agent.py, which
# checks names against ENVIRONMENTS, TOOLS and TURN_BUDGETS; rollout does not import the config at run time.


def build_turn_budget(cfg: AgentConfig) -> Callable[[int, int], int] | None:
    if cfg.turn_budget is None:
        return None
    from rlvr.sampling import TURN_BUDGETS as registry  # a validated config named a registered schedule
    if inspect.isclass(registry.get(cfg.turn_budget)):
        obj = registry.build(cfg.turn_budget, cfg.turn_budget_params, where="agent.turn_budget")
        return getattr(obj, "budget", obj)
    return registry.bind(cfg.turn_budget, cfg.turn_budget_params, where="agent.turn_budget")


class EnvFactory:
    """Makes one fresh environment per episode; the tools are built once and shared (they are thread-safe)."""

    def __init__(self, cfg: AgentConfig):
        self.cfg = cfg
        self.toolset = ToolSet([build_tool(s.name, s.params, where=f"agent.tools[{i}]")
                                for i, s in enumerate(cfg.tools)])

    def __call__(self) -> Environment:
        spec = self.cfg.environment
        return ENVIRONMENTS.build(spec.name, spec.params, where="agent.environment", toolset=self.toolset)

    def close(self) -> None:
        self.toolset.close()


def build_env_factory(cfg: AgentConfig) -> EnvFactory:
    """Build the tools (fails here, before any compute, on a missing corpus, database or library)."""
    return EnvFactory(cfg)


# -- the rollout -----------------------------------------------------------------------------------------


@dataclass
class _Episode:
    group: int
    env: Environment
    prompt_ids: list[int]
    prompt_text: str
    response_ids: list[int] = field(default_factory=list)
    logprobs: list[float] | None = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    turn_spans: list[tuple[int, int]] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    turn_rewards: list[float] = field(default_factory=list)
    obs_truncated: int = 0
    policy_version: int | None = None
    episode: dict[str, Any] | None = None  # what the environment reported when the episode ended (info["episode"])
    done: bool = False
    finish_reason: str = "stop"
    truncated: str | None = None

    def end(self, finish_reason: str, truncated: str | None = None) -> None:
        self.done, self.finish_reason, self.truncated = True, finish_reason, truncated

    def append(self, ids: Sequence[int], logprobs: Sequence[float] | None, trained: bool) -> None:
        self.response_ids.extend(ids)
        self.loss_mask.extend([int(trained)] * len(ids))
        if self.logprobs is not None:
            if logprobs is None:
                self.logprobs = None  # one turn without behaviour log-probs: the learner recomputes them
            else:
                self.logprobs.extend(float(x) for x in logprobs)


def agent_rollout_groups(
    engine: RolloutEngine,
    renderer: Any,
    task: Any,
    records: Sequence[TaskRecord],
    params: SamplingParams,
    agent_cfg: AgentConfig,
    *,
    step: int = 0,
    total_steps: int = 0,
    env_factory: Callable[[], Environment] | None = None,
    turn_budget: Callable[[int, int], int] | None = None,
) -> list[Group]:
    """`params.n` multi-turn episodes per record, as one Group per record (see the module docstring).

    `renderer` supplies `tokenizer` and `uses_chat` (a `PromptRenderer`); `env_factory()` makes one environment
    per episode (default: built from `agent_cfg` for this call only; a trainer builds it once). `turn_budget`
    (default: `agent_cfg.turn_budget`) caps the turns at `budget(step, total_steps)`.
    """
    tokenizer = renderer.tokenizer
    fmt = AgentFormat(tokenizer, bool(getattr(renderer, "uses_chat", False)), tools_in_prompt=agent_cfg.tools_in_prompt)
    budget = turn_budget or build_turn_budget(agent_cfg)
    max_turns = agent_cfg.max_turns
    if budget is not None:
        max_turns = max(1, min(max_turns, int(budget(step, total_steps))))
    per_turn = agent_cfg.max_turn_tokens or params.max_new_tokens
    end_of_turn = set(getattr(engine, "eos_ids", None) or [int(tokenizer.eos_token_id)])
    own_factory = env_factory is None
    factory = build_env_factory(agent_cfg) if env_factory is None else env_factory

    episodes: list[_Episode] = []
    try:
        for gi, record in enumerate(records):
            for _ in range(params.n):
                env = factory()
                first = env.reset(record)
                ids, text = fmt.prompt(task, first, env.tool_schemas())
                episodes.append(_Episode(gi, env, ids, text))
        with ThreadPoolExecutor(max_workers=agent_cfg.tool_workers, thread_name_prefix="rlvr-env") as pool:
            for turn in range(max_turns):
                active = [e for e in episodes if not e.done]
                if not active:
                    break
                _generate_turn(engine, tokenizer, active, params, per_turn, agent_cfg.max_total_tokens)
                stepping = [e for e in active if not e.done]
                results = list(pool.map(_safe_step, [e.env for e in stepping], [e.texts[-1] for e in stepping]))
                for e, result in zip(stepping, results):
                    _apply(e, result, fmt, agent_cfg, end_of_turn, last_turn=turn == max_turns - 1)
    finally:
        for e in episodes:
            e.env.close()
        if own_factory:
            factory.close()  # type: ignore[attr-defined]
    return _to_groups(records, episodes, tokenizer)


def _generate_turn(engine: RolloutEngine, tokenizer: Any, active: list[_Episode], params: SamplingParams,
                   per_turn: int, max_total: int) -> None:
    """One engine call for every active episode; appends each model turn exactly as sampled."""
    rooms = [max_total - len(e.response_ids) for e in active]
    stops = list(dict.fromkeys([*params.stop, *(s for e in active for s in e.env.stop)]))
    gen = replace(params, n=1, max_new_tokens=max(1, min(per_turn, max(rooms))), stop=stops)
    outputs = engine.generate([e.prompt_ids + e.response_ids for e in active], gen)
    for e, room, out in zip(active, rooms, outputs):
        s = out[0]
        limit = min(per_turn, room)
        ids = list(s.response_ids)[:limit]
        logprobs = None if s.logprobs is None else list(s.logprobs)[:limit]
        start = len(e.response_ids)
        e.append(ids, logprobs, trained=True)
        e.turn_spans.append((start, len(e.response_ids)))
        e.texts.append(tokenizer.decode(ids, skip_special_tokens=True))  # read by the environment, never re-encoded
        if e.policy_version is None:
            e.policy_version = s.policy_version
        if len(s.response_ids) > limit or s.finish_reason == "length":
            e.end("length", "max_total_tokens" if len(e.response_ids) >= max_total else "turn_tokens")


def _safe_step(env: Environment, action: str) -> StepResult:
    try:
        return env.step(action)
    except Exception as err:  # an environment bug ends this episode, never the run
        log.warning("environment %s failed: %s: %s", type(env).__name__, type(err).__name__, err)
        return StepResult(f"Error: environment failed: {type(err).__name__}: {err}", 0.0, True,
                          {"env_error": f"{type(err).__name__}: {err}"})


def _apply(e: _Episode, result: StepResult, fmt: AgentFormat, cfg: AgentConfig, end_of_turn: set[int],
           last_turn: bool) -> None:
    observation, reward, done, info = result
    info = info or {}
    calls = list(info.get("calls", []))
    e.calls.extend(calls)
    if info.get("episode") is not None:
        e.episode = dict(info["episode"])
    errors = sum(not c.get("ok", False) for c in calls)
    e.turn_rewards.append(cfg.env_reward_scale * float(reward) - cfg.tool_error_penalty * errors - cfg.turn_penalty)
    if done:
        e.end("stop")
        return
    if last_turn:
        e.end("length", "max_turns")
        return
    role = e.env.observation_role
    outputs = list(info.get("tool_outputs") or [observation]) if role == "tool" else [observation]
    cut = [fmt.truncate(o, cfg.max_obs_tokens) for o in outputs]
    e.obs_truncated += sum(was_cut for _, was_cut in cut)
    obs_ids = fmt.observation_ids(role, [o for o, _ in cut], e.response_ids[-1] if e.response_ids else None,
                                  tuple(end_of_turn))
    if len(e.response_ids) + len(obs_ids) >= cfg.max_total_tokens:
        e.end("length", "max_total_tokens")  # no room left for the model to read it and answer
        return
    e.append(obs_ids, [0.0] * len(obs_ids), trained=False)


def _to_groups(records: Sequence[TaskRecord], episodes: list[_Episode], tokenizer: Any) -> list[Group]:
    by_group: list[list[_Episode]] = [[] for _ in records]
    for e in episodes:
        by_group[e.group].append(e)
    groups = []
    for record, eps in zip(records, by_group):
        samples = []
        for e in eps:
            errors = sum(not c.get("ok", False) for c in e.calls)
            samples.append(Sample(
                prompt_ids=list(e.prompt_ids), response_ids=e.response_ids, logprobs=e.logprobs,
                loss_mask=e.loss_mask, finish_reason=e.finish_reason, policy_version=e.policy_version or 0,
                text=e.texts[-1] if e.texts else "",
                meta={
                    "turns": len(e.texts), "tool_calls": len(e.calls), "tool_errors": errors,
                    "tool_latency_s": sum(float(c.get("latency_s", 0.0)) for c in e.calls),
                    "truncated": e.truncated, "obs_truncated": e.obs_truncated,
                    "env_reward": sum(e.turn_rewards), "turn_rewards": list(e.turn_rewards),
                    "calls": e.calls, "turn_spans": [list(s) for s in e.turn_spans],
                    "transcript": tokenizer.decode(e.response_ids, skip_special_tokens=False),
                    **({"env_episode": e.episode} if e.episode is not None else {}),
                },
            ))
        first = eps[0] if eps else None
        groups.append(Group(record=record, prompt_ids=list(first.prompt_ids) if first else [], samples=samples,
                            prompt_text=first.prompt_text if first else ""))
    return groups


# -- metrics ---------------------------------------------------------------------------------------------


def agent_metrics(groups: Sequence[Group]) -> dict[str, float]:
    """Per-episode agent statistics for the step's metrics (keys `agent/...`); empty for single-turn groups."""
    samples = [s for g in groups for s in g.samples if "turns" in s.meta]
    if not samples:
        return {}
    if any("episode" in s.meta for s in samples):  # an agent harness behind the endpoint
        from rlvr.rollout.harness import harness_metrics

        return harness_metrics(groups)
    n = len(samples)
    calls = [int(s.meta["tool_calls"]) for s in samples]
    errors = [int(s.meta["tool_errors"]) for s in samples]
    total_calls = sum(calls)
    latencies = [float(c.get("latency_s", 0.0)) for s in samples for c in s.meta.get("calls", [])]
    obs_tokens = sum(len(s.loss_mask) - sum(s.loss_mask) for s in samples)
    all_tokens = sum(len(s.response_ids) for s in samples)
    out = {
        "agent/turns_mean": sum(int(s.meta["turns"]) for s in samples) / n,
        "agent/turns_max": float(max(int(s.meta["turns"]) for s in samples)),
        "agent/tool_calls_mean": total_calls / n,
        "agent/tool_errors_mean": sum(errors) / n,
        "agent/tool_success_rate": (total_calls - sum(errors)) / total_calls if total_calls else 1.0,
        "agent/tool_use_frac": sum(c > 0 for c in calls) / n,
        "agent/multi_call_frac": sum(c > 1 for c in calls) / n,
        "agent/tool_latency_mean_s": sum(latencies) / len(latencies) if latencies else 0.0,
        "agent/tool_latency_max_s": max(latencies, default=0.0),
        "agent/tool_timeouts": float(sum(bool(c.get("timed_out")) for s in samples for c in s.meta.get("calls", []))),
        "agent/env_reward_mean": sum(float(s.meta.get("env_reward", 0.0)) for s in samples) / n,
        "agent/obs_token_frac": obs_tokens / all_tokens if all_tokens else 0.0,
        "agent/obs_truncated_frac": sum(int(s.meta.get("obs_truncated", 0)) > 0 for s in samples) / n,
        "agent/truncated_frac": sum(s.meta.get("truncated") is not None for s in samples) / n,
    }
    for reason in TRUNCATION_REASONS:
        out[f"agent/truncated/{reason}"] = sum(s.meta.get("truncated") == reason for s in samples) / n
    correct = [c for c, s in zip(calls, samples) if s.correct]
    if any(s.correct is not None for s in samples):
        out["agent/tool_calls_when_correct"] = sum(correct) / len(correct) if correct else 0.0
    return out
