"""Shaping, label-free and model-based rewards against hand-computed values; gating and pooled correctness."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.config import ConfigError, load_config
from rlvr.models import load_causal_lm, load_tokenizer
from rlvr.rewards import REWARDS, CorrectnessReward, RewardContext, RewardFunction, RewardOutput
from rlvr.rewards.label_free import (
    CrossAgreementReward,
    FrequencyEntropyReward,
    MajorityNoveltyReward,
    MajorityVoteReward,
    ReferenceProbabilityReward,
    SelfCertaintyReward,
    majority,
)
from rlvr.rewards.shaping import (
    ConciseLengthReward,
    FormatReward,
    LeadLengthReward,
    OverlongPunishment,
    ToolEfficiencyReward,
)
from rlvr.tasks import build_task
from rlvr.types import Group, Sample, TaskRecord

TASK = build_task("addition", {"eval_size": 5})


def group(texts, answer="5", lengths=None, truncated=(), tool_calls=None, question="2+3", meta=None, rid="q"):
    samples = []
    for i, t in enumerate(texts):
        n = lengths[i] if lengths else max(1, len(t))
        s = Sample(prompt_ids=[1, 2], response_ids=list(range(3, 3 + n)), text=t,
                   finish_reason="length" if i in truncated else "stop")
        if tool_calls is not None:
            s.meta["tool_calls"] = tool_calls[i]
        samples.append(s)
    a, b = (int(x) for x in question.split("+"))
    record = TaskRecord(id=rid, question=question, answer=answer, meta={"a": a, "b": b, **(meta or {})})
    return Group(record, [1, 2], samples)


def values(outputs):
    return [round(o.value, 6) for o in outputs]


# -- shaping -----------------------------------------------------------------------------------------------


def test_format_reward():
    g = group(["<think>x</think> <answer>5</answer>", "<answer>5</answer>", "<think>a</think><answer>b</answer>\n"])
    assert values(FormatReward()(g, TASK)) == [1.0, 0.0, 1.0]
    with pytest.raises(ValueError, match="regular expression"):
        FormatReward(pattern="(")


def test_overlong_punishment_hand_computed():
    # L_max 100, buffer 20: <= 80 -> 0; 90 -> (80 - 90) / 20 = -0.5; 100 -> -1.0; cut off -> -1
    reward = OverlongPunishment(RewardContext(max_new_tokens=100), buffer=20)
    g = group(["a", "b", "c", "d"], lengths=[80, 90, 100, 50], truncated=(3,))
    assert values(reward(g, TASK)) == [0.0, -0.5, -1.0, -1.0]


def test_lead_length_reward():
    # correct lengths 10 and 30: mu 20, sigma 10 -> z = -1, +1 -> exp(0.05), exp(-0.05); wrong -> -1
    g = group(["A:5", "A:5", "A:7"], lengths=[10, 30, 20])
    out = LeadLengthReward(alpha=0.05)(g, TASK)
    assert values(out) == [round(math.exp(0.05), 6), round(math.exp(-0.05), 6), -1.0]
    assert [o.correct for o in out] == [True, True, False]


def test_concise_length_reward_only_when_all_correct():
    reward = ConciseLengthReward(RewardContext(max_new_tokens=100))
    assert values(reward(group(["A:5", "A:5"], lengths=[25, 50]), TASK)) == [0.75, 0.5]
    assert values(reward(group(["A:5", "A:6"], lengths=[25, 50]), TASK)) == [0.0, 0.0]


def test_otc_tool_reward_hand_computed():
    r = ToolEfficiencyReward(alpha=1.0, c=1.0)
    assert r.tool_reward(0, 0) == 1.0
    assert r.tool_reward(2, 0) == pytest.approx(math.cos(2 * math.pi / 5))
    assert r.tool_reward(1, 1) == pytest.approx(1.0)          # optimal number of calls
    assert r.tool_reward(3, 1) == pytest.approx(math.sin(1.5 * math.pi / 2))  # f = 2*1*3/4 = 1.5
    g = group(["A:5", "A:5", "A:6"], tool_calls=[1, 3, 0])
    out = r(g, TASK)  # optimum n = 1 (fewest calls among correct); wrong answers earn 0
    assert values(out) == [1.0, round(math.sin(0.75 * math.pi), 6), 0.0]


# -- label-free ------------------------------------------------------------------------------------------


def test_majority_clusters_equal_answers():
    clusters, best, sizes = majority(["5", "05", "7", None, "5.0"], TASK)
    assert clusters == [0, 0, 1, None, 0]
    assert best == 0 and sizes == [3, 1]


def test_ttrl_rewards_the_majority_and_reports_label_quality():
    reward = MajorityVoteReward()
    g = group(["A:5", "A:5", "A:7", "no answer here"], answer="5")
    assert values(reward(g, TASK)) == [1.0, 1.0, 0.0, 0.0]
    wrong_majority = group(["A:7", "A:7", "A:5"], answer="5")
    assert values(reward(wrong_majority, TASK)) == [1.0, 1.0, 0.0]
    m = reward.metrics()
    assert m["label_accuracy"] == pytest.approx(0.5)  # one of two majorities is right
    # pseudo vs true rewards: 4/4 right in the first group, 0/3 in the second
    assert m["reward_accuracy"] == pytest.approx(4 / 7)
    assert reward.metrics() == {}  # reset after reading


def test_ttrv_frequency_and_entropy_terms():
    # answers 5,5,5,7: p = .75, .25; H = -(.75 ln .75 + .25 ln .25)
    g = group(["A:5", "A:5", "A:5", "A:7"])
    per_sample = FrequencyEntropyReward(alpha=0.5)(g, TASK)
    assert values(per_sample) == [round(0.75 + 0.5 * math.log(0.75), 6)] * 3 + [round(0.25 + 0.5 * math.log(0.25), 6)]
    h = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    grouped = FrequencyEntropyReward(alpha=0.5, entropy_mode="group")(g, TASK)
    assert values(grouped) == [round(0.75 - 0.5 * h, 6)] * 3 + [round(0.25 - 0.5 * h, 6)]
    # the per-sample entropy term has the group-constant term's mean: mean_i log p(a_i) = -H
    mean_term = sum(o.value - f for o, f in zip(per_sample, [0.75, 0.75, 0.75, 0.25])) / 4
    assert mean_term == pytest.approx(-0.5 * h)


def test_evol_rl_reward_ranges():
    texts = ["1+2=3;3|A:5", "1+2=3;3|A:5", "9+9=18;8|x y z A:5", "A:7", "nothing"]
    out = MajorityNoveltyReward(embedding="ngram")(group(texts), TASK)
    v = values(out)
    assert all(0.5 <= x <= 1.0 for x in v[:3]), v       # majority
    assert -1.0 <= v[3] <= -0.5                          # minority
    assert v[4] == -1.0                                  # no answer
    assert v[2] == max(v[:3])                            # the most different majority trace earns most


def test_co_reward_uses_the_paraphrase_groups_majority():
    original = group(["A:5", "A:6", "A:6"], question="2+3", rid="q")
    swapped = group(["A:5", "A:5", "A:6"], question="3+2", rid="q-swap", meta={"paraphrase_of": "q"})
    reward = CrossAgreementReward()
    assert reward.needs_paraphrases
    out = reward.score_batch([original, swapped], TASK)
    assert values(out[0]) == [1.0, 0.0, 0.0]   # label from the paraphrase: 5
    assert values(out[1]) == [0.0, 0.0, 1.0]   # label from the original: 6
    assert TASK.paraphrase(TASK.heldout[0]).answer == TASK.heldout[0].answer


@pytest.fixture(scope="module")
def policy_context(tiny_model_dir):
    return RewardContext(policy=load_causal_lm(tiny_model_dir), tokenizer=load_tokenizer(tiny_model_dir),
                         temperature=1.0, max_new_tokens=16)


def test_rlpr_is_a_probability_and_debiasing_clips(policy_context):
    tok = policy_context.tokenizer
    g = group(["1+2=3;3|A:7", "A:5"], answer="5")
    g.prompt_ids = tok("2+3=")["input_ids"]
    raw = ReferenceProbabilityReward(policy_context, debias=False)(g, TASK)
    assert all(0.0 < o.value < 1.0 for o in raw)
    debiased = ReferenceProbabilityReward(policy_context, debias=True)(g, TASK)
    assert all(0.0 <= o.value <= 1.0 for o in debiased)
    with pytest.raises(ValueError, match="policy"):
        ReferenceProbabilityReward(RewardContext())


def test_self_certainty_modes(policy_context):
    tok = policy_context.tokenizer
    texts = ["A:5", "1+1"]
    g = group(texts)
    for s, t in zip(g.samples, texts):
        s.prompt_ids = tok("2+3=")["input_ids"]
        s.response_ids = tok(t)["input_ids"]
    neg_entropy = SelfCertaintyReward(policy_context)(g, TASK)
    certainty = SelfCertaintyReward(policy_context, mode="self_certainty")(g, TASK)
    vocab = len(tok)
    assert all(-math.log(vocab) - 1e-4 <= o.value <= 0 for o in neg_entropy)  # -H in [-log V, 0]
    assert all(o.value >= -1e-5 for o in certainty)                            # KL >= 0


# -- combination -----------------------------------------------------------------------------------------


def test_gating_counts_a_term_only_when_the_outcome_passes():
    fn = RewardFunction([("correctness", 1.0, CorrectnessReward(workers=0)),
                         ("format", 0.5, FormatReward(pattern="A:"))])
    fn.terms[1].gate = "correctness"
    g = group(["A:5", "A:6"])
    fn([g], TASK)
    assert [s.reward for s in g.samples] == [1.5, 0.0]          # the wrong answer's format bonus is gated off
    assert [s.rewards["format"] for s in g.samples] == [1.0, 1.0]  # still recorded


def test_gate_must_name_another_reward():
    with pytest.raises(ConfigError, match="rewards\\[1\\].gate"):
        load_config(None, ["rewards=[{name: correctness}, {name: format, gate: nope}]"])


def test_pooled_correctness_matches_in_process_and_survives_a_crash():
    class Crashy(type(TASK)):
        def verify(self, response, record):
            if "boom" in response:
                raise RuntimeError("bad verifier")
            return super().verify(response, record)

    task = Crashy(eval_size=5)
    g = group(["A:5", "boom", "A:4"])
    pooled = CorrectnessReward(workers=2, timeout=5)
    try:
        out = pooled(g, task)
    finally:
        pooled.close()
    here = CorrectnessReward(workers=0)(group(["A:5", "boom", "A:4"]), task)
    assert values(out) == values(here) == [1.0, 0.0, 0.0]
    assert out[1].failed and "bad verifier" in out[1].reason
    assert g.samples[0].meta["extracted"] == "5"


def test_label_free_components_are_registered():
    for name in ("ttrl", "ttrv", "evol_rl", "co_reward", "rlpr", "self_certainty", "format", "overlong",
                 "lead_length", "concise_length", "otc", "reward_model", "judge", "correctness"):
        assert name in REWARDS


def test_reward_outputs_never_nan_on_empty_answers():
    g = group(["", "", ""])
    for component in (MajorityVoteReward(), FrequencyEntropyReward(), MajorityNoveltyReward(embedding="ngram")):
        out = component(g, TASK)
        assert all(isinstance(o, RewardOutput) and math.isfinite(o.value) for o in out)
    assert torch.isfinite(torch.tensor(values(FrequencyEntropyReward()(g, TASK)))).all()
