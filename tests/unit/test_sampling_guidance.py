"""Off-policy guidance: the luffy sampler (teacher solutions mixed into failing groups) and the luffy / sft_mix
losses, against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.algorithms import LOSSES
from rlvr.algorithms.guidance import adaptive_sft_coef
from rlvr.models.byte_tokenizer import save_byte_tokenizer
from rlvr.sampling import SAMPLERS, StepContext
from rlvr.sampling.guidance import mean_token_logprob, off_policy_sample, teacher_solutions
from rlvr.tasks.addition import AdditionTask, worked_solution
from rlvr.types import Batch, Group, Sample, TaskRecord


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return save_byte_tokenizer(tmp_path_factory.mktemp("tok"))


def addition_records():
    return [TaskRecord(id=f"r{i}", question=f"{a}+{b}", answer=str(a + b), meta={"a": a, "b": b})
            for i, (a, b) in enumerate([(12, 35), (48, 57), (7, 5)])]


class WrongThenRight:
    """ctx.rollout stand-in: prompt r0's samples are all wrong, the others have one right answer."""

    def __init__(self):
        self.calls = 0

    def __call__(self, records, n):
        self.calls += 1
        out = []
        for r in records:
            samples = []
            for k in range(n):
                ok = r.id != "r0" and k == 0
                samples.append(Sample([1, 2], [3, 4, 5], logprobs=[-1.0] * 3, text="A:0", reward=float(ok),
                                      correct=ok))
            out.append(Group(record=r, prompt_ids=[1, 2], samples=samples))
        return out


def verify_score(task):
    def score(groups):
        for g in groups:
            for s in g.samples:
                v = task.verify(s.text, g.record)
                s.reward, s.correct = v.reward, v.correct
    return score


def ctx_for(tokenizer, rollout, task, n=4, prompts_per_step=3, policy=None):
    return StepContext(step=1, prompts_per_step=prompts_per_step, n=n, rollout=rollout, score=verify_score(task),
                       task=task, tokenizer=tokenizer, policy=policy)


def test_teacher_solutions_come_from_meta_or_the_task():
    task = AdditionTask(digits=(1, 2), train_size=10, eval_size=5)
    rec = addition_records()[1]
    assert teacher_solutions(rec, task) == [worked_solution(48, 57)[0]]
    assert teacher_solutions(TaskRecord("x", "q", meta={"solution": "S"}), task) == ["S"]
    assert teacher_solutions(TaskRecord("x", "q", meta={"solutions": ["S1", "S2"]}), None) == ["S1", "S2"]
    assert teacher_solutions(TaskRecord("x", "q"), None) == []


def test_off_policy_sample_is_the_solution_tokens_with_zero_logprobs(tokenizer):
    s = off_policy_sample([9, 9], "1+2=3;3|A:3", tokenizer)
    assert s.response_ids == list(tokenizer("1+2=3;3|A:3", add_special_tokens=False)["input_ids"]) + [
        tokenizer.eos_token_id]
    assert s.logprobs == [0.0] * len(s.response_ids) and s.loss_mask == [1] * len(s.response_ids)
    assert s.meta["off_policy"] is True and s.prompt_ids == [9, 9]


def test_luffy_sampler_replaces_one_sample_in_failing_groups(tokenizer):
    task = AdditionTask(digits=(1, 2), train_size=10, eval_size=5)
    sampler = SAMPLERS.build("luffy", {}, prompts=addition_records(), seed=0)
    sampler.order.shuffle = False
    groups, m = sampler.next_batch(ctx_for(tokenizer, WrongThenRight(), task))
    g0 = groups[0]
    assert g0.record.id == "r0" and len(g0.samples) == 4
    off = g0.samples[-1]
    assert off.meta["off_policy"] and off.correct and off.reward == 1.0
    assert off.text == worked_solution(12, 35)[0]
    assert all(not s.meta.get("off_policy") for g in groups[1:] for s in g.samples)
    assert m["guided_groups"] == 1 and m["off_policy_samples"] == 1 and m["on_policy_replaced"] == 1
    batch = Batch.from_groups(groups, pad_id=0)
    assert batch.off_policy.tolist() == [False] * 3 + [True] + [False] * 8
    row = 3
    start = int(batch.prompt_lengths[row])
    assert batch.old_logprobs[row, start: start + len(off.response_ids)].abs().sum() == 0


