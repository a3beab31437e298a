"""Held-out evaluation: n samples per prompt, pass@k, maj@k, accuracy, mean length, per-difficulty breakdown;
with a scorer (`eval.select_model`), rm@k (best-of-k by a reward model); for grounding tasks (a
`predicted_region`), GUI-RC's spatial vote (`region_vote`)."""

from __future__ import annotations

import hashlib
import json
import logging
import time

import numpy as np
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rlvr.eval.passk import best_of_k, maj_at_k, mean_pass_at_k
from rlvr.rewards import CorrectnessReward, RewardFunction
from rlvr.rewards.label_free.region import region_vote_hit
from rlvr.rollout.base import RolloutEngine, SamplingParams, rollout_groups
from rlvr.types import TaskRecord

log = logging.getLogger(__name__)

# Longer extracted answers (e.g. whole code blocks) are stored shortened; the vote itself uses the full text.
MAX_ANSWER_CHARS = 200


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
    generate: Callable[[Sequence[TaskRecord], SamplingParams], list] | None = None,
    scorer: Callable[[TaskRecord, list[str]], list[float]] | None = None,
) -> dict[str, Any]:
    """Sample `params.n` answers per record, verify them, and summarise. Nothing here trains.

    `generate(records, params)` makes the unrewarded groups (default: single-turn `rollout_groups`; an agent
    run passes its multi-turn rollout). `scorer(record, responses)` (a reward model) scores each sample; the
    result then has rm@k, the accuracy of the top-scored of k samples (`best_of_k`)."""
    if any(k > params.n for k in ks):
        raise ValueError(f"every k must be <= n={params.n}; got {list(ks)}")
    verify = RewardFunction([("correctness", 1.0, CorrectnessReward())])
    problems = []
    lengths: list[int] = []
    length_correct: list[bool] = []
    marker = getattr(task, "answer_after", None)  # a traversal-trained model: count its backtracks
    backtracks: list[tuple[int, bool, bool]] = []  # per sample: markers, final attempt correct, first correct
    started = time.perf_counter()
    for start in range(0, len(records), prompts_per_call):
        chunk = list(records[start : start + prompts_per_call])
        groups = generate(chunk, params) if generate else rollout_groups(engine, renderer, chunk, params)
        verify(groups, task)
        for g in groups:
            c = sum(bool(s.correct) for s in g.samples)
            answers = [s.meta.get("extracted") for s in g.samples]
            flags = [bool(s.correct) for s in g.samples]
            lengths.extend(len(s.response_ids) for s in g.samples)
            length_correct.extend(flags)
            if marker:
                backtracks += [_backtrack_record(s.text, bool(s.correct), marker, task, g.record) for s in g.samples]
            problem: dict[str, Any] = {
                "id": g.record.id,
                "difficulty": g.record.difficulty,
                "source": g.record.source,
                "n": len(g.samples),
                "correct": c,
                "truncated": sum(s.truncated for s in g.samples),
                # the verifier's scores summed: for graded rewards (IoU, partial credit) more than `correct` says
                "reward_sum": float(sum(s.reward for s in g.samples)),
                "example": g.samples[0].text[:500],
            }
            hit = region_vote_hit([s.text for s in g.samples], g.record, task)  # GUI-RC, grounding tasks only
            if hit is not None:
                problem["region_vote"] = hit
            # A correct sample without an extracted answer means the verifier reports none: no vote to count.
            if not any(ok and a is None for a, ok in zip(answers, flags)):
                vote = getattr(task, "vote_answer", None)  # the answers as a vote counts them (Task.vote_answer)
                if vote is not None:
                    answers = [vote(a, g.record) if a is not None else None for a in answers]
                problem["maj@k"] = {str(k): maj_at_k(answers, flags, k) for k in ks}
                problem["answers"] = [short_answer(a) for a in answers]
                problem["sample_correct"] = flags
            if scorer is not None:
                scores = [float(v) for v in scorer(g.record, [s.text for s in g.samples])]
                problem["rm@k"] = {str(k): best_of_k(scores, flags, k) for k in ks}
                problem["rm_scores"] = [round(v, 6) for v in scores]
                problem["sample_correct"] = flags
            problems.append(problem)
        if on_progress:
            on_progress(min(start + prompts_per_call, len(records)), len(records))
    verify.close()
    result = summarize(problems, ks, lengths, extra={
        "n": params.n, "temperature": params.temperature, "max_new_tokens": params.max_new_tokens,
        "seconds": round(time.perf_counter() - started, 2),
        "length": length_summary(lengths, length_correct),
    })
    if marker:
        result["backtracks"] = summarize_backtracks(backtracks, marker)
    return result


def _backtrack_record(text: str, correct: bool, marker: str, task: Any, record: TaskRecord
                      ) -> tuple[int, bool, bool]:
    """(markers in the response, its final attempt correct, its first attempt correct); the first attempt is
    graded only when there was a backtrack (else it is the final one)."""
    key = marker.strip()
    count = text.count(key)
    if not count:
        return 0, correct, correct
    first = text[: text.index(key)]
    try:
        first_ok = bool(task.verify(first, record).correct)
    except Exception:  # a verifier failure: count the first attempt as wrong, as the reward stage would
        first_ok = False
    return count, correct, first_ok


