"""The learner: gradient accumulation is exact, non-finite steps are skipped cleanly, updates follow A."""

from __future__ import annotations

import copy

import pytest
import torch

from rlvr.config import Config
from rlvr.learner.learner import Learner
from rlvr.models import load_causal_lm
from rlvr.models.logprobs import token_logprobs
from rlvr.types import Batch, Group, Sample, TaskRecord


def _cfg(**train):
    return Config.model_validate({"train": {"steps": 10, **train}, "optim": {"lr": 1e-2, "grad_clip": None},
                                  "rollout": {"n": 2}})


def _batch(model, advantages=(1.0, -1.0, 0.5, -0.5), nan=False):
    torch.manual_seed(0)
    groups = []
    for g in range(2):
        samples = []
        for i in range(2):
            resp = torch.randint(2, 60, (3 + i + g,)).tolist()
            samples.append(Sample(prompt_ids=[5, 6, 7], response_ids=resp,
                                  advantage=float("nan") if nan else advantages[2 * g + i]))
        groups.append(Group(TaskRecord(id=str(g), question=""), [5, 6, 7], samples))
    batch = Batch.from_groups(groups, pad_id=0)
    with torch.no_grad():
        batch.old_logprobs, _ = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.mask)
    return batch


def test_micro_batching_gives_the_same_update(tiny_model_dir):
    base = load_causal_lm(tiny_model_dir)
    m1, m2 = copy.deepcopy(base), copy.deepcopy(base)
    batch = _batch(base)
    Learner(m1, _cfg(micro_batch_size=1)).update(copy.deepcopy(batch))
    Learner(m2, _cfg(micro_batch_size=4)).update(copy.deepcopy(batch))
    for p1, p2 in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(p1, p2, atol=5e-5, rtol=1e-4)  # Adam amplifies fp32 noise on ~0 grads
    assert any(not torch.equal(p, q) for p, q in zip(m1.parameters(), base.parameters()))


def test_update_moves_probability_towards_positive_advantages(tiny_model_dir):
    model = load_causal_lm(tiny_model_dir)
    advantages = torch.tensor([1.0, -1.0, 1.0, -1.0])
    batch = _batch(model, advantages=tuple(advantages.tolist()))
    cfg = Config.model_validate({"train": {"steps": 10}, "optim": {"lr": 1e-4}, "rollout": {"n": 2}})
    stats = Learner(model, cfg).update(copy.deepcopy(batch))
    with torch.no_grad():
        after, _ = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.mask)
    seq = lambda lp: (lp * batch.mask).sum(1)  # noqa: E731
    # a small step increases the surrogate objective sum_i A_i log pi(y_i)
    assert float((advantages * seq(after)).sum()) > float((advantages * seq(batch.old_logprobs)).sum())
    for key in ("pg_loss", "entropy", "clip_frac", "grad_norm", "lr", "approx_kl_old"):
        assert key in stats
    assert stats["entropy"] > 0


def test_non_finite_step_is_skipped_and_state_untouched(tiny_model_dir):
    model = load_causal_lm(tiny_model_dir)
    learner = Learner(model, _cfg())
    params = [p.detach().clone() for p in model.parameters()]
    stats = learner.update(_batch(model, nan=True))
    assert stats["skipped_optimizer_steps"] == 1.0
    assert learner.skipped_steps == 1
    assert learner.optimizer.state_dict()["state"] == {}
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), params))


def test_recomputed_old_logprobs_give_ratio_one(tiny_model_dir):
    model = load_causal_lm(tiny_model_dir)
    batch = _batch(model)
    batch.old_logprobs = None  # the learner must recompute them
    learner = Learner(model, _cfg(recompute_old_logprobs=True))
    batch, _ = learner.prepare(batch)
    stats = learner.update(batch)
    assert stats["clip_frac"] == 0.0
    assert stats["approx_kl_old"] == pytest.approx(0.0, abs=1e-10)


def test_kl_term_uses_the_reference(tiny_model_dir):
    model = load_causal_lm(tiny_model_dir)
    ref = load_causal_lm(tiny_model_dir, trainable=False)
    cfg = Config.model_validate({"train": {"steps": 10, "ppo_epochs": 3}, "optim": {"lr": 5e-2},
                                 "algorithm": {"kl_coef": 0.1}})
    learner = Learner(model, cfg, reference=ref)
    first = learner.update(learner.prepare(_batch(model))[0])  # prepare computes the reference log-probs
    second = learner.update(learner.prepare(_batch(model))[0])
    assert first["kl"] == pytest.approx(0.0, abs=1e-6)  # first pass: policy == reference
    assert second["kl"] > 0


def test_state_dict_round_trip(tiny_model_dir):
    model = load_causal_lm(tiny_model_dir)
    learner = Learner(model, _cfg(mini_batches=2))
    learner.update(_batch(model))
    state = copy.deepcopy(learner.state_dict())
    other = Learner(copy.deepcopy(model), _cfg(mini_batches=2))
    other.load_state_dict(state)
    assert other.scheduler.last_epoch == learner.scheduler.last_epoch == 2
    assert torch.equal(other.generator.get_state(), learner.generator.get_state())