def test_luffy_sampler_always_and_append_modes(tokenizer):
    task = AdditionTask(digits=(1, 2), train_size=10, eval_size=5)
    sampler = SAMPLERS.build("luffy", {"trigger": "always", "mode": "append"}, prompts=addition_records(), seed=0)
    groups, m = sampler.next_batch(ctx_for(tokenizer, WrongThenRight(), task))
    assert [len(g.samples) for g in groups] == [5, 5, 5] and m["guided_groups"] == 3


def test_luffy_sampler_skips_wrong_or_missing_teachers(tokenizer):
    task = AdditionTask(digits=(1, 2), train_size=10, eval_size=5)
    recs = [TaskRecord("r0", "12+35", answer="47", meta={"solution": "2+5=7;7|1+3=4;47|A:48"}),
            TaskRecord("r1", "1+1", answer="2")]
    sampler = SAMPLERS.build("luffy", {}, prompts=recs, seed=0)
    groups, m = sampler.next_batch(StepContext(step=1, prompts_per_step=2, n=2, rollout=WrongThenRight(),
                                               score=verify_score(task), task=None, tokenizer=tokenizer))
    # r0 fails everywhere but its teacher's answer is wrong (require_correct drops it); r1 has a right answer
    assert m["missing_solutions"] == 1 and m["guided_groups"] == 0


def test_ampo_likelihood_selection_prefers_what_the_policy_finds_likely(tokenizer, tiny_model_dir):
    from rlvr.models import load_causal_lm

    policy = load_causal_lm(str(tiny_model_dir), dtype=torch.float32, device=torch.device("cpu"))
    task = AdditionTask(digits=(1, 2), train_size=10, eval_size=5)
    sols = ["2+5=7;7|1+3=4;47|A:47", "Answer: 47", "47 is 12+35 so A:47"]
    recs = [TaskRecord("r0", "12+35", answer="47", meta={"solutions": sols})]
    cands = [off_policy_sample([1, 2], t, tokenizer) for t in sols]
    scores = mean_token_logprob(policy, cands)
    best = sols[max(range(3), key=lambda i: scores[i])]
    sampler = SAMPLERS.build("luffy", {"select": "likelihood"}, prompts=recs, seed=0)
    groups, m = sampler.next_batch(StepContext(step=1, prompts_per_step=1, n=3, rollout=WrongThenRight(),
                                               score=verify_score(task), tokenizer=tokenizer, policy=policy))
    assert groups[0].samples[-1].text == best and m["guided_groups"] == 1


# -- losses -----------------------------------------------------------------------------------------------


def test_luffy_loss_hand_computed():
    logp = torch.log(torch.tensor([[0.5, 0.2], [0.1, 0.9]]))
    old = torch.log(torch.tensor([[0.4, 0.2], [1.0, 1.0]]))  # row 1 is off-policy: behaviour log-prob 0
    adv = torch.tensor([[1.0, 1.0], [2.0, 2.0]])
    mask = torch.ones(2, 2)
    off = torch.tensor([False, True])
    loss, diag = LOSSES.bind("luffy", {"gamma": 0.1})(logp, old, adv, mask, off)
    # on-policy row: ratio 1.25 clipped at 1.2 for A > 0 -> -1.2; ratio 1 -> -1
    assert loss[0].tolist() == pytest.approx([-1.2, -1.0])
    # off-policy row: -A * p/(p + 0.1)
    assert loss[1].tolist() == pytest.approx([-2 * 0.1 / 0.2, -2 * 0.9 / 1.0])
    assert diag["clipped"].tolist() == [[1.0, 0.0], [0.0, 0.0]]
    assert diag["off_policy_prob"][1].tolist() == pytest.approx([0.1, 0.9])
    loss, _ = LOSSES.bind("luffy", {"on_policy_clip": False})(logp, old, adv, mask, off)
    assert loss[0].tolist() == pytest.approx([-1.25, -1.0])


def test_luffy_shaping_gradient_amplifies_low_probability_tokens():
    logp = torch.log(torch.tensor([[0.01, 0.9]])).requires_grad_(True)
    loss, _ = LOSSES.bind("luffy", {"gamma": 0.1})(logp, torch.zeros(1, 2), torch.ones(1, 2), torch.ones(1, 2),
                                                   torch.tensor([True]))
    loss.sum().backward()
    # d/dlogp of -p/(p+g) = -g p / (p+g)^2
    expected = [-0.1 * p / (p + 0.1) ** 2 for p in (0.01, 0.9)]
    assert logp.grad[0].tolist() == pytest.approx(expected, rel=1e-5)
    # versus plain importance sampling (-p): gradient -p; shaping is 1/(p+g)^2 * g ~ 8.3x larger at p = 0.01
    assert expected[0] / -0.01 == pytest.approx(0.1 / 0.11 ** 2)


