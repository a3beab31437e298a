"""Held-out evaluation: n samples per prompt, pass@k, accuracy, mean length, per-difficulty breakdown."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rlvr.eval.passk import mean_pass_at_k
from rlvr.rewards import RewardFunction
from rlvr.rewards.base import CorrectnessReward
from rlvr.rollout.base import RolloutEngine, SamplingParams, rollout_groups
from rlvr.types import TaskRecord


def evaluate(
    engine: RolloutEngine,
    renderer: Any,
    task: Any,
    records: Sequence[TaskRecord],
    params: SamplingParams,
    ks: Sequence[int],
    *,
    prompts_per_call: int = 64,
    on_progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Sample `params.n` answers per record, verify them, and summarise. Nothing here trains."""
    if any(k > params.n for k in ks):
        raise ValueError(f"every k must be <= n={params.n}; got {list(ks)}")
    verify = RewardFunction([("correctness", 1.0, CorrectnessReward())])
    problems = []
    lengths: list[int] = []
    started = time.perf_counter()
    for start in range(0, len(records), prompts_per_call):
        chunk = list(records[start : start + prompts_per_call])
        groups = rollout_groups(engine, renderer, chunk, params)
        verify(groups, task)
        for g in groups:
            c = sum(bool(s.correct) for s in g.samples)
            lengths.extend(len(s.response_ids) for s in g.samples)
            problems.append({
                "id": g.record.id,
                "difficulty": g.record.difficulty,
                "source": g.record.source,
                "n": len(g.samples),
                "correct": c,
                "truncated": sum(s.truncated for s in g.samples),
                "example": g.samples[0].text[:500],
            })
        if on_progress:
            on_progress(min(start + prompts_per_call, len(records)), len(records))
    return summarize(problems, ks, lengths, extra={
        "n": params.n, "temperature": params.temperature, "max_new_tokens": params.max_new_tokens,
        "seconds": round(time.perf_counter() - started, 2),
    })


def summarize(problems: list[dict[str, Any]], ks: Sequence[int], lengths: list[int],
              extra: dict[str, Any] | None = None) -> dict[str, Any]:
    counts = [(p["n"], p["correct"]) for p in problems]
    total = sum(n for n, _ in counts)
    result: dict[str, Any] = {
        "num_prompts": len(problems),
        **(extra or {}),
        "pass@k": {str(k): mean_pass_at_k(counts, k) for k in ks},
        "accuracy": sum(c for _, c in counts) / max(total, 1),
        "mean_length": sum(lengths) / max(len(lengths), 1),
        "truncated_frac": sum(p["truncated"] for p in problems) / max(total, 1),
    }
    for key in ("difficulty", "source"):
        buckets: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for p in problems:
            if p.get(key) not in (None, ""):
                buckets[str(p[key])].append(p)
        if len(buckets) > 1:
            result[f"by_{key}"] = {
                b: {"num_prompts": len(ps), "pass@k": {str(k): mean_pass_at_k([(p["n"], p["correct"]) for p in ps], k)
                                                       for k in ks}}
                for b, ps in sorted(buckets.items())
            }
    result["problems"] = problems
    return result


def write_results(result: dict[str, Any], path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(result, indent=2) + "\n")
    return p
