"""Rewards: named components combined by weights into `Sample.reward`, each visible in the metrics.

A reward component is a registered class. Its keyword-only constructor parameters are its config knobs; a
positional `context` parameter, if it has one, receives a `RewardContext` (the policy and tokenizer, for
rewards computed from the model itself). An instance scores either one group at a time,
`component(group, task) -> list[RewardOutput]`, or a whole batch, `component.score_batch(groups, task)`, for
rewards that compare groups (Co-Reward). Components see whole groups so that label-free rewards (majority
vote) fit the same interface as per-sample verifiers.

A failure in one sample gives that sample 0 with the reason recorded; a failing component gives its samples
0; neither stops the run. Failures are counted by reason. A component value that is not a finite number (NaN,
inf) is logged with the sample and the component; that sample's reward is 0 and it is excluded (see
`Sample.excluded`): the learner leaves it out of its group's statistics and trains on it nowhere.

Gating (G-RA): a component with `gate: other` counts for a sample only when that sample's `other` reward is at
least `gate_threshold`.

Step rewards (process rewards, `rlvr.rewards.process`): a component may also return, per sample, the scores of
the response's reasoning steps with their character spans (`RewardOutput.steps`). The weighted step scores of
all such terms are mapped onto response tokens, each on its step's last token, and stored on the sample
(`Sample.step_rewards`, `Sample.step_ends`) for token-level advantages (`process_grpo`). A term with
`process_only: true` feeds only that channel: its scalar value is logged, not added to `reward`.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Protocol

from pydantic import Field

from rlvr.errors import RoleLost
from rlvr.registry import Registry
from rlvr.types import Group, VerifyResult

log = logging.getLogger(__name__)

REWARDS: Registry = Registry("reward")


@dataclass
class StepScore:
    """One reasoning step's score; `start`/`end` are character offsets of the step in the response text (end
    exclusive)."""

    start: int
    end: int
    score: float


@dataclass
class RewardOutput:
    value: float
    reason: str = ""
    correct: bool | None = None
    failed: bool = False  # the scorer raised; counted in the metrics by reason
    steps: list[StepScore] | None = None  # a step reward's per-step scores (None: not a step reward)


@dataclass
class RewardContext:
    """What model-based and label-free rewards may use besides the samples themselves."""

    policy: Any = None
    tokenizer: Any = None
    temperature: float = 1.0
    max_new_tokens: int = 256
    reward_learner: Any = None  # co_evolve: the run's trainable reward model (`score(rows) -> list[float]`)


class RewardComponent(Protocol):
    def __call__(self, group: Group, task: Any) -> list[RewardOutput]: ...


@REWARDS.register("correctness")
class CorrectnessReward:
    """The task's verifier: reward in [0, 1] and a reason per sample. Also sets `Sample.correct`.

    With `workers > 0` (the default) the whole batch is verified in a pool of forked worker processes, each call
    under `timeout` seconds: a verifier that raises, hangs or crashes costs that sample reward 0 with the reason,
    and a hung or dead worker is replaced. `workers: 0` verifies in this process (no timeout).
    """

    def __init__(self, *, workers: Annotated[int, Field(ge=0)] = 2, timeout: Annotated[float, Field(gt=0)] = 30.0):
        self.workers, self.timeout = workers, timeout
        self._pool: Any = None
        self._pool_task: Any = None
        self._remote = False  # the pool was handed in (Ray reward workers): keep it for every task
        self._flags: Counter[str] = Counter()  # verifier flags of the step's samples ("blocked", "anomaly")
        self._flaggable = 0  # samples whose verifier reports flags (code) in the step

    def use_pool(self, pool: Any) -> None:
        """Verify through `pool` (anything with `VerifierPool`'s map/stats/reset_stats/close), e.g. the Ray
        reward workers of `distributed.reward_workers`."""
        self.close()
        self._pool, self._remote = pool, True

    def _verify_all(self, pairs: list[tuple[str, Any]], task: Any) -> list[Any]:
        """VerifyResults for (text, record) pairs; failures become reward 0 with `meta['verifier_failure']`."""
        if self._remote:
            return self._pool.map(pairs)
        if self.workers > 0 and len(pairs) > 1:
            from rlvr.rewards.pool import VerifierPool

            if self._pool is None or self._pool_task is not task:
                self.close()
                self._pool, self._pool_task = VerifierPool(task, self.workers, self.timeout), task
            return self._pool.map(pairs)
        results = []
        for text, record in pairs:
            try:
                results.append(task.verify(text, record))
            except Exception as err:  # a verifier bug must cost one sample, not the run
                results.append(VerifyResult(0.0, False, f"verifier error: {type(err).__name__}: {err}", None,
                                            {"verifier_failure": "error"}))
        return results

    def score_batch(self, groups: list[Group], task: Any) -> list[list[RewardOutput]]:
        samples = [(s, g.record) for g in groups for s in g.samples]
        results = self._verify_all([(s.text, record) for s, record in samples], task)
        flat = []
        for (sample, record), v in zip(samples, results):
            sample.meta["extracted"] = v.extracted  # for majority votes (maj@k) and the rollout browser
            if "verifier_flag" in v.meta:  # code verifiers: did the program probe the judge?
                self._flaggable += 1
                if v.meta["verifier_flag"]:
                    self._flags[str(v.meta["verifier_flag"])] += 1
                    sample.meta["verifier_flag"] = v.meta["verifier_flag"]
            failed = "verifier_failure" in v.meta
            if failed:
                log.warning("%s (prompt %s)", v.reason, record.id)
            flat.append(RewardOutput(float(v.reward), v.reason, bool(v.correct), failed=failed))
        out, i = [], 0
        for g in groups:
            out.append(flat[i : i + len(g.samples)])
            i += len(g.samples)
        return out

    def __call__(self, group: Group, task: Any) -> list[RewardOutput]:
        return self.score_batch([group], task)[0]

    def metrics(self) -> dict[str, float]:
        out: dict[str, float] = {}
        if self._flaggable:  # reward-hacking telemetry: a policy probing the judge shows up as a rising curve
            blocked, anomaly = self._flags.get("blocked", 0), self._flags.get("anomaly", 0)
            out.update({"blocked_frac": blocked / self._flaggable, "anomaly_frac": anomaly / self._flaggable,
                        "hack_suspect_frac": (blocked + anomaly) / self._flaggable})
        self._flags, self._flaggable = Counter(), 0
        if self._pool is None:
            return out
        stats = self._pool.stats()
        self._pool.reset_stats()
        out.update({"verify_calls_per_s": stats.get("calls_per_s", 0.0), "verifier_timeouts": stats.get("timeouts", 0),
                    "verifier_crashes": stats.get("crashes", 0), "verifier_restarts": stats.get("restarts", 0)})
        if "actor_restarts" in stats:
            out["reward_worker_restarts"] = stats["actor_restarts"]
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool, self._remote = None, False


@dataclass
class RewardTerm:
    name: str
    weight: float
    component: Any
    gate: str | None = None
    gate_threshold: float = 1.0
    process_only: bool = False


def build_component(name: str, params: dict[str, Any], context: RewardContext | None, where: str) -> Any:
    cls = REWARDS.get(name)
    target = cls.__init__ if inspect.isclass(cls) else cls
    runtime = {"context": context or RewardContext()} if "context" in inspect.signature(target).parameters else {}
    return REWARDS.build(name, params, where=where, **runtime)


class RewardFunction:
    """The weighted (and optionally gated) sum of reward components: fills `rewards`, `reward` and `correct`
    of every sample; `last_metrics` holds the components' own statistics for the step."""

    def __init__(self, terms: Sequence[RewardTerm | tuple[str, float, Any]], tokenizer: Any = None):
        self.terms = [t if isinstance(t, RewardTerm) else RewardTerm(*t) for t in terms]
        self.failures: Counter[str] = Counter()
        self.last_metrics: dict[str, float] = {}
        self.tokenizer = tokenizer  # maps step character spans onto response tokens

    @property
    def components(self) -> list[tuple[str, float, Any]]:
        return [(t.name, t.weight, t.component) for t in self.terms]

    @classmethod
    def from_config(cls, specs: list[Any], context: RewardContext | None = None) -> RewardFunction:
        terms = []
        for i, s in enumerate(specs):
            component = build_component(s.name, s.params, context, f"rewards[{i}]")
            terms.append(RewardTerm(s.name, s.weight, component, getattr(s, "gate", None),
                                    getattr(s, "gate_threshold", 1.0), getattr(s, "process_only", False)))
        return cls(terms, tokenizer=context.tokenizer if context is not None else None)

    def close(self) -> None:
        """Release what components hold (worker processes)."""
        for t in self.terms:
            close = getattr(t.component, "close", None)
            if callable(close):
                close()

    @property
    def needs_paraphrases(self) -> bool:
        return any(getattr(t.component, "needs_paraphrases", False) for t in self.terms)

    @property
    def needs_shuffled_frames(self) -> bool:
        """T-GRPO: every prompt is also sampled with its clip's frames shuffled, as a contrast."""
        return any(getattr(t.component, "needs_shuffled_frames", False) for t in self.terms)

    def _score(self, term: RewardTerm, groups: list[Group], task: Any) -> list[list[RewardOutput]]:
        def fallback(err: Exception, group: Group) -> list[RewardOutput]:
            log.warning("reward '%s' failed on %s: %s", term.name, group.record.id, err)
            # correct=None: a broken shaping term must not overwrite the verifier's verdict
            return [RewardOutput(0.0, f"reward error: {type(err).__name__}: {err}", None, failed=True)
                    for _ in group.samples]

        batch_scorer = getattr(term.component, "score_batch", None)
        if batch_scorer is not None:
            try:
                outputs = batch_scorer(groups, task)
                if len(outputs) != len(groups):
                    raise ValueError(f"returned {len(outputs)} groups of rewards for {len(groups)} groups")
                for group, out in zip(groups, outputs):
                    if len(out) != len(group.samples):
                        raise ValueError(f"returned {len(out)} rewards for {len(group.samples)} samples")
                return outputs
            except RoleLost:  # a dead worker behind the reward (e.g. co_evolve's reward model actor) stops the run
                raise
            except Exception as err:
                return [fallback(err, g) for g in groups]
        results = []
        for group in groups:
            try:
                out = term.component(group, task)
                if len(out) != len(group.samples):
                    raise ValueError(f"returned {len(out)} rewards for {len(group.samples)} samples")
            except RoleLost:
                raise
            except Exception as err:
                out = fallback(err, group)
            results.append(out)
        return results

    def __call__(self, groups: list[Group], task: Any) -> None:
        scored = {t.name: self._score(t, groups, task) for t in self.terms}
        # a step reward ran when any of its outputs carries steps: then every sample gets a (maybe empty) list
        has_steps = any(o.steps is not None for out in scored.values() for group_out in out for o in group_out)
        self.last_metrics = {}
        for t in self.terms:
            stats = getattr(t.component, "metrics", None)
            if callable(stats):
                self.last_metrics.update({f"reward/{t.name}/{k}": float(v) for k, v in stats().items()})
        for g, group in enumerate(groups):
            for i, sample in enumerate(group.samples):
                values = {t.name: _finite(scored[t.name][g][i].value) for t in self.terms}
                step_terms: list[tuple[float, list[StepScore]]] = []
                non_finite = []
                total = 0.0
                for t in self.terms:
                    o = scored[t.name][g][i]
                    reason = o.reason
                    if values[t.name] is None:  # NaN, inf or not a number: this sample's reward is unknown
                        non_finite.append(t.name)
                        reason = f"non-finite reward {o.value!r}" + (f" ({o.reason})" if o.reason else "")
                        self.failures[f"{t.name}: non-finite"] += 1
                        log.warning("reward '%s' returned %r for sample %d of prompt %s (response %r); the sample "
                                    "is scored 0 and left out of its group's statistics", t.name, o.value, i,
                                    group.record.id, sample.text[:80])
                    sample.rewards[t.name] = values[t.name] or 0.0
                    sample.meta.setdefault("reasons", {})[t.name] = reason
                    if o.correct is not None:
                        sample.correct = o.correct
                    if o.failed:
                        self.failures[f"{t.name}: {_failure_kind(o.reason)}"] += 1
                    if t.gate is not None and (values[t.gate] or 0.0) < t.gate_threshold:
                        continue  # gated: this term only counts once the outcome passes
                    if o.steps is not None:
                        step_terms.append((t.weight, o.steps))
                    if not t.process_only:
                        total += t.weight * sample.rewards[t.name]
                if not non_finite and not math.isfinite(total):  # finite terms whose weighted sum overflows
                    non_finite.append("sum")
                    log.warning("the weighted reward sum is %r for sample %d of prompt %s; the sample is scored 0 "
                                "and left out of its group's statistics", total, i, group.record.id)
                if non_finite:
                    sample.meta["non_finite_reward"] = non_finite
                    sample.reward = 0.0
                else:
                    sample.meta.pop("non_finite_reward", None)
                    sample.reward = total
                if has_steps:
                    self._place_steps(sample, step_terms)

    def _place_steps(self, sample: Any, step_terms: list[tuple[float, list[StepScore]]]) -> None:
        """Sum the terms' weighted step scores on each step's last response token (see module docstring)."""
        if step_terms and self.tokenizer is None:
            raise ValueError("a step reward needs the tokenizer to map its steps onto tokens; build the "
                             "RewardFunction with RewardContext(tokenizer=...) (RewardFunction.from_config)")
        per_token: dict[int, float] = {}
        ends = token_char_ends(sample.response_ids, self.tokenizer) if step_terms else []
        for weight, steps in step_terms:
            for st in steps:
                if not ends or not math.isfinite(st.score):
                    continue
                token = next((k for k, e in enumerate(ends) if e >= st.end), len(ends) - 1)
                per_token[token] = per_token.get(token, 0.0) + weight * float(st.score)
        order = sorted(per_token)
        sample.step_ends = order
        sample.step_rewards = [per_token[k] for k in order]


def token_char_ends(response_ids: Sequence[int], tokenizer: Any) -> list[int]:
    """For each response token, the length of the decoded text up to and including it (as `Sample.text` is
    decoded: special tokens skipped). Token pieces decoded one by one are used when they add up to the whole
    text (byte-level tokenizers on ASCII, most text); otherwise every prefix is decoded (exact, slower)."""
    ids = list(response_ids)
    pieces = tokenizer.batch_decode([[i] for i in ids], skip_special_tokens=True)
    ends, total = [], 0
    for piece in pieces:
        total += len(piece)
        ends.append(total)
    if "".join(pieces) == tokenizer.decode(ids, skip_special_tokens=True):
        return ends
    prefixes = tokenizer.batch_decode([ids[: k + 1] for k in range(len(ids))], skip_special_tokens=True)
    return [len(p) for p in prefixes]


def _finite(value: Any) -> float | None:
    """`value` as a float if it is a finite number, else None."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def non_finite_metrics(groups: Sequence[Group]) -> dict[str, float]:
    """Per-step counts of samples whose reward was not a finite number (scored 0 and excluded)."""
    samples = [s for g in groups for s in g.samples]
    count = sum(s.excluded for s in samples)
    return {"reward_non_finite": float(count), "reward_non_finite_frac": count / max(len(samples), 1)}


def _failure_kind(reason: str) -> str:
    """'verifier error: ValueError: bad' -> 'ValueError'; 'verifier timeout after 3s' -> 'timeout'."""
    parts = [p.strip() for p in reason.split(":")]
    if len(parts) >= 3 and parts[0].endswith("error"):
        return parts[1]
    for kind in ("timeout", "crashed"):
        if kind in parts[0]:
            return kind
    return parts[0][:60] or "failed"
