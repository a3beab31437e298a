"""A reward from the user's own Python function: `rewards: [{name: python, function: my_rewards.py:score}]`.

The function is named as `path/to/file.py:function` or `module:function` and is checked (file, module and
name) when the config is loaded, so a typo stops the run before any compute, naming the key. It is called as

    score(response: str, record: TaskRecord) -> float | (float, reason) | dict

or, with `batched: true`, once per step as `score(responses: list[str], records: list[TaskRecord])`, returning
a list of those. `async def` functions are run to completion. A dict holds `reward`, and optionally `reason`,
`correct` (bool: sets the sample's correctness, e.g. for accuracy) and any number of named components (numbers),
logged each step as the mean `reward/python/<key>`. Several functions (`function: [a.py:f, b.py:g]`) are summed;
each function's value is logged as `reward/python/<function name>`.

Calls run in the verifier pool's forked worker processes (`rlvr.rewards.pool`), each under `timeout` seconds
(with `batched: true` the timeout covers the whole step's call). A function that raises, hangs, kills its
process or returns a wrong type gives the sample reward 0 with the reason; NaN or inf is scored 0 and the
sample left out of its group's statistics (as for every reward). Either way the run goes on, and the step's
counts are logged as `reward/python/failed` and `reward_failures/python: <kind>`.
"""

from __future__ import annotations

import asyncio
import inspect
import math
from collections import Counter
from typing import Annotated, Any

from pydantic import AfterValidator, Field

from rlvr.errors import ConfigError
from rlvr.rewards.base import REWARDS, RewardOutput
from rlvr.types import Group, VerifyResult

_FAILURE = "verifier_failure"


def _check_spec(spec: str) -> str:
    from rlvr.plugins import import_object

    try:
        fn = import_object(spec, "function")
    except ConfigError as err:  # the registry names the key (rewards[i].function); keep only the problem
        raise ValueError(err.problems[0].removeprefix("function: ")) from None
    if not callable(fn):
        raise ValueError(f"{spec} is a {type(fn).__name__}, not a function")
    return spec


def _check_specs(value: str | list[str]) -> str | list[str]:
    specs = [value] if isinstance(value, str) else value
    if not specs:
        raise ValueError("give at least one 'file.py:function' or 'module:function'")
    for spec in specs:
        _check_spec(spec)
    if not isinstance(value, str) and len({_short(s) for s in specs}) != len(specs):
        raise ValueError("two functions share a name; their values would be logged under the same key")
    return value


FunctionSpec = Annotated[str | list[str], AfterValidator(_check_specs)]


def _short(spec: str) -> str:
    """'dir/my_rewards.py:score' -> 'score' (the name a function's value is logged under)."""
    return spec.rpartition(":")[2].rpartition(".")[2]


def _call(fn: Any, *args: Any) -> Any:
    out = fn(*args)
    if inspect.isawaitable(out):
        out = asyncio.run(_awaited(out))
    return out


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def _number(value: Any) -> float | None:
    """A number (bool, int, float, numpy or torch scalar) as a float; None for anything else."""
    if isinstance(value, str | bytes) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _wrong_type(value: Any, why: str) -> VerifyResult:
    text = repr(value)
    text = text if len(text) <= 60 else text[:57] + "..."
    return VerifyResult(0.0, False, f"reward function error: wrong type: {why}; got {type(value).__name__} {text}", None,
                        {_FAILURE: "wrong_type"})


def to_result(value: Any) -> VerifyResult:
    """One returned value as a VerifyResult (components in `meta['components']`); a value of the wrong shape
    becomes reward 0 with `meta['verifier_failure'] = 'wrong_type'` and a reason saying what was expected."""
    expected = "expected a number, a (number, reason) pair or a dict with 'reward'"
    if isinstance(value, dict):
        if "reward" not in value:
            return _wrong_type(value, f"a dict needs a 'reward' key ({expected})")
        reward = _number(value["reward"])
        if reward is None:
            return _wrong_type(value["reward"], "dict['reward'] is not a number")
        components: dict[str, float] = {}
        for key, v in value.items():
            if key in ("reward", "reason", "correct"):
                continue
            number = _number(v)
            if number is None:
                return _wrong_type(v, f"component '{key}' is not a number")
            components[str(key)] = number
        correct = value.get("correct")
        meta: dict[str, Any] = {"components": components}
        if correct is not None:
            meta["correct"] = bool(correct)
        return VerifyResult(reward, bool(correct), str(value.get("reason", "")), None, meta)
    if isinstance(value, tuple):
        if len(value) != 2 or _number(value[0]) is None:
            return _wrong_type(value, expected)
        return VerifyResult(_number(value[0]), False, str(value[1]), None, {"components": {}})  # type: ignore[arg-type]
    number = _number(value)
    if number is None:
        return _wrong_type(value, expected)
    return VerifyResult(number, False, "", None, {"components": {}})


