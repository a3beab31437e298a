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
from rlvr.learner.spark import (
    Example,
    JudgeObjective,
    SparkTrainable,
    deal_judge_examples,
    pairwise_examples,
    pointwise_examples,
    reflection_examples,
    self_reward_step,
)
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
    def pointwise(rows):
        return [Example("pointwise", ids, [yes if lab else no], lab, no if lab else yes) for ids, lab in rows]

    obj = JudgeObjective(pointwise(examples), pad_id=0, coef=coef)
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
    obj0 = JudgeObjective(pointwise(examples), pad_id=0, coef=0.0)
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


def test_a_lost_reward_model_stops_scoring_instead_of_scoring_zero():
    from rlvr.config.schema import RewardSpec
    from rlvr.errors import RoleLost
    from rlvr.rewards import RewardFunction

    def dead(rows):
        raise RoleLost("the reward model worker died while scoring")

    def broken(rows):
        raise RuntimeError("a bug")

    specs = [RewardSpec(name="learned_rm")]
    with pytest.raises(RoleLost, match="died while scoring"):  # not a reward of 0 for every sample
        RewardFunction.from_config(specs, RewardContext(reward_learner=SimpleNamespace(score=dead)))(
            [_group(0, [([1], True)])], None)
    groups = [_group(0, [([1], True)])]  # any other error still costs the samples, not the run
    RewardFunction.from_config(specs, RewardContext(reward_learner=SimpleNamespace(score=broken)))(groups, None)
    assert groups[0].samples[0].rewards["learned_rm"] == 0.0


@pytest.mark.parametrize("overrides, message", [
    (["rewards=[{name: correctness}, {name: learned_rm}]"], "set coevolve.mode=co_evolve"),
    (["coevolve.mode=spark", "rewards=[{name: format}]"], "add {name: correctness, weight: 0}"),
    (["coevolve.mode=co_evolve", "distributed.reward_model_worker=true"], "set distributed.backend=ray"),
    (["coevolve.mode=spark", "distributed.backend=ray", "distributed.reward_model_worker=true"],
     "set reward_model_worker=false, or coevolve.mode=co_evolve"),
    (["distributed.backend=ray", "distributed.reward_model_worker=true"], "coevolve.mode=None"),
])
def test_bad_coevolve_configs_name_the_fix(overrides, message):
    with pytest.raises(ConfigError) as err:
        load_config("recipes/grpo.yaml", overrides)
    assert message in str(err.value)


@pytest.mark.parametrize("overrides", [
    ["distributed.backend=ray"],  # Ray rollout workers, the reward model in the controller
    ["distributed.backend=ray", "distributed.reward_model_worker=true", "distributed.learner_workers=2"],
    ["distributed.backend=ray", "distributed.reward_model_worker=true", "distributed.mode=async"],
])
def test_co_evolve_on_ray_is_a_valid_config(overrides):
    cfg = load_config("recipes/co_evolve.yaml", overrides)
    assert cfg.distributed.reward_model_worker == ("distributed.reward_model_worker=true" in overrides)
    load_config("recipes/spark.yaml", ["distributed.backend=ray", "distributed.mode=async"])  # beside Ray rollouts
    load_config("recipes/spark.yaml", ["distributed.backend=ray", "distributed.learner_workers=2"])  # on its ranks


def test_spark_verdicts_must_start_with_different_tokens(tiny_model_dir):
    from rlvr.models import load_tokenizer

    cfg = load_config("recipes/spark.yaml", ["coevolve.no_text=yep"])  # yes_text: "yes"
    inner = SimpleNamespace(learner=None, pad_id=0)
    with pytest.raises(ConfigError, match="coevolve.yes_text / no_text"):
        SparkTrainable(inner, cfg.coevolve, load_tokenizer(tiny_model_dir), seed=0)  # type: ignore[arg-type]


# -- SPARK's pairwise and reflection objectives, label-free self-reward ----------------------------------------

GLUE = ([70], [71], [72])  # ids before answer A, before answer B, and the question


