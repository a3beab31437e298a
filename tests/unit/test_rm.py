"""`rlvr rm`: the Bradley–Terry loss, pair reading and mining, a tiny real training, and the scorer loading it."""

from __future__ import annotations

import json
import math
import random

import pytest
import torch

from rlvr.config import RMConfig, load_config
from rlvr.rm import (
    RMDataError,
    bradley_terry_loss,
    mine_rollout_pairs,
    pair_accuracy,
    read_pairs,
    split_pairs,
)
from rlvr.rm.data import PreferencePair


def _sig(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def test_bradley_terry_loss_matches_hand_computed_values():
    c, r = torch.tensor([2.0, 0.0, -1.0]), torch.tensor([1.0, 0.0, 1.0])
    # -mean log sigmoid(r_c - r_r): differences 1, 0, -2
    expected = -(math.log(_sig(1.0)) + math.log(0.5) + math.log(_sig(-2.0))) / 3
    assert float(bradley_terry_loss(c, r)) == pytest.approx(expected, rel=1e-6)
    # Llama 2 margin: the chosen must win by m, so the differences become 1-0.5, 0-1, -2-0
    m = torch.tensor([0.5, 1.0, 0.0])
    expected_m = -(math.log(_sig(0.5)) + math.log(_sig(-1.0)) + math.log(_sig(-2.0))) / 3
    assert float(bradley_terry_loss(c, r, m)) == pytest.approx(expected_m, rel=1e-6)
    # centering adds coef * mean((r_c + r_r)^2) = 0.1 * (9 + 0 + 0) / 3
    assert float(bradley_terry_loss(c, r, None, 0.1)) == pytest.approx(expected + 0.3, rel=1e-6)
    # a huge gap neither overflows nor underflows
    assert float(bradley_terry_loss(torch.tensor([1e4]), torch.tensor([-1e4]))) == 0.0
    assert float(bradley_terry_loss(torch.tensor([-1e4]), torch.tensor([1e4]))) == pytest.approx(2e4)


def test_pair_accuracy_counts_ties_as_half():
    assert pair_accuracy(torch.tensor([1.0, 0.0, 2.0, 3.0]), torch.tensor([0.0, 0.0, 3.0, 1.0])) == 0.625
    assert math.isnan(pair_accuracy(torch.tensor([]), torch.tensor([])))


def _rollout(step, prompt, response, correct):
    return {"step": step, "prompt_id": prompt, "prompt": prompt, "response": response, "correct": correct,
            "reward": float(bool(correct))}


def test_pairs_mined_from_hand_made_rollouts(tmp_path):
    rows = [_rollout(1, "1+2=", "A:3", True), _rollout(1, "1+2=", "A:4", False), _rollout(1, "1+2=", "A:5", False),
            _rollout(2, "1+2=", "A:4", False),  # the same wrong answer again, at a later step: counted once
            _rollout(1, "2+2=", "A:4", True), _rollout(1, "2+2=", "A:4 ", True),  # only correct: no pair
            _rollout(1, "3+3=", "A:7", False),  # only incorrect: no pair
            _rollout(1, "5+5=", "A:10", None)]  # a label-free run: no verdict
    (tmp_path / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    pairs = mine_rollout_pairs(tmp_path)  # a run directory works as well as the file
    assert sorted((p.prompt, p.chosen, p.rejected) for p in pairs) == [("1+2=", "A:3", "A:4"), ("1+2=", "A:3", "A:5")]
    assert all(p.rendered and p.margin == 0.0 for p in pairs)
    assert len(mine_rollout_pairs(tmp_path / "rollouts.jsonl", max_pairs_per_prompt=1)) == 1


def test_mining_without_mixed_prompts_names_the_file_and_the_fix(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    path.write_text(json.dumps(_rollout(1, "1+1=", "A:2", True)) + "\n" + json.dumps(_rollout(1, "2+1=", "A:1", False))
                    + "\n")
    with pytest.raises(RMDataError, match=r"data.path: no prompt in .*rollouts.jsonl.* 1 only correct, 1 only "
                                          r"incorrect.*rollouts_per_step"):
        mine_rollout_pairs(path)


def test_bad_pair_files_give_clear_errors(tmp_path):
    with pytest.raises(RMDataError, match="data.path: file .*missing.jsonl' not found"):
        read_pairs(tmp_path / "missing.jsonl")
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text(json.dumps({"question": "q", "good": "a", "rejected": "b"}) + "\n")
    with pytest.raises(RMDataError, match="data.chosen_column: column 'chosen' not in .*columns are: good, question, "
                                          "rejected"):
        read_pairs(wrong)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(RMDataError, match="has no readable rows"):
        read_pairs(empty)
    nulls = tmp_path / "nulls.jsonl"
    nulls.write_text(json.dumps({"chosen": None, "rejected": "b"}) + "\n")
    with pytest.raises(RMDataError, match="no row with text 'chosen' and 'rejected'"):
        read_pairs(nulls)


def test_pairs_file_with_prompt_and_margin_and_a_prompt_level_split(tmp_path):
    path = tmp_path / "pairs.jsonl"
    rows = [{"prompt": f"q{i % 5}", "chosen": "a", "rejected": "b", "margin": 1.5} for i in range(20)]
    rows.append({"chosen": "whole text a", "rejected": "whole text b"})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    pairs = read_pairs(path)
    assert pairs[0] == PreferencePair("q0", "a", "b", 1.5) and pairs[-1] == PreferencePair(None, "whole text a",
                                                                                           "whole text b", 0.0)
    train, held = split_pairs(pairs, 0.4, seed=0)
    assert len(train) + len(held) == len(pairs) and held
    assert not {p.prompt for p in train if p.prompt} & {p.prompt for p in held if p.prompt}
    assert split_pairs(pairs, 0.4, seed=0) == (train, held)  # seeded


def _sum_pairs(n: int, seed: int) -> list[dict]:
    """An easy preference: the right sum over one that is hundreds off (a tell a few steps can learn)."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        wrong = a + b + rng.choice([300, 500, 700])
        rows.append({"prompt": f"{a}+{b}=", "chosen": f"A:{a + b}", "rejected": f"A:{wrong}"})
    return rows


def test_tiny_rm_training_beats_the_untrained_model_and_the_scorer_loads_it(tmp_path, tiny_model_dir):
    from transformers import AutoModelForSequenceClassification

    from rlvr.rewards.models import SequenceClassifierReward
    from rlvr.rm.trainer import run_rm

    data, held = tmp_path / "train.jsonl", tmp_path / "held.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _sum_pairs(128, 0)))
    held.write_text("".join(json.dumps(r) + "\n" for r in _sum_pairs(64, 1)))
    cfg = load_config(None, [f"data.path={data}", f"data.eval_path={held}", f"model.path={tiny_model_dir}",
                             "train.steps=20", "train.batch_size=16", "optim.lr=1e-3", f"run.dir={tmp_path / 'run'}",
                             "logging.progress=false"], schema=RMConfig)
    run = run_rm(cfg)
    result = json.loads((run / "rm_eval.json").read_text())
    assert result["heldout_pairs"] == 64
    assert result["after"]["accuracy"] >= result["before"]["accuracy"] + 0.15, result
    assert result["after"]["margin"] > 0
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert {"loss", "accuracy", "margin", "reward_chosen", "reward_rejected"} <= set(metrics[-1])

    final = run / "final"
    assert AutoModelForSequenceClassification.from_pretrained(str(final)).config.num_labels == 1
    scorer = SequenceClassifierReward(path=str(final), normalize="raw")
    rows = _sum_pairs(64, 1)
    chosen = scorer.score_texts([r["prompt"] for r in rows], [r["chosen"] for r in rows])
    rejected = scorer.score_texts([r["prompt"] for r in rows], [r["rejected"] for r in rows])
    wins = sum((c > r) + 0.5 * (c == r) for c, r in zip(chosen, rejected)) / len(rows)
    # the scorer sees the same texts and tokens as training did, so it ranks exactly as the trainer measured
    assert wins == pytest.approx(result["after"]["accuracy"], abs=1e-6)


def test_rm_training_is_reproducible_and_rejects_a_pairless_rollouts_file(tmp_path, tiny_model_dir):
    from rlvr.rm.trainer import run_rm

    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _sum_pairs(24, 0)))

    def once(name):
        cfg = load_config(None, [f"data.path={data}", f"model.path={tiny_model_dir}", "train.steps=2",
                                 "train.batch_size=4", "data.eval_fraction=0.25", f"run.dir={tmp_path / name}",
                                 "logging.progress=false"], schema=RMConfig)
        return [json.loads(line) for line in (run_rm(cfg) / "metrics.jsonl").read_text().splitlines()]

    first, second = once("a"), once("b")
    assert [m["loss"] for m in first[1:]] == [m["loss"] for m in second[1:]]
    rollouts = tmp_path / "rollouts.jsonl"
    rollouts.write_text(json.dumps(_rollout(1, "1+1=", "A:2", True)) + "\n")
    cfg = load_config(None, [f"data.path={rollouts}", f"model.path={tiny_model_dir}", f"run.dir={tmp_path / 'c'}"],
                      schema=RMConfig)
    with pytest.raises(RMDataError, match="no prompt in"):
        run_rm(cfg)
    assert not (tmp_path / "c").exists()  # bad data stops the run before it makes a run directory


# -- the generative-RM task (preference_judge) -------------------------------------------------------------


def test_preference_judge_verifier_rewards_agreement_only():
    from rlvr.tasks import build_task

    task = build_task("preference_judge", {"eval_size": 20})
    rec = task.heldout[0]
    gold, other = rec.answer, ({"A", "B"} - {rec.answer}).pop()
    # the right answer really is the one the label names
    right = rec.meta["answers"][["A", "B"].index(gold)]
    assert int(right) == rec.meta["a"] + rec.meta["b"] and rec.meta["answers_correct"][["A", "B"].index(gold)]
    assert task.verify(f"I add the columns... so [[{gold}]]", rec).reward == 1.0
    assert task.verify(f"[[{gold}]] and again [[{gold}]]", rec).reward == 1.0  # repeating one verdict is fine
    bad = task.verify(f"[[{other}]]", rec)
    assert bad.reward == 0.0 and "disagrees" in bad.reason
    for response, reason in [("", "empty"), ("the answer is A", "no verdict"), ("\x00\xff[[C]] [[a]]", "no verdict"),
                             ("[[A]] or maybe [[B]]", "conflicting")]:
        out = task.verify(response, rec)
        assert out.reward == 0.0 and not out.correct and reason in out.reason, (response, out)
    # labels are balanced between the positions over the held-out split
    assert 5 <= sum(r.answer == "A" for r in task.heldout) <= 15


def test_preference_judge_pointwise_boxed_and_scores_verdicts():
    from rlvr.tasks import TaskError, build_task

    point = build_task("preference_judge", {"mode": "pointwise", "eval_size": 20})
    for rec in point.heldout[:6]:
        shown_right = int(rec.meta["answers"][0]) == rec.meta["a"] + rec.meta["b"]
        assert rec.answer == ("correct" if shown_right else "incorrect")
        assert point.verify(f"[[{rec.answer}]]", rec).reward == 1.0
    boxed = build_task("preference_judge", {"labels": ["1", "2"], "verdict_template": "\\boxed{{label}}",
                                            "eval_size": 5})
    rec = boxed.heldout[0]
    assert f"\\boxed{{{rec.answer}}}" in boxed.plain_prompt(rec)
    assert boxed.verify(f"so \\boxed{{{rec.answer}}}", rec).reward == 1.0
    assert boxed.verify("\\boxed{1} \\boxed{2}", rec).reward == 0.0

    spct = build_task("preference_judge", {"verdict": "scores", "eval_size": 5})
    rec = spct.heldout[0]
    hi, lo = ("9, 2", "2, 9") if rec.answer == "A" else ("2, 9", "9, 2")
    assert spct.verify(f"critique... [[{hi}]]", rec).reward == 1.0
    assert spct.verify(f"[[{lo}]]", rec).reward == 0.0
    for response, reason in [("[[5, 5]]", "disagree"), ("[[7]]", "expected 2"), ("[[x, y]]", "expected 2"),
                             ("[[0, 11]]", "1..10"), (f"[[{hi}]] [[{lo}]]", "conflicting"), ("9 2", "no verdict")]:
        out = spct.verify(response, rec)
        assert out.reward == 0.0 and reason in out.reason, (response, out)
    point_scores = build_task("preference_judge", {"mode": "pointwise", "verdict": "scores", "eval_size": 5})
    rec = point_scores.heldout[0]
    good = "[[8]]" if rec.answer == "correct" else "[[3]]"
    assert point_scores.verify(good, rec).reward == 1.0
    with pytest.raises(TaskError, match="task.labels"):
        build_task("preference_judge", {"labels": ["A", "A"]})
    with pytest.raises(TaskError, match="task.verdict_template"):
        build_task("preference_judge", {"verdict_template": "[[X]]"})
