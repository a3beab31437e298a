"""The lab's per-run metrics: one number per (arm, seed), read from the run directory after it finished.

A training arm's directory has metrics.jsonl (one line per step) and eval_after.json (the held-out evaluation
of the final policy); an evaluation-only arm has eval_after.json alone.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

WINDOW = 5  # steps averaged at each end of a run for the curve metrics


def _steps(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _eval(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "eval_after.json").read_text())


def _window_mean(steps: list[dict[str, Any]], key: str, last: bool) -> float:
    values = [s[key] for s in steps if isinstance(s.get(key), (int, float)) and math.isfinite(s[key])]
    if not values:
        return math.nan
    chosen = values[-WINDOW:] if last else values[:WINDOW]
    return statistics.fmean(chosen)


def entropy_final(run_dir: Path) -> float:
    """Mean policy entropy (nats per token) over the last steps."""
    return _window_mean(_steps(run_dir), "entropy", last=True)


def entropy_drop(run_dir: Path) -> float:
    """Entropy at the start minus entropy at the end (positive: it collapsed)."""
    steps = _steps(run_dir)
    return _window_mean(steps, "entropy", last=False) - _window_mean(steps, "entropy", last=True)


def wrong_length_growth(run_dir: Path) -> float:
    """Mean length (tokens) of wrong responses over the last steps minus over the first steps."""
    steps = _steps(run_dir)
    key = "response_length_wrong_mean"
    return _window_mean(steps, key, last=True) - _window_mean(steps, key, last=False)


def length_final(run_dir: Path) -> float:
    """Mean response length (tokens) over the last steps."""
    return _window_mean(_steps(run_dir), "response_length_mean", last=True)


def length_growth(run_dir: Path) -> float:
    """Mean response length (tokens) of the training samples over the last steps minus over the first steps."""
    steps = _steps(run_dir)
    key = "response_length_mean"
    return _window_mean(steps, key, last=True) - _window_mean(steps, key, last=False)


def _eval_length(run_dir: Path, key: str) -> float:
    value = _eval(run_dir).get("length", {}).get(key)
    return float(value) if isinstance(value, (int, float)) else math.nan


def eval_length(run_dir: Path) -> float:
    """Mean response length (tokens) of the held-out evaluation's samples."""
    return float(_eval(run_dir).get("mean_length", math.nan))


def right_length(run_dir: Path) -> float:
    """Mean length (tokens) of the held-out evaluation's right samples: the tokens a right answer costs."""
    return _eval_length(run_dir, "right_mean")


def wrong_length(run_dir: Path) -> float:
    """Mean length (tokens) of the held-out evaluation's wrong samples."""
    return _eval_length(run_dir, "wrong_mean")


def wrong_right_length_ratio(run_dir: Path) -> float:
    """Held-out wrong samples' mean length over right samples' (1.2: wrong answers are 20% longer)."""
    return wrong_length(run_dir) / right_length(run_dir)


def length_spread(run_dir: Path) -> float:
    """Held-out response length p90 over p10 (2.0: the long tenth is at least twice the short tenth)."""
    return _eval_length(run_dir, "p90") / _eval_length(run_dir, "p10")


def rollout_tokens(run_dir: Path) -> float:
    """Every response token sampled, counting groups a sampler dropped."""
    steps = _steps(run_dir)
    if not steps:
        return 0.0
    return float(steps[-1].get("rollout_tokens_total", sum(s.get("response_tokens", 0.0) for s in steps)))


def train_accuracy_final(run_dir: Path) -> float:
    """Training-batch accuracy over the last steps."""
    return _window_mean(_steps(run_dir), "accuracy", last=True)


def unsolved_frac(run_dir: Path) -> float:
    """Share of held-out problems with no correct sample among eval.n (1 - pass@n)."""
    problems = _eval(run_dir)["problems"]
    return sum(p["correct"] == 0 for p in problems) / max(len(problems), 1)


def mean_reward(run_dir: Path) -> float:
    """The held-out evaluation's mean reward (its accuracy when it records no reward); nan when neither."""
    result = _eval(run_dir)
    return float(result.get("mean_reward", result.get("accuracy", math.nan)))