def test_pairwise_examples_pair_each_correct_with_each_incorrect_answer_in_a_seeded_order():
    # end token 0; [1, 0] twice (counted once), two distinct wrong answers, a None verdict; a one-class group
    g = _group(0, [([1, 0], True), ([2, 0], False), ([1, 0], True), ([3, 0], False), ([4, 0], None)])
    one_class = _group(1, [([7, 0], True), ([8, 0], True)], prompt=(9,))
    orders = set()
    for seed in range(12):
        ex = pairwise_examples([g, one_class], GLUE, eos_id=0, max_examples=8, max_per_group=8, seed=seed)
        assert len(ex) == 2 and ex == pairwise_examples([g, one_class], GLUE, 0, 8, 8, seed)  # seeded
        wrongs = set()
        for ids, correct_first in ex:
            a, b = ids[3], ids[5]
            assert ids == [5, 6, 70, a, 71, b, 72]  # prompt, A-glue, answer A, B-glue, answer B, question
            correct, wrong = (a, b) if correct_first else (b, a)
            assert correct == 1  # the label names the correct answer's position
            wrongs.add(wrong)
            orders.add(correct_first)
        assert wrongs == {2, 3}  # exactly the two (correct, incorrect) pairs
    assert orders == {0, 1}  # the position of the correct answer varies with the seed
    assert len(pairwise_examples([g], GLUE, 0, max_examples=8, max_per_group=1, seed=0)) == 1
    assert len(pairwise_examples([g, g], GLUE, 0, max_examples=3, max_per_group=8, seed=0)) == 3


def test_reflection_examples_revise_each_wrong_answer_to_a_correct_one_of_its_group():
    g = _group(0, [([2, 0], False), ([1, 0], True), ([2, 0], False), ([3], False)])
    no_correct = _group(1, [([4, 0], False)], prompt=(9,))
    ex = reflection_examples([g, no_correct], reflection_ids=[80, 81], eos_id=0, max_examples=8, seed=0)
    # the wrong answer (end token dropped, duplicates once) + reflection text -> the correct answer, end token kept
    assert sorted(ex) == [([5, 6, 2, 80, 81], [1, 0]), ([5, 6, 3, 80, 81], [1, 0])]
    assert len(reflection_examples([g], [80], 0, max_examples=1, seed=0)) == 1


def test_judge_objective_weighs_each_objective_as_its_mean_nll(tiny_model_dir):
    model = load_causal_lm(tiny_model_dir)
    examples = [Example("pointwise", [5, 6, 7], [40], 1, 41), Example("pointwise", [9, 10], [41], 0, 40),
                Example("pairwise", [5, 70, 8, 71, 9, 72], [50], 1, 51),
                Example("reflection", [5, 8, 80], [12, 13, 0])]
    with torch.no_grad():  # by hand: each row alone, the mean NLL of its target tokens
        def nll(ex):
            logits = model(torch.tensor([ex.context + ex.target[:-1]])).logits[0, len(ex.context) - 1:]
            return float(F.cross_entropy(logits, torch.tensor(ex.target)))
        point = (nll(examples[0]) + nll(examples[1])) / 2
        pair, reflect = nll(examples[2]), nll(examples[3])
        first = model(torch.tensor([examples[2].context])).logits[0, -1]
    obj = JudgeObjective(examples, pad_id=0, coef=0.25)
    total = sum(obj.backward(model, j, 3) for j in range(3))
    assert total == pytest.approx(0.25 * (point + pair + reflect), rel=1e-5)
    m = obj.metrics()
    assert m["rm/examples"] == 2 and m["rm/pairwise_examples"] == 1 and m["rm/reflection_examples"] == 1
    assert m["rm/pairwise_accuracy"] == float(first[50] > first[51])
    assert m["rm/pairwise_accuracy_first"] == m["rm/pairwise_accuracy"] and "rm/pairwise_accuracy_second" not in m
    assert m["rm/reflection_loss"] == pytest.approx(reflect, rel=1e-5) and "rm/reflection_accuracy" not in m


def test_judge_examples_are_dealt_per_mini_batch_then_round_robin_over_ranks():
    # one process: mini-batch 0 trains examples 0, 2, 4, 6 and mini-batch 1 trains 1, 3, 5
    assert deal_judge_examples(7, mini_batches=2, ranks=2) == [[[0, 4], [1, 5]], [[2, 6], [3]]]
    assert deal_judge_examples(2, mini_batches=1, ranks=3) == [[[0]], [[1]], [[]]]  # a rank with none
    assert deal_judge_examples(0, mini_batches=2, ranks=1) == [[[], []]]


