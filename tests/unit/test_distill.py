"""Teacher losses and advantages (rlvr.algorithms.distill): hand-computed values on tiny tensors (2 tokens,
vocabulary 3), edge cases (teacher == student, masks, beta endpoints), and float64 gradient checks."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.algorithms import ADVANTAGES, LOSSES
from rlvr.algorithms.distill import (
    generalized_jsd,
    gkd_use_student_samples,
    kd_coefficient,
    kd_sample_mask,
    kdrl_loss,
    on_policy_distill_advantages,
    teacher_kl,
)
from rlvr.algorithms.inputs import (
    ADVANTAGE_INPUTS,
    LOSS_INPUTS,
    call_with_inputs,
    check_inputs,
    tensor_inputs,
)
from rlvr.registry import RegistryError

T = torch.tensor
L2 = math.log(2.0)


@pytest.fixture(autouse=True)
def one_thread():
    """Tensors of a dozen numbers: a second intra-op thread only adds wake-ups on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def close(actual, expected, atol=1e-6):
    torch.testing.assert_close(actual.to(torch.float64), T(expected, dtype=torch.float64), atol=atol, rtol=0)


def _pair():
    """Student log-probs [log .5, log .25], teacher [log .25, log .5]: log r = log pi_t - log pi_s = [-l2, l2]."""
    student = T([[math.log(0.5), math.log(0.25)]], dtype=torch.float64)
    teacher = T([[math.log(0.25), math.log(0.5)]], dtype=torch.float64)
    return student, teacher


# -- reverse-KL estimators ----------------------------------------------------------------------------------


def test_teacher_kl_estimators_match_schulmans_formulas():
    s, t = _pair()
    close(teacher_kl(s, t, "k1"), [[L2, -L2]])                       # -log r
    close(teacher_kl(s, t, "k2"), [[L2 ** 2 / 2, L2 ** 2 / 2]])      # (log r)^2 / 2
    close(teacher_kl(s, t, "k3"), [[0.5 - 1 + L2, 2 - 1 - L2]])      # r - 1 - log r, r = 1/2 and 2
    for est in ("k1", "k2", "k3"):
        close(teacher_kl(s, s.clone(), est), [[0.0, 0.0]])           # teacher == student: zero
    with pytest.raises(ValueError, match="k1, k2 or k3"):
        teacher_kl(s, t, "forward_k3")


def test_k3_is_nonnegative_and_k2_gradient_is_the_reverse_kl_policy_gradient():
    g = torch.Generator().manual_seed(0)
    s = torch.randn(4, 7, generator=g, dtype=torch.float64) - 2
    t = torch.randn(4, 7, generator=g, dtype=torch.float64) - 2
    assert bool((teacher_kl(s, t, "k3") >= 0).all()) and bool((teacher_kl(s, t, "k2") >= 0).all())
    leaf = s.clone().requires_grad_()
    teacher_kl(leaf, t, "k2").sum().backward()
    close(leaf.grad, (s - t).tolist())                                # d/d log pi_s = log pi_s - log pi_t


# -- schedule and masking -------------------------------------------------------------------------------------


def test_kd_coefficient_schedules():
    assert kd_coefficient(7, schedule="constant", start=0.3) == 0.3
    assert kd_coefficient(0, schedule="linear", start=5e-3, end=1e-3, total_steps=10) == pytest.approx(5e-3)
    assert kd_coefficient(5, schedule="linear", start=5e-3, end=1e-3, total_steps=10) == pytest.approx(3e-3)
    assert kd_coefficient(50, schedule="linear", start=5e-3, end=1e-3, total_steps=10) == pytest.approx(1e-3)
    assert kd_coefficient(0, schedule="cosine", start=1.0, end=0.0, total_steps=4) == pytest.approx(1.0)
    # (1 + cos(pi/4)) / 2 = 0.853553 ; (1 + cos(pi/2)) / 2 = 0.5
    assert kd_coefficient(1, schedule="cosine", start=1.0, end=0.0, total_steps=4) == pytest.approx(0.8535534)
    assert kd_coefficient(2, schedule="cosine", start=1.0, end=0.0, total_steps=4) == pytest.approx(0.5)
    assert kd_coefficient(9, schedule="cosine", start=1.0, end=0.0, total_steps=4) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="total_steps"):
        kd_coefficient(0, total_steps=0)
    with pytest.raises(ValueError, match="constant, linear or cosine"):
        kd_coefficient(0, schedule="exp")  # type: ignore[arg-type]