def train_steps(run_dir: Path) -> list[dict[str, Any]]:
    return [s for s in _steps(run_dir) if "response_tokens" in s]  # evaluation lines carry no rollout


def updates(run_dir: Path) -> float:
    """Optimizer steps taken: training steps less those skipped (e.g. a batch with no signal)."""
    steps = train_steps(run_dir)
    return float(len(steps) - sum(s.get("skipped_optimizer_steps", 0.0) for s in steps))


def _sum(key: str) -> Callable[[Path], float]:
    def total(run_dir: Path) -> float:
        return float(sum(s.get(key, 0.0) for s in train_steps(run_dir)))
    total.__doc__ = f"The run's total of the per-step `{key}`."
    return total


def zero_std_frac(run_dir: Path) -> float:
    """Mean share of a step's groups whose rewards are all equal (no signal for a group-relative advantage)."""
    values = [s["zero_std_frac"] for s in train_steps(run_dir) if isinstance(s.get("zero_std_frac"), (int, float))]
    return statistics.fmean(values) if values else math.nan


def solve_rate(run_dir: Path) -> float:
    """A search evaluation's pass@1 of the searched answer (`rlvr eval ... search.name=...`)."""
    return float(_eval(run_dir)["solve_rate"])


def tokens_per_problem(run_dir: Path) -> float:
    """Tokens a search evaluation spent per problem."""
    return float(_eval(run_dir)["tokens_per_problem"])


METRICS: dict[str, Callable[[Path], float]] = {
    "entropy_final": entropy_final,
    "entropy_drop": entropy_drop,
    "wrong_length_growth": wrong_length_growth,
    "length_final": length_final,
    "length_growth": length_growth,
    "eval_length": eval_length,
    "right_length": right_length,
    "wrong_length": wrong_length,
    "wrong_right_length_ratio": wrong_right_length_ratio,
    "length_spread": length_spread,
    "rollout_tokens": rollout_tokens,
    "train_accuracy_final": train_accuracy_final,
    "unsolved_frac": unsolved_frac,
    "mean_reward": mean_reward,
    "solve_rate": solve_rate,
    "tokens_per_problem": tokens_per_problem,
    "updates": updates,
    "train_tokens": _sum("train_tokens"),
    "teacher_forward_tokens": _sum("teacher_forward_tokens"),
    "reference_forward_tokens": _sum("reference_forward_tokens"),
    "zero_std_frac": zero_std_frac,
}
# The work an arm did, tabulated for every training arm and checked against a declared budget.
WORK_METRICS = ("updates", "rollout_tokens", "train_tokens", "teacher_forward_tokens", "reference_forward_tokens")
# pass@K, maj@K (majority vote), rm@K (best-of-K by eval.select_model), and best_of@K: the arm's own selector's
# accuracy among K samples, rm@K when its evaluation has a reward model, else maj@K (a vote-vs-RM finding's
# arms then differ only in eval.select_model).
_AT_K = re.compile(r"(pass|maj|rm|best_of)@(\d+)$")


def metric_known(name: str) -> bool:
    return name in METRICS or _AT_K.match(name) is not None


def metric_k(name: str) -> int | None:
    """K of pass@K, maj@K, rm@K or best_of@K; None for other metrics."""
    m = _AT_K.match(name)
    return int(m[2]) if m else None


def is_rate(name: str) -> bool:
    """A metric that is a share of problems (shown in %): pass@K, maj@K, rm@K, best_of@K, solve_rate,
    unsolved_frac."""
    return _AT_K.match(name) is not None or name in ("solve_rate", "unsolved_frac")


def run_metric(name: str, run_dir: Path) -> float:
    """The value of metric `name` for one finished run (nan when the run did not record it)."""
    m = _AT_K.match(name)
    if m:
        result = _eval(run_dir)
        kind = m[1] if m[1] != "best_of" else ("rm" if "rm@k" in result else "maj")
        return float(result.get(f"{kind}@k", {}).get(m[2], math.nan))
    return float(METRICS[name](run_dir))
