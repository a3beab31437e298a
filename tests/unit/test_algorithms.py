"""Advantage estimators, the PPO-clip loss, loss aggregation and KL estimators against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.algorithms import (
    ADVANTAGES,
    LOSSES,
    aggregate_loss,
    group_normalized_advantages,
    kl_penalty,
    ppo_clip_loss,
)

T = torch.tensor


# -- GRPO advantages ---------------------------------------------------------------------------------------


def test_grpo_one_group_hand_computed():
    # mean 0.5; unbiased std = sqrt(4 * 0.25 / 3) = 0.57735
    adv = group_normalized_advantages(T([1.0, 0.0, 0.0, 1.0]), T([0, 0, 0, 0]))
    expected = 0.5 / math.sqrt(1 / 3)
    torch.testing.assert_close(adv, T([expected, -expected, -expected, expected]), atol=1e-5, rtol=0)


def test_grpo_two_groups_are_normalized_separately():
    adv = group_normalized_advantages(T([1.0, 0.0, 3.0, 5.0, 4.0]), T([0, 0, 1, 1, 1]))
    # group 0: mean .5, std sqrt(.5) -> +-0.7071; group 1: mean 4, std 1 -> -1, 1, 0
    torch.testing.assert_close(adv, T([0.70711, -0.70711, -1.0, 1.0, 0.0]), atol=1e-4, rtol=0)


def test_grpo_all_equal_rewards_give_zero_not_nan():
    adv = group_normalized_advantages(T([0.7, 0.7, 0.7]), T([0, 0, 0]))
    assert torch.isfinite(adv).all()
    assert torch.equal(adv, torch.zeros(3))


def test_grpo_group_of_one_gives_zero():
    adv = group_normalized_advantages(T([1.0, 0.0, 1.0]), T([0, 1, 1]))
    assert adv[0].item() == 0.0
    assert adv[1].item() < 0 < adv[2].item()


def test_grpo_std_scopes():
    rewards, groups = T([1.0, 0.0, 0.0, 0.0]), T([0, 0, 1, 1])
    # batch std of [1,0,0,0] (unbiased) = 0.5; group means .5,.5,0,0
    torch.testing.assert_close(ADVANTAGES.bind("grpo", {"std_scope": "batch"})(rewards, groups),
                               T([1.0, -1.0, 0.0, 0.0]), atol=1e-5, rtol=0)
    torch.testing.assert_close(ADVANTAGES.bind("grpo", {"std_scope": "none"})(rewards, groups),
                               T([0.5, -0.5, 0.0, 0.0]), atol=1e-6, rtol=0)


@settings(max_examples=60, deadline=None)
@given(
    rewards=st.lists(st.floats(-5, 5, allow_nan=False), min_size=2, max_size=12),
    shift=st.floats(-100, 100, allow_nan=False),
    groups=st.integers(1, 3),
)
def test_grpo_invariant_to_adding_a_constant(rewards, shift, groups):
    r = T(rewards, dtype=torch.float64)
    gid = torch.arange(len(rewards)) % groups
    a = group_normalized_advantages(r, gid)
    b = group_normalized_advantages(r + shift, gid)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    # and every group's advantages sum to zero
    for g in range(groups):
        assert abs(float(a[gid == g].sum())) < 1e-6


# -- PPO-clip --------------------------------------------------------------------------------------------


def _tokens(ratios, advantages):
    old = torch.zeros(1, len(ratios))
    new = torch.log(T([ratios]))
    return new, old, T([advantages]), torch.ones(1, len(ratios))


def test_ppo_clip_hand_computed():
    new, old, adv, mask = _tokens([1.5, 0.5, 0.5, 1.5], [1.0, 1.0, -1.0, -1.0])
    loss, diag = ppo_clip_loss(new, old, adv, mask, clip_low=0.2, clip_high=0.2)
    # min(r*A, clip(r)*A): 1.5->min(1.5,1.2)=1.2 ; 0.5->0.5 ; A<0, 0.5->min(-0.5,-0.8)=-0.8 ; A<0, 1.5->-1.5
    torch.testing.assert_close(loss, T([[-1.2, -0.5, 0.8, 1.5]]), atol=1e-5, rtol=0)
    assert diag["clipped"].tolist() == [[1.0, 0.0, 1.0, 0.0]]


def test_clip_higher_widens_only_the_upper_bound():
    new, old, adv, mask = _tokens([1.25, 0.7], [1.0, -1.0])
    sym, _ = ppo_clip_loss(new, old, adv, mask, clip_low=0.2, clip_high=0.2)
    hi, _ = ppo_clip_loss(new, old, adv, mask, clip_low=0.2, clip_high=0.28)
    torch.testing.assert_close(sym, T([[-1.2, 0.8]]), atol=1e-5, rtol=0)
    torch.testing.assert_close(hi, T([[-1.25, 0.8]]), atol=1e-5, rtol=0)


def test_ratios_far_outside_the_clip_range_stay_finite():
    new = T([[80.0, -80.0]])
    old = T([[0.0, 0.0]])
    loss, diag = ppo_clip_loss(new, old, T([[1.0, -1.0]]), torch.ones(1, 2))
    assert torch.isfinite(loss).all()
    torch.testing.assert_close(loss, T([[-1.2, 0.8]]), atol=1e-5, rtol=0)
    assert diag["clipped"].tolist() == [[1.0, 1.0]]


def test_ratio_one_gradient_equals_vanilla_policy_gradient():
    logp = T([[-0.3, -1.2, -2.0], [-0.5, -0.1, -4.0]], requires_grad=True)
    adv = T([[0.5, 0.5, 0.5], [-2.0, -2.0, -2.0]])
    mask = T([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    loss, _ = ppo_clip_loss(logp, logp.detach(), adv, mask)
    aggregate_loss(loss, mask, "token_mean").backward()
    # vanilla PG: loss = -mean(A * logp) over unmasked tokens -> grad = -A * mask / 5
    torch.testing.assert_close(logp.grad, -adv * mask / 5)


def test_masked_tokens_do_not_contribute():
    new, old, adv, _ = _tokens([1.1, 3.0], [1.0, 1.0])
    mask = T([[1.0, 0.0]])
    loss, _ = ppo_clip_loss(new, old, adv, mask)
    assert aggregate_loss(loss, mask).item() == pytest.approx(-1.1, abs=1e-5)


def test_length_one_response():
    loss, _ = ppo_clip_loss(T([[math.log(1.1)]]), T([[0.0]]), T([[2.0]]), T([[1.0]]))
    assert aggregate_loss(loss, T([[1.0]]), "seq_mean_token_mean").item() == pytest.approx(-2.2, abs=1e-5)


def test_losses_registry_binds_clip_params():
    fn = LOSSES.bind("ppo_clip", {"clip_high": 0.28})
    new, old, adv, mask = _tokens([1.3], [1.0])
    loss, _ = fn(new, old, adv, mask)
    assert loss.item() == pytest.approx(-1.28, abs=1e-5)


# -- aggregation -----------------------------------------------------------------------------------------


PER_TOKEN = T([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0]])
MASK = T([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])


@pytest.mark.parametrize("mode,expected", [
    ("token_mean", (1 + 2 + 3 + 4) / 4),
    ("seq_mean_token_mean", (2.0 + 4.0) / 2),
    ("seq_mean_token_sum", (6.0 + 4.0) / 2),
])
def test_aggregation_modes(mode, expected):
    assert aggregate_loss(PER_TOKEN, MASK, mode).item() == pytest.approx(expected)


@pytest.mark.parametrize("mode", ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum"])
def test_micro_batches_with_global_normalizers_add_up_to_the_full_batch(mode):
    full = aggregate_loss(PER_TOKEN, MASK, mode)
    kw = dict(num_tokens=float(MASK.sum()), num_seqs=2.0)
    parts = sum(aggregate_loss(PER_TOKEN[i : i + 1], MASK[i : i + 1], mode, **kw) for i in range(2))
    assert parts.item() == pytest.approx(full.item())


def test_aggregation_of_fully_masked_batch_is_zero_not_nan():
    for mode in ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum"):
        assert aggregate_loss(PER_TOKEN, torch.zeros_like(MASK), mode).item() == 0.0


# -- KL ---------------------------------------------------------------------------------------------------


def test_kl_estimators_hand_computed():
    logp, ref = T([-1.0]), T([-2.0])  # r = ref - logp = -1
    assert kl_penalty(logp, ref, "k1").item() == pytest.approx(1.0)
    assert kl_penalty(logp, ref, "k2").item() == pytest.approx(0.5)
    assert kl_penalty(logp, ref, "k3").item() == pytest.approx(math.exp(-1.0) + 1.0 - 1.0)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-30, 0, allow_nan=False), min_size=2, max_size=2))
def test_k3_is_nonnegative_finite_and_zero_at_equality(pair):
    a, b = T([pair[0]]), T([pair[1]])
    k3 = kl_penalty(a, b, "k3")
    assert torch.isfinite(k3).all() and k3.item() >= 0
    assert kl_penalty(a, a, "k3").item() == 0.0


def test_unknown_kl_estimator():
    with pytest.raises(ValueError, match="k1, k2 or k3"):
        kl_penalty(T([0.0]), T([0.0]), "k4")  # type: ignore[arg-type]


# -- excluded rows (a non-finite reward): every estimator runs as if they were not in the batch ---------------


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo", "lite_ppo", "reinforce_pp", "reinforce_pp_baseline"])
def test_excluded_rows_are_left_out_of_every_statistic(name):
    from rlvr.algorithms.inputs import call_on_rows, tensor_inputs

    fn = ADVANTAGES.bind(name, {}, where="algorithm.advantage")
    rewards = T([1.0, 0.0, 0.0, 1.0, 0.0, 1.0])
    mask = torch.ones(6, 4)
    mask[:, :2] = 0
    token_rewards = torch.zeros(6, 4)
    token_rewards[:, -1] = rewards
    inputs = {"rewards": rewards, "group_ids": T([0, 0, 0, 0, 1, 1]), "mask": mask, "token_rewards": token_rewards}
    valid = torch.tensor([True, True, False, True, True, True])
    keep = valid.nonzero().squeeze(1)
    alone = fn(*[inputs[k][keep] for k in tensor_inputs(fn)])  # the batch without row 2
    out = call_on_rows(fn, inputs, valid, name)
    torch.testing.assert_close(out[keep], alone)
    assert out[2].abs().sum() == 0
    assert torch.equal(call_on_rows(fn, inputs, None, name), fn(*[inputs[k] for k in tensor_inputs(fn)]))
    assert not torch.allclose(out[keep], fn(*[inputs[k] for k in tensor_inputs(fn)])[keep])  # row 2 mattered


def test_grpo_with_an_excluded_sample_hand_computed():
    from rlvr.algorithms.inputs import call_on_rows

    # rewards 1, 0, (excluded), 1: mean 2/3, unbiased std sqrt(((1/3)^2 * 2 + (2/3)^2) / 2) = sqrt(1/3)
    adv = call_on_rows(group_normalized_advantages, {"rewards": T([1.0, 0.0, 0.0, 1.0]), "group_ids": T([0, 0, 0, 0])},
                       torch.tensor([True, True, False, True]), "grpo")
    s = math.sqrt(1 / 3) + 1e-6
    torch.testing.assert_close(adv, T([(1 / 3) / s, -(2 / 3) / s, 0.0, (1 / 3) / s]))