def summarize_backtracks(records: Sequence[tuple[int, bool, bool]], marker: str) -> dict[str, Any]:
    """How often responses backtrack (contain the marker) and whether it pays: the accuracy of the responses
    with and without a backtrack, and, among those with one, how often the first attempt was right and how
    often the final one is (wrong -> right: fixed; right -> wrong: broken)."""
    n = max(len(records), 1)
    back = [r for r in records if r[0] > 0]
    plain = [r for r in records if r[0] == 0]

    def acc(rs: Sequence[tuple[int, bool, bool]], i: int) -> float | None:
        return sum(r[i] for r in rs) / len(rs) if rs else None

    return {"marker": marker, "samples": len(records), "with_backtrack": len(back) / n,
            "mean_backtracks": sum(r[0] for r in records) / n,
            "accuracy_with_backtrack": acc(back, 1), "accuracy_without_backtrack": acc(plain, 1),
            "first_attempt_accuracy_with_backtrack": acc(back, 2),
            "fixed": sum(1 for r in back if r[1] and not r[2]), "broken": sum(1 for r in back if r[2] and not r[1])}


def short_answer(answer: str | None) -> str | None:
    """An answer as stored in the result: unchanged when short, else a prefix plus a hash of the full text, so
    that equal answers stay equal (and maj@k can be recomputed from the file) without storing whole programs."""
    if answer is None or len(answer) <= MAX_ANSWER_CHARS:
        return answer
    digest = hashlib.sha1(answer.encode("utf-8", "replace")).hexdigest()[:12]
    return f"{answer[: MAX_ANSWER_CHARS - 20]}...#{digest}"


def _problem_maj(p: dict[str, Any], k: int) -> float | None:
    """A problem's maj@k: the stored value, else computed from its answers; None when it has neither."""
    stored = p.get("maj@k", {}).get(str(k))
    if stored is not None:
        return float(stored)
    if p.get("answers") is not None and p.get("sample_correct") is not None and k <= len(p["answers"]):
        return maj_at_k(p["answers"], p["sample_correct"], k)
    return None


def _mean_maj(problems: list[dict[str, Any]], ks: Sequence[int]) -> dict[str, float] | None:
    """Mean maj@k per k, or None when some problem carries no answers (results from older versions)."""
    out = {}
    for k in ks:
        values = [_problem_maj(p, k) for p in problems]
        if not values or any(v is None for v in values):
            return None
        out[str(k)] = sum(values) / len(values)  # type: ignore[arg-type]
    return out


def _mean_rm(problems: list[dict[str, Any]], ks: Sequence[int]) -> dict[str, float] | None:
    """Mean rm@k per k (best-of-k by the reward model), or None unless every problem was scored."""
    if not problems or not all("rm@k" in p for p in problems):
        return None
    return {str(k): sum(p["rm@k"][str(k)] for p in problems) / len(problems) for k in ks}


def length_summary(lengths: Sequence[int], correct: Sequence[bool]) -> dict[str, float | None]:
    """Response lengths (tokens) over every sample: the 10th, 50th and 90th percentiles (linear interpolation)
    and the mean of right and of wrong samples (None when there are none)."""
    if not lengths:
        return {"p10": None, "p50": None, "p90": None, "right_mean": None, "wrong_mean": None}
    arr = np.asarray(lengths, dtype=float)
    ok = np.asarray(correct, dtype=bool)
    p10, p50, p90 = (float(v) for v in np.percentile(arr, [10, 50, 90]))
    return {"p10": p10, "p50": p50, "p90": p90,
            "right_mean": float(arr[ok].mean()) if ok.any() else None,
            "wrong_mean": float(arr[~ok].mean()) if (~ok).any() else None}


def summarize(problems: list[dict[str, Any]], ks: Sequence[int], lengths: list[int],
              extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Aggregate per-problem records (`n`, `correct`, optional `answers`/`sample_correct`) into the result.

    `maj@k` is included when every problem carries its extracted answers.
    """
    counts = [(p["n"], p["correct"]) for p in problems]
    total = sum(n for n, _ in counts)
    result: dict[str, Any] = {
        "num_prompts": len(problems),
        **(extra or {}),
        "pass@k": {str(k): mean_pass_at_k(counts, k) for k in ks},
    }
    maj = _mean_maj(problems, ks)
    if maj is not None:
        result["maj@k"] = maj
    rm = _mean_rm(problems, ks)
    if rm is not None:
        result["rm@k"] = rm
    votes = [p.get("region_vote") for p in problems]
    if votes and all(v is not None for v in votes):  # GUI-RC: the spatial vote of all n samples, per prompt
        result["region_vote"] = sum(votes) / len(votes)
    result.update({
        "accuracy": sum(c for _, c in counts) / max(total, 1),
        "mean_length": sum(lengths) / max(len(lengths), 1),
        "truncated_frac": sum(p["truncated"] for p in problems) / max(total, 1),
    })
    if problems and all("reward_sum" in p for p in problems):  # results from older versions have none
        result["mean_reward"] = sum(p["reward_sum"] for p in problems) / max(total, 1)
    for key in ("difficulty", "source"):
        buckets: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for p in problems:
            if p.get(key) not in (None, ""):
                buckets[str(p[key])].append(p)
        if len(buckets) > 1:
            result[f"by_{key}"] = {}
            for b, ps in sorted(buckets.items()):
                sub: dict[str, Any] = {"num_prompts": len(ps), "pass@k": {
                    str(k): mean_pass_at_k([(p["n"], p["correct"]) for p in ps], k) for k in ks}}
                sub_maj = _mean_maj(ps, ks)
                if sub_maj is not None:
                    sub["maj@k"] = sub_maj
                sub_rm = _mean_rm(ps, ks)
                if sub_rm is not None:
                    sub["rm@k"] = sub_rm
                result[f"by_{key}"][b] = sub
    result["problems"] = problems
    return result


def graded(result: dict[str, Any]) -> bool:
    """Whether the evaluation's verifier grades (IoU, partial credit): its mean reward is not its accuracy."""
    return result.get("mean_reward") is not None and abs(result["mean_reward"] - result["accuracy"]) > 1e-9


def write_results(result: dict[str, Any], path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(result, indent=2) + "\n")
    return p
