"""SFT rows from whole search traversals (`rlvr eval --sft-mode traversal`, R-MCTS's exploratory learning): the
linearization of a hand-built tree with the built-in (byte-level) tokenizer, every field by hand; grading the final
attempt (`task.answer_after`); the JSONL round trip into `rlvr sft`; backtrack statistics; errors."""

from __future__ import annotations

import json

import pytest

from rlvr.config import ConfigError, load_config
from rlvr.eval.evaluate import _backtrack_record, summarize_backtracks
from rlvr.eval.search import TraversalSpec, evaluate_search, search_traversal_row
from rlvr.models import load_tokenizer
from rlvr.rollout import SamplingParams
from rlvr.sampling.search import LeafRollout, SearchResult, SearchSettings, SearchStats
from rlvr.search import Budget, SearchTree, linearize_traversal, traversal_ids, traversal_text
from rlvr.search.traversal import after_last_marker
from rlvr.tasks import build_task
from rlvr.tasks.base import TaskError
from rlvr.types import Sample, TaskRecord


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("builtin")


def _ids(tok, text):
    return list(tok(text, add_special_tokens=False)["input_ids"])


def _tree(tok):
    """Problem 2+3 (answer 5). root -> A '2+3=6;6|' (its rollout 'A:6', then its child 'A:7' EOS);
    root -> B '2+3=5;5|' -> B1 'A:4' EOS, B2 'A:5' EOS. Visit order: A's rollout (wrong), A1 (wrong), B1 (wrong),
    B2 (right: the search stops)."""
    eos = tok.eos_token_id
    tree = SearchTree(Budget(max_nodes=10), _ids(tok, "2+3="))
    a, b = tree.add_children(tree.root, [(_ids(tok, "2+3=6;6|"), -1.0), (_ids(tok, "2+3=5;5|"), -1.0)])
    (a1,) = tree.add_children(a, [(_ids(tok, "A:7") + [eos], -1.0)])
    b1, b2 = tree.add_children(b, [(_ids(tok, "A:4") + [eos], -1.0), (_ids(tok, "A:5") + [eos], -1.0)])
    for leaf in (a1, b1, b2):
        leaf.terminal = True
    roll = LeafRollout(node=a, token_ids=_ids(tok, "A:6") + [eos], logprobs=[-0.1] * 4, reward=0.0)
    rewards = {tuple(a.response_ids() + roll.token_ids): 0.0, tuple(a1.response_ids()): 0.0,
               tuple(b1.response_ids()): 0.0, tuple(b2.response_ids()): 1.0}
    return SearchResult(tree=tree, rollouts=[roll], stats=SearchStats(), rewards=rewards), (a, b, a1, b1, b2)


def test_linearize_a_hand_built_tree_every_field(tok):
    res, (a, b, a1, b1, b2) = _tree(tok)
    attempts = res.attempts()
    dec = [tok.decode(ids, skip_special_tokens=True) for ids, _ in attempts]
    assert dec == ["2+3=6;6|A:6", "2+3=6;6|A:7", "2+3=5;5|A:4", "2+3=5;5|A:5"]  # the visit order
    final = 3
    trav = linearize_traversal(attempts, final, max_dead_ends=2, tree=res.tree)
    # three dead ends before the answer, the last two kept
    assert trav.visits == [1, 2, 3] and trav.dropped == 1 and trav.backtracks == 2
    assert trav.segments == [list(attempts[i][0]) for i in (1, 2, 3)] and trav.answer == b2.response_ids()
    assert trav.rewards == [0.0, 0.0, 1.0]
    # segment 1 (B1) parts from A1 at the root; segment 2 (B2) parts from B1 after B's 8 tokens ('2+3=5;5|'),
    # though the two share 10 tokens ('2+3=5;5|A:')
    assert trav.returns_to == [0, 0, 8] and trav.return_depth == [0, 0, 1]
    text, at = traversal_text(trav, lambda ids: tok.decode(ids, skip_special_tokens=True))
    assert text == "2+3=6;6|A:7 <back> 2+3=5;5|A:4 <back> 2+3=5;5|A:5"
    assert at == [11, 30] and [text[i:i + 8] for i in at] == [" <back> "] * 2
    marker = _ids(tok, " <back> ")
    ids, pos = traversal_ids(trav, marker)
    eos = tok.eos_token_id
    # each segment keeps its EOS in ids (12 tokens: 11 characters + EOS); the marker is 8 byte tokens
    assert pos == [12, 32] and len(ids) == 12 + 8 + 12 + 8 + 12 and ids[pos[0]:pos[0] + 8] == marker
    assert ids[11] == eos and ids[-1] == eos
    # without the tree: the longest common token prefix stands in
    assert linearize_traversal(attempts, final).returns_to == [0, 4, 10]
    assert linearize_traversal(attempts, final).return_depth == [None, None, None]
    # the cap: 0 writes only the answer; a large cap keeps every dead end
    assert linearize_traversal(attempts, final, max_dead_ends=0).visits == [3]
    assert linearize_traversal(attempts, final, max_dead_ends=5).visits == [0, 1, 2, 3]
    # attempts after the answer are never written; duplicates and non-worse attempts are not dead ends
    dup = [attempts[0], attempts[0], (attempts[3][0], 1.0), ([7, 7], 1.0), attempts[3], attempts[2]]
    assert linearize_traversal(dup, 4, max_dead_ends=5).visits == [0, 4]
    with pytest.raises(ValueError, match="final=4"):
        linearize_traversal(attempts, 4)
    with pytest.raises(ValueError, match="max_dead_ends"):
        linearize_traversal(attempts, 0, max_dead_ends=-1)
    with pytest.raises(ValueError, match="non-space"):
        traversal_text(trav, str, "  ")


