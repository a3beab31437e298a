"""The loss library: policy losses, regularizers, token selection, KL directions and coefficient controllers.

Pure tensor tests: small cases against hand-computed values (arithmetic in the comments), edge cases
(ratios far outside the clip range, masked tokens, length-1 responses, fully masked rows), autograd gradient
checks, and micro-batch exactness of the aggregation.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.algorithms.controllers import AdaptiveKLController, FixedKLController, TargetEntropyController
from rlvr.algorithms.inputs import LOSS_INPUTS, call_with_inputs, check_inputs, tensor_inputs
from rlvr.algorithms.kl import KL_ESTIMATORS, kl_penalty
from rlvr.algorithms.losses import (
    LOSSES,
    aggregate_loss,
    clip_cov_loss,
    cpgd_loss,
    dcpo_loss,
    dcpo_ratio_bounds,
    entropy_bonus,
    gspo_loss,
    kl_cov_loss,
    pacs_loss,
    ppo_clip_loss,
    token_covariance,
    top_entropy_mask,
    truncated_is_weights,
)
from rlvr.registry import RegistryError

T = torch.tensor
NEW_LOSSES = ["ppo_clip", "dcpo", "gspo", "cpgd", "clip_cov", "kl_cov", "pacs"]


def _tokens(ratios, advantages, old=0.0):
    """One row: old log-probs `old`, new log-probs old + log(ratio), as a leaf that collects gradients."""
    old_lp = torch.full((1, len(ratios)), float(old), dtype=torch.float64)
    new = (old_lp + torch.log(T([ratios], dtype=torch.float64))).requires_grad_()
    return new, old_lp, T([advantages], dtype=torch.float64), torch.ones(1, len(ratios), dtype=torch.float64)


def _close(actual, expected, atol=1e-5):
    torch.testing.assert_close(actual, T(expected, dtype=actual.dtype), atol=atol, rtol=0)


def _available(logp, old, adv, mask, rewards=None, group_ids=None):
    n = logp.shape[0]
    return {
        "logprobs": logp, "old_logprobs": old, "advantages": adv, "mask": mask,
        "rewards": rewards if rewards is not None else (torch.arange(n) % 2).to(logp.dtype),
        "group_ids": group_ids if group_ids is not None else torch.arange(n) // 2,
        "entropy": torch.rand(logp.shape, dtype=logp.dtype), "ref_logprobs": old, "behaviour_logprobs": old,
    }


# -- registry and the input contract ----------------------------------------------------------------------


@pytest.mark.parametrize("name", NEW_LOSSES)
def test_every_loss_binds_with_defaults_and_names_known_inputs(name):
    fn = LOSSES.bind(name, {})
    assert check_inputs(fn, LOSS_INPUTS, name) == []
    assert set(tensor_inputs(fn)) <= set(LOSS_INPUTS)


def test_all_registered_losses_follow_the_contract():
    assert set(NEW_LOSSES) <= set(LOSSES.names())
    for name in LOSSES.names():
        assert check_inputs(LOSSES.bind(name, {}), LOSS_INPUTS, name) == []


@pytest.mark.parametrize("name,params,key", [
    ("ppo_clip", {"dual_clip": 0.5}, "dual_clip"),
    ("dcpo", {"max_ratio": 1.0}, "max_ratio"),
    ("gspo", {"variant": "tokens"}, "variant"),
    ("pacs", {"baseline": "mean"}, "baseline"),
    ("kl_cov", {"kl_ratio": 0.0}, "kl_ratio"),
    ("cpgd", {"drift": 0.1}, "drift"),
])
def test_bad_knobs_fail_at_bind_time_naming_the_key(name, params, key):
    with pytest.raises(RegistryError, match=key):
        LOSSES.bind(name, params)


def test_old_calls_keep_working():
    new, old, adv, mask = _tokens([1.5, 0.5], [1.0, -1.0])
    loss, diag = ppo_clip_loss(new, old, adv, mask, clip_low=0.2, clip_high=0.2)
    _close(loss, [[-1.2, 0.8]])  # 1.5 -> min(1.5, 1.2); A<0, 0.5 -> -min(-0.5, -0.8)
    assert set(diag) == {"clipped", "ratio"}
    assert aggregate_loss(T([[1.0, 3.0]]), T([[1.0, 1.0]])).item() == pytest.approx(2.0)
    assert kl_penalty(T([-1.0]), T([-2.0])).item() == pytest.approx(math.exp(-1.0))


# -- dual-clip PPO ----------------------------------------------------------------------------------------


def test_dual_clip_caps_the_loss_of_negative_advantages():
    new, old, adv, mask = _tokens([5.0, 1.5, 0.5, 5.0], [-1.0, -1.0, -1.0, 1.0])
    loss, diag = ppo_clip_loss(new, old, adv, mask, dual_clip=3.0)
    # r=5, A=-1: -min(-5, -1.2) = 5, capped at -c*A = 3 ; r=1.5: -min(-1.5, -1.2) = 1.5 < 3
    # r=0.5, A=-1: -min(-0.5, -0.8) = 0.8 (plain clip) ; r=5, A=+1: -min(5, 1.2) = -1.2 (no dual clip for A>0)
    _close(loss, [[3.0, 1.5, 0.8, -1.2]])
    assert diag["clipped"].tolist() == [[1.0, 0.0, 1.0, 1.0]]
    loss.sum().backward()
    # capped and clipped tokens: zero gradient; r=1.5, A=-1: d(-r*A)/dlogp = -A*r = 1.5
    _close(new.grad, [[0.0, 1.5, 0.0, 0.0]])


def test_dual_clip_off_by_default_and_finite_far_off_policy():
    new = T([[80.0, 80.0]], dtype=torch.float64)
    old = torch.zeros_like(new)
    adv = T([[-1.0, 1.0]], dtype=torch.float64)
    plain, _ = ppo_clip_loss(new, old, adv, torch.ones_like(new))
    assert plain[0, 0].item() == pytest.approx(math.exp(20.0))  # the log-ratio is clamped at 20: finite
    capped, _ = ppo_clip_loss(new, old, adv, torch.ones_like(new), dual_clip=3.0)
    _close(capped, [[3.0, -1.2]])


def test_dual_clip_must_exceed_one():
    new, old, adv, mask = _tokens([1.0], [1.0])
    with pytest.raises(ValueError, match="dual_clip"):
        ppo_clip_loss(new, old, adv, mask, dual_clip=1.0)


# -- DCPO ---------------------------------------------------------------------------------------------------


def test_dcpo_bounds_match_the_paper_table():
    old = torch.log(T([0.9, 0.01, 1e-4], dtype=torch.float64))
    low, high = dcpo_ratio_bounds(old, 0.16, 0.2, 10.0)
    # q=0.9: low = .5+.5*sqrt(1 - .64/.9) = .5+.5*sqrt(.288889) = .768742
    #        high = .5+.5*sqrt(1 + .8/.9) = .5+.5*sqrt(1.888889) = 1.187184
    # q=0.01: 1 - 64 < 0 -> low = .5 ; high = .5+.5*sqrt(1+80) = 5
    # q=1e-4: high = .5+.5*sqrt(8001) = 45.2 -> capped at 10
    _close(low, [0.768742, 0.5, 0.5])
    _close(high, [1.187184, 5.0, 10.0])
    # the paper's table in probabilities: p_min = .768742 * .9 = .69 ; p_max = 5 * .01 = .05
    assert (low[0] * 0.9).item() == pytest.approx(0.6919, abs=1e-4)
    assert (high[1] * 0.01).item() == pytest.approx(0.05)


def test_dcpo_loss_hand_computed():
    q = T([[0.01, 0.01, 0.9, 0.9]], dtype=torch.float64)
    old = torch.log(q)
    new = (old + torch.log(T([[4.0, 6.0, 1.3, 0.5]], dtype=torch.float64))).requires_grad_()
    adv = T([[1.0, 1.0, 1.0, -1.0]], dtype=torch.float64)
    loss, diag = dcpo_loss(new, old, adv, torch.ones_like(q))
    # q=.01: r=4 inside [.5, 5] -> -4 ; r=6 clipped to 5 -> -5 ; q=.9: r=1.3 clipped to 1.187184 -> -1.187184
    # q=.9, A=-1, r=.5 < .768742: -min(-.5, -.768742) = .768742 (clipped)
    _close(loss, [[-4.0, -5.0, -1.187184, 0.768742]])
    assert diag["clipped"].tolist() == [[0.0, 1.0, 1.0, 1.0]]
    loss.sum().backward()
    _close(new.grad, [[-4.0, 0.0, 0.0, 0.0]])  # d(-r*A)/dlogp = -A*r = -4 inside the range


def test_dcpo_rare_tokens_get_a_wider_range_than_ppo():
    old = torch.log(T([[1e-3]], dtype=torch.float64))
    new, adv = old + math.log(3.0), T([[1.0]], dtype=torch.float64)
    dcpo, _ = dcpo_loss(new, old, adv, torch.ones_like(old))
    ppo, _ = ppo_clip_loss(new, old, adv, torch.ones_like(old))
    assert dcpo.item() == pytest.approx(-3.0) and ppo.item() == pytest.approx(-1.2)


def test_dcpo_finite_for_vanishing_old_probability_and_far_ratios():
    old = T([[-200.0, -1.0, 0.0]])
    new = T([[-120.0, 79.0, -80.0]])
    loss, diag = dcpo_loss(new, old, T([[1.0, -1.0, 1.0]]), torch.ones_like(old), dual_clip=3.0)
    assert torch.isfinite(loss).all() and torch.isfinite(diag["ratio_high"]).all()
    assert diag["ratio_low"][0, 0].item() == 0.5 and diag["ratio_high"][0, 0].item() == 10.0
    assert loss[0, 1].item() == pytest.approx(3.0)  # A<0, huge ratio: dual-clip cap


# -- GSPO ---------------------------------------------------------------------------------------------------


def test_gspo_sequence_ratio_and_clipping_hand_computed():
    old = torch.zeros(2, 2, dtype=torch.float64)
    new = T([[0.2, -0.1], [2e-4, 0.0]], dtype=torch.float64)
    adv = T([[1.0, 1.0], [-2.0, -2.0]], dtype=torch.float64)
    loss, diag = gspo_loss(new, old, adv, torch.ones_like(old))
    # row 0: s = exp((.2 - .1)/2) = exp(.05) = 1.051271 > 1 + 4e-4 -> -min(1.051271, 1.0004) = -1.0004
    # row 1: s = exp(1e-4) = 1.0001 inside [.9997, 1.0004] -> -(1.0001 * -2) = 2.0002
    _close(loss, [[-1.0004, -1.0004], [2.0002, 2.0002]])
    assert diag["clipped"].tolist() == [[1.0, 1.0], [0.0, 0.0]]
    _close(diag["ratio"][:, 0], [math.exp(0.05), math.exp(1e-4)])


def test_gspo_sequence_gradient_is_the_length_normalized_ratio():
    old = torch.zeros(1, 3, dtype=torch.float64)
    new = T([[0.3, 0.1, 7.0]], dtype=torch.float64, requires_grad=True)
    mask = T([[1.0, 1.0, 0.0]], dtype=torch.float64)
    adv = torch.full((1, 3), 2.0, dtype=torch.float64)
    loss, _ = gspo_loss(new, old, adv, mask, clip_low=0.5, clip_high=0.5)
    aggregate_loss(loss, mask, "seq_mean_token_mean").backward()
    # s = exp((.3 + .1)/2) = exp(.2) = 1.221403 (the masked 7.0 is ignored); L = -s*A;
    # dL/dlogp_t = -A * s / |y| = -2 * 1.221403 / 2 = -1.221403 ; masked token: 0
    _close(new.grad, [[-math.exp(0.2), -math.exp(0.2), 0.0]])


def test_gspo_token_variant_matches_sequence_gradient_with_constant_advantages():
    g = torch.Generator().manual_seed(3)
    old = -torch.rand(3, 4, generator=g, dtype=torch.float64) * 2
    delta = (torch.rand(3, 4, generator=g, dtype=torch.float64) - 0.5) * 0.2
    mask = T([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=torch.float64)
    adv = T([[1.0], [-0.5], [2.0]], dtype=torch.float64).expand(3, 4)
    grads, values = [], []
    for variant in ("sequence", "token"):
        new = (old + delta).requires_grad_()
        loss, _ = gspo_loss(new, old, adv, mask, clip_low=0.5, clip_high=0.5, variant=variant)
        agg = aggregate_loss(loss, mask, "seq_mean_token_mean")
        agg.backward()
        grads.append(new.grad)
        values.append(agg.item())
    torch.testing.assert_close(grads[0], grads[1])
    assert values[0] == pytest.approx(values[1])


def test_gspo_token_variant_uses_per_token_advantages_and_clipped_sequences_have_no_gradient():
    old = torch.zeros(2, 2, dtype=torch.float64)
    new = T([[0.0, 0.0], [0.1, 0.1]], dtype=torch.float64, requires_grad=True)
    adv = T([[1.0, -3.0], [1.0, 1.0]], dtype=torch.float64)
    loss, diag = gspo_loss(new, old, adv, torch.ones_like(old), variant="token")
    aggregate_loss(loss, torch.ones_like(old), "seq_mean_token_mean").backward()
    # row 0: s = 1, token t gets -A_t * s / |y| / G = -A_t / 2 / 2
    # row 1: s = e^.1 > 1.0004 with A > 0: clipped, no gradient
    _close(new.grad, [[-0.25, 0.75], [0.0, 0.0]])
    assert diag["clipped"][1].tolist() == [1.0, 1.0]


def test_gspo_length_one_and_fully_masked_rows():
    old = torch.zeros(2, 3, dtype=torch.float64)
    new = T([[1e-4, -50.0, 50.0], [-90.0, 90.0, 3.0]], dtype=torch.float64, requires_grad=True)
    mask = T([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    loss, diag = gspo_loss(new, old, torch.ones_like(old), mask)
    assert diag["ratio"][0, 0].item() == pytest.approx(math.exp(1e-4))  # the single token's ratio
    assert diag["ratio"][1, 0].item() == 1.0                             # no tokens: ratio 1
    agg = aggregate_loss(loss, mask, "seq_mean_token_mean")
    agg.backward()
    assert agg.item() == pytest.approx(-math.exp(1e-4))
    assert torch.isfinite(new.grad).all()
    assert new.grad[1].abs().sum() == 0 and new.grad[0, 1:].abs().sum() == 0


# -- CPGD ---------------------------------------------------------------------------------------------------


def test_cpgd_clipped_log_ratio_hand_computed():
    new, old, adv, mask = _tokens([1.5, 0.5, 1.1], [1.0, -1.0, 1.0])
    loss, diag = cpgd_loss(new, old, adv, mask, drift_coef=0.0)
    # r=1.5: ln 1.5 = .405465 > ln 1.2 = .182322 -> -min(.405465, .182322) = -.182322 (clipped)
    # r=.5, A=-1: -min(.693147, .223144) = -.223144 (clipped) ; r=1.1: -ln 1.1 = -.095310
    _close(loss, [[-0.182322, -0.223144, -0.095310]])
    assert diag["clipped"].tolist() == [[1.0, 1.0, 0.0]]
    with_drift, diag = cpgd_loss(new, old, adv, mask, drift_coef=0.01)
    # drift = r - 1 - ln r: 1.5 -> .094535 ; .5 -> .193147 ; 1.1 -> .004690 ; times .01
    _close(with_drift - loss, [[0.00094535, 0.00193147, 0.0000469]], atol=1e-7)


def test_cpgd_gradients_inside_and_outside_the_clip():
    new, old, adv, mask = _tokens([1.5, 1.1], [1.0, 1.0])
    loss, _ = cpgd_loss(new, old, adv, mask, drift_coef=0.0)
    loss.sum().backward()
    _close(new.grad, [[0.0, -1.0]])  # clipped: none ; inside: -A (no ratio factor)
    new, old, adv, mask = _tokens([1.5, 1.1], [1.0, 1.0])
    loss, _ = cpgd_loss(new, old, adv, mask, drift_coef=0.5)
    loss.sum().backward()
    # drift gradient alpha * (r - 1): 0.5 * 0.5 = 0.25 ; -1 + 0.5 * 0.1 = -0.95
    _close(new.grad, [[0.25, -0.95]])


def test_cpgd_is_linear_not_exponential_far_off_policy():
    new = T([[80.0, -80.0]], dtype=torch.float64, requires_grad=True)
    old = torch.zeros_like(new)
    loss, _ = cpgd_loss(new, old, T([[-1.0, 1.0]], dtype=torch.float64), torch.ones_like(old), drift_coef=0.0)
    # A<0, log-ratio clamped at 20: -min(-20, -.182322) = 20 ; A>0, -20 < ln .8: -min(-20, -.223144) = 20
    _close(loss, [[20.0, 20.0]])
    loss.sum().backward()
    assert torch.isfinite(new.grad).all()


# -- Clip-Cov and KL-Cov ------------------------------------------------------------------------------------

COV_LOGP = T([[-1.0, -1.0, -3.0, -3.0]], dtype=torch.float64)
COV_ADV = T([[3.0, 2.0, -3.0, 0.0]], dtype=torch.float64)


def test_token_covariance_hand_computed_and_ignores_masked_tokens():
    # mean logp = -2 -> [1, 1, -1, -1] ; mean A = .5 -> [2.5, 1.5, -3.5, -.5] ; products [2.5, 1.5, 3.5, .5]
    _close(token_covariance(COV_LOGP, COV_ADV, torch.ones_like(COV_LOGP)), [[2.5, 1.5, 3.5, 0.5]])
    logp = torch.cat([COV_LOGP, T([[-99.0]], dtype=torch.float64)], 1)
    adv = torch.cat([COV_ADV, T([[50.0]], dtype=torch.float64)], 1)
    mask = T([[1.0, 1.0, 1.0, 1.0, 0.0]], dtype=torch.float64)
    _close(token_covariance(logp, adv, mask), [[2.5, 1.5, 3.5, 0.5, 0.0]])


def test_clip_cov_detaches_tokens_in_the_covariance_band_only():
    mask = torch.ones_like(COV_LOGP)
    for seed in range(6):
        new = COV_LOGP.clone().requires_grad_()
        loss, diag = clip_cov_loss(new, COV_LOGP, COV_ADV, mask, clip_ratio=0.5, seed=seed)
        _close(loss, [[-3.0, -2.0, 3.0, 0.0]])  # r = 1: values are -A, detached or not
        loss.sum().backward()
        detached = diag["cov_detached"][0]
        # band (1, 5) holds tokens 0, 1, 2 (cov 2.5, 1.5, 3.5); int(.5 * 4) = 2 of them lose their gradient
        assert detached.sum().item() == 2 and detached[3].item() == 0.0
        expected = torch.where(detached.bool(), torch.zeros(4, dtype=torch.float64), -COV_ADV[0])
        torch.testing.assert_close(new.grad[0], expected)
        assert torch.equal(diag["clipped"], diag["cov_detached"])  # nothing PPO-clipped at r = 1


def test_clip_cov_selection_is_seeded_and_at_least_one_token():
    mask = torch.ones_like(COV_LOGP)
    a = clip_cov_loss(COV_LOGP, COV_LOGP, COV_ADV, mask, seed=7)[1]["cov_detached"]
    b = clip_cov_loss(COV_LOGP, COV_LOGP, COV_ADV, mask, seed=7)[1]["cov_detached"]
    assert torch.equal(a, b) and a.sum().item() == 1  # int(2e-4 * 4) = 0 -> at least 1
    picks = {int(clip_cov_loss(COV_LOGP, COV_LOGP, COV_ADV, mask, seed=s)[1]["cov_detached"].argmax())
             for s in range(20)}
    assert picks <= {0, 1, 2} and len(picks) > 1


def test_clip_cov_skips_ppo_clipped_tokens_and_handles_no_candidates():
    old = COV_LOGP - T([[0.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    new = COV_LOGP + T([[math.log(3.0), 0.0, 0.0, 0.0]], dtype=torch.float64)  # token 0: r=3 > 2 with A>0
    _, diag = clip_cov_loss(new, old, COV_ADV, torch.ones_like(old), clip_ratio=1.0)
    assert diag["cov_detached"][0, 0].item() == 0.0 and diag["clipped"][0, 0].item() == 1.0
    _, diag = clip_cov_loss(COV_LOGP, COV_LOGP, COV_ADV, torch.ones_like(old), cov_low=10.0, cov_high=20.0)
    assert diag["cov_detached"].sum().item() == 0.0


def test_kl_cov_penalizes_the_top_covariance_tokens():
    old = COV_LOGP - T([[0.0, 0.0, 0.5, 0.0]], dtype=torch.float64)
    new = COV_LOGP.clone().requires_grad_()
    loss, diag = kl_cov_loss(new, old, COV_ADV, torch.ones_like(old), kl_ratio=0.25, kl_coef=1.0)
    # k = int(.25 * 4) = 1: token 2 (cov 3.5). Its r = e^.5 = 1.648721: -r*A + |.5| = 4.946164 + .5
    _close(loss, [[-3.0, -2.0, 5.446164, 0.0]])
    assert diag["kl_penalized"].tolist() == [[0.0, 0.0, 1.0, 0.0]]
    loss.sum().backward()
    # d/dlogp: -A*r + sign(l) = 3 * 1.648721 + 1 = 5.946164 on token 2 ; -A elsewhere
    _close(new.grad, [[-3.0, -2.0, 5.946164, 0.0]])


def test_kl_cov_ties_are_broken_by_position():
    logp = torch.full((2, 5), -1.0, dtype=torch.float64)  # equal log-probs: every covariance is 0
    _, diag = kl_cov_loss(logp, logp, torch.ones_like(logp), torch.ones_like(logp), kl_ratio=0.2)
    assert diag["kl_penalized"].reshape(-1).nonzero().flatten().tolist() == [0, 1]  # int(.2 * 10) = 2


# -- PACS ---------------------------------------------------------------------------------------------------


def _pacs_grad(rewards, groups, class_balance, beta=1.0, baseline="rloo"):
    n = len(rewards)
    old = torch.full((n, 2), -1.0, dtype=torch.float64)
    new = old.clone().requires_grad_()
    mask = torch.ones_like(old)
    loss, diag = pacs_loss(new, old, T(rewards, dtype=torch.float64), T(groups), mask, beta=beta,
                           baseline=baseline, class_balance=class_balance)
    agg = aggregate_loss(loss, mask, "seq_mean_token_mean")
    agg.backward()
    return agg.item(), new.grad[:, 0], diag


def test_pacs_on_policy_loss_and_gradient_rloo():
    value, grad, diag = _pacs_grad([1.0, 0.0, 0.0], [0, 0, 0], class_balance=False)
    # on policy every r^ = 0 -> psi = 0 -> BCE = log 2 for every sample
    assert value == pytest.approx(math.log(2.0))
    # dL/dpsi_i = (sigmoid(0) - y_i)/3 = [-.5, .5, .5]/3 ; psi_i = r^_i - mean_{j!=i} r^_j
    # dL/dr^_0 = (-.5 - (.5 + .5)/2)/3 = -1/3 ; dL/dr^_1 = (.5 - (-.5 + .5)/2)/3 = 1/6 ; r^ = beta * sum_t
    _close(grad, [-1 / 3, 1 / 6, 1 / 6])
    _close(diag["predicted"][:, 0], [0.5, 0.5, 0.5])
    _, grad2, _ = _pacs_grad([1.0, 0.0, 0.0], [0, 0, 0], class_balance=False, beta=2.0)
    torch.testing.assert_close(grad2, 2 * grad)


def test_pacs_class_balanced_weights():
    value, grad, diag = _pacs_grad([1.0, 0.0, 0.0], [0, 0, 0], class_balance=True)
    # balanced weights n / (K * count): 3/(2*1) = 1.5 for the positive, 3/(2*2) = .75 for the negatives
    _close(diag["weight"][:, 0], [1.5, 0.75, 0.75])
    assert value == pytest.approx(math.log(2.0))  # (1.5 + .75 + .75)/3 * log 2
    # g = w (.5 - y) = [-.75, .375, .375]; dL/dr^_0 = (-.75 - (.375+.375)/2)/3 = -.375 ; _1 = (.375 + .1875)/3
    _close(grad, [-0.375, 0.1875, 0.1875])


def test_pacs_value_off_policy_hand_computed():
    old = torch.zeros(2, 2, dtype=torch.float64)
    new = T([[0.5, 0.5], [-0.5, -0.5]], dtype=torch.float64)  # r^ = [1, -1]
    loss, diag = pacs_loss(new, old, T([1.0, 0.0], dtype=torch.float64), T([4, 4]), torch.ones_like(old))
    # rloo: psi_0 = 1 - (-1) = 2, psi_1 = -1 - 1 = -2 ; BCE(2, 1) = BCE(-2, 0) = log(1 + e^-2) = .126928
    _close(diag["score"][:, 0], [2.0, -2.0])
    assert aggregate_loss(loss, torch.ones_like(old), "seq_mean_token_mean").item() == pytest.approx(0.126928,
                                                                                                  abs=1e-6)


def test_pacs_groups_are_independent_and_ids_need_not_be_contiguous():
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(4, 3, generator=g, dtype=torch.float64)
    new = old + 0.3 * torch.randn(4, 3, generator=g, dtype=torch.float64)
    mask, rewards = torch.ones_like(old), T([1.0, 0.0, 0.0, 1.0], dtype=torch.float64)
    a, _ = pacs_loss(new, old, rewards, T([7, 3, 7, 3]), mask)
    b, _ = pacs_loss(new, old, rewards, T([1, 0, 1, 0]), mask)
    torch.testing.assert_close(a, b)
    # the grpo and none baselines also run, and a group of one gets psi = r^ (rloo) or 0 (grpo)
    _, d = pacs_loss(new, old, rewards, T([0, 1, 1, 2]), mask)
    assert d["score"][0, 0].item() == pytest.approx((new - old)[0].sum().item())
    _, d = pacs_loss(new, old, rewards, T([0, 1, 1, 2]), mask, baseline="grpo")
    assert d["score"][0, 0].item() == 0.0 and torch.isfinite(d["score"]).all()
    _, d = pacs_loss(new, old, rewards, T([0, 0, 1, 1]), mask, baseline="none")
    torch.testing.assert_close(d["score"][:, 0], (new - old).sum(1))


def test_pacs_fully_masked_rows_leave_the_group_statistics():
    old = torch.zeros(3, 2, dtype=torch.float64)
    new = T([[0.5, 0.5], [-0.5, -0.5], [9.0, 9.0]], dtype=torch.float64)
    mask = T([[1.0, 1.0], [1.0, 1.0], [0.0, 0.0]], dtype=torch.float64)
    _, diag = pacs_loss(new, old, T([1.0, 0.0, 1.0], dtype=torch.float64), T([0, 0, 0]), mask)
    _close(diag["score"][:2, 0], [2.0, -2.0])   # as if the group were the first two rows only
    _close(diag["weight"][:2, 0], [1.0, 1.0])


# -- edge cases shared by every loss ------------------------------------------------------------------------


@pytest.mark.parametrize("name", NEW_LOSSES)
def test_masked_tokens_have_no_gradient_and_no_effect(name):
    g = torch.Generator().manual_seed(1)
    base_old = -torch.rand(4, 5, generator=g, dtype=torch.float64) * 2
    base_new = base_old + 0.2 * torch.randn(4, 5, generator=g, dtype=torch.float64)
    base_adv = torch.randn(4, 5, generator=g, dtype=torch.float64)
    mask = T([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [1, 1, 0, 0, 0]], dtype=torch.float64)
    fn = LOSSES.bind(name, {})
    results = []
    for fill_new, fill_old, fill_adv in ((-0.5, -0.7, 0.3), (-30.0, 5.0, -100.0)):
        new = torch.where(mask > 0, base_new, torch.full_like(base_new, fill_new)).requires_grad_()
        old = torch.where(mask > 0, base_old, torch.full_like(base_old, fill_old))
        adv = torch.where(mask > 0, base_adv, torch.full_like(base_adv, fill_adv))
        loss, _ = call_with_inputs(fn, _available(new, old, adv, mask), name)
        agg = aggregate_loss(loss, mask, "seq_mean_token_mean")
        agg.backward()
        assert torch.all(new.grad[mask == 0] == 0)
        results.append((agg.item(), new.grad[mask > 0]))
    assert results[0][0] == pytest.approx(results[1][0], abs=1e-10)
    torch.testing.assert_close(results[0][1], results[1][1])


@pytest.mark.parametrize("name", NEW_LOSSES)
@pytest.mark.parametrize("mode", ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum",
                                  "seq_mean_token_sum_norm"])
def test_length_one_and_fully_masked_rows_are_finite(name, mode):
    old = T([[-1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [-2.0, -0.5, -3.0]], dtype=torch.float64)
    step = T([[0.3, 0.0, 0.0], [0.0, 0.0, 0.0], [-0.1, 0.2, 0.1]], dtype=torch.float64)
    new = (old + step).requires_grad_()
    mask = T([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]], dtype=torch.float64)
    adv = T([[1.0], [-1.0], [-0.5]], dtype=torch.float64).expand(3, 3)
    inputs = _available(new, old, adv, mask, rewards=T([1.0, 0.0, 0.0], dtype=torch.float64),
                        group_ids=T([0, 0, 0]))
    loss, diag = call_with_inputs(LOSSES.bind(name, {}), inputs, name)
    agg = aggregate_loss(loss, mask, mode)
    agg.backward()
    assert torch.isfinite(agg) and torch.isfinite(new.grad).all()
    assert new.grad[1].abs().sum() == 0
    assert all(torch.isfinite(v).all() and v.shape == mask.shape for v in diag.values())


@pytest.mark.parametrize("name", NEW_LOSSES)
def test_ratios_far_outside_the_clip_range_stay_finite(name):
    old = torch.zeros(3, 2, dtype=torch.float64)
    new = T([[80.0, 80.0], [-80.0, -80.0], [80.0, -80.0]], dtype=torch.float64, requires_grad=True)
    adv = T([[1.0, 1.0], [-1.0, -1.0], [-1.0, 1.0]], dtype=torch.float64)
    mask = torch.ones_like(old)
    loss, diag = call_with_inputs(LOSSES.bind(name, {}), _available(new, old, adv, mask), name)
    aggregate_loss(loss, mask).backward()
    assert torch.isfinite(loss).all() and torch.isfinite(new.grad).all()
    if "clipped" in diag and name != "clip_cov":  # clip_cov's default clip_low = 1 never clips r -> 0
        assert diag["clipped"][:2].tolist() == [[1.0, 1.0], [1.0, 1.0]]  # A>0 far up, A<0 far down


# -- property: at ratio 1 the clipped losses are the vanilla policy gradient --------------------------------


@settings(max_examples=25, deadline=None)
@given(
    rows=st.integers(1, 3),
    cols=st.integers(1, 4),
    data=st.data(),
)
@pytest.mark.parametrize("name,params", [
    ("ppo_clip", {}), ("ppo_clip", {"dual_clip": 3.0, "clip_high": 0.28}), ("dcpo", {}),
    ("gspo", {"variant": "token"}),
])
def test_ratio_one_gradient_is_the_vanilla_policy_gradient(name, params, rows, cols, data):
    n = rows * cols
    logp = T(data.draw(st.lists(st.floats(-8.0, -0.01), min_size=n, max_size=n)), dtype=torch.float64)
    adv = T(data.draw(st.lists(st.floats(-3.0, 3.0), min_size=n, max_size=n)), dtype=torch.float64)
    bits = data.draw(st.lists(st.booleans(), min_size=n, max_size=n).filter(any))
    logp = logp.reshape(rows, cols).requires_grad_()
    adv = adv.reshape(rows, cols)
    mask = T(bits, dtype=torch.float64).reshape(rows, cols)
    loss, _ = LOSSES.bind(name, params)(logp, logp.detach(), adv, mask)
    aggregate_loss(loss, mask, "token_mean").backward()
    # vanilla PG: loss = -sum(A * logp * mask) / num_tokens -> grad = -A * mask / num_tokens
    torch.testing.assert_close(logp.grad, -adv * mask / mask.sum())


# -- top-entropy tokens, entropy bonus, truncated IS ----------------------------------------------------


def test_top_entropy_mask_hand_computed():
    entropy = T([[0.1, 0.9, 0.5, 0.7], [0.3, 0.9, 0.2, 0.8]])
    mask = T([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0]])
    # 7 trained tokens, ceil(.3 * 7) = 3: the two 0.9s and the 0.7 (the 0.8 is not trained)
    kept = top_entropy_mask(entropy, mask, ratio=0.3)
    assert kept.tolist() == [[0.0, 1.0, 0.0, 1.0], [0.0, 1.0, 0.0, 0.0]]
    assert kept.dtype == mask.dtype


def test_top_entropy_mask_ties_and_exact_counts():
    flat = torch.ones(2, 5)
    kept = top_entropy_mask(torch.full((2, 5), 0.4), flat, ratio=0.2)  # .2 * 10 = 2 exactly, not 3
    assert kept.reshape(-1).nonzero().flatten().tolist() == [0, 1]    # ties: earlier positions first
    assert torch.equal(top_entropy_mask(torch.rand(2, 5), flat, ratio=1.0), flat)
    assert top_entropy_mask(torch.rand(2, 5), torch.zeros(2, 5)).sum() == 0
    assert top_entropy_mask(torch.rand(1, 3), torch.ones(1, 3), ratio=0.01).sum() == 1
    with pytest.raises(ValueError, match="ratio"):
        top_entropy_mask(torch.rand(1, 3), torch.ones(1, 3), ratio=0.0)


def test_top_entropy_mask_composes_with_a_loss():
    new, old, adv, mask = _tokens([1.0, 1.0, 1.0], [1.0, 1.0, 1.0])
    keep = top_entropy_mask(T([[0.2, 2.0, 0.1]]), mask, ratio=0.34)  # ceil(1.02) = 2 tokens: 2.0 and 0.2
    loss, _ = ppo_clip_loss(new, old, adv, keep)
    aggregate_loss(loss, keep).backward()
    _close(new.grad, [[-0.5, -0.5, 0.0]])


def test_entropy_bonus_is_minus_entropy_on_trained_tokens():
    entropy = T([[0.5, 1.5, 9.0]], requires_grad=True)
    mask = T([[1.0, 1.0, 0.0]])
    bonus = entropy_bonus(entropy, mask)
    _close(bonus, [[-0.5, -1.5, 0.0]])
    aggregate_loss(bonus, mask).backward()
    _close(entropy.grad, [[-0.5, -0.5, 0.0]])  # descending the loss raises the entropy


def test_truncated_is_weights_hand_computed():
    old = T([[0.0, -1.0, -2.0, 100.0]], requires_grad=True)
    behaviour = T([[-1.0, -1.0, 0.0, 0.0]])
    w = truncated_is_weights(old, behaviour, T([[1.0, 1.0, 1.0, 0.0]]), cap=2.0)
    # exp(1) = 2.718 -> 2 ; exp(0) = 1 ; exp(-2) = .135335 ; masked: 0 (exp(100) never formed)
    _close(w, [[2.0, 1.0, 0.135335, 0.0]])
    assert not w.requires_grad
    with pytest.raises(ValueError, match="cap"):
        truncated_is_weights(old, behaviour, torch.ones(1, 4), cap=0.0)


# -- KL directions --------------------------------------------------------------------------------------


def test_forward_kl_estimators_hand_computed():
    logp = T([-1.0], requires_grad=True)
    ref = T([-2.0])
    # r = ref - logp = -1, w = e^-1 = .367879
    # forward_k1 = w r = -.367879 ; forward_k3 = w r - (w - 1) = .264241
    k1 = kl_penalty(logp, ref, "forward_k1")
    assert k1.item() == pytest.approx(-0.367879, abs=1e-6)
    assert kl_penalty(logp, ref, "forward_k3").item() == pytest.approx(0.264241, abs=1e-6)
    k1.backward()
    assert logp.grad.item() == pytest.approx(-0.367879, abs=1e-6)  # d/dlogp = -w
    assert set(KL_ESTIMATORS) == {"k1", "k2", "k3", "forward_k1", "forward_k3"}


def test_kl_estimators_are_exact_in_expectation_over_a_categorical():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, generator=g, dtype=torch.float64, requires_grad=True)
    ref = torch.log_softmax(torch.randn(6, generator=g, dtype=torch.float64), 0)
    logp = torch.log_softmax(logits, 0)
    p = logp.exp().detach()  # sampling weights of tokens drawn from pi
    forward_exact = (ref.exp() * (ref - logp)).sum()
    reverse_exact = (logp.exp() * (logp - ref)).sum()
    for est in ("forward_k1", "forward_k3"):
        expected = (p * kl_penalty(logp, ref, est)).sum()
        assert expected.item() == pytest.approx(forward_exact.item())
        grad_est = torch.autograd.grad(expected, logits, retain_graph=True)[0]
        grad_exact = torch.autograd.grad(forward_exact, logits, retain_graph=True)[0]
        torch.testing.assert_close(grad_est, grad_exact)
    for est in ("k1", "k3"):
        assert (p * kl_penalty(logp, ref, est)).sum().item() == pytest.approx(reverse_exact.item())


def test_kl_estimators_finite_far_apart_and_zero_at_equality():
    a, b = T([-80.0, 0.0]), T([0.0, -80.0])
    for est in KL_ESTIMATORS:
        assert torch.isfinite(kl_penalty(a, b, est)).all()
        assert kl_penalty(a, a, est).abs().sum().item() == 0.0
    assert (kl_penalty(a, b, "forward_k3") >= 0).all()
    with pytest.raises(ValueError, match="k1, k2 or k3"):
        kl_penalty(a, b, "reverse")  # type: ignore[arg-type]


# -- Dr.GRPO aggregation --------------------------------------------------------------------------------

PER_TOKEN = T([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0]])
MASK = T([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])


def test_seq_mean_token_sum_norm_hand_computed():
    # masked sum = 1 + 2 + 3 + 4 = 10 ; 2 sequences ; L = T = 3 -> 10 / 6 ; L = 8 -> 10 / 16
    assert aggregate_loss(PER_TOKEN, MASK, "seq_mean_token_sum_norm").item() == pytest.approx(10 / 6)
    with_budget = aggregate_loss(PER_TOKEN, MASK, "seq_mean_token_sum_norm", constant_length=8)
    assert with_budget.item() == pytest.approx(10 / 16)
    assert aggregate_loss(PER_TOKEN, torch.zeros_like(MASK), "seq_mean_token_sum_norm").item() == 0.0
    with pytest.raises(ValueError, match="constant_length"):
        aggregate_loss(PER_TOKEN, MASK, "seq_mean_token_sum_norm", constant_length=0)
    with pytest.raises(ValueError, match="seq_mean_token_sum_norm"):
        aggregate_loss(PER_TOKEN, MASK, "token_sum")  # type: ignore[arg-type]


def test_seq_mean_token_sum_norm_is_exact_under_micro_batching_with_different_widths():
    full = aggregate_loss(PER_TOKEN, MASK, "seq_mean_token_sum_norm", constant_length=16)
    # micro-batches padded to their own widths: row 0 keeps T=3, row 1 is trimmed to T=1
    parts = [(PER_TOKEN[0:1], MASK[0:1]), (PER_TOKEN[1:2, :1], MASK[1:2, :1])]
    kw = dict(num_seqs=2.0, constant_length=16)
    total = sum(aggregate_loss(p, m, "seq_mean_token_sum_norm", **kw) for p, m in parts)
    assert total.item() == pytest.approx(full.item())
    # without the constant each micro-batch would divide by its own width: not exact
    loose = sum(aggregate_loss(p, m, "seq_mean_token_sum_norm", num_seqs=2.0) for p, m in parts)
    assert loose.item() != pytest.approx(aggregate_loss(PER_TOKEN, MASK, "seq_mean_token_sum_norm").item())


# -- controllers -----------------------------------------------------------------------------------------


def test_fixed_controller():
    ctl = FixedKLController(0.05)
    ctl.update(123.0, 64)
    assert ctl.value == 0.05
    other = FixedKLController(0.0)
    other.load_state_dict(ctl.state_dict())
    assert other.value == 0.05
    with pytest.raises(ValueError, match="value"):
        FixedKLController(-1.0)


def test_adaptive_kl_controller_hand_computed():
    ctl = AdaptiveKLController(0.1, target=1.0, horizon=100)
    ctl.update(2.0, 10)   # e = clip(2/1 - 1, -.2, .2) = .2 -> .1 * (1 + .2 * 10/100) = .102
    assert ctl.value == pytest.approx(0.102)
    ctl.update(0.9, 10)   # e = -.1 -> .102 * (1 - .1 * .1) = .10098
    assert ctl.value == pytest.approx(0.10098)
    ctl.update(float("nan"), 10)
    assert ctl.value == pytest.approx(0.10098)
    resumed = AdaptiveKLController(0.1, target=1.0, horizon=100)
    resumed.load_state_dict(ctl.state_dict())
    ctl.update(0.1, 7)
    resumed.update(0.1, 7)
    assert resumed.value == ctl.value
    for kwargs in ({"target": 0.0}, {"horizon": 0}, {"init_coef": -1.0}):
        args = {"init_coef": 0.1, "target": 1.0, "horizon": 10, **kwargs}
        with pytest.raises(ValueError, match=next(iter(kwargs))):
            AdaptiveKLController(**args)


def test_target_entropy_controller_hand_computed():
    ctl = TargetEntropyController(0.001, 0.5, delta=0.001, max_coef=0.0025)
    assert ctl.value == 0.001                      # on before any observation
    ctl.update(0.2, 64)                            # below target: c = .002, bonus on
    assert ctl.value == pytest.approx(0.002)
    ctl.update(0.2, 64)                            # .003 clipped to max .0025
    assert ctl.value == pytest.approx(0.0025)
    ctl.update(0.8, 64)                            # above target: c = .0015, bonus off
    assert ctl.coef == pytest.approx(0.0015) and ctl.value == 0.0
    ctl.update(0.8, 64)
    ctl.update(0.8, 64)                            # .0005 - .001 -> clipped to min 0
    assert ctl.coef == 0.0
    ctl.update(float("inf"), 64)
    assert ctl.coef == 0.0 and ctl.value == 0.0
    resumed = TargetEntropyController(0.001, 0.5, delta=0.001, max_coef=0.0025)
    resumed.load_state_dict(ctl.state_dict())
    for h in (0.1, 0.3, 0.9):
        ctl.update(h)
        resumed.update(h)
    assert (resumed.coef, resumed.value) == (ctl.coef, ctl.value)
    with pytest.raises(ValueError, match="init_coef"):
        TargetEntropyController(0.01, 0.5, max_coef=0.005)
    with pytest.raises(ValueError, match="target"):
        TargetEntropyController(0.01, 0.0)


def test_entropy_min_is_the_masked_entropy_and_its_gradient_sharpens():
    from rlvr.algorithms.losses import LOSSES

    loss_fn = LOSSES.get("entropy_min")
    logits = torch.tensor([[[0.0, 0.0, 0.0], [2.0, 0.0, 0.0]]], requires_grad=True)
    probs = torch.softmax(logits, dim=-1)
    entropy = -(probs * torch.log(probs)).sum(-1)  # [1, 2]: ln 3 = 1.0986, then 0.6103 (by hand below)
    mask = torch.tensor([[1.0, 1.0]])
    per_token, diag = loss_fn(entropy, mask, coef=0.5)
    p = torch.tensor([2.0, 0.0, 0.0]).exp() / (2 * 1 + torch.tensor(2.0).exp())
    by_hand = -(p * p.log()).sum()
    assert per_token[0, 0].item() == pytest.approx(0.5 * math.log(3), rel=1e-6)
    assert per_token[0, 1].item() == pytest.approx(0.5 * by_hand.item(), rel=1e-6)
    assert diag == {}
    assert loss_fn(entropy, torch.tensor([[1.0, 0.0]]))[0][0, 1].item() == 0.0  # masked tokens carry nothing
    # a step down its gradient lowers the entropy (the uniform position has zero gradient: a stationary point)
    per_token.sum().backward()
    with torch.no_grad():
        stepped = torch.softmax(logits - 1.0 * logits.grad, dim=-1)[0, 1]
    assert -(stepped * stepped.log()).sum() < entropy[0, 1].detach()
    assert torch.allclose(logits.grad[0, 0], torch.zeros(3))
