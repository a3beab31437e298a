"""Search at evaluation: the searched answer's pass@1 and the tokens spent, against plain sampling at the same
token budget (`rlvr eval MODEL search.name=mcts|beam_prm|sampling search.max_tokens=B search.select=...`).

Per problem, a search (or budgeted sampling) collects complete responses and one of them is chosen as the
answer, by `search.select`:

    verifier  (oracle)  every complete response is scored by the task's verifier while searching; the search stops
                        at the first verified-correct one, and the answer is the highest-scored response
                        (`SearchResult.best_response`; for sampling: the first correct sample, best-of-N)
    value               no verifier while searching: a complete response is scored by the policy's own confidence,
                        c(y) = exp(mean_t log pi(y_t | x, y_<t)) (the geometric-mean token probability, from the
                        engine's log-probs), partial nodes by the mean c of their rollouts; the budget is spent in
                        full and the answer is found by descending the tree along the highest node value Q
                        (`SearchResult.value_response`; for sampling: the sample with the highest c)
    vote                no verifier while searching (values as for `value`); the answer is the plurality answer
                        over every complete response (finished leaves and rollouts; for sampling: all samples),
                        answers extracted and compared by the task (`extract_answer`, `answers_match`), the
                        first response of the winning answer on ties; responses without an answer never win

solved = the chosen answer is correct (the verifier checks only the chosen one, after the search, for value
and vote). Tokens spent = every token the engine generated for the problem (`SearchStats.tokens`; for sampling,
the samples' tokens).

With `search.prm=DIR` (a `rlvr prm` run's final/, loaded by `rlvr.sampling.search.load_search_prm`), partial nodes are valued by
the PRM's score of their last complete step instead of by rollouts (`rlvr.sampling.search.prm_step_value`);
with `search.prm_terminal=true` (select value or vote) complete responses are scored by the PRM as well, by
their weakest step (the `prm` reward's value), in place of the confidence c(y).

With `sft_rows`, each problem's chosen answer is also written as a training example in the rows `rlvr sft`
reads (`data.format=rollouts`: prompt, response, correct), for SFT on searched trajectories (ProMed,
R-MCTS's self-learning): `search_sft_row`. With `traversal` (`rlvr eval --sft-mode traversal`) the row's
response is instead the search's traversal, the dead ends it reached before the answer each followed by a
backtrack marker, then the answer (R-MCTS's exploratory learning; `rlvr.search.traversal`):
`search_traversal_row`.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from rlvr.rewards import CorrectnessReward, RewardFunction
from rlvr.sampling.search import (
    SearchResult,
    SearchSettings,
    build_action_policy,
    engine_prefix_cache,
    group_scorer,
    prm_step_value,
    search_prompt,
)
from rlvr.search.traversal import DEFAULT_BACKTRACK, linearize_traversal, traversal_ids, traversal_text
from rlvr.types import Group, Sample, TaskRecord

SELECTS = ("verifier", "value", "vote")
SFT_MODES = ("best", "traversal")
Candidate = tuple[list[int], float]  # a complete response's ids and its score


def confidence(logprobs: Sequence[float] | None) -> float:
    """exp(mean token log-prob): the geometric-mean probability the policy gave its own tokens (0 if none)."""
    if not logprobs:
        return 0.0
    return math.exp(sum(logprobs) / len(logprobs))


def confidence_scores(samples: list[Sample]) -> list[float]:
    """A label-free score of complete responses (no verifier): each sample's `confidence`."""
    return [confidence(s.logprobs) for s in samples]


def vote_response(candidates: Sequence[Candidate], answers: Sequence[str | None],
                  same: Callable[[str, str], bool]) -> Candidate | None:
    """The plurality answer's first response and the answer's vote share (votes / all candidates, abstentions
    included), or None when no candidate has an answer. Classes are formed in order with `same`; ties go to the
    class seen first."""
    classes: list[tuple[str, int, int]] = []  # (answer, first candidate index, votes)
    for i, a in enumerate(answers):
        if a is None or not str(a).strip():
            continue
        for j, (rep, first, votes) in enumerate(classes):
            if same(rep, a):
                classes[j] = (rep, first, votes + 1)
                break
        else:
            classes.append((a, i, 1))
    if not classes:
        return None
    _, first, votes = max(classes, key=lambda c: c[2])  # max keeps the first of equal counts
    return list(candidates[first][0]), votes / len(candidates)