def test_traversal_row_jsonl_round_trip_into_rlvr_sft(tok, tmp_path):
    from rlvr.config import SFTConfig
    from rlvr.eval.run import write_sft_rows
    from rlvr.trainer.sft import rollout_examples, tokenize_examples

    res, _ = _tree(tok)
    record = TaskRecord(id="p1", question="2+3", answer="5", difficulty=1)
    settings = SearchSettings(strategy="mcts", max_tokens=100)
    answer = res.best_response()
    row = search_traversal_row(record, "2+3=", res.attempts(), answer, True, tok, settings, TraversalSpec(),
                               tree=res.tree)
    text = "2+3=6;6|A:7 <back> 2+3=5;5|A:4 <back> 2+3=5;5|A:5"
    assert row == {"prompt": "2+3=", "response": text, "correct": True, "value": 1.0, "prompt_id": "p1",
                   "answer": "5", "difficulty": 1, "search": "mcts", "select": "verifier", "step": 0,
                   "length": 52, "sft_mode": "traversal", "loss": "all",
                   "traversal": {"backtracks": 2, "backtrack_at": [11, 30], "segment_rewards": [0.0, 0.0, 1.0],
                                 "visits": [1, 2, 3], "returns_to": [0, 0, 8], "return_depth": [0, 0, 1],
                                 "dropped": 1, "attempts": 4, "answer": "2+3=5;5|A:5", "marker": " <back> "}}
    # --traversal-loss final: the dead ends join the prompt; the response is the last backtrack + the answer
    final = search_traversal_row(record, "2+3=", res.attempts(), answer, True, tok, settings,
                                 TraversalSpec(loss="final"), tree=res.tree)
    assert final["prompt"] == "2+3=2+3=6;6|A:7 <back> 2+3=5;5|A:4" and final["response"] == " <back> 2+3=5;5|A:5"
    assert final["loss"] == "final" and final["traversal"] == row["traversal"]
    # '{prompt}' in the marker restates the question after each backtrack
    again = search_traversal_row(record, "2+3=", res.attempts(), answer, True, tok, settings,
                                 TraversalSpec(backtrack="||{prompt}"), tree=res.tree)
    assert again["response"] == "2+3=6;6|A:7||2+3=2+3=5;5|A:4||2+3=2+3=5;5|A:5"
    assert again["traversal"]["marker"] == "||2+3=" and again["traversal"]["backtrack_at"] == [11, 28]
    path = write_sft_rows([row], tmp_path / "trav.jsonl")
    assert [json.loads(line) for line in path.read_text().splitlines()] == [row]
    assert rollout_examples(path)[0] == [("2+3=", text)]
    cfg = load_config("recipes/search_sft_traversal.yaml", [f"data.path={path}"], schema=SFTConfig)
    examples, skipped = tokenize_examples(cfg, tok)
    prompt = tok("2+3=")["input_ids"]
    assert skipped == 0 and examples == [(prompt + _ids(tok, text) + [tok.eos_token_id], len(prompt))]


