"""Search at evaluation: the searched answer's pass@1 and the tokens spent, against plain sampling at the same
token budget (`rlvr eval MODEL search.name=mcts|beam_prm|sampling search.max_tokens=B`).

Per held-out problem:

    mcts / beam_prm   grow a tree (rlvr.sampling.search) whose leaf values are the task's verifier (terminal
                      leaves) and rollouts to the end (partial leaves), stopping once a complete response is
                      verified correct; the answer is the complete response (finished leaf or rollout) with the
                      highest reward (`SearchResult.best_response`); solved = that answer is correct
    sampling          independent samples, `search.branch` per engine call, until one is correct or the budget
                      is spent; solved = one of them is correct (best-of-N with the verifier)

Both use the verifier while searching, so both are "oracle-verifier" test-time compute: this compares how
efficiently they spend tokens, not answer selection without a verifier. Tokens spent = every token the engine
generated for the problem (`SearchStats.tokens`; for sampling, the samples' tokens).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from rlvr.rewards import CorrectnessReward, RewardFunction
from rlvr.sampling.search import SearchSettings, group_scorer, search_prompt
from rlvr.types import Group, TaskRecord


def evaluate_search(engine: Any, renderer: Any, task: Any, records: Sequence[TaskRecord], params: Any,
                    settings: SearchSettings, tokenizer: Any,
                    on_progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Search (or budgeted sampling) on every record; returns solve rate, tokens and per-problem details."""
    verify = RewardFunction([("correctness", 1.0, CorrectnessReward())])
    eos_ids = list(getattr(engine, "eos_ids", None) or [tokenizer.eos_token_id])
    started = time.perf_counter()
    problems: list[dict[str, Any]] = []
    for i, record in enumerate(records):
        prompt_ids, _ = renderer.render(record)
        score, correct = _verifier(record, prompt_ids, tokenizer, verify, task)
        if settings.strategy == "sampling":
            problem = _budgeted_sampling(engine, params, prompt_ids, settings, score, correct)
        else:
            res = search_prompt(engine, params, prompt_ids, settings, score, eos_ids, solved_at=1.0)
            best = res.best_response()
            answer = best[0] if best is not None else None
            problem = {"solved": bool(answer is not None and correct.get(tuple(answer), False)),
                       "tokens": res.stats.tokens, "nodes": res.tree.nodes, "calls": res.stats.calls,
                       "leaves": len(res.tree.leaves(terminal_only=True)), "rollouts": len(res.rollouts),
                       "answer": tokenizer.decode(answer, skip_special_tokens=True)[:300] if answer else None}
        problem.update(id=record.id, difficulty=record.difficulty)
        problems.append(problem)
        if on_progress:
            on_progress(i + 1, len(records))
    verify.close()
    return summarize_search(problems, settings, params, seconds=time.perf_counter() - started)


def _verifier(record: TaskRecord, prompt_ids: Sequence[int], tokenizer: Any, verify: RewardFunction, task: Any
              ) -> tuple[Callable[[list[Any]], list[float]], dict[tuple[int, ...], bool]]:
    """`score(samples)` by the task's verifier for one record, and the verdicts it has given so far."""
    correct: dict[tuple[int, ...], bool] = {}

    def reward_groups(groups: list[Group]) -> None:
        verify(groups, task)
        for s in groups[0].samples:
            correct[tuple(s.response_ids)] = bool(s.correct)

    return group_scorer(record, prompt_ids, tokenizer, reward_groups), correct


def _budgeted_sampling(engine: Any, params: Any, prompt_ids: Sequence[int], settings: SearchSettings,
                       score: Callable[[list[Any]], list[float]], correct: dict[tuple[int, ...], bool]
                       ) -> dict[str, Any]:
    """Samples, `settings.branch` per call, until one is correct or `settings.max_tokens` are spent."""
    assert settings.max_tokens is not None
    spent, calls, n, solved, answer = 0, 0, 0, False, None
    while spent < settings.max_tokens and not solved:
        outs = engine.generate([list(prompt_ids)], replace(params, n=settings.branch, stop=[]))[0]
        calls += 1
        score(outs)
        for s in outs:
            spent += len(s.response_ids)
            n += 1
            if correct.get(tuple(s.response_ids), False):
                solved, answer = True, s.text
                break  # the samples after the first correct one would not have been needed
    return {"solved": solved, "tokens": spent, "samples": n, "calls": calls,
            "answer": answer[:300] if answer else None}


def summarize_search(problems: list[dict[str, Any]], settings: SearchSettings, params: Any,
                     seconds: float = 0.0) -> dict[str, Any]:
    """Solve rate (pass@1 of the searched answer), tokens per problem and per solved problem, by difficulty."""

    def stats(ps: list[dict[str, Any]]) -> dict[str, Any]:
        solved = sum(p["solved"] for p in ps)
        tokens = sum(p["tokens"] for p in ps)
        return {"num_prompts": len(ps), "solve_rate": solved / max(len(ps), 1),
                "tokens_per_problem": tokens / max(len(ps), 1),
                "tokens_per_solved": tokens / solved if solved else None}

    result: dict[str, Any] = {
        "search": {"name": settings.strategy, "max_tokens": settings.max_tokens, "max_nodes": settings.max_nodes,
                   "branch": settings.branch, "segment_tokens": settings.segment_tokens,
                   "delimiter": settings.delimiter, "leaf_rollouts": settings.leaf_rollouts,
                   **settings.strategy_params},
        "temperature": params.temperature, "max_new_tokens": params.max_new_tokens, "seconds": round(seconds, 2),
        **stats(problems),
    }
    buckets: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for p in problems:
        if p.get("difficulty") not in (None, ""):
            buckets[str(p["difficulty"])].append(p)
    if len(buckets) > 1:
        result["by_difficulty"] = {b: stats(ps) for b, ps in sorted(buckets.items())}
    result["problems"] = problems
    return result


def print_search_result(result: dict[str, Any]) -> None:
    from rich.table import Table

    from rlvr.runtime import console

    s = result["search"]
    budget = f"max_tokens={s['max_tokens']}" + (f", max_nodes={s['max_nodes']}" if s["max_nodes"] else "")
    table = Table(title=f"{result.get('model', 'model')}: {s['name']} ({budget}) on {result['num_prompts']} "
                        f"held-out prompts, T={result['temperature']}")
    for col in ("slice", "solved (pass@1)", "tokens/problem", "tokens/solved"):
        table.add_column(col, justify="left" if col == "slice" else "right")

    def row(name: str, st: dict[str, Any]) -> None:
        per_solved = st["tokens_per_solved"]
        table.add_row(name, f"{100 * st['solve_rate']:.1f}%", f"{st['tokens_per_problem']:.0f}",
                      "-" if per_solved is None else f"{per_solved:.0f}")

    row("all", result)
    for b, st in result.get("by_difficulty", {}).items():
        row(f"difficulty={b}", st)
    console.print(table)
    console.print(f"({result['seconds']} s)")