def choose_answer(select: str, candidates: Sequence[Candidate], *, result: SearchResult | None = None,
                  task: Any = None, decode: Callable[[list[int]], str] | None = None) -> Candidate | None:
    """The answer among a search's (or sampling's) complete responses, by `select` (module docstring); the
    float is its score (verifier), node value (value) or vote share (vote)."""
    if not candidates:
        return None
    if select == "verifier":
        return result.best_response() if result is not None else max(candidates, key=lambda c: c[1])
    if select == "value":
        return result.value_response() if result is not None else max(candidates, key=lambda c: c[1])
    if select == "vote":
        if task is None or decode is None:
            raise ValueError("choose_answer: select=vote needs the task (to extract answers) and a decoder")
        answers = [task.extract_answer(decode(ids)) for ids, _ in candidates]
        return vote_response(candidates, answers, task.answers_match)
    raise ValueError(f"search.select: unknown '{select}'; expected one of {', '.join(SELECTS)}")


def search_sft_row(record: TaskRecord, prompt_text: str, answer: Candidate, correct: bool, tokenizer: Any,
                   settings: SearchSettings) -> dict[str, Any]:
    """One SFT example from a searched problem: the rendered prompt and the chosen response, as `rlvr sft` reads
    a run's rollouts (prompt, response, correct; `data.correct_only` keeps the verified ones)."""
    ids, value = answer
    return {"prompt": prompt_text, "response": tokenizer.decode(ids, skip_special_tokens=True),
            "correct": bool(correct), "value": float(value), "prompt_id": record.id, "answer": record.answer,
            "difficulty": record.difficulty, "search": settings.strategy, "select": settings.select, "step": 0,
            "length": len(ids)}


@dataclass
class TraversalSpec:
    """How `--sft-mode traversal` writes a row: the backtrack marker written after every dead end, at most
    `max_dead_ends` dead ends per row (the last ones before the answer), and where the SFT loss goes (`loss`):
    `all` the whole traversal is the response; `final` everything before the last marker is appended to the
    prompt (no loss on the dead ends), the response is the last marker + the answer. `{prompt}` in the marker
    is replaced by the row's rendered prompt (the question restated after each backtrack)."""

    backtrack: str = DEFAULT_BACKTRACK
    max_dead_ends: int = 2
    loss: str = "all"


def search_traversal_row(record: TaskRecord, prompt_text: str, attempts: Sequence[Candidate], answer: Candidate,
                         correct: bool, tokenizer: Any, settings: SearchSettings, spec: TraversalSpec,
                         tree: Any = None) -> dict[str, Any]:
    """One SFT example whose response is the search's traversal up to the chosen answer (`attempts`: the complete
    responses in visit order): the row of `search_sft_row` with `response` = dead ends + markers + answer, and
    a `traversal` record (segments, their scores, where each backtrack starts, what it returns to)."""
    ids = [list(a) for a, _ in attempts]
    final = ids.index(list(answer[0]))
    trav = linearize_traversal(attempts, final, max_dead_ends=spec.max_dead_ends, tree=tree)

    def decode(x: list[int]) -> str:
        return tokenizer.decode(x, skip_special_tokens=True)

    marker = spec.backtrack.replace("{prompt}", prompt_text)  # a marker may restate the question after it
    text, at = traversal_text(trav, decode, marker)
    marker_ids = tokenizer(marker, add_special_tokens=False)["input_ids"]
    row = search_sft_row(record, prompt_text, answer, correct, tokenizer, settings)
    prompt, response = prompt_text, text
    if spec.loss == "final" and at:  # the dead ends as context: the loss is on the last backtrack and the answer
        prompt, response = prompt_text + text[: at[-1]], text[at[-1]:]
    row.update(prompt=prompt, response=response, length=len(traversal_ids(trav, marker_ids)[0]),
               sft_mode="traversal", loss=spec.loss,
               traversal={"backtracks": trav.backtracks, "backtrack_at": at, "segment_rewards": trav.rewards,
                          "visits": trav.visits, "returns_to": trav.returns_to,
                          "return_depth": trav.return_depth, "dropped": trav.dropped,
                          "attempts": len(attempts), "answer": decode(trav.answer), "marker": marker})
    return row


