"""train.skip_zero_advantage: rows whose advantages are all zero are left out of the forward and backward, and the
update is the one the full batch gives (up to float rounding in the gradient sums; exactly when nothing is live)."""

from __future__ import annotations

import copy

import pytest
import torch

from rlvr.algorithms import LOSSES
from rlvr.config import Config
import rlvr.learner.learner as learner_module
from rlvr.learner.learner import Learner
from rlvr.models import load_causal_lm
from rlvr.models.logprobs import token_logprobs
from rlvr.types import Batch, Group, Sample, TaskRecord


def _cfg(skip: bool, **over):
    algorithm = over.pop("algorithm", {})
    return Config.model_validate({
        "train": {"steps": 10, "micro_batch_size": 4, "skip_zero_advantage": skip, **over},
        "optim": {"lr": 1e-2, "grad_clip": None, "weight_decay": 0.1}, "rollout": {"n": 2},
        "algorithm": algorithm})


def _batch(model, advantages):
    """Groups of two samples with the given advantages (one pair per group), random responses of 3-6 tokens."""
    torch.manual_seed(0)
    groups = []
    for g in range(len(advantages) // 2):
        samples = [Sample(prompt_ids=[5, 6, 7], response_ids=torch.randint(2, 60, (3 + i + g % 3,)).tolist(),
                          advantage=advantages[2 * g + i]) for i in range(2)]
        groups.append(Group(TaskRecord(id=str(g), question=""), [5, 6, 7], samples))
    batch = Batch.from_groups(groups, pad_id=0)
    with torch.no_grad():
        batch.old_logprobs, _ = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.mask)
    return batch


def _update_capturing_grads(model, cfg, batch):
    """Run one update; return its metrics and the gradients the optimizer stepped with."""
    learner = Learner(model, cfg)
    grads: list[torch.Tensor | None] = []
    learner.optimizer.register_step_pre_hook(lambda *_: grads.extend(
        None if p.grad is None else p.grad.detach().clone() for p in model.parameters()))
    return learner.update(copy.deepcopy(batch)), grads, learner


# groups 1 and 3 have all-equal rewards (advantage 0); micro-batches of 4 rows mix live and dead groups
ADVANTAGES = (1.0, -1.0, 0.0, 0.0, 0.5, -0.5, 0.0, 0.0)


def test_skipping_dead_rows_gives_the_full_batch_gradient(tiny_model_dir):
    base = load_causal_lm(tiny_model_dir)
    batch = _batch(base, ADVANTAGES)
    full_stats, full, _ = _update_capturing_grads(copy.deepcopy(base), _cfg(False), batch)
    skip_stats, skipped, _ = _update_capturing_grads(copy.deepcopy(base), _cfg(True), batch)
    assert skip_stats["zero_adv_rows_skipped_frac"] == pytest.approx(0.5)
    assert "zero_adv_rows_skipped_frac" not in full_stats
    assert skip_stats["train_tokens"] < full_stats["train_tokens"]  # the dead rows were not computed
    # A dead row adds exact zeros to every gradient sum, so leaving it out changes only the order and blocking
    # of the remaining fp32 sums: each entry is a sum over at most all response tokens, so its error is bounded
    # by tokens * eps * the largest gradient magnitude.
    eps = torch.finfo(torch.float32).eps
    tokens = float(batch.mask.sum())
    for g_full, g_skip in zip(full, skipped):
        assert (g_full is None) == (g_skip is None)
        if g_full is not None:
            tol = tokens * eps * float(g_full.abs().max()) + 1e-12
            torch.testing.assert_close(g_skip, g_full, atol=tol, rtol=0)
    assert any(g is not None and g.abs().max() > 0 for g in full)