def test_addition_grades_the_final_attempt_with_answer_after():
    plain = build_task("addition", {})
    task = build_task("addition", {"answer_after": "<back>"})
    record = TaskRecord(id="r", question="2+3", answer="5")
    right_last = "2+3=6;6|A:6 <back> 2+3=5;5|A:5"
    right_first = "2+3=5;5|A:5 <back> 2+3=6;6|A:6"
    unfinished = "2+3=5;5|A:5 <back> 2+3="
    assert task.verify(right_last, record).correct and not task.verify(right_first, record).correct
    # without the option a traversal is not gradable: the answer line runs on to the end of the line
    assert plain.verify(right_last, record).reason == "answer '6 <back> 2+3=5;5|A:5' is not a number"
    # an answer left in an abandoned attempt never counts
    assert task.verify(unfinished, record).reason == "wrong answer: got 3, expected 5"  # the last number
    assert task.extract_answer(right_first) == "6" and task.extract_answer("A:5") == "5"
    assert after_last_marker("x <back> y", " <back> ") == " y" and after_last_marker("x", "<back>") == "x"
    with pytest.raises((TaskError, ConfigError, ValueError), match="answer_after"):
        build_task("addition", {"answer_after": "  "})


def test_backtrack_statistics_by_hand():
    task = build_task("addition", {"answer_after": "<back>"})
    record = TaskRecord(id="r", question="2+3", answer="5")
    cases = ["2+3=5;5|A:5", "2+3=6;6|A:6 <back> 2+3=5;5|A:5", "2+3=5;5|A:5 <back> 2+3=6;6|A:6",
             "2+3=6;6|A:6 <back> 2+3=4;4|A:4 <back> 2+3=7;7|A:7"]
    recs = [_backtrack_record(t, bool(task.verify(t, record).correct), "<back>", task, record) for t in cases]
    assert recs == [(0, True, True), (1, True, False), (1, False, True), (2, False, False)]
    s = summarize_backtracks(recs, "<back>")
    assert s == {"marker": "<back>", "samples": 4, "with_backtrack": 0.75, "mean_backtracks": 1.0,
                 "accuracy_with_backtrack": pytest.approx(1 / 3), "accuracy_without_backtrack": 1.0,
                 "first_attempt_accuracy_with_backtrack": pytest.approx(1 / 3), "fixed": 1, "broken": 1}
    assert summarize_backtracks([], "<back>")["accuracy_with_backtrack"] is None


class _CharTok:
    """Characters as token ids (ord), EOS = 0."""

    eos_token_id = 0

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) for c in text]}

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(t) for t in ids if t != 0)


class _Engine:
    """Continuations cycled (across calls) from a script keyed by the response prefix; cut after '|' with a stop
    string."""

    eos_ids = [0]

    def __init__(self, script, prompt_len):
        self.script, self.prompt_len, self.drawn = script, prompt_len, 0

    def generate(self, prompts, params):
        out = []
        for p in prompts:
            options = self.script["".join(chr(t) for t in p[self.prompt_len:])]
            group = []
            for _ in range(params.n):
                ids = [ord(c) for c in options[self.drawn % len(options)]] + [0]
                self.drawn += 1
                if params.stop and ord("|") in ids:
                    ids = ids[: ids.index(ord("|")) + 1]
                ids = ids[: params.max_new_tokens]
                group.append(Sample(prompt_ids=list(p), response_ids=ids, logprobs=[-0.5] * len(ids)))
            out.append(group)
        return out


class _Renderer:
    def render(self, record):
        return [ord(c) for c in "2+3="], "2+3="


def test_evaluate_search_writes_traversal_rows_for_mcts_beam_prm_and_sampling():
    # the root proposes '6|' then '5|' (branch 2); under '6|' every completion is 'A:6' (wrong), under '5|' 'A:5'
    script = {"": ["6|A:6", "5|A:5"], "6|": ["A:6"], "5|": ["A:5"]}
    task = build_task("addition", {"answer_after": "<back>"})
    record = TaskRecord(id="r", question="2+3", answer="5")
    rows: list[dict] = []
    out = evaluate_search(_Engine(script, 4), _Renderer(), task, [record], SamplingParams(max_new_tokens=16),
                          SearchSettings(strategy="mcts", max_tokens=100, branch=2, delimiter="|", segment_tokens=8),
                          _CharTok(), sft_rows=rows, traversal=TraversalSpec())
    assert out["solve_rate"] == 1.0
    # mcts: expands the root into '6|' and '5|', steps into '6|' and rolls it out ('6|A:6', wrong), then expands
    # '5|' into its one child 'A:5' EOS ('5|A:5', right, the search stops): one dead end, one backtrack to the root
    assert rows[0]["response"] == "6|A:6 <back> 5|A:5" and rows[0]["correct"] is True
    assert rows[0]["traversal"]["returns_to"] == [0, 0] and rows[0]["traversal"]["return_depth"] == [0, 0]
    # beam_prm (width 1): scores '6|' and '5|' by one rollout each, '6|A:6' (wrong) then '5|A:5' (right): the same row
    rows = []
    evaluate_search(_Engine(script, 4), _Renderer(), task, [record], SamplingParams(max_new_tokens=16),
                    SearchSettings(strategy="beam_prm", strategy_params={"beam_width": 1}, max_tokens=100, branch=2,
                                   delimiter="|", segment_tokens=8), _CharTok(), sft_rows=rows,
                    traversal=TraversalSpec())
    assert rows[0]["response"] == "6|A:6 <back> 5|A:5" and rows[0]["traversal"]["return_depth"] == [0, 0]
    # sampling: the samples in order ('6|A:6', then '5|A:5': the first correct stops it), no tree
    rows = []
    evaluate_search(_Engine({"": ["6|A:6", "5|A:5"]}, 4), _Renderer(), task, [record],
                    SamplingParams(max_new_tokens=16), SearchSettings(strategy="sampling", max_tokens=100, branch=1),
                    _CharTok(), sft_rows=rows, traversal=TraversalSpec(backtrack=" ## ", max_dead_ends=1))
    assert rows[0]["response"] == "6|A:6 ## 5|A:5" and rows[0]["traversal"]["return_depth"] == [None, None]
    with pytest.raises(ValueError, match="search.select=verifier"):
        evaluate_search(_Engine(script, 4), _Renderer(), task, [record], SamplingParams(max_new_tokens=16),
                        SearchSettings(strategy="mcts", max_tokens=100, select="vote"), _CharTok(), sft_rows=[],
                        traversal=TraversalSpec())


