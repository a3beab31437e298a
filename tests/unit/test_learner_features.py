"""Learner features that recipes switch on: critic/GAE, KL in reward, adaptive KL, TIS, top-entropy tokens,
entropy bonus, ProRL reference reset, and the config checks that guard their combinations."""

from __future__ import annotations

import copy

import pytest
import torch

from rlvr.config import Config, ConfigError, load_config
from rlvr.learner.critic import Critic
from rlvr.learner.learner import Learner, needs_reference
from rlvr.models import load_causal_lm
from rlvr.types import Batch, Group, Sample, TaskRecord


def _cfg(**algorithm) -> Config:
    return Config.model_validate({"train": {"steps": 10, "micro_batch_size": 2}, "optim": {"lr": 1e-3},
                                  "rollout": {"n": 2}, "algorithm": algorithm})


def _groups(model) -> list[Group]:
    gen = torch.Generator().manual_seed(0)
    groups = []
    for g in range(2):
        samples = []
        for i in range(2):
            resp = torch.randint(2, 60, (3 + i + g,), generator=gen).tolist()
            samples.append(Sample(prompt_ids=[5, 6, 7], response_ids=resp, reward=float((g + i) % 2),
                                  correct=bool((g + i) % 2), logprobs=[-1.0] * len(resp)))
        groups.append(Group(TaskRecord(id=str(g), question=""), [5, 6, 7], samples))
    return groups


def _step(learner: Learner, model) -> tuple[Batch, dict, dict]:
    batch, inputs = learner.prepare(Batch.from_groups(_groups(model), pad_id=0))
    learner.compute_advantages(batch, inputs)
    return batch, inputs, learner.update(batch)


def _critic(cfg: Config, model, separate: bool, tiny_model_dir):
    backbone = load_causal_lm(tiny_model_dir) if separate else None
    return Critic(cfg.algorithm.critic, model, backbone, torch.device("cpu"))


@pytest.mark.parametrize("kind", ["separate", "head"])
def test_gae_with_a_critic_trains_the_value_model(tiny_model_dir, kind):
    cfg = _cfg(advantage={"name": "gae", "gamma": 1.0, "lam": 1.0}, critic={"kind": kind, "lr": 1e-2})
    model = load_causal_lm(tiny_model_dir)
    learner = Learner(model, cfg, None, _critic(cfg, model, kind == "separate", tiny_model_dir))
    batch, inputs, stats = _step(learner, model)
    # the value head starts at zero, so the first returns are the rewards-to-go and advantages equal them
    assert torch.allclose(batch.values, torch.zeros_like(batch.values))
    expected = (batch.rewards[:, None] * batch.mask)
    torch.testing.assert_close(batch.returns, expected)
    losses = [stats["value_loss"]]
    for _ in range(4):
        losses.append(_step(learner, model)[2]["value_loss"])
    assert losses[-1] < losses[0]
    assert any(p.abs().sum() > 0 for p in learner.critic.head.parameters())


def test_critic_warmup_leaves_the_policy_alone(tiny_model_dir):
    cfg = _cfg(advantage="gae", critic={"kind": "separate", "warmup_steps": 1, "lr": 1e-2})
    model = load_causal_lm(tiny_model_dir)
    before = copy.deepcopy(model.state_dict())
    learner = Learner(model, cfg, None, _critic(cfg, model, True, tiny_model_dir))
    _, _, stats = _step(learner, model)
    assert stats["critic_only"] == 1.0
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    _, _, stats = _step(learner, model)
    assert stats["critic_only"] == 0.0
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_kl_in_reward_lowers_the_reward_by_the_penalty(tiny_model_dir):
    cfg = _cfg(kl_coef=0.5, kl_placement="reward")
    model = load_causal_lm(tiny_model_dir)
    ref = load_causal_lm(tiny_model_dir, trainable=False)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.05 * torch.randn_like(p))
    learner = Learner(model, cfg, ref)
    batch, inputs = learner.prepare(Batch.from_groups(_groups(model), pad_id=0))
    penalty = batch.rewards - inputs["rewards"]
    assert (penalty > 0).all()  # k3 >= 0, and the reference differs
    last = batch.last_token_index
    rows = torch.arange(len(batch))
    token_sum = inputs["token_rewards"].sum(1)
    torch.testing.assert_close(token_sum, inputs["rewards"])
    assert (inputs["token_rewards"][rows, last] <= batch.rewards).all()


