"""Choosing the searched answer without an oracle (search.select=value|vote), SFT rows from searched trees
(--sft-out), and the search plot in the report: hand-built trees and a scripted engine, then `rlvr sft` on the
rows with the built-in model."""

from __future__ import annotations

import json

import pytest

from rlvr.config import ConfigError, load_config
from rlvr.eval.search import (
    choose_answer,
    confidence,
    confidence_scores,
    evaluate_search,
    search_sft_row,
    vote_response,
)
from rlvr.rollout import SamplingParams
from rlvr.sampling.search import LeafRollout, SearchResult, SearchSettings, SearchStats
from rlvr.search import Budget, SearchTree, backup
from rlvr.tasks.base import Task
from rlvr.types import Sample, TaskRecord, VerifyResult

EOS = 9


def _value_tree():
    """root -> a [1, 2] -> leaf [3, EOS] (score 0.6), a's rollout [4, EOS] (0.9);
    root -> b [5] -> leaves [6, EOS] (0.95) and [7, EOS] (0.05). Q(a) = (0.6 + 0.9)/2 = 0.75, Q(b) = 0.5."""
    tree = SearchTree(Budget(max_nodes=10), [8])
    a, b = tree.add_children(tree.root, [([1, 2], -0.1), ([5], -0.2)])
    (a1,) = tree.add_children(a, [([3, EOS], -0.3)])
    b1, b2 = tree.add_children(b, [([6, EOS], -0.4), ([7, EOS], -0.5)])
    for leaf in (a1, b1, b2):
        leaf.terminal = True
    backup(a1, 0.6)
    backup(a, 0.9)  # a's rollout
    backup(b1, 0.95)
    backup(b2, 0.05)
    rollout = LeafRollout(node=a, token_ids=[4, EOS], logprobs=[-0.1, -0.1], reward=0.9)
    rewards = {(1, 2, 3, EOS): 0.6, (1, 2, 4, EOS): 0.9, (5, 6, EOS): 0.95, (5, 7, EOS): 0.05}
    return SearchResult(tree=tree, rollouts=[rollout], stats=SearchStats(), rewards=rewards)


def test_value_selection_descends_by_node_value_not_by_the_best_single_score():
    res = _value_tree()
    assert [c.value for c in res.tree.root.children] == pytest.approx([0.75, 0.5])
    # root: a (0.75) over b (0.5); at a: its rollout (0.9) over its leaf (0.6)
    assert res.value_response() == ([1, 2, 4, EOS], pytest.approx(0.9))
    # the verifier rule takes the highest score anywhere: b's leaf 0.95
    assert res.best_response() == ([5, 6, EOS], 0.95)
    assert [ids for ids, _ in res.complete_responses()] == [[1, 2, 3, EOS], [5, 6, EOS], [5, 7, EOS],
                                                            [1, 2, 4, EOS]]
    # a finished child reached on the way is the answer; ties keep the first option
    tree = SearchTree(Budget(max_nodes=5), [8])
    x, y = tree.add_children(tree.root, [([1, EOS], 0.0), ([2, EOS], 0.0)])
    x.terminal = y.terminal = True
    backup(x, 0.5)
    backup(y, 0.5)
    tie = SearchResult(tree=tree, rollouts=[], stats=SearchStats(), rewards={(1, EOS): 0.5, (2, EOS): 0.5})
    assert tie.value_response() == ([1, EOS], 0.5)
    empty = SearchResult(tree=SearchTree(Budget(max_nodes=3), [8]), rollouts=[], stats=SearchStats(), rewards={})
    assert empty.value_response() is None and choose_answer("value", [], result=empty) is None


class DigitsTask(Task):
    """Responses are token ids; the answer is the last id before EOS as text ('abstain' for id 0). Correct when
    it equals the record's answer. Counts verifier calls."""

    def __init__(self):
        super().__init__()
        self._train, self._heldout = [], []
        self.verified: list[str] = []

    def verify(self, response: str, record: TaskRecord) -> VerifyResult:
        self.verified.append(response)
        ok = self.extract_answer(response) == record.answer
        return VerifyResult(float(ok), ok, "ok" if ok else "wrong")

    def extract_answer(self, response: str) -> str | None:
        last = response.split()[-1] if response.split() else "0"
        return None if last == "0" else last


class Tok:
    eos_token_id = EOS

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(str(t) for t in ids if t != EOS)


def test_vote_is_the_plurality_answer_first_class_on_ties_abstentions_never_win():
    task = DigitsTask()
    cands = [([1, 0, EOS], 0.1), ([2, 7, EOS], 0.2), ([3, 7, EOS], 0.3), ([4, 8, EOS], 0.4), ([5, 0, EOS], 0.5)]
    answers = [task.extract_answer(Tok().decode(ids)) for ids, _ in cands]
    assert answers == [None, "7", "7", "8", None]
    # "7" has 2 of 5 votes (abstentions count in the denominator); its first response is the answer
    assert vote_response(cands, answers, task.answers_match) == ([2, 7, EOS], pytest.approx(2 / 5))
    tie = [([1, 8, EOS], 0.0), ([1, 7, EOS], 0.0), ([2, 7, EOS], 0.0), ([2, 8, EOS], 0.0)]
    assert choose_answer("vote", tie, task=task, decode=Tok().decode) == ([1, 8, EOS], 0.5)  # "8" seen first
    assert vote_response(cands[:1], [None], task.answers_match) is None
    # numbers compare as numbers (Task.answers_match): "7" and "7.0" are one class
    assert vote_response(cands[:3], ["7.0", "8", "7"], task.answers_match) == ([1, 0, EOS], pytest.approx(2 / 3))
    with pytest.raises(ValueError, match="search.select"):
        choose_answer("oracle", cands)