class UserFunctionJudge:
    """What the verifier pool calls: `verify(text, record)` runs the user's functions on one response (or, batched,
    on lists of them) and returns VerifyResult(s). It holds only the specs; the functions are looked up in the
    process that calls (a forked worker has the trainer's modules)."""

    def __init__(self, specs: list[str], batched: bool):
        self.specs, self.batched = specs, batched
        self._fns: list[Any] | None = None

    def functions(self) -> list[Any]:
        if self._fns is None:
            from rlvr.plugins import import_object

            self._fns = [import_object(s, "function") for s in self.specs]
        return self._fns

    def verify(self, text: Any, record: Any) -> Any:
        fns = self.functions()
        if not self.batched:
            return _combine([to_result(_call(fn, text, record)) for fn in fns], self.specs)
        per_fn = []
        for fn, spec in zip(fns, self.specs):
            out = _call(fn, list(text), list(record))
            if not isinstance(out, list | tuple) or len(out) != len(text):
                got = f"{type(out).__name__} of {len(out)}" if isinstance(out, list | tuple) else type(out).__name__
                bad = _wrong_type(out, f"{_short(spec)} (batched) must return a list of {len(text)} values, one "
                                  f"per response; got a {got}")
                per_fn.append([bad] * len(text))
            else:
                per_fn.append([to_result(v) for v in out])
        return [_combine([results[i] for results in per_fn], self.specs) for i in range(len(text))]


def _combine(results: list[VerifyResult], specs: list[str]) -> VerifyResult:
    """One function: its result. Several: the sum, each function's value a component under its name."""
    if len(results) == 1:
        return results[0]
    failed = [r for r in results if _FAILURE in r.meta]
    if failed:
        return failed[0]
    components: dict[str, float] = {}
    for r, spec in zip(results, specs):
        components[_short(spec)] = r.reward
        components.update({f"{_short(spec)}.{k}": v for k, v in r.meta.get("components", {}).items()})
    meta: dict[str, Any] = {"components": components}
    verdicts = [r.meta["correct"] for r in results if "correct" in r.meta]
    if verdicts:
        meta["correct"] = all(verdicts)
    reasons = "; ".join(f"{_short(s)}: {r.reason}" for r, s in zip(results, specs) if r.reason)
    return VerifyResult(sum(r.reward for r in results), bool(verdicts and all(verdicts)), reasons, None, meta)


@REWARDS.register("python")
class PythonReward:
    """The user's Python function(s) as a reward (see the module docstring). `function`: 'file.py:name' or
    'module:name', or a list of them (summed); `batched`: called once per step with lists; `workers` forked
    processes run the calls, each under `timeout` seconds (`workers: 0`: in this process, no timeout)."""

    def __init__(self, *, function: FunctionSpec, batched: bool = False,
                 workers: Annotated[int, Field(ge=0)] = 2, timeout: Annotated[float, Field(gt=0)] = 30.0):
        specs = [function] if isinstance(function, str) else list(function)
        self.judge = UserFunctionJudge(specs, batched)
        self.batched, self.workers, self.timeout = batched, workers, timeout
        self._pool: Any = None
        self._step: list[VerifyResult] = []

    def _results(self, texts: list[str], records: list[Any]) -> list[VerifyResult]:
        from rlvr.rewards.pool import VerifierPool

        if self._pool is None:
            self._pool = VerifierPool(self.judge, self.workers, self.timeout)
        if not self.batched:
            return self._pool.map(list(zip(texts, records)))
        out = self._pool.map([(texts, records)])[0]
        return out if isinstance(out, list) else [out] * len(texts)  # a failed batched call fails every sample

    def score_batch(self, groups: list[Group], task: Any) -> list[list[RewardOutput]]:
        pairs = [(s.text, g.record) for g in groups for s in g.samples]
        results = self._results([t for t, _ in pairs], [r for _, r in pairs]) if pairs else []
        self._step.extend(results)
        flat = []
        for v in results:
            failed = _FAILURE in v.meta
            reason = "reward function " + v.reason.removeprefix("verifier ") if failed and \
                v.reason.startswith("verifier ") else v.reason
            flat.append(RewardOutput(0.0 if failed else v.reward, reason, v.meta.get("correct"), failed=failed))
        out, i = [], 0
        for g in groups:
            out.append(flat[i : i + len(g.samples)])
            i += len(g.samples)
        return out

    def __call__(self, group: Group, task: Any) -> list[RewardOutput]:
        return self.score_batch([group], task)[0]

    def metrics(self) -> dict[str, float]:
        """This step's means of every returned component (over the samples that returned it), counts of the
        calls that failed, by kind (error, timeout, crash, wrong_type), the pool's calls per second and how many
        of its workers were replaced."""
        results, self._step = self._step, []
        out: dict[str, float] = {}
        sums: Counter[str] = Counter()
        counts: Counter[str] = Counter()
        kinds: Counter[str] = Counter()
        for v in results:
            if _FAILURE in v.meta:
                kinds[v.meta[_FAILURE]] += 1
                continue
            for key, value in v.meta.get("components", {}).items():
                if math.isfinite(value):
                    sums[key] += value
                    counts[key] += 1
        out.update({key: sums[key] / counts[key] for key in counts})
        if results:
            out["failed"] = float(sum(kinds.values()))
            out.update({f"failed_{kind}": float(n) for kind, n in kinds.items()})
        if self._pool is not None:
            stats = self._pool.stats()
            self._pool.reset_stats()
            out.update({"calls_per_s": stats.get("calls_per_s", 0.0), "worker_restarts": stats.get("restarts", 0)})
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