def test_rl_plus_loss_hand_computed():
    logp = torch.log(torch.tensor([[0.5, 0.2], [0.1, 0.9]]))
    old = torch.log(torch.tensor([[0.4, 0.2], [0.2, 0.6]]))  # row 1: external tokens, old policy's log-probs
    adv = torch.tensor([[1.0, 1.0], [2.0, -1.0]])
    mask = torch.ones(2, 2)
    off = torch.tensor([False, True])
    loss, diag = LOSSES.bind("rl_plus", {})(logp, old, adv, mask, off)
    assert loss[0].tolist() == pytest.approx([-1.2, -1.0])  # PPO-clip as usual
    # w = p / (0.5 q + 0.5 (q + 1) / 2) = p / (0.75 q + 0.25); explore = (1 - p) ** 0.5
    w = [0.1 / (0.75 * 0.2 + 0.25), 0.9 / (0.75 * 0.6 + 0.25)]
    expected = [-w[0] * 2.0 * 0.9 ** 0.5, -w[1] * -1.0 * 0.1 ** 0.5]
    assert loss[1].tolist() == pytest.approx(expected, rel=1e-6)
    assert diag["ratio"][1].tolist() == pytest.approx(w, rel=1e-6)
    capped, _ = LOSSES.bind("rl_plus", {"max_ratio": 1.0, "exploration_gamma": 0.0})(logp, old, adv, mask, off)
    assert capped[1].tolist() == pytest.approx([-2.0 * w[0], 1.0 * min(w[1], 1.0)], rel=1e-6)
    # the weight stays bounded where the plain ratio p / q would explode
    tiny = torch.log(torch.tensor([[1e-6]]))
    lo, diag = LOSSES.bind("rl_plus", {})(torch.log(torch.tensor([[0.5]])), tiny, torch.ones(1, 1),
                                          torch.ones(1, 1), torch.tensor([True]))
    assert diag["ratio"].item() == pytest.approx(0.5 / (0.75e-6 + 0.25), rel=1e-4)


def test_rl_plus_exploration_factor_is_not_differentiated():
    logp = torch.log(torch.tensor([[0.3]])).requires_grad_(True)
    old = torch.log(torch.tensor([[0.3]]))
    loss, _ = LOSSES.bind("rl_plus", {})(logp, old, torch.ones(1, 1), torch.ones(1, 1), torch.tensor([True]))
    loss.sum().backward()
    # d/dlogp of -(p / c) * sg[(1 - p)^0.5] = -(p / c) * (1 - p)^0.5, c = 0.75 * 0.3 + 0.25
    assert logp.grad.item() == pytest.approx(-(0.3 / (0.75 * 0.3 + 0.25)) * 0.7 ** 0.5, rel=1e-5)


def test_sft_mix_loss_adaptive_coefficient():
    logp = torch.log(torch.tensor([[0.5, 0.5], [math.exp(-1.0), math.exp(-3.0)]]))
    old = logp.clone()
    adv = torch.tensor([[1.0, 1.0], [5.0, 5.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0]])
    off = torch.tensor([False, True])
    lam = adaptive_sft_coef(logp, mask, off, coef=1.0, scale=1.0)
    assert float(lam) == pytest.approx(2.0 / 3.0)  # d = mean(1, 3) = 2 -> 2 / (2 + 1)
    loss, diag = LOSSES.bind("sft_mix", {})(logp, old, adv, mask, off)
    assert loss[0].tolist() == pytest.approx([-1.0, -1.0])  # on-policy: -r A with r = 1
    assert loss[1].tolist() == pytest.approx([2 / 3 * 1.0, 2 / 3 * 3.0])  # lambda * NLL, advantage unused
    loss, _ = LOSSES.bind("sft_mix", {"adaptive": False, "sft_coef": 0.5})(logp, old, adv, mask, off)
    assert loss[1].tolist() == pytest.approx([0.5, 1.5])
    # no demonstrations in the batch: lambda 0, plain PPO
    assert float(adaptive_sft_coef(logp, mask, torch.tensor([False, False]), 1.0, 1.0)) == 0.0