def test_confidence_is_the_geometric_mean_token_probability():
    assert confidence([]) == 0.0 and confidence(None) == 0.0
    assert confidence([-0.5, -1.5]) == pytest.approx(0.36787944)  # exp(-1)
    s = Sample(prompt_ids=[1], response_ids=[2, 3], logprobs=[0.0, 0.0])
    assert confidence_scores([s]) == [1.0]


class ScriptedEngine:
    """Every call returns `n` continuations cycled from the script for the prefix, each token's log-prob given
    per sequence; cut at '|' (id 6) when a stop is given, at EOS, and at max_new_tokens."""

    def __init__(self, script, prompt_len):
        self.script, self.prompt_len, self.eos_ids = script, prompt_len, [EOS]

    def generate(self, prompts, params):
        out = []
        for p in prompts:
            options = self.script[tuple(p[self.prompt_len:])]
            group = []
            for i in range(params.n):
                ids, lp = options[i % len(options)]
                ids = list(ids)[: params.max_new_tokens]
                if params.stop and 6 in ids:
                    ids = ids[: ids.index(6) + 1]
                group.append(Sample(prompt_ids=list(p), response_ids=ids, logprobs=[lp] * len(ids)))
            out.append(group)
        return out


class Renderer:
    def render(self, record):
        return [8], f"Q{record.id}="


def test_eval_by_value_and_vote_uses_the_verifier_only_on_the_chosen_answer():
    # sampling, 3 per call, budget 9 tokens: one call gives "1 1 EOS" (p = e^-2 per token), "2 2 EOS"
    # (p = e^-0.1), "1 1 EOS" again, 3 tokens each. Answer "1" is correct.
    script = {(): [([1, 1, EOS], -2.0), ([2, 2, EOS], -0.1)]}
    task, record = DigitsTask(), TaskRecord(id="r", question="q", answer="1")
    runs = {}
    for select in ("verifier", "value", "vote"):
        task.verified.clear()
        rows: list[dict] = []
        out = evaluate_search(ScriptedEngine(script, 1), Renderer(), task, [record], SamplingParams(max_new_tokens=4),
                              SearchSettings(strategy="sampling", max_tokens=9, branch=3, select=select), Tok(),
                              sft_rows=rows)
        runs[select] = (out, list(task.verified), rows)
    out, verified, rows = runs["verifier"]  # oracle: verifies while sampling and stops at the correct one
    assert out["solve_rate"] == 1.0 and out["problems"][0]["tokens"] == 3 and out["search"]["select"] == "verifier"
    assert rows[0]["response"] == "1 1" and rows[0]["correct"] is True
    out, verified, rows = runs["value"]  # no verifier while sampling: all 9 tokens; the confident "2" is chosen
    assert out["problems"][0]["tokens"] == 9 and out["problems"][0]["candidates"] == 3
    assert verified == ["2 2"] and out["solve_rate"] == 0.0
    assert rows[0]["value"] == pytest.approx(0.904837418) and rows[0]["correct"] is False  # exp(-0.1)
    out, verified, rows = runs["vote"]  # "1" has 2 of 3 votes
    assert verified == ["1 1"] and out["solve_rate"] == 1.0 and rows[0]["value"] == pytest.approx(2 / 3)


def test_search_eval_by_value_never_stops_at_a_verified_answer():
    # mcts: the root has one child "1 |", whose rollouts end "1 EOS" (correct, confident) — by value the search
    # spends its whole node budget instead of stopping at the first verified answer
    script = {(): [([1, 6], -0.1)], (1, 6): [([1, EOS], -0.1)]}
    task, record = DigitsTask(), TaskRecord(id="r", question="q", answer="1")
    settings = dict(strategy="mcts", max_tokens=100, branch=1, segment_tokens=4, delimiter="|")
    out = evaluate_search(ScriptedEngine(script, 1), Renderer(), task, [record], SamplingParams(max_new_tokens=8),
                          SearchSettings(**settings, select="value"), Tok())
    assert out["solve_rate"] == 1.0 and task.verified == ["1 6 1"]  # one verifier call, after the search
    p = out["problems"][0]
    assert p["nodes"] == 2 and p["tokens"] == 2 + 2 + 2  # root child, its rollout, then its terminal child
    assert p["answer"] == "1 6 1"


