"""The advantage-estimator library: every estimator against hand-computed values, its edge cases, and properties."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.algorithms import ADVANTAGES, group_normalized_advantages
from rlvr.algorithms.advantages import (
    _fisher_exact_p,
    ace_advantages,
    dr_grpo_advantages,
    entropy_reshaped_advantages,
    gae_advantages,
    gae_returns,
    grpo_lead_advantages,
    ktae_advantages,
    lite_ppo_advantages,
    nsr_advantages,
    psr_advantages,
    reinforce_pp_advantages,
    reinforce_pp_baseline_advantages,
    rloo_advantages,
    weighted_reinforce_advantages,
)
from rlvr.algorithms.inputs import ADVANTAGE_INPUTS, call_with_inputs, check_inputs, tensor_inputs
from rlvr.registry import RegistryError

T = torch.tensor
NEW = ["dr_grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "lite_ppo", "gae", "ktae", "ace",
       "psr", "nsr", "w_reinforce", "grpo_lead", "ear"]
GROUPED = {"grpo", "dr_grpo", "rloo", "reinforce_pp_baseline", "lite_ppo", "ktae", "ace", "grpo_lead", "ear"}


def close(actual, expected, atol=1e-5):
    torch.testing.assert_close(actual.to(torch.float64), T(expected, dtype=torch.float64), atol=atol, rtol=0)


# -- registry and contract ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["grpo", *NEW])
def test_registered_bindable_and_inputs_known(name):
    fn = ADVANTAGES.bind(name, {})
    assert check_inputs(fn, ADVANTAGE_INPUTS, f"advantage {name}") == []
    doc = ADVANTAGES.get(name).__doc__
    assert "arXiv:" in doc and "=" in doc  # formula and source
    assert getattr(ADVANTAGES.get(name), "needs_group", False) == (name in GROUPED)


def test_bad_knobs_fail_at_bind_time():
    for name, params in [("gae", {"gamma": 1.5}), ("ear", {"mode": "bogus"}), ("w_reinforce", {"positive_weight": -1}),
                         ("ktae", {"scale": -0.1}), ("reinforce_pp", {"gama": 1.0})]:
        with pytest.raises(RegistryError):
            ADVANTAGES.bind(name, params)


def _batch():
    """A mixed batch: groups of 3, 1 (alone) and 2; row 4 fully masked, row 5 a length-1 response."""
    torch.manual_seed(0)
    n, t = 6, 7
    mask = T([[0, 0, 1, 1, 1, 1, 0],
              [0, 1, 1, 1, 0, 0, 0],
              [0, 0, 0, 1, 1, 1, 1],
              [0, 0, 1, 1, 0, 0, 0],
              [0, 0, 0, 0, 0, 0, 0],
              [0, 0, 0, 0, 0, 1, 0]], dtype=torch.float32)
    rewards = T([1.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    token_rewards = torch.zeros(n, t)
    for i in range(n):
        idx = torch.nonzero(mask[i]).flatten()
        if len(idx):
            token_rewards[i, idx[-1]] = rewards[i]
        token_rewards[i] -= 0.01 * mask[i]  # a per-token KL penalty
    return {
        "rewards": rewards,
        "group_ids": T([0, 0, 0, 1, 2, 2]),
        "correct": rewards > 0,
        "mask": mask,
        "response_lengths": mask.sum(-1).long(),
        "old_logprobs": -torch.rand(n, t),
        "ref_logprobs": -torch.rand(n, t),
        "entropy": torch.rand(n, t) * 2,
        "values": torch.randn(n, t),
        "token_rewards": token_rewards,
        "input_ids": torch.randint(0, 6, (n, t)),
    }


@pytest.mark.parametrize("name", ["grpo", *NEW])
def test_finite_shaped_and_zero_outside_mask(name):
    batch = _batch()
    adv = call_with_inputs(ADVANTAGES.bind(name, {}), batch, name)
    assert torch.isfinite(adv).all()
    assert adv.is_floating_point()
    if adv.dim() == 2:
        assert adv.shape == batch["mask"].shape
        assert (adv[batch["mask"] == 0] == 0).all()
    else:
        assert adv.shape == (6,)


@pytest.mark.parametrize("name", ["grpo", *NEW])
def test_masked_positions_never_influence_anything(name):
    batch = _batch()
    fn = ADVANTAGES.bind(name, {})
    before = call_with_inputs(fn, batch, name)
    off = batch["mask"] == 0
    poked = dict(batch)
    for key in ("token_rewards", "values", "entropy", "old_logprobs", "ref_logprobs"):
        poked[key] = torch.where(off, torch.full_like(batch[key], 123.0), batch[key])
    poked["input_ids"] = torch.where(off, torch.full_like(batch["input_ids"], 5), batch["input_ids"])
    torch.testing.assert_close(call_with_inputs(fn, poked, name), before)


def _last_token(mask):
    out = torch.zeros_like(mask)
    for i in range(mask.shape[0]):
        idx = torch.nonzero(mask[i]).flatten()
        if len(idx):
            out[i, idx[-1]] = 1.0
    return out


@pytest.mark.parametrize("name", sorted(GROUPED))
def test_group_of_one_and_all_equal_group_give_zero(name):
    batch = _batch()
    batch["rewards"] = T([0.5, 0.5, 0.5, 1.0, 0.0, 0.0])  # group 0 all equal, group 1 alone, group 2 all equal
    batch["correct"] = batch["rewards"] > 0.7
    batch["token_rewards"] = _last_token(batch["mask"]) * batch["rewards"][:, None]  # no KL: outcome reward only
    adv = call_with_inputs(ADVANTAGES.bind(name, {}), batch, name)
    assert torch.isfinite(adv).all()
    assert adv.abs().max().item() < 1e-6


def test_dtypes_follow_rewards():
    r, g = T([1.0, 0.0], dtype=torch.float64), T([0, 0])
    for fn in (dr_grpo_advantages, rloo_advantages, lite_ppo_advantages):
        assert fn(r, g).dtype == torch.float64
        assert fn(T([1, 0]), g).dtype == torch.float32  # integer rewards -> float32


# -- Dr. GRPO, RLOO, Lite PPO --------------------------------------------------------------------------------


def test_dr_grpo_hand_computed():
    # group 0: mean .5 -> +-.5 ; group 1: mean 4 -> -1, 1, 0 (no std division)
    adv = dr_grpo_advantages(T([1.0, 0.0, 0.0, 1.0, 3.0, 5.0, 4.0]), T([0, 0, 0, 0, 1, 1, 1]))
    close(adv, [0.5, -0.5, -0.5, 0.5, -1.0, 1.0, 0.0])


def test_rloo_hand_computed():
    # group 0 (k=4): 1 - (0+0+0)/3 = 1 ; 0 - (1+0+0)/3 = -1/3 ; group 1 (k=2): 1-3 = -2, 3-1 = 2 ; group 2 alone: 0
    adv = rloo_advantages(T([1.0, 0.0, 0.0, 0.0, 1.0, 3.0, 7.0]), T([0, 0, 0, 0, 1, 1, 2]))
    close(adv, [1.0, -1 / 3, -1 / 3, -1 / 3, -2.0, 2.0, 0.0])


def test_lite_ppo_hand_computed():
    # batch std (unbiased) of [1,0,0,0] = sqrt((.5625 + 3*.0625)/3) = .5 ; group means .5, .5, 0, 0
    r, g = T([1.0, 0.0, 0.0, 0.0]), T([0, 0, 1, 1])
    close(lite_ppo_advantages(r, g), [1.0, -1.0, 0.0, 0.0])
    torch.testing.assert_close(lite_ppo_advantages(r, g), group_normalized_advantages(r, g, std_scope="batch"))


@settings(max_examples=40, deadline=None)
@given(rewards=st.lists(st.floats(-5, 5, allow_nan=False), min_size=2, max_size=10),
       shift=st.floats(-100, 100, allow_nan=False), groups=st.integers(1, 3))
def test_group_baselines_invariant_to_adding_a_constant(rewards, shift, groups):
    r = T(rewards, dtype=torch.float64)
    gid = torch.arange(len(rewards)) % groups
    for name in ("grpo", "dr_grpo", "rloo", "lite_ppo"):
        fn = ADVANTAGES.bind(name, {})
        torch.testing.assert_close(fn(r, gid), fn(r + shift, gid), atol=1e-5, rtol=1e-5)


@settings(max_examples=40, deadline=None)
@given(rewards=st.lists(st.floats(-5, 5, allow_nan=False), min_size=1, max_size=9), groups=st.integers(1, 3),
       bump=st.floats(-3, 3, allow_nan=False))
def test_rloo_matches_brute_force_and_excludes_itself(rewards, groups, bump):
    r = T(rewards, dtype=torch.float64)
    gid = torch.arange(len(rewards)) % groups
    adv = rloo_advantages(r, gid)
    for i in range(len(rewards)):
        others = [rewards[j] for j in range(len(rewards)) if j != i and gid[j] == gid[i]]
        expected = rewards[i] - sum(others) / len(others) if others else 0.0
        assert abs(adv[i].item() - expected) < 1e-9
        # the baseline of sample i ignores r_i: moving r_i moves A_i by exactly the same amount
        if others:
            moved = r.clone()
            moved[i] += bump
            assert abs(rloo_advantages(moved, gid)[i].item() - (expected + bump)) < 1e-9


# -- REINFORCE++ ------------------------------------------------------------------------------------------


def test_reinforce_pp_hand_computed():
    # row 0: response at t=1..3, reward 1 on t=3 ; row 1: response at t=2..3, reward 0. (9s sit outside the mask.)
    mask = T([[0.0, 1, 1, 1], [0, 0, 1, 1]])
    tok = T([[9.0, 0, 0, 1], [9, 9, 0, 0]])
    # gamma=1: returns 1,1,1 | 0,0 ; mean .6 ; var (3*.16 + 2*.36)/5 = .24 ; A = .4/.4899 , -.6/.4899
    s = math.sqrt(0.24)
    close(reinforce_pp_advantages(tok, mask), [[0, 0.4 / s, 0.4 / s, 0.4 / s], [0, 0, -0.6 / s, -0.6 / s]])
    # gamma=.5: returns .25,.5,1 | 0,0 ; mean .35 ; var (.01+.0225+.4225+2*.1225)/5 = .14
    s = math.sqrt(0.14)
    adv = ADVANTAGES.bind("reinforce_pp", {"gamma": 0.5})(tok, mask)
    close(adv, [[0, -0.1 / s, 0.15 / s, 0.65 / s], [0, 0, -0.35 / s, -0.35 / s]])


def test_reinforce_pp_all_equal_and_single_token_batches_are_zero():
    mask = T([[1.0, 1.0], [1.0, 1.0]])
    assert reinforce_pp_advantages(T([[0.0, 1.0], [0.0, 1.0]]), mask).abs().max() == 0  # returns all 1
    assert reinforce_pp_advantages(T([[0.0, 2.0]]), T([[0.0, 1.0]])).abs().max() == 0  # one token in the batch
    assert reinforce_pp_advantages(T([[3.0]]), T([[0.0]])).abs().max() == 0  # nothing trained


def test_reinforce_pp_baseline_hand_computed():
    rewards, groups = T([1.0, 0.0, 1.0, 1.0]), T([0, 0, 1, 1])
    mask = T([[1.0, 1, 1], [0, 0, 1], [1, 1, 0], [1, 1, 1]])
    tok = T([[-0.1, 0, 1], [9, 9, 0], [0, 1, 7], [0, 0, 1]])  # a KL of -.1 on row 0, token 0; 9/7 are outside
    # group means .5 and 1, subtracted on each row's last trained token:
    # row0 [-.1, 0, .5] -> returns [.4, .5, .5] ; row1 [-.5] ; row2 [0, 0] ; row3 [0, 0, 0]
    # 9 tokens, mean .9/9 = .1 ; var (.09+.16+.16+.36+5*.01)/9 = .82/9
    s = math.sqrt(0.82 / 9)
    z = -0.1 / s
    close(reinforce_pp_baseline_advantages(rewards, groups, tok, mask),
          [[0.3 / s, 0.4 / s, 0.4 / s], [0, 0, -0.6 / s], [z, z, 0], [z, z, z]])


# -- GAE ---------------------------------------------------------------------------------------------------


def test_gae_hand_computed_with_offsets_and_length_one():
    mask = T([[0.0, 1, 1], [0, 0, 1]])
    tok = T([[5.0, 0, 1], [5, 5, 1]])
    values = T([[7.0, 0.5, 0.8], [7, 7, 0.3]])
    # lam=gamma=1: row0 d1 = 0 + .8 - .5 = .3, d2 = 1 - .8 = .2 -> A = [.5, .2] ; row1 (one token): 1 - .3 = .7
    close(gae_advantages(tok, values, mask), [[0, 0.5, 0.2], [0, 0, 0.7]])
    # gamma=.9, lam=.5: d1 = .9*.8 - .5 = .22, d2 = .2 -> A1 = .22 + .45*.2 = .31 ; row1 .7
    adv = ADVANTAGES.bind("gae", {"gamma": 0.9, "lam": 0.5})(tok, values, mask)
    close(adv, [[0, 0.31, 0.2], [0, 0, 0.7]])
    # value targets R = A + V on trained tokens: .81, 1.0 ; 1.0
    close(gae_returns(adv, values, mask), [[0, 0.81, 1.0], [0, 0, 1.0]])


def test_gae_whiten_and_tool_observation_gap():
    mask = T([[1.0, 0, 1]])  # token 1 is a tool observation: skipped, its value and reward never read
    tok, values = T([[0.0, 50, 1]]), T([[0.2, -50, 0.6]])
    # d0 = 0 + V2 - V0 = .4 ; d2 = 1 - .6 = .4 -> A = [.8, .4]
    close(gae_advantages(tok, values, mask), [[0.8, 0, 0.4]])
    # whitened: mean .6, population std .2 -> [1, -1]
    close(ADVANTAGES.bind("gae", {"whiten": True})(tok, values, mask), [[1.0, 0, -1.0]])


def _rows(draw_lists):
    """Random right-padded rows with a random response offset, as (token_rewards, values, mask)."""
    n = len(draw_lists)
    t = max(len(r) for r, _, _ in draw_lists) + 2
    tok, val, mask = torch.zeros(n, t, dtype=torch.float64), torch.zeros(n, t, dtype=torch.float64), torch.zeros(n, t)
    for i, (r, v, off) in enumerate(draw_lists):
        off = min(off, t - len(r))
        tok[i, off:off + len(r)] = T(r, dtype=torch.float64)
        val[i, off:off + len(r)] = T(v, dtype=torch.float64)
        mask[i, off:off + len(r)] = 1
    return tok, val, mask


row_strategy = st.integers(1, 6).flatmap(lambda k: st.tuples(
    st.lists(st.floats(-2, 2, allow_nan=False), min_size=k, max_size=k),
    st.lists(st.floats(-2, 2, allow_nan=False), min_size=k, max_size=k),
    st.integers(0, 2)))


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(row_strategy, min_size=1, max_size=4))
def test_gae_lambda_gamma_one_zero_values_is_reward_to_go(rows):
    tok, _, mask = _rows(rows)
    adv = gae_advantages(tok, torch.zeros_like(tok), mask)
    expected = (tok * mask).flip(-1).cumsum(-1).flip(-1) * mask
    torch.testing.assert_close(adv, expected, atol=1e-9, rtol=0)


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(row_strategy, min_size=1, max_size=4), gamma=st.floats(0, 1))
def test_gae_lambda_zero_is_one_step_td_error(rows, gamma):
    tok, val, mask = _rows(rows)
    adv = gae_advantages(tok, val, mask, gamma=gamma, lam=0.0)
    expected = torch.zeros_like(tok)
    for i in range(tok.shape[0]):
        idx = torch.nonzero(mask[i]).flatten().tolist()
        for j, t in enumerate(idx):
            nxt = val[i, idx[j + 1]] if j + 1 < len(idx) else 0.0
            expected[i, t] = tok[i, t] + gamma * nxt - val[i, t]
    torch.testing.assert_close(adv, expected, atol=1e-9, rtol=0)


# -- KTAE --------------------------------------------------------------------------------------------------


def test_fisher_exact_p_hand_computed():
    # [[2,0],[0,2]]: P(k) for k=0,1,2 = 1/6, 4/6, 1/6 -> two-sided p = 1/3 ; [[3,0],[0,3]]: 2/20 ; balanced: 1
    p = _fisher_exact_p(T([2.0, 3.0, 1.0]), T([0.0, 0.0, 1.0]), T([0.0, 0.0, 1.0]), T([2.0, 3.0, 1.0]))
    close(p, [1 / 3, 0.1, 1.0])


def test_ktae_hand_computed():
    # group of 4: rows 0,1 correct with tokens {5,7},{5,8}; rows 2,3 incorrect with {6,7},{6,8}
    ids = T([[5, 7], [5, 8], [6, 7], [6, 8]])
    mask, rewards, groups = torch.ones(4, 2), T([1.0, 1.0, 0.0, 0.0]), T([0, 0, 0, 0])
    grpo = 0.5 / math.sqrt(1 / 3)  # mean .5, unbiased std sqrt(1/3)
    # token 5: table a=2,b=0,c=0,d=2 -> p=1/3, F=exp(-2/3); IG = 1 bit; Cohen's h = asin(1) - asin(0) = pi/2
    # K = 2*sigmoid((F + IG) * h / 2) - 1 = tanh((F + 1) * pi/8) ; token 6 mirrors it ; 7 and 8 carry nothing
    key = math.tanh((math.exp(-2 / 3) + 1) * math.pi / 8)
    adv = ktae_advantages(rewards, groups, rewards > 0, ids, mask, use_tf=False)
    close(adv, [[grpo + key, grpo], [grpo + key, grpo], [-grpo - key, -grpo], [-grpo - key, -grpo]])
    # with the TF term, token 5 is only in correct rollouts: tf_c/(0 + 1e-5) saturates K at +scale
    adv = ADVANTAGES.bind("ktae", {"scale": 0.5})(rewards, groups, rewards > 0, ids, mask)
    close(adv, [[grpo + 0.5, grpo], [grpo + 0.5, grpo], [-grpo - 0.5, -grpo], [-grpo - 0.5, -grpo]])


def test_ktae_prompt_tokens_and_one_sided_groups_carry_no_key_value():
    ids = T([[9, 5, 7], [9, 5, 8], [5, 6, 7], [9, 6, 8], [1, 2, 3], [1, 2, 4]])
    mask = T([[0.0, 1, 1], [0, 1, 1], [0, 1, 1], [0, 1, 1], [0, 1, 1], [0, 1, 1]])  # column 0 is the prompt
    rewards, groups = T([1.0, 1.0, 0.0, 0.0, 1.0, 1.0]), T([0, 0, 0, 0, 1, 1])
    adv = ktae_advantages(rewards, groups, rewards > 0, ids, mask)
    assert adv[4:].abs().max() == 0  # group 1 is all correct: no GRPO signal, no key tokens
    assert (adv[:, 0] == 0).all()
    # the prompt token 5 in row 2 does not count: token 5 still appears only in correct responses
    torch.testing.assert_close(adv[0, 1] - adv[0, 2], adv[1, 1] - adv[1, 2])
    assert adv[0, 1] - adv[0, 2] > 0.99


# -- ACE ---------------------------------------------------------------------------------------------------


def test_ace_hand_computed():
    rewards, groups = T([1.0, 0.0, 0.0, 0.0]), T([0, 0, 0, 0])
    correct = rewards > 0
    mask = T([[1.0, 1, 0], [1, 1, 0], [1, 1, 1], [0, 0, 1]])
    # log-ratios per token; the 9s sit outside the mask. c = [5, 2, -3, 0]
    old = T([[3.0, 2.0, 9.0], [1.5, 0.5, 9.0], [-1.0, -1.0, -1.0], [9.0, 9.0, 0.0]])
    ref = torch.zeros(4, 3)
    # GRPO: mean .25, unbiased std .5 -> [1.5, -.5, -.5, -.5] ; errors scaled by 1 + softplus(c)
    sp = [math.log1p(math.exp(c)) for c in (2.0, -3.0, 0.0)]  # 2.1269, .0486, ln 2
    adv = ace_advantages(rewards, groups, correct, mask, old, ref)
    close(adv, [1.5, -0.5 * (1 + sp[0]), -0.5 * (1 + sp[1]), -0.5 * (1 + sp[2])])
    # confidence="mean": c = [2.5, 1, -1, 0] ; alpha=2
    adv = ADVANTAGES.bind("ace", {"confidence": "mean", "alpha": 2.0})(rewards, groups, correct, mask, old, ref)
    sp = [math.log1p(math.exp(c)) for c in (1.0, -1.0, 0.0)]
    close(adv, [1.5, -0.5 * (1 + 2 * sp[0]), -0.5 * (1 + 2 * sp[1]), -0.5 * (1 + 2 * sp[2])])


def test_ace_leaves_correct_samples_and_positive_advantages_alone():
    rewards, groups = T([1.0, 0.6, 0.0]), T([0, 0, 0])
    correct = T([True, False, False])  # a partially rewarded error with a positive advantage
    mask = torch.ones(3, 2)
    big = torch.full((3, 2), 10.0)  # c = 20 for every sample
    adv = ace_advantages(rewards, groups, correct, mask, big, torch.zeros(3, 2))
    base = group_normalized_advantages(rewards, groups).tolist()  # [+, +, -]
    assert base[1] > 0
    close(adv, [base[0], base[1], base[2] * (1 + math.log1p(math.exp(20.0)))])


# -- PSR / NSR / W-REINFORCE -------------------------------------------------------------------------------


def test_psr_nsr_w_reinforce():
    correct = T([True, False, True])
    close(psr_advantages(correct), [1.0, 0.0, 1.0])
    close(nsr_advantages(correct), [0.0, -1.0, 0.0])
    close(weighted_reinforce_advantages(correct), [0.1, -1.0, 0.1])
    close(ADVANTAGES.bind("w_reinforce", {"positive_weight": 0.5})(correct), [0.5, -1.0, 0.5])
    close(psr_advantages(T([1.0, 0.0])), [1.0, 0.0])  # a float verdict works too


# -- GRPO-LEAD ---------------------------------------------------------------------------------------------


def test_grpo_lead_hand_computed():
    rewards = T([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0])
    groups = T([0, 0, 0, 0, 1, 1, 1, 1])
    # hard group (rho=.25): GRPO [1.5, -.5, -.5, -.5] ; easy group (rho=.75): [.5, .5, .5, -1.5]
    # w(x) = .4 + 1.1 / (1 + exp(10 (x - .75))) : w(.25) = .4 + 1.1/(1+e^-5) = 1.49264 ; w(.75) = .95
    w_hard = 0.4 + 1.1 / (1 + math.exp(-5))
    adv = grpo_lead_advantages(rewards, groups, rewards > 0)
    # positives use w(rho), negatives w(1 - rho)
    close(adv, [1.5 * w_hard, -0.5 * 0.95, -0.5 * 0.95, -0.5 * 0.95, 0.5 * 0.95, 0.5 * 0.95, 0.5 * 0.95,
                -1.5 * w_hard])


# -- ETTRL EAR ---------------------------------------------------------------------------------------------


def test_ear_reshape_hand_computed():
    rewards, groups = T([1.0, 0.0]), T([0, 0])
    mask = T([[1.0, 1, 0], [1, 1, 1]])
    entropy = T([[0.2, 0.8, 99.0], [1.0, 1.5, 2.0]])  # H = .5 and 1.5 ; group mean 1
    # GRPO +-.70711 ; Y = 1 + (1 - .5)/1 = 1.5 and 1 + (1 - 1.5)/1 = .5
    g = 0.5 / math.sqrt(0.5)
    close(entropy_reshaped_advantages(rewards, groups, entropy, mask), [1.5 * g, -0.5 * g])


def test_ear_weight_never_flips_sign_and_clip_mode():
    rewards, groups = T([1.0, 0.0, 1.0]), T([0, 0, 0])
    entropy, mask = T([[0.0], [0.0], [3.0]]), torch.ones(3, 1)  # group mean 1 -> Y = 2, 2, -1 -> clamped to 0
    base = group_normalized_advantages(rewards, groups)
    close(entropy_reshaped_advantages(rewards, groups, entropy, mask), [2 * base[0].item(), 2 * base[1].item(), 0.0])
    # Adv-Clip: one success in 10 -> GRPO (1 - .1)/sqrt(.1) = 2.846 -> clipped to 2 ; the rest -.316 untouched
    rewards, groups = T([1.0] + [0.0] * 9), torch.zeros(10, dtype=torch.long)
    adv = ADVANTAGES.bind("ear", {"mode": "clip"})(rewards, groups, torch.ones(10, 1), torch.ones(10, 1))
    close(adv, [2.0] + [-0.1 / math.sqrt(0.1)] * 9)


def test_tensor_inputs_are_what_the_docs_say():
    assert tensor_inputs(ADVANTAGES.get("gae")) == ["token_rewards", "values", "mask"]
    assert tensor_inputs(ADVANTAGES.get("ktae")) == ["rewards", "group_ids", "correct", "input_ids", "mask"]
    assert tensor_inputs(ADVANTAGES.get("ace")) == ["rewards", "group_ids", "correct", "mask", "old_logprobs",
                                                    "ref_logprobs"]
    assert tensor_inputs(ADVANTAGES.get("ear")) == ["rewards", "group_ids", "entropy", "mask"]