def test_rank_shares_weighted_by_global_counts_sum_to_the_single_process_judge_loss(tiny_model_dir):
    """Two 'ranks' (shares of one model's gradient) against one process, 2 mini-batches: the summed gradient,
    the summed loss and the merged metrics are the single process's (fp32, a few hundred terms)."""
    examples = [Example("pointwise", [5, 6, 7], [40], 1, 41), Example("pointwise", [9, 10], [41], 0, 40),
                Example("pairwise", [5, 70, 8, 71, 9, 72], [50], 1, 51), Example("pointwise", [11], [40], 1, 41),
                Example("reflection", [5, 8, 80], [12, 13, 0]), Example("pairwise", [6, 70, 9, 71, 8, 72], [51], 0, 50),
                Example("pointwise", [12, 13, 14, 15], [41], 0, 40)]

    def grads(model):
        return torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.grad is not None])

    model = load_causal_lm(tiny_model_dir)
    one = JudgeObjective(examples, pad_id=0, coef=0.5)
    loss = sum(one.backward(model, j, 2) for j in range(2))
    expected = grads(model)
    model.zero_grad(set_to_none=True)
    whole = JudgeObjective(examples, pad_id=0, coef=0.5)  # the controller's: it only counts and merges
    assert whole.counts == {"pointwise": 4, "pairwise": 2, "reflection": 1}
    ranks = [JudgeObjective([], 0, 0.5, counts=whole.counts, shares=[[(i, examples[i]) for i in part] for part in mine])
             for mine in deal_judge_examples(len(examples), 2, 2)]
    got = sum(r.backward(model, j, 2) for j in range(2) for r in ranks)  # grads accumulate: the all-reduce sum
    assert got == pytest.approx(loss, rel=1e-5)
    torch.testing.assert_close(grads(model), expected, rtol=1e-4, atol=1e-6)
    whole.record([rec for r in reversed(ranks) for rec in r.records()], mini_batches=2)
    assert [i for i, *_ in whole.seen] == [i for i, *_ in one.seen] == [0, 2, 4, 6, 1, 3, 5]
    assert whole.metrics() == pytest.approx(one.metrics(), rel=1e-5)


def test_spark_over_learner_ranks_seeds_its_step_with_the_groups_mirrored_update_count(tiny_model_dir):
    """Resume on learner ranks: the group mirrors rank 0's update count from the state it loads, and spark draws
    that step's examples and self-reward decision from it, as the in-process learner's count does."""
    from rlvr.distributed.ray_learner import RayLearnerGroup
    from rlvr.models import load_tokenizer

    cfg = load_config("recipes/spark.yaml", ["coevolve.objectives=[pointwise, pairwise]",
                                             "coevolve.self_reward={after: 4, share: 1.0}"]).coevolve
    tok, model = load_tokenizer(tiny_model_dir), load_causal_lm(tiny_model_dir)
    loaded = []
    fake_ray = SimpleNamespace(put=lambda x: x, wait=lambda refs, num_returns: (refs[:1], refs[1:]),
                               get=lambda ref: ref, exceptions=SimpleNamespace(RayActorError=RuntimeError))
    actor = SimpleNamespace(load_state_dict=SimpleNamespace(remote=lambda state: loaded.append(state)))
    group = RayLearnerGroup.__new__(RayLearnerGroup)  # no actors started: only the bookkeeping is tested
    group.ray, group.actors, group.updates, group.pad_id = fake_ray, [actor, actor], 0, 0
    judged = []
    group.learn = lambda groups, judge=None: judged.append(judge) or {"grad_norm": 1.0}
    group.load_state_dict({"updates": 3})
    assert group.updates == 3 and len(loaded) == 2
    spark = SparkTrainable(group, cfg, tok, seed=7, judge_model=model)
    batch = [_group(0, [([40, 41], True), ([42], False)]), _group(1, [([43], False), ([44], True)], prompt=(9,))]
    spark.learn(batch)  # step 4: judged, seeded as the in-process spark at 3 updates
    local = SparkTrainable(SimpleNamespace(learner=SimpleNamespace(model=model, updates=3), pad_id=0), cfg, tok,
                           seed=7)
    assert judged[0].examples == local.examples(batch, 7 * 1_000_003 + 4)
    group.updates = 4
    out = spark.learn(batch)  # step 5: label-free, judged by the controller's policy
    assert judged[1] is None and out["self_reward/step"] == 1.0