def prm_complete_scores(prm: Any, task: Any, record: TaskRecord, prompt_ids: Sequence[int], tokenizer: Any
                        ) -> Callable[[list[Sample]], list[float]]:
    """`score(samples)` of complete responses by the PRM: the `prm` reward's value (the weakest step's
    score by default; 0 for a response without steps). No verifier."""

    def score(samples: list[Sample]) -> list[float]:
        for s in samples:
            s.text = tokenizer.decode(s.response_ids, skip_special_tokens=True)
        group = Group(record=record, prompt_ids=list(prompt_ids), samples=samples)
        return [float(o.value) for o in prm(group, task)]

    return score


def evaluate_search(engine: Any, renderer: Any, task: Any, records: Sequence[TaskRecord], params: Any,
                    settings: SearchSettings, tokenizer: Any,
                    on_progress: Callable[[int, int], None] | None = None,
                    sft_rows: list[dict[str, Any]] | None = None, prm: Any = None,
                    compare: Any = None, traversal: TraversalSpec | None = None) -> dict[str, Any]:
    """Search (or budgeted sampling) on every record; returns solve rate, tokens and per-problem details, and
    appends each problem's chosen answer to `sft_rows` when given (with `traversal`: the search's traversal up
    to it, `search_traversal_row`; needs select=verifier, whose scores say which attempts ended wrong). `prm`: the loaded `search.prm`
    (`load_search_prm`); it values partial nodes (and complete responses with `settings.prm_terminal`).
    `compare`: the loaded `search.compare` (`load_search_compare`), beam_prm's pairwise preference model."""
    if settings.prm is not None and prm is None:
        raise ValueError("evaluate_search: settings.prm is set; pass prm=load_search_prm(settings, tokenizer, task)")
    if settings.compare is not None and compare is None:
        raise ValueError("evaluate_search: settings.compare is set; pass compare=load_search_compare(settings, "
                         "tokenizer)")
    if traversal is not None and settings.select != "verifier":
        raise ValueError("--sft-mode traversal: a traversal's dead ends are the attempts the verifier scored "
                         f"wrong; use search.select=verifier (got {settings.select})")
    verify = RewardFunction([("correctness", 1.0, CorrectnessReward())])
    eos_ids = list(getattr(engine, "eos_ids", None) or [tokenizer.eos_token_id])
    oracle = settings.select == "verifier"
    action_policy = build_action_policy(settings, learn=False)  # policy_guided: frozen (search.policy_from)
    runtime = {"policy": action_policy} if action_policy is not None else None
    # the fast engine counts the prompt tokens it runs (not on its transformers fallback)
    prefilled = getattr(engine, "prefill_tokens", None) if getattr(engine, "supported", True) else None
    started = time.perf_counter()
    problems: list[dict[str, Any]] = []

    def decode(ids: list[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=True)

    for i, record in enumerate(records):
        prompt_ids, prompt_text = renderer.render(record)
        verifier, correct = _verifier(record, prompt_ids, tokenizer, verify, task)
        score = verifier if oracle else confidence_scores
        if prm is not None and settings.prm_terminal:
            score = prm_complete_scores(prm, task, record, prompt_ids, tokenizer)
        result = None
        if settings.strategy == "sampling":
            candidates, problem = _budgeted_sampling(engine, params, prompt_ids, settings, score, correct, oracle)
        else:
            node_prm = prm_step_value(prm, task, record, decode) if prm is not None else None
            calls = runtime
            if compare is not None:  # beam_prm: re-rank by the preference model, per problem (its score cache)
                question = task.plain_prompt(record) if hasattr(task, "plain_prompt") else record.question
                calls = {**(runtime or {}), "compare": compare.for_problem(question, decode)}
            result = search_prompt(engine, params, prompt_ids, settings, score, eos_ids, prm=node_prm,
                                   solved_at=1.0 if oracle else None, runtime=calls)
            candidates = result.complete_responses()
            problem = {"tokens": result.stats.tokens, "nodes": result.tree.nodes, "calls": result.stats.calls,
                       "leaves": len(result.tree.leaves(terminal_only=True)), "rollouts": len(result.rollouts)}
        answer = choose_answer(settings.select, candidates, result=result, task=task, decode=decode)
        solved = False
        if answer is not None:
            key = tuple(answer[0])
            if key not in correct:  # value / vote: the verifier sees only the chosen answer, after the search
                verifier([Sample(prompt_ids=list(prompt_ids), response_ids=list(answer[0]))])
            solved = correct[key]
            if sft_rows is not None and traversal is not None:
                attempts = result.attempts() if result is not None else candidates  # in visit order
                sft_rows.append(search_traversal_row(record, prompt_text, attempts, answer, solved, tokenizer,
                                                     settings, traversal,
                                                     tree=result.tree if result is not None else None))
            elif sft_rows is not None:
                sft_rows.append(search_sft_row(record, prompt_text, answer, solved, tokenizer, settings))
        problem.update(solved=solved, candidates=len(candidates),
                       answer=decode(answer[0])[:300] if answer is not None else None,
                       id=record.id, difficulty=record.difficulty)
        problems.append(problem)
        if on_progress:
            on_progress(i + 1, len(records))
    verify.close()
    out = summarize_search(problems, settings, params, seconds=time.perf_counter() - started)
    if action_policy is not None:  # the frozen policy's actions over every search (no update: lr 0)
        out["pgts"] = action_policy.update()
    if prefilled is not None:
        out["prefill_tokens"] = int(engine.prefill_tokens) - int(prefilled)
    return out


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
                       score: Callable[[list[Any]], list[float]], correct: dict[tuple[int, ...], bool],
                       stop_when_correct: bool) -> tuple[list[Candidate], dict[str, Any]]:
    """Samples, `settings.branch` per call, until `settings.max_tokens` are spent (or, with the verifier as
    `score`, until one is correct); returns them with their scores, and what was spent."""
    assert settings.max_tokens is not None
    spent, calls, candidates, solved = 0, 0, [], False
    with engine_prefix_cache(engine, settings.prefix_cache_mb):  # the prompt is prefilled once, not per call
        while spent < settings.max_tokens and not solved:
            outs = engine.generate([list(prompt_ids)], replace(params, n=settings.branch, stop=[]))[0]
            calls += 1
            for s, v in zip(outs, score(outs)):
                spent += len(s.response_ids)
                candidates.append((list(s.response_ids), float(v)))
                if stop_when_correct and correct.get(tuple(s.response_ids), False):
                    solved = True
                    break  # the samples after the first correct one would not have been needed
    return candidates, {"tokens": spent, "samples": len(candidates), "calls": calls}


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
                   "select": settings.select, "prm": settings.prm, "prm_terminal": settings.prm_terminal,
                   "compare": settings.compare,
                   "prefix_cache_mb": settings.prefix_cache_mb,
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
    select = s.get("select", "verifier")
    table = Table(title=f"{result.get('model', 'model')}: {s['name']} ({budget}, answer by {select}) on "
                        f"{result['num_prompts']} {result.get('split', 'heldout')} prompts, T={result['temperature']}")
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
    prefill = result.get("prefill_tokens")
    cache = "" if prefill is None else (f", {prefill} prompt tokens prefilled, prefix cache "
                                        f"{s.get('prefix_cache_mb', 0):g} MiB")
    console.print(f"({result['seconds']} s{cache})")