def test_kd_sample_mask_variants():
    correct = T([True, False, False, False, True])
    groups = T([0, 0, 1, 1, 2])
    assert kd_sample_mask(correct, groups, "none").tolist() == [1, 1, 1, 1, 1]
    assert kd_sample_mask(correct, groups, "incorrect").tolist() == [0, 1, 1, 1, 0]
    assert kd_sample_mask(correct, groups, "unsolved_group").tolist() == [0, 0, 1, 1, 0]
    with pytest.raises(ValueError, match="unsolved_group"):
        kd_sample_mask(correct, groups, "bogus")  # type: ignore[arg-type]


# -- KDRL loss ------------------------------------------------------------------------------------------------


def test_kdrl_loss_hand_computed():
    s, t = _pair()
    s2 = torch.cat([s, s]).requires_grad_()
    t2 = torch.cat([t, t])
    adv = T([[1.0, 1.0], [-1.0, -1.0]], dtype=torch.float64)
    mask = torch.ones(2, 2, dtype=torch.float64)
    correct, groups = T([True, False]), T([0, 0])
    # on policy: ratio 1, pg = -A ; KD term beta * m_i * k2 = 0.1 * m_i * l2^2/2
    loss, diag = kdrl_loss(s2, s2.detach(), adv, mask, t2, correct, groups, kd_coef=0.1, kd_masking="incorrect")
    k2 = L2 ** 2 / 2
    close(loss, [[-1.0, -1.0], [1.0 + 0.1 * k2, 1.0 + 0.1 * k2]])
    close(diag["teacher_kl"], [[k2, k2], [k2, k2]])
    assert diag["clipped"].sum() == 0
    # kd_coef = 0 is exactly the clipped surrogate
    plain, _ = kdrl_loss(s2, s2.detach(), adv, mask, t2, correct, groups, kd_coef=0.0)
    close(plain, [[-1.0, -1.0], [1.0, 1.0]])
    # teacher == student: no KD contribution whatever the coefficient
    same, _ = kdrl_loss(s2, s2.detach(), adv, mask, s2.detach(), correct, groups, kd_coef=10.0)
    close(same, [[-1.0, -1.0], [1.0, 1.0]])