def test_self_reward_steps_replace_the_reward_by_the_policys_own_judgement(tiny_model_dir):
    from rlvr.models import load_tokenizer

    cfg = load_config("recipes/spark.yaml", ["coevolve.self_reward={after: 2, share: 1.0}"]).coevolve
    assert [self_reward_step(cfg, 0, s) for s in (1, 2, 3, 4)] == [False, False, True, True]
    half = load_config("recipes/spark.yaml", ["coevolve.self_reward={share: 0.5}"]).coevolve
    picks = [self_reward_step(half, 0, s) for s in range(1, 201)]
    assert 60 < sum(picks) < 140 and picks == [self_reward_step(half, 0, s) for s in range(1, 201)]

    model, tok = load_causal_lm(tiny_model_dir), load_tokenizer(tiny_model_dir)
    seen = {}
    learner = SimpleNamespace(model=model, updates=0, auxiliary=None)

    def inner_learn(groups):
        seen["rewards"] = [s.reward for g in groups for s in g.samples]
        seen["auxiliary"] = learner.auxiliary
        return {"loss": 0.0}

    inner = SimpleNamespace(learner=learner, pad_id=0, learn=inner_learn)
    spark = SparkTrainable(inner, cfg, tok, seed=0)  # type: ignore[arg-type]
    eos = tok.eos_token_id

    def groups():
        g = _group(0, [([40, 41, eos], True), ([42], False)])
        for s in g.samples:
            s.reward = float(s.correct)
        return [g]

    out = spark.learn(groups())  # step 1: the verifier's reward, the judge trains
    assert seen["rewards"] == [1.0, 0.0] and seen["auxiliary"] is not None and out["self_reward/step"] == 0.0
    learner.updates = 2  # step 3: label-free
    with torch.no_grad():  # by hand: p(yes) / (p(yes) + p(no)) after prompt + answer (no end token) + question
        def p_yes(answer):
            last = model(torch.tensor([[5, 6] + answer + spark.question_ids])).logits[0, -1]
            return float(torch.softmax(last[[spark.yes_id, spark.no_id]], dim=-1)[0])
        expected = [p_yes([40, 41]), p_yes([42])]
    batch = groups()
    out = spark.learn(batch)
    assert seen["rewards"] == pytest.approx(expected, rel=1e-5) and seen["auxiliary"] is None  # no label used
    assert [s.rewards["self_judge"] for s in batch[0].samples] == pytest.approx(expected, rel=1e-5)
    assert out["self_reward/step"] == 1.0 and out["reward/self_judge"] == pytest.approx(sum(expected) / 2)
    assert out["self_reward/agreement"] == ((expected[0] > 0.5) + (expected[1] <= 0.5)) / 2
    verdict = SparkTrainable(inner, load_config("recipes/spark.yaml", [  # type: ignore[arg-type]
        "coevolve.self_reward={signal: verdict}"]).coevolve, tok, seed=0)
    verdict.learn(groups())
    assert seen["rewards"] == [float(p > 0.5) for p in expected]


@pytest.mark.parametrize("overrides, message", [
    (["coevolve.objectives=[]"], "give at least one of pointwise, pairwise, reflection"),
    (["coevolve.objectives=[pointwise, pointwise]"], "listed more than once"),
    (["coevolve.objectives=[pointwise, listwise]"], "coevolve.objectives"),
    (["coevolve.mode=co_evolve", "coevolve.self_reward={after: 5}"], "set coevolve.mode=spark"),
    (["coevolve.self_reward={share: 1.5}"], "coevolve.self_reward.share"),
])
def test_bad_spark_objectives_and_self_reward_name_the_fix(overrides, message):
    with pytest.raises(ConfigError) as err:
        load_config("recipes/spark.yaml", overrides)
    assert message in str(err.value)


def test_spark_pair_labels_must_start_with_different_tokens(tiny_model_dir):
    from rlvr.models import load_tokenizer

    cfg = load_config("recipes/spark.yaml", ["coevolve.pair_labels=[Ay, Ab]"])
    with pytest.raises(ConfigError, match="coevolve.pair_labels"):
        SparkTrainable(SimpleNamespace(learner=None, pad_id=0), cfg.coevolve,  # type: ignore[arg-type]
                       load_tokenizer(tiny_model_dir), seed=0)