def test_sft_mode_errors_name_the_option(tmp_path):
    from rlvr.eval.run import _check_marker, run_eval

    cfg = load_config(None, ["search.name=mcts", "search.max_tokens=100", "eval.size=2"])
    out = tmp_path / "x.jsonl"
    with pytest.raises(ConfigError, match="--sft-mode: expected best or traversal; got 'tree'"):
        run_eval(cfg, "builtin", None, split="train", sft_out=out, sft_mode="tree")
    with pytest.raises(ConfigError, match="--sft-mode traversal: writes SFT rows; add --sft-out"):
        run_eval(cfg, "builtin", None, split="train", sft_mode="traversal")
    with pytest.raises(ConfigError, match="--backtrack: only used with --sft-mode traversal"):
        run_eval(cfg, "builtin", None, split="train", sft_out=out, backtrack=" <b> ")
    with pytest.raises(ConfigError, match="--max-dead-ends: only used"):
        run_eval(cfg, "builtin", None, split="train", sft_out=out, max_dead_ends=1)
    with pytest.raises(ConfigError, match="--backtrack: the marker must contain"):
        run_eval(cfg, "builtin", None, split="train", sft_out=out, sft_mode="traversal", backtrack="  ")
    with pytest.raises(ConfigError, match="--max-dead-ends: expected >= 0"):
        run_eval(cfg, "builtin", None, split="train", sft_out=out, sft_mode="traversal", max_dead_ends=-1)
    with pytest.raises(ConfigError, match="--traversal-loss: only used"):
        run_eval(cfg, "builtin", None, split="train", sft_out=out, traversal_loss="final")
    with pytest.raises(ConfigError, match="--traversal-loss: expected all"):
        run_eval(cfg, "builtin", None, split="train", sft_out=out, sft_mode="traversal", traversal_loss="dead")
    vote = load_config(None, ["search.name=mcts", "search.max_tokens=100", "search.select=vote", "eval.size=2"])
    with pytest.raises(ConfigError, match="search.select: --sft-mode traversal"):
        run_eval(vote, "builtin", None, split="train", sft_out=out, sft_mode="traversal")

    class Lossy(_CharTok):
        def decode(self, ids, skip_special_tokens=True):
            return super().decode(ids).replace("<", "")

    _check_marker(_CharTok(), " <back> ")
    with pytest.raises(ConfigError, match="--backtrack: the tokenizer does not reproduce"):
        _check_marker(Lossy(), " <back> ")


def test_the_cli_passes_the_traversal_options(tmp_path):
    from typer.testing import CliRunner

    from rlvr.cli import app

    base = ["eval", "builtin", "--split", "train", "--size", "2", "search.name=mcts", "search.max_tokens=100",
            "--sft-out", str(tmp_path / "x.jsonl")]
    res = CliRunner().invoke(app, [*base, "--sft-mode", "traversal", "--traversal-loss", "dead"])
    assert res.exit_code != 0 and "--traversal-loss: expected all" in res.output
    res = CliRunner().invoke(app, [*base, "--max-dead-ends", "1"])
    assert res.exit_code != 0 and "--max-dead-ends: only used with --sft-mode traversal" in res.output