def test_sft_rows_are_the_best_leaf_and_rlvr_sft_reads_them(tmp_path):
    from rlvr.config import SFTConfig
    from rlvr.eval.run import write_sft_rows
    from rlvr.models import load_tokenizer
    from rlvr.trainer.sft import rollout_examples, tokenize_examples

    res = _value_tree()
    record = TaskRecord(id="p7", question="2+3", answer="5", difficulty=1)
    settings = SearchSettings(strategy="mcts", max_tokens=100)
    best = choose_answer("verifier", res.complete_responses(), result=res)
    row = search_sft_row(record, "2+3=", best, True, Tok(), settings)
    assert row == {"prompt": "2+3=", "response": "5 6", "correct": True, "value": 0.95, "prompt_id": "p7",
                   "answer": "5", "difficulty": 1, "search": "mcts", "select": "verifier", "step": 0, "length": 3}
    wrong = search_sft_row(TaskRecord(id="p8", question="1+1", answer="2"), "1+1=", ([1, 2, 3, EOS], 0.6), False,
                           Tok(), settings)
    path = write_sft_rows([row, wrong], tmp_path / "sft.jsonl")
    assert [json.loads(line) for line in path.read_text().splitlines()] == [row, wrong]
    assert rollout_examples(path)[0] == [("2+3=", "5 6")]  # correct_only keeps the verified answer
    assert rollout_examples(path, correct_only=False)[0] == [("2+3=", "5 6"), ("1+1=", "1 2 3")]
    # rlvr sft's shipped recipe reads the file: the verified row, tokenized as prompt + response + EOS with the
    # loss on the response (the built-in tokenizer)
    tok = load_tokenizer("builtin")
    cfg = load_config("recipes/search_sft.yaml", [f"data.path={path}"], schema=SFTConfig)
    examples, skipped = tokenize_examples(cfg, tok)
    prompt_ids = tok("2+3=")["input_ids"]
    assert skipped == 1 and examples == [(prompt_ids + tok("5 6", add_special_tokens=False)["input_ids"]
                                          + [tok.eos_token_id], len(prompt_ids))]


def test_eval_config_errors_name_the_option(tmp_path):
    from rlvr.eval.run import run_eval

    base = ["search.max_tokens=100"]
    with pytest.raises(ConfigError, match="--split train"):
        run_eval(load_config(None, ["search.name=mcts", *base]), "builtin", None, sft_out=tmp_path / "x.jsonl")
    with pytest.raises(ConfigError, match="--sft-out: SFT data is built from searched trees"):
        run_eval(load_config(None, []), "builtin", None, split="train", sft_out=tmp_path / "x.jsonl")
    with pytest.raises(ConfigError, match="--size"):
        run_eval(load_config(None, ["search.name=mcts", *base]), "builtin", None, split="train")
    with pytest.raises(ConfigError, match="--split"):
        run_eval(load_config(None, []), "builtin", None, split="test")
    with pytest.raises(ConfigError, match="search.select"):
        load_config(None, ["search.name=mcts", *base, "search.select=oracle"])


def test_training_refuses_an_answer_selection():
    from rlvr.trainer.run import _build_sampler

    cfg = load_config("recipes/grpo.yaml", ["search.name=mcts", "search.max_tokens=100", "search.select=vote"])
    with pytest.raises(ConfigError, match="search.select"):
        _build_sampler(cfg, [])


def test_report_plots_search_results_against_tokens(tmp_path):
    from rlvr.eval.report import write_report

    def result(name, select, budget, solved, tokens, **knobs):
        return {"search": {"name": name, "max_tokens": budget, "max_nodes": None, "branch": 2, "select": select,
                           **knobs}, "num_prompts": 10, "solve_rate": solved, "tokens_per_problem": tokens,
                "tokens_per_solved": tokens / solved, "problems": []}

    files = {"sampling_100": result("sampling", "verifier", 100, 0.5, 90.0),
             "sampling_200": result("sampling", "verifier", 200, 0.7, 150.0),
             "mcts_200": result("mcts", "verifier", 200, 0.6, 170.0, c=0.5),
             "mcts_w_200": result("mcts", "verifier", 200, 0.65, 190.0, c=0.5, widen=0.5),
             "mcts_vote_200": result("mcts", "vote", 200, 0.4, 200.0, c=0.5)}
    for tag, r in files.items():
        (tmp_path / f"search_{tag}.json").write_text(json.dumps(r))
    (tmp_path / "search_broken.json").write_text("{}")
    html = write_report(tmp_path).read_text()
    section = html[html.index('<section id="search">'):]
    section = section[: section.index("</section>")]
    assert section.count('data-plot="search_tokens"') == 1 and 'href="#search"' in html
    # one line per strategy and setting; the budgets are its points
    for label in ("sampling, by verifier", "mcts, by verifier", "mcts, by verifier, widen=0.5", "mcts, by vote"):
        assert f'class="legend">{label}</text>' in section, label
    assert section.count("<polyline") == 1  # only sampling has two budgets: one line; the rest are points
    assert "search_broken.json: not a search evaluation result" in html
    assert "70.0%" in section and "150" in section
    (tmp_path / "empty").mkdir()
    assert 'id="search"' not in write_report(tmp_path / "empty").read_text()  # no search results: no section
