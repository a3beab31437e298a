"""Co-evolution (coevolve.*): pair and judge-example mining, the co-evolving reward model, SPARK's judge loss
(hand-computed), the learned_rm reward, and the config errors that name the fix."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from rlvr.config import ConfigError, load_config
from rlvr.learner.reward_model import RewardModelLearner, mine_group_pairs
from rlvr.learner.spark import PointwiseJudgeObjective, SparkTrainable, pointwise_examples
from rlvr.models import load_causal_lm
from rlvr.models.reward_head import load_reward_model
from rlvr.rewards.base import RewardContext
from rlvr.rewards.models import LearnedRewardModel
from rlvr.types import Group, Sample, TaskRecord


def _group(gid: int, answers: list[tuple[list[int], bool | None]], prompt: tuple[int, ...] = (5, 6)) -> Group:
    samples = [Sample(prompt_ids=list(prompt), response_ids=ids, correct=c) for ids, c in answers]
    return Group(TaskRecord(id=str(gid), question="q"), list(prompt), samples)


def test_pairs_are_correct_vs_incorrect_within_a_group_deduplicated_and_capped():
    nan = Sample(prompt_ids=[5, 6], response_ids=[9], correct=False, meta={"non_finite_reward": ["x"]})
    g = _group(0, [([1, 0], True), ([1, 0], True), ([2, 0], False), ([3, 0], False), ([4, 0], None)])
    g.samples.append(nan)
    pairs = mine_group_pairs([g, _group(1, [([7], True), ([8], True)])], max_pairs_per_prompt=8, seed=0)
    # one distinct correct answer x two distinct incorrect ones; the None verdict, the excluded sample and the
    # all-correct group give nothing
    assert sorted(pairs) == [([5, 6, 1, 0], [5, 6, 2, 0]), ([5, 6, 1, 0], [5, 6, 3, 0])]
    capped = mine_group_pairs([g], max_pairs_per_prompt=1, seed=0)
    assert len(capped) == 1 and capped[0] in pairs
    assert capped == mine_group_pairs([g], max_pairs_per_prompt=1, seed=0)  # seeded


def test_pointwise_examples_are_balanced_token_in_and_strip_the_end_token():
    groups = [_group(0, [([1, 0], True), ([2, 0], True), ([3, 0], True), ([4], False), ([5, 0], None)])]
    ex = pointwise_examples(groups, question_ids=[63], eos_id=0, max_examples=2, seed=0)
    assert sorted(label for _, label in ex) == [0, 1]  # one of each class, not two correct
    assert ([5, 6, 4, 63], 0) in ex  # prompt + response (no end token to strip) + question
    right = next(ids for ids, label in ex if label == 1)
    assert right[:2] == [5, 6] and right[2] in (1, 2, 3) and right[3:] == [63]  # the end token 0 was dropped
    # a short class is filled in by the other one, up to max_examples
    assert sorted(lab for _, lab in pointwise_examples(groups, [63], 0, max_examples=4, seed=1)) == [0, 1, 1, 1]


def test_judge_loss_shares_add_up_to_the_hand_computed_mean_nll(tiny_model_dir):
    model = load_causal_lm(tiny_model_dir)
    examples = [([5, 6, 7, 8], 1), ([9, 10, 11], 0), ([12, 13], 1)]
    yes, no, coef = 40, 41, 0.5
    with torch.no_grad():  # by hand: each row alone, the next-token logits after its last token
        nll = [float(F.cross_entropy(model(torch.tensor([ids])).logits[0, -1:], torch.tensor([yes if lab else no])))
               for ids, lab in examples]
        says_yes = [bool(model(torch.tensor([ids])).logits[0, -1, yes] > model(torch.tensor([ids])).logits[0, -1, no])
                    for ids, _ in examples]
    obj = PointwiseJudgeObjective(examples, yes, no, pad_id=0, coef=coef)
    total = obj.backward(model, 0, 2) + obj.backward(model, 1, 2)  # two mini-batches: rows 0, 2 then row 1
    assert total == pytest.approx(coef * sum(nll) / 3, rel=1e-5)
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    m = obj.metrics()
    expected = [s == bool(lab) for s, (_, lab) in zip(says_yes, examples)]
    order = [0, 2, 1]  # the order the shares were judged in
    assert m["rm/accuracy"] == pytest.approx(sum(expected) / 3)
    assert m["rm/loss"] == pytest.approx(sum(nll[i] for i in order) / 3, rel=1e-5)
    assert m["rm/examples"] == 3
    # coef 0: measured, not trained
    model.zero_grad(set_to_none=True)
    obj0 = PointwiseJudgeObjective(examples, yes, no, pad_id=0, coef=0.0)
    assert obj0.backward(model, 0, 1) == 0.0
    assert all(p.grad is None for p in model.parameters())
    assert obj0.metrics()["rm/accuracy"] == m["rm/accuracy"]


def _rm(tiny_model_dir, head_seed=0):
    torch.manual_seed(head_seed)
    model = load_reward_model(str(tiny_model_dir), dtype=torch.float32, device=torch.device("cpu"), pad_token_id=0)
    return RewardModelLearner(model, 0, lr=3e-3, updates=2, batch_size=8, seed=0)


def test_reward_model_learns_the_pairs_and_resumes_bit_exactly(tiny_model_dir):
    import io

    # chosen rows end in token 30, rejected in 31: a separable preference
    pairs = [([5, i, 30], [5, i, 31]) for i in range(7, 15)]
    learner = _rm(tiny_model_dir)
    first = learner.learn(pairs)
    assert first["rm/pairs"] == 8 and set(first) >= {"rm/accuracy", "rm/margin", "rm/loss", "rm/grad_norm"}
    buffer = io.BytesIO()
    torch.save(learner.state_dict(), buffer)  # as a checkpoint does
    for _ in range(2):
        last = learner.learn(pairs)
    assert last["rm/accuracy"] == 1.0 and last["rm/margin"] > first["rm/margin"]
    # a fresh model (another head init) with the saved state continues exactly as the original did
    again = _rm(tiny_model_dir, head_seed=1)
    buffer.seek(0)
    again.load_state_dict(torch.load(buffer))
    again.learn(pairs)
    assert again.learn(pairs) == last and again.score([[5, 7, 30]]) == learner.score([[5, 7, 30]])
    assert learner.learn([]) == {"rm/pairs": 0.0}


def test_learned_rm_reward_is_the_sigmoid_of_the_live_score():
    fake = SimpleNamespace(score=lambda rows: [float(len(r)) - 3.0 for r in rows])
    reward = LearnedRewardModel(RewardContext(reward_learner=fake))
    out = reward.score_batch([_group(0, [([1], True), ([1, 2, 3], False)])], task=None)
    assert [o.value for o in out[0]] == pytest.approx([1 / (1 + math.exp(0.0)), 1 / (1 + math.exp(-2.0))])
    raw = LearnedRewardModel(RewardContext(reward_learner=fake), normalize="raw")
    assert [o.value for o in raw.score_batch([_group(0, [([1], True)])], None)[0]] == [0.0]
    with pytest.raises(ValueError, match="coevolve.mode=co_evolve"):
        LearnedRewardModel(RewardContext())


@pytest.mark.parametrize("overrides, message", [
    (["rewards=[{name: correctness}, {name: learned_rm}]"], "set coevolve.mode=co_evolve"),
    (["coevolve.mode=spark", "rewards=[{name: format}]"], "add {name: correctness, weight: 0}"),
    (["coevolve.mode=co_evolve", "distributed.backend=ray"], "in this process only"),
])
def test_bad_coevolve_configs_name_the_fix(overrides, message):
    with pytest.raises(ConfigError) as err:
        load_config("recipes/grpo.yaml", overrides)
    assert message in str(err.value)


def test_spark_verdicts_must_start_with_different_tokens(tiny_model_dir):
    from rlvr.models import load_tokenizer

    cfg = load_config("recipes/spark.yaml", ["coevolve.no_text=yep"])  # yes_text: "yes"
    inner = SimpleNamespace(learner=None, pad_id=0)
    with pytest.raises(ConfigError, match="coevolve.yes_text / no_text"):
        SparkTrainable(inner, cfg.coevolve, load_tokenizer(tiny_model_dir), seed=0)  # type: ignore[arg-type]