def test_fused_adamw_is_used_when_available_and_matches_the_loop_kernel():
    from rlvr.config import OptimConfig
    from rlvr.learner.optim import build_optimizer

    torch.manual_seed(0)
    a = torch.nn.Linear(8, 8)
    b = torch.nn.Linear(8, 8)
    b.load_state_dict(a.state_dict())
    fused, plain = build_optimizer(a, OptimConfig(lr=1e-2)), build_optimizer(b, OptimConfig(lr=1e-2, fused=False))
    assert fused.defaults["fused"] is True and not plain.defaults.get("fused")
    x = torch.randn(4, 8)
    for _ in range(3):
        for model, opt in ((a, fused), (b, plain)):
            opt.zero_grad()
            model(x).square().sum().backward()
            opt.step()
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=1e-5)


# -- samples excluded for a non-finite reward ---------------------------------------------------------------


def _groups_with(rewards_per_group, excluded=()):
    """Groups of samples with the given rewards; (g, i) in `excluded` marks a non-finite reward."""
    torch.manual_seed(1)
    groups = []
    for g, rewards in enumerate(rewards_per_group):
        samples = []
        for i, r in enumerate(rewards):
            resp = torch.randint(2, 60, (3 + i,)).tolist()
            s = Sample(prompt_ids=[5, 6, 7], response_ids=resp, reward=r)
            if (g, i) in excluded:
                s.meta["non_finite_reward"] = ["shape"]
            samples.append(s)
        groups.append(Group(TaskRecord(id=str(g), question=""), [5, 6, 7], samples))
    return groups


def _prepared(model, groups):
    batch = Batch.from_groups(groups, pad_id=0)
    with torch.no_grad():
        batch.old_logprobs, _ = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.mask)
    return batch


def test_an_excluded_sample_is_out_of_its_group_statistics_and_gets_no_tokens(tiny_model_dir):
    model = load_causal_lm(tiny_model_dir)
    # group 0: rewards 1, 0, (excluded, scored 0), 1 -> statistics over 1, 0, 1: mean 2/3, unbiased std sqrt(1/3)
    groups = _groups_with([[1.0, 0.0, 0.0, 1.0], [0.0, 1.0]], excluded={(0, 2)})
    batch = _prepared(model, groups)
    assert batch.valid.tolist() == [True, True, False, True, True, True]
    assert batch.mask[2].sum() == 0 and batch.mask[3].sum() == 6  # row 2's tokens are trained on nowhere
    learner = Learner(model, _cfg())
    batch, inputs = learner.prepare(batch)
    adv = learner.compute_advantages(batch, inputs)
    s = (1 / 3) ** 0.5
    hi, lo, one = (1 - 2 / 3) / (s + 1e-6), (0 - 2 / 3) / (s + 1e-6), 0.5 / (0.5 ** 0.5 + 1e-6)
    torch.testing.assert_close(adv, torch.tensor([hi, lo, 0.0, hi, -one, one]), atol=1e-5, rtol=0)
    assert torch.isfinite(batch.advantages).all() and batch.advantages[2].abs().sum() == 0


def test_an_excluded_sample_changes_nothing_in_the_update(tiny_model_dir):
    """Training on groups plus an excluded sample gives the update of the groups alone."""
    base = load_causal_lm(tiny_model_dir)
    m1, m2 = copy.deepcopy(base), copy.deepcopy(base)
    with_bad = _groups_with([[1.0, 0.0, 0.0, 1.0], [0.0, 1.0]], excluded={(0, 2)})
    without = copy.deepcopy(with_bad)
    del without[0].samples[2]
    stats = []
    for model, groups in ((m1, with_bad), (m2, without)):
        learner = Learner(model, _cfg(micro_batch_size=8))
        batch, inputs = learner.prepare(_prepared(model, groups))
        learner.compute_advantages(batch, inputs)
        stats.append(learner.update(batch))
    for p1, p2 in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(p1, p2, atol=5e-5, rtol=1e-4)
    assert any(not torch.equal(p, q) for p, q in zip(m1.parameters(), base.parameters()))
    assert stats[0]["skipped_optimizer_steps"] == 0.0
    assert stats[0]["pg_loss"] == pytest.approx(stats[1]["pg_loss"], abs=1e-6)


def test_a_step_whose_every_sample_is_excluded_changes_no_weight_and_is_no_fault(tiny_model_dir):
    model = load_causal_lm(tiny_model_dir)
    before = [p.detach().clone() for p in model.parameters()]
    groups = _groups_with([[0.0, 0.0]], excluded={(0, 0), (0, 1)})
    learner = Learner(model, _cfg())
    batch, inputs = learner.prepare(_prepared(model, groups))
    assert learner.compute_advantages(batch, inputs).tolist() == [0.0, 0.0]
    stats = learner.update(batch)
    assert stats["skipped_optimizer_steps"] == 0.0 and stats["grad_norm"] == 0.0
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))
