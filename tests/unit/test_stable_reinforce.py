"""R1-Reward's StableReinforce options: pre-CLIP in `ppo_clip` and the advantage filter in REINFORCE++.

Hand-computed values; the defaults (options off) are checked to be bit-identical to the plain formulas.
"""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.algorithms import ADVANTAGES, LOSSES
from rlvr.algorithms.advantages import reinforce_pp_advantages, reinforce_pp_baseline_advantages
from rlvr.algorithms.losses import ppo_clip_loss
from rlvr.registry import RegistryError

T = torch.tensor
LN1000 = math.log(1000.0)


def _loss_and_grad(new: float, old: float, adv: float, **knobs) -> tuple[float, float]:
    logp = T([[new]], dtype=torch.float64, requires_grad=True)
    loss, _ = ppo_clip_loss(logp, T([[old]], dtype=torch.float64), T([[adv]], dtype=torch.float64),
                            torch.ones(1, 1, dtype=torch.float64), **knobs)
    loss.sum().backward()
    return float(loss.detach()), float(logp.grad)


def test_pre_clip_bounds_a_large_ratio_and_zeroes_its_gradient():
    # log r = 10, A = -1: plain PPO takes the unclipped branch -r*A = e^10 with gradient -A*r = e^10
    loss, grad = _loss_and_grad(10.0, 0.0, -1.0)
    assert loss == pytest.approx(math.exp(10.0)) and grad == pytest.approx(math.exp(10.0))
    # pre-CLIP at ln 1000: r = 1000, loss = 1000, and the clamped token has no gradient
    loss, grad = _loss_and_grad(10.0, 0.0, -1.0, pre_clip=LN1000)
    assert loss == pytest.approx(1000.0) and grad == 0.0


def test_pre_clip_bounds_a_tiny_ratio_for_a_positive_advantage():
    # log r = -10, A = +1: -min(r, clip(r) = 0.8) = -r; plain: -e^-10 with gradient -e^-10
    loss, grad = _loss_and_grad(-10.0, 0.0, 1.0)
    assert loss == pytest.approx(-math.exp(-10.0)) and grad == pytest.approx(-math.exp(-10.0))
    loss, grad = _loss_and_grad(-10.0, 0.0, 1.0, pre_clip=LN1000)
    assert loss == pytest.approx(-1e-3) and grad == 0.0


def test_pre_clip_inside_the_bound_changes_nothing():
    for new, adv in [(0.1, 1.0), (-0.3, -2.0), (0.5, -1.0)]:
        assert _loss_and_grad(new, 0.0, adv, pre_clip=LN1000) == _loss_and_grad(new, 0.0, adv)


def test_pre_clip_marks_clamped_tokens_as_clipped():
    logp, old = T([[10.0, 0.1, -9.0]]), torch.zeros(1, 3)
    _, diag = ppo_clip_loss(logp, old, T([[-1.0, 1.0, -1.0]]), torch.ones(1, 3), pre_clip=LN1000)
    assert diag["clipped"].tolist() == [[1.0, 0.0, 1.0]]
    assert diag["ratio"][0, 0].item() == pytest.approx(1000.0, rel=1e-6)


def test_pre_clip_off_is_bit_identical_to_the_plain_surrogate():
    g = torch.Generator().manual_seed(0)
    new, old = torch.randn(4, 9, generator=g) * 3, torch.randn(4, 9, generator=g) * 3
    adv, mask = torch.randn(4, 9, generator=g), torch.ones(4, 9)
    default, _ = ppo_clip_loss(new, old, adv, mask)
    ratio = torch.exp((new - old).clamp(-20.0, 20.0))
    plain = -torch.minimum(ratio * adv, ratio.clamp(0.8, 1.2) * adv)
    assert torch.equal(default, plain)
    # a bound wider than the overflow guard (20) is the identity on every ratio the loss can see
    wide, _ = ppo_clip_loss(new, old, adv, mask, pre_clip=25.0)
    assert torch.equal(default, wide)


def test_pre_clip_and_filter_knobs_are_validated_at_bind_time():
    LOSSES.bind("ppo_clip", {"pre_clip": LN1000, "dual_clip": 3.0})
    with pytest.raises(RegistryError, match="pre_clip"):
        LOSSES.bind("ppo_clip", {"pre_clip": 0.0})
    ADVANTAGES.bind("reinforce_pp", {"filter_sigma": 3.0})
    for name in ("reinforce_pp", "reinforce_pp_baseline"):
        with pytest.raises(RegistryError, match="filter_sigma"):
            ADVANTAGES.bind(name, {"filter_sigma": -1.0})


def _one_token_rows(rewards: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
    """Each reward on the single response token of its own row."""
    r = T(rewards, dtype=torch.float32)
    return r[:, None].clone(), torch.ones(len(rewards), 1)


def test_filter_zeroes_exactly_the_outliers_without_renormalising():
    # 17 rows, one reward 1 and sixteen 0: p = 1/17, whitened A = sqrt((1-p)/p) = 4 for the 1 and
    # -sqrt(p/(1-p)) = -1/4 for the others. 3-sigma drops the 4; the others keep -1/4 (stats not recomputed).
    token_rewards, mask = _one_token_rows([1.0] + [0.0] * 16)
    plain = reinforce_pp_advantages(token_rewards, mask)
    assert plain[0, 0].item() == pytest.approx(4.0, rel=1e-6)
    assert plain[1:, 0].tolist() == pytest.approx([-0.25] * 16, rel=1e-6)
    filtered = reinforce_pp_advantages(token_rewards, mask, filter_sigma=3.0)
    assert filtered[0, 0].item() == 0.0
    assert torch.equal(filtered[1:], plain[1:])
    # a looser limit keeps everything; a tighter one below 1/4 drops everything
    assert torch.equal(reinforce_pp_advantages(token_rewards, mask, filter_sigma=4.5), plain)
    assert torch.count_nonzero(reinforce_pp_advantages(token_rewards, mask, filter_sigma=0.2)) == 0


def test_filter_in_reinforce_pp_baseline():
    # two groups: group 0 rewards [1, 0, 0, 0] on 1-token rows, group 1 sixteen zeros and nothing else moves.
    # after the group-mean shift group 0 has [0.75, -0.25, -0.25, -0.25] and group 1 all 0; whitening over 20
    # tokens: mean 0, pop. var = (0.5625 + 3 * 0.0625) / 20 = 0.0375, std 0.19365; 0.75 / 0.19365 = 3.873 > 3.
    rewards = T([1.0, 0.0, 0.0, 0.0] + [0.0] * 16)
    group_ids = T([0] * 4 + [1] * 16)
    token_rewards, mask = rewards[:, None].clone(), torch.ones(20, 1)
    plain = reinforce_pp_baseline_advantages(rewards, group_ids, token_rewards, mask)
    std = math.sqrt(0.0375)
    assert plain[0, 0].item() == pytest.approx(0.75 / std, rel=1e-5)
    filtered = reinforce_pp_baseline_advantages(rewards, group_ids, token_rewards, mask, filter_sigma=3.0)
    assert filtered[0, 0].item() == 0.0
    assert torch.equal(filtered[1:], plain[1:])


def test_filter_off_is_bit_identical():
    g = torch.Generator().manual_seed(1)
    token_rewards = torch.randn(6, 5, generator=g)
    mask = (torch.rand(6, 5, generator=g) > 0.3).float()
    fn = ADVANTAGES.bind("reinforce_pp", {})
    assert torch.equal(fn(token_rewards, mask), reinforce_pp_advantages(token_rewards, mask, filter_sigma=None))