def test_kdrl_loss_gradcheck_float64():
    g = torch.Generator().manual_seed(1)
    old = torch.randn(3, 4, generator=g, dtype=torch.float64) - 1
    new = (old + 0.05 * torch.randn(3, 4, generator=g, dtype=torch.float64)).requires_grad_()  # inside the clip
    teacher = torch.randn(3, 4, generator=g, dtype=torch.float64) - 1
    adv = torch.randn(3, 4, generator=g, dtype=torch.float64)
    mask = T([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.float64)
    correct, groups = T([False, True, False]), T([0, 0, 1])
    for est in ("k1", "k2", "k3"):
        def f(x, est=est):
            return kdrl_loss(x, old, adv, mask, teacher, correct, groups, kd_coef=0.3, kd_estimator=est)[0]
        assert torch.autograd.gradcheck(f, (new,))


def test_kdrl_registered_with_known_inputs_and_checked_knobs():
    fn = LOSSES.bind("kdrl", {"kd_coef": 0.01, "kd_masking": "incorrect"})
    assert check_inputs(fn, LOSS_INPUTS, "kdrl") == []
    assert "teacher_logprobs" in tensor_inputs(fn)
    s, t = _pair()
    out, _ = call_with_inputs(fn, {"logprobs": s, "old_logprobs": s, "advantages": torch.zeros_like(s),
                                   "mask": torch.ones_like(s), "teacher_logprobs": t, "correct": T([False]),
                                   "group_ids": T([0])}, "kdrl")
    close(out, [[0.01 * L2 ** 2 / 2] * 2])
    with pytest.raises(RegistryError, match="kd_masking"):
        LOSSES.bind("kdrl", {"kd_masking": "wrong_only"})
    with pytest.raises(RegistryError, match="kd_coef"):
        LOSSES.bind("kdrl", {"kd_coef": -1.0})


# -- on-policy distillation advantage ------------------------------------------------------------------------


def test_on_policy_distill_advantage_hand_computed():
    s, t = _pair()
    mask = torch.ones_like(s)
    close(on_policy_distill_advantages(t, s, mask), [[-L2, L2]])              # -(log pi_s - log pi_t)
    close(on_policy_distill_advantages(t, s, mask, coef=2.0), [[-2 * L2, 2 * L2]])
    # gamma = 0.5: A_0 = -(l2 + 0.5 * (-l2)) = -l2/2, A_1 = l2
    close(on_policy_distill_advantages(t, s, mask, gamma=0.5), [[-L2 / 2, L2]])
    close(on_policy_distill_advantages(t, s, T([[1.0, 0.0]], dtype=torch.float64)), [[-L2, 0.0]])
    close(on_policy_distill_advantages(s.clone(), s, mask), [[0.0, 0.0]])     # teacher == student
    # a gap in the mask (a tool observation) is skipped by the discounted sum: A_0 = -(l2 + 0.5 * (-l2))
    s3 = T([[s[0, 0].item(), 0.0, s[0, 1].item()]], dtype=torch.float64)
    t3 = T([[t[0, 0].item(), -5.0, t[0, 1].item()]], dtype=torch.float64)
    gap = T([[1.0, 0.0, 1.0]], dtype=torch.float64)
    close(on_policy_distill_advantages(t3, s3, gap, gamma=0.5), [[-L2 / 2, 0.0, L2]])
    close(on_policy_distill_advantages(t3, s3, gap), [[-L2, 0.0, L2]])


def test_on_policy_distill_registered():
    fn = ADVANTAGES.bind("on_policy_distill", {})
    assert tensor_inputs(fn) == ["teacher_logprobs", "old_logprobs", "mask"]
    assert check_inputs(fn, ADVANTAGE_INPUTS, "on_policy_distill") == []
    assert "arXiv:2306.13649" in ADVANTAGES.get("on_policy_distill").__doc__
    with pytest.raises(RegistryError, match="gamma"):
        ADVANTAGES.bind("on_policy_distill", {"gamma": 2.0})


# -- GKD generalized JSD ---------------------------------------------------------------------------------------


def _kl(p, q):
    return sum(a * math.log(a / b) for a, b in zip(p, q))


P_T = [0.7, 0.2, 0.1]   # teacher, token 0
P_S = [0.2, 0.4, 0.4]   # student, token 0
Q_T = [1 / 3] * 3       # token 1: both uniform


def _logits():
    teacher = torch.log(T([[P_T, Q_T]], dtype=torch.float64)) + 3.0  # a shift leaves the softmax unchanged
    student = torch.log(T([[P_S, Q_T]], dtype=torch.float64))
    return student, teacher


def test_generalized_jsd_hand_computed_and_endpoints():
    s, t = _logits()
    mask = torch.ones(1, 2, dtype=torch.float64)
    close(generalized_jsd(s, t, mask, beta=0.0), [[_kl(P_T, P_S), 0.0]])      # forward KL(P_t || P_s)
    close(generalized_jsd(s, t, mask, beta=1.0), [[_kl(P_S, P_T), 0.0]])      # reverse KL(P_s || P_t)
    m = [0.5 * a + 0.5 * b for a, b in zip(P_T, P_S)]
    close(generalized_jsd(s, t, mask, beta=0.5), [[0.5 * _kl(P_T, m) + 0.5 * _kl(P_S, m), 0.0]])
    m = [0.2 * a + 0.8 * b for a, b in zip(P_T, P_S)]
    close(generalized_jsd(s, t, mask, beta=0.2), [[0.2 * _kl(P_T, m) + 0.8 * _kl(P_S, m), 0.0]])
    # near the ends, JSD_b / b -> forward KL and JSD_b / (1 - b) -> reverse KL
    eps = 1e-6
    assert generalized_jsd(s, t, mask, beta=eps)[0, 0].item() / eps == pytest.approx(_kl(P_T, P_S), rel=1e-4)
    assert generalized_jsd(s, t, mask, beta=1 - eps)[0, 0].item() / eps == pytest.approx(_kl(P_S, P_T), rel=1e-4)
    close(generalized_jsd(s, t, T([[0.0, 1.0]], dtype=torch.float64), beta=0.5), [[0.0, 0.0]])  # masked


def test_generalized_jsd_zero_for_equal_models_and_temperature():
    s, t = _logits()
    mask = torch.ones(1, 2, dtype=torch.float64)
    for beta in (0.0, 0.3, 1.0):
        close(generalized_jsd(t, t.clone(), mask, beta=beta), [[0.0, 0.0]])
    # a huge temperature flattens both distributions to uniform
    close(generalized_jsd(s, t, mask, beta=0.5, temperature=1e6), [[0.0, 0.0]])
    # a vocabulary entry both models rule out (logit -inf) contributes 0, not NaN
    blocked = torch.cat([t, torch.full((1, 2, 1), -math.inf, dtype=torch.float64)], -1)
    for beta in (0.0, 0.5, 1.0):
        out = generalized_jsd(blocked, blocked.clone(), mask, beta=beta)
        assert not out.isnan().any()
        close(out, [[0.0, 0.0]])
    with pytest.raises(ValueError, match="temperature"):
        generalized_jsd(s, t, mask, temperature=0.0)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        generalized_jsd(s, t, mask, beta=1.5)
    with pytest.raises(ValueError, match="tokenizer"):
        generalized_jsd(s, t[..., :2], mask)


def test_generalized_jsd_gradcheck_float64():
    g = torch.Generator().manual_seed(2)
    s = torch.randn(2, 2, 3, generator=g, dtype=torch.float64).requires_grad_()
    t = torch.randn(2, 2, 3, generator=g, dtype=torch.float64)
    mask = T([[1.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    for beta in (0.0, 0.4, 1.0):
        assert torch.autograd.gradcheck(lambda x, b=beta: generalized_jsd(x, t, mask, beta=b), (s,))


def test_gkd_lambda_coin():
    assert not any(gkd_use_student_samples(i, lmbda=0.0) for i in range(100))
    assert all(gkd_use_student_samples(i, lmbda=1.0) for i in range(100))
    draws = [gkd_use_student_samples(i, lmbda=0.3, seed=5) for i in range(2000)]
    assert draws == [gkd_use_student_samples(i, lmbda=0.3, seed=5) for i in range(2000)]  # seeded
    assert 0.25 < sum(draws) / len(draws) < 0.35
    with pytest.raises(ValueError, match="lambda"):
        gkd_use_student_samples(0, lmbda=1.2)


# -- tiny trainings: the estimators move a tabular student towards the teacher ------------------------------


def _exact_reverse_kl(student_logits, teacher_logits):
    """Sum over positions of KL(pi_s || pi_t), computed exactly from the tables."""
    ls, lt = torch.log_softmax(student_logits, -1), torch.log_softmax(teacher_logits, -1)
    return float((ls.exp() * (ls - lt)).sum())


@pytest.mark.parametrize("method", ["on_policy_distill", "kdrl_k2", "gkd"])
def test_tiny_distillation_reduces_the_reverse_kl(method):
    """A student that is a table of logits per position (4 positions, vocabulary 3) samples 64 responses a
    step; 60 plain gradient steps of each method must cut the exact reverse KL to a fixed teacher by over 80%.
    (on_policy_distill and kdrl with k2 and A = 0 have the same gradient, (log pi_s - log pi_t) grad log pi_s,
    so they end at the same student.)"""
    from rlvr.algorithms.losses import ppo_clip_loss

    g = torch.Generator().manual_seed(0)
    teacher = 2.0 * torch.randn(4, 3, generator=g)
    student = torch.zeros(4, 3, requires_grad=True)
    before = _exact_reverse_kl(student.detach(), teacher)
    n, mask = 64, torch.ones(64, 4)
    for _ in range(60):
        probs = torch.softmax(student.detach(), -1)
        tokens = torch.multinomial(probs, n, replacement=True, generator=g).T            # [N, T] y ~ pi_s
        pos = torch.arange(4).expand(n, 4)
        logp = torch.log_softmax(student, -1)[pos, tokens]                                # differentiable
        teacher_lp = torch.log_softmax(teacher, -1)[pos, tokens]
        if method == "on_policy_distill":
            adv = on_policy_distill_advantages(teacher_lp, logp.detach(), mask)
            per_token, _ = ppo_clip_loss(logp, logp.detach(), adv, mask)
        elif method == "kdrl_k2":  # no reward signal (A = 0): only the KD term moves the student
            per_token, _ = kdrl_loss(logp, logp.detach(), torch.zeros(n, 4), mask, teacher_lp,
                                     torch.zeros(n, dtype=torch.bool), torch.zeros(n, dtype=torch.long),
                                     kd_coef=1.0, kd_estimator="k2")
        else:  # GKD on the full distributions at the sampled positions, beta = 0.5
            per_token = generalized_jsd(student.expand(n, 4, 3), teacher.expand(n, 4, 3), mask, beta=0.5)
        student.grad = None
        (per_token * mask).sum(-1).mean().backward()
        with torch.no_grad():  # plain gradient descent (torch.optim's first use costs seconds of imports)
            student -= 1.0 * student.grad
    after = _exact_reverse_kl(student.detach(), teacher)
    print(f"{method}: reverse KL {before:.4f} -> {after:.4f}")
    assert after < 0.2 * before, (before, after)