@pytest.mark.parametrize("over", [{}, {"mini_batches": 2, "ppo_epochs": 2}])
def test_a_batch_with_no_live_row_takes_the_same_optimizer_step_without_a_forward(tiny_model_dir, over, monkeypatch):
    """All advantages zero: no backward runs, and no forward but a no-grad one of a single row, for the
    train/inference gap diagnostic; the optimizer steps on exact zero gradients, as the full update does (AdamW's
    weight decay and the step count move): parameters and optimizer state are bit-identical to the full
    update's."""
    base = load_causal_lm(tiny_model_dir)
    batch = _batch(base, (0.0,) * 8)
    m_full, m_skip = copy.deepcopy(base), copy.deepcopy(base)
    _, _, full = _update_capturing_grads(m_full, _cfg(False, **over), batch)
    forwards: list[tuple[int, bool]] = []  # (rows, grad enabled) of every forward the learner runs
    real_forward = learner_module.forward_tokens

    def counting_forward(model, input_ids, *args, **kwargs):
        forwards.append((len(input_ids), torch.is_grad_enabled()))
        return real_forward(model, input_ids, *args, **kwargs)

    monkeypatch.setattr(learner_module, "forward_tokens", counting_forward)
    stats, grads, skip = _update_capturing_grads(m_skip, _cfg(True, **over), batch)
    assert forwards == [(1, False)]  # one row, no grad: the gap diagnostic of the first mini-batch
    assert 0 <= stats["rollout/logprob_abs_diff"] < 1e-5  # the learner is the policy whose log-probs these are
    assert stats["zero_adv_rows_skipped_frac"] == 1.0 and stats["train_tokens"] == 0
    assert grads and all(g is not None and not g.any() for g in grads)  # exact zeros on every trainable param
    for p, q in zip(m_full.parameters(), m_skip.parameters()):
        assert torch.equal(p, q)
    assert any(not torch.equal(p, q) for p, q in zip(m_skip.parameters(), base.parameters()))  # weight decay
    full_state, skip_state = list(full.optimizer.state.values()), list(skip.optimizer.state.values())
    assert len(full_state) == len(skip_state) > 0
    for a, b in zip(full_state, skip_state):
        assert a.keys() == b.keys()
        for key in a:
            assert torch.equal(torch.as_tensor(a[key]), torch.as_tensor(b[key])), key


def test_a_dead_batch_zeroes_only_the_parameters_a_backward_reaches(tiny_model_dir):
    """A trainable parameter that no forward uses (as a vision tower on a text-only batch) gets no gradient from
    a backward, so AdamW leaves it alone; after a live update, a dead one leaves it alone too. A live update and
    then a dead one are bit-identical to the full path's two updates."""
    base = load_causal_lm(tiny_model_dir)
    base.register_parameter("unused", torch.nn.Parameter(torch.ones(3)))
    live, dead = _batch(base, (1.0, -1.0, 0.5, -0.5) * 2), _batch(base, (0.0,) * 8)
    models = []
    for skip in (False, True):
        model = copy.deepcopy(base)
        learner = Learner(model, _cfg(skip))
        learner.update(copy.deepcopy(live))
        stats = learner.update(copy.deepcopy(dead))
        assert stats.get("zero_adv_rows_skipped_frac", 1.0) == 1.0
        assert torch.equal(model.unused, base.unused) and model.unused not in learner.optimizer.state
        models.append(model)
    for p, q in zip(*(m.parameters() for m in models)):
        assert torch.equal(p, q)


@pytest.mark.parametrize("change", [
    {"algorithm": {"kl_coef": 0.1}},                                   # KL to the reference in the loss
    {"algorithm": {"entropy_coef": 0.01}},                             # entropy bonus on every row
    {"algorithm": {"loss": {"name": "cpgd"}}},                         # drift term does not vanish at A = 0
    {"algorithm": {"loss": {"name": "kl_cov"}}},                       # covariance over the whole batch
])
def test_skipping_is_off_when_another_term_reads_the_dead_rows(tiny_model_dir, change):
    learner = Learner(load_causal_lm(tiny_model_dir), _cfg(True, **change))
    assert not learner._skips_zero_advantage


def test_skipping_is_on_for_the_marked_losses_and_off_by_switch(tiny_model_dir):
    model = load_causal_lm(tiny_model_dir)
    for name in ("ppo_clip", "dcpo", "gspo"):
        assert getattr(LOSSES.get(name), "zero_grad_at_zero_advantage", False)
        assert Learner(model, _cfg(True, algorithm={"loss": {"name": name}}))._skips_zero_advantage
    assert not Learner(model, _cfg(False))._skips_zero_advantage


@pytest.mark.parametrize("name", ["ppo_clip", "dcpo", "gspo"])
def test_marked_losses_have_zero_value_and_gradient_on_a_zero_advantage_row(name):
    """The mark's contract, checked on the loss itself: with A = 0 on a row, that row's per-token loss and its
    gradient are exactly zero, whatever the log-ratios and the other rows."""
    torch.manual_seed(0)
    logprobs = (-torch.rand(3, 5) * 3).requires_grad_()
    old = logprobs.detach() + 1e-5 * torch.randn(3, 5)  # live rows inside every clip range (gspo's is 3e-4)
    old[1] = -torch.rand(5) * 3                          # the dead row far off-policy
    advantages = torch.tensor([[1.5] * 5, [0.0] * 5, [-0.7] * 5])
    mask = torch.ones(3, 5)
    loss, _ = LOSSES.bind(name, {})(logprobs=logprobs, old_logprobs=old, advantages=advantages, mask=mask)
    (loss * mask).sum().backward()
    assert torch.all(loss[1] == 0) and torch.all(logprobs.grad[1] == 0)
    assert logprobs.grad[0].abs().sum() > 0