def test_adaptive_kl_coefficient_moves(tiny_model_dir):
    cfg = _cfg(kl_coef=0.1, kl_target=1e-6, kl_horizon=10)
    model = load_causal_lm(tiny_model_dir)
    learner = Learner(model, cfg, load_causal_lm(tiny_model_dir, trainable=False))
    coefs = [_step(learner, model)[2]["kl_coef"] for _ in range(3)]
    assert coefs[0] == pytest.approx(0.1, rel=0.5)
    assert coefs[-1] != coefs[0]


def test_tis_recomputes_old_logprobs_and_keeps_the_engines(tiny_model_dir):
    cfg = _cfg(tis_cap=2.0)
    model = load_causal_lm(tiny_model_dir)
    learner = Learner(model, cfg)
    batch, _, stats = _step(learner, model)
    assert batch.behaviour_logprobs is not None
    assert torch.all(batch.behaviour_logprobs[batch.mask.bool()] == -1.0)  # the engine's, as given
    assert not torch.all(batch.old_logprobs[batch.mask.bool()] == -1.0)    # the learner's recomputation
    assert torch.isfinite(torch.tensor(stats["grad_norm"]))


def test_top_entropy_tokens_restrict_the_gradient(tiny_model_dir):
    cfg = _cfg(top_entropy_ratio=0.25)
    model = load_causal_lm(tiny_model_dir)
    batch, _, stats = _step(Learner(model, cfg), model)
    kept = float(batch.token_filter.sum() / batch.mask.sum())
    assert 0.15 <= kept <= 0.35
    assert stats["trained_token_frac"] == pytest.approx(kept)
    assert torch.all(batch.token_filter <= batch.mask)


def test_entropy_bonus_with_a_target_adapts_its_coefficient(tiny_model_dir):
    cfg = _cfg(entropy_coef=0.01, entropy_target=100.0)  # far above any entropy: the coefficient must grow
    model = load_causal_lm(tiny_model_dir)
    learner = Learner(model, cfg)
    first = _step(learner, model)[2]["entropy_coef"]
    second = _step(learner, model)[2]["entropy_coef"]
    assert second > first


def test_reference_reset_copies_the_policy_and_clears_adam(tiny_model_dir):
    cfg = _cfg(kl_coef=0.01, reference_reset_every=1)
    model = load_causal_lm(tiny_model_dir)
    ref = load_causal_lm(tiny_model_dir, trainable=False)
    learner = Learner(model, cfg, ref)
    _step(learner, model)
    assert learner.optimizer.state
    learner.reset_reference()
    assert not learner.optimizer.state
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), ref.state_dict().values()))
    assert "reference" in learner.state_dict()


def test_reference_is_loaded_only_when_something_asks_for_it():
    assert not needs_reference(_cfg())
    assert needs_reference(_cfg(kl_coef=0.01))


@pytest.mark.parametrize("overrides,fragment", [
    (["algorithm.advantage=gae"], "algorithm.critic: the 'gae' advantage needs a value model"),
    (["algorithm.critic.kind=separate"], "does not use values"),
    (["algorithm.reference_reset_every=10"], "needs a KL term"),
    (["algorithm.kl_target=0.1"], "kl_coef > 0"),
    (["algorithm.entropy_target=0.5"], "entropy_coef > 0"),
    (["algorithm.kl_estimator=k9"], "algorithm.kl_estimator"),
    (["algorithm.top_entropy_ratio=1.5"], "algorithm.top_entropy_ratio"),
])
def test_incompatible_combinations_are_rejected(overrides, fragment):
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides)
    assert fragment in " ".join(str(err.value).split())
