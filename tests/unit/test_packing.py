"""Token-budget micro-batching: every row once, groups whole, budget kept, less padding, same update."""

from __future__ import annotations

import copy

import torch

from rlvr.config import Config
from rlvr.learner.learner import Learner
from rlvr.learner.packing import (
    group_token_micro_batches,
    padded_cost,
    padding_report,
    row_lengths,
    row_token_micro_batches,
)
from rlvr.models import load_causal_lm
from rlvr.models.logprobs import forward_tokens, pack_rows, packable, token_logprobs
from rlvr.types import Batch, Group, Sample, TaskRecord


def _random_plan(seed: int = 0, groups: int = 12, n: int = 4):
    g = torch.Generator().manual_seed(seed)
    group_ids = torch.arange(groups).repeat_interleave(n)
    lengths = torch.randint(8, 120, (groups * n,), generator=g)
    return group_ids, lengths


def test_every_row_once_groups_whole_budget_kept():
    group_ids, lengths = _random_plan()
    rows = torch.randperm(len(group_ids), generator=torch.Generator().manual_seed(1))[:40]
    rows = torch.cat([torch.nonzero(group_ids == gid).squeeze(1) for gid in torch.unique(group_ids[rows])])
    budget = 600
    plan = group_token_micro_batches(rows, group_ids, lengths, budget)
    assert sorted(torch.cat(plan).tolist()) == sorted(rows.tolist())
    for mb in plan:
        gids = set(group_ids[mb].tolist())
        for gid in gids:  # a group is never split
            assert set(torch.nonzero(group_ids == gid).squeeze(1).tolist()) <= set(mb.tolist())
        assert padded_cost(mb, lengths) <= budget or len(gids) == 1


def test_max_rows_is_respected_and_oversized_groups_stand_alone():
    group_ids, lengths = _random_plan(groups=6, n=5)
    plan = group_token_micro_batches(torch.arange(30), group_ids, lengths, max_tokens=10, max_rows=10)
    assert all(len(set(group_ids[mb].tolist())) == 1 for mb in plan)  # each group exceeds 10 tokens alone
    plan = group_token_micro_batches(torch.arange(30), group_ids, lengths, max_tokens=10**6, max_rows=10)
    assert all(mb.numel() <= 10 for mb in plan) and len(plan) == 3


def test_sorting_by_length_cuts_padding_versus_row_count_split():
    group_ids, lengths = _random_plan(groups=16, n=8)
    by_rows = list(torch.split(torch.arange(len(group_ids)), 32))
    budget = 32 * int(lengths.max())  # same worst-case size as 32-row micro-batches
    by_tokens = group_token_micro_batches(torch.arange(len(group_ids)), group_ids, lengths, budget)
    assert padding_report(by_tokens, lengths)["padded_tokens"] < padding_report(by_rows, lengths)["padded_tokens"]
    rows_only = row_token_micro_batches(len(lengths), lengths, budget)
    assert padding_report(rows_only, lengths)["padding_frac"] < padding_report(by_tokens, lengths)["padding_frac"]
    assert sorted(torch.cat(rows_only).tolist()) == list(range(len(lengths)))


# The update and forward comparisons below check quantities that are mathematically equal (the same per-token
# terms, summed in a different grouping). They run in float64 and allow what reordering a float64 reduction can
# change, not a hand-picked float32 margin: in float32, Adam's first step lr*g/(|g|+eps) turns the rounding noise
# of a near-zero gradient into differences of order lr, which made these tests fail at random.
EPS64 = torch.finfo(torch.float64).eps
GRAD_SCALE = 10.0  # a bound on |per-token gradient terms| of this tiny model (measured: below 9)


def _reduction_tol(n_terms: int, scale: float) -> float:
    """How much two orderings of an n-term float64 sum of terms bounded by `scale` can differ."""
    return n_terms * EPS64 * scale


def _update_tol(cfg: Config, batch: Batch) -> float:
    """Bound on the parameter difference after one Adam step from gradients that differ by reduction order:
    Adam's first step amplifies a gradient difference by at most lr / eps."""
    return cfg.optim.lr / cfg.optim.eps * _reduction_tol(int(batch.mask.sum()), GRAD_SCALE)


def _float64_model(model_dir):
    return load_causal_lm(model_dir).to(torch.float64)


def _batch(model):
    torch.manual_seed(0)
    groups = []
    for g in range(3):
        samples = [Sample(prompt_ids=[5, 6, 7], response_ids=torch.randint(2, 60, (2 + 3 * i + g,)).tolist(),
                          advantage=float((-1) ** i) * (g + 1)) for i in range(2)]
        groups.append(Group(TaskRecord(id=str(g), question=""), [5, 6, 7], samples))
    batch = Batch.from_groups(groups, pad_id=0)
    with torch.no_grad():
        batch.old_logprobs, _ = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.mask)
    return batch


def _configs(**train: int) -> tuple[Config, Config]:
    """A learner config with one mini-batch of up to 64 rows, and the same with `train` options set."""
    cfg = Config.model_validate({"train": {"steps": 10, "mini_batches": 1, "micro_batch_size": 64},
                                 "optim": {"lr": 1e-2, "grad_clip": None}, "rollout": {"n": 2}})
    other = cfg.model_copy(deep=True)
    for key, value in train.items():
        setattr(other.train, key, value)
    return cfg, other


def test_token_budget_split_gives_the_same_update(tiny_model_dir):
    base = _float64_model(tiny_model_dir)
    m1, m2 = copy.deepcopy(base), copy.deepcopy(base)
    cfg, packed_cfg = _configs(micro_batch_tokens=40)
    batch = _batch(base)
    plan = Learner(copy.deepcopy(base), packed_cfg)._split(batch)
    assert len(plan[0][1]) > 1  # the budget really cuts the mini-batch
    lengths = row_lengths(batch.attention_mask)
    assert all(padded_cost(mb, lengths) <= 40 or len(torch.unique(batch.group_ids[mb])) == 1 for mb in plan[0][1])
    assert len(Learner(copy.deepcopy(base), cfg)._split(batch)[0][1]) == 1  # by rows: one micro-batch
    Learner(m1, cfg).update(copy.deepcopy(batch))
    Learner(m2, packed_cfg).update(copy.deepcopy(batch))
    tol = _update_tol(cfg, batch)
    assert tol < 1e-4 * cfg.optim.lr  # tight: a wrongly weighted micro-batch moves parameters by about lr
    for p1, p2 in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(p1, p2, atol=tol, rtol=0)
    assert max(float((p - q).detach().abs().max()) for p, q in zip(m1.parameters(), base.parameters())) > 0.5 * cfg.optim.lr


# -- packed sequences (train.pack_tokens) --------------------------------------------------------------------


def test_rows_pack_first_fit_longest_first():
    mask = torch.zeros(5, 10)
    for row, n in enumerate([4, 9, 3, 6, 2]):
        mask[row, :n] = 1
    # 9 -> bin 0 (room 1); 6 -> bin 1 (room 4); 4 -> bin 1 (room 0); 3 -> bin 2 (room 7); 2 -> bin 2
    assert pack_rows(mask, capacity=10) == [[1], [3, 0], [2, 4]]
    assert pack_rows(mask, capacity=4) == [[1], [3], [0], [2], [4]]  # rows longer than a bin stand alone


def test_packed_forward_equals_padded_forward_with_gradients(tiny_model_dir):
    model = _float64_model(tiny_model_dir)
    assert packable(model)
    batch = _batch(model)

    def run(pack):
        model.zero_grad()
        out = forward_tokens(model, batch.input_ids, batch.attention_mask, batch.mask, 0.7, with_entropy=True,
                             entropy_grad=True, pack_tokens=pack)
        ((out.logprobs * batch.mask).sum() + (out.entropy * batch.mask).sum()).backward()
        return out, {n: p.grad.clone() for n, p in model.named_parameters()}

    padded, padded_grads = run(None)
    packed, packed_grads = run(20)  # rows of 5..12 tokens: several bins, some holding two rows
    assert len(pack_rows(batch.attention_mask, 20)) < len(batch)
    # log-probs and entropies come back rounded to their output dtype: one rounding step of it apart at most
    for got, want in ((packed.logprobs, padded.logprobs), (packed.entropy, padded.entropy)):
        torch.testing.assert_close(got, want, atol=torch.finfo(want.dtype).eps * float(want.detach().abs().max()), rtol=0)
    assert (packed.logprobs[batch.mask == 0] == 0).all()
    n = int(batch.mask.sum())
    for name, grad in padded_grads.items():
        tol = _reduction_tol(n, max(GRAD_SCALE, float(grad.abs().max())))
        torch.testing.assert_close(packed_grads[name], grad, atol=tol, rtol=0, msg=name)


def test_packed_learner_makes_the_padded_update(tiny_model_dir):
    base = _float64_model(tiny_model_dir)
    m1, m2 = copy.deepcopy(base), copy.deepcopy(base)
    cfg, packed_cfg = _configs(pack_tokens=24)
    batch = _batch(base)
    Learner(m1, cfg).update(copy.deepcopy(batch))
    Learner(m2, packed_cfg).update(copy.deepcopy(batch))
    for p1, p2 in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(p1, p2, atol=_update_tol(cfg, batch), rtol=0)
    assert max(float((p - q).detach().abs().max()) for p, q in zip(m1.parameters(), base.parameters())) > 5e-3


def test_models_that_cannot_pack_run_padded(tiny_model_dir):
    model = load_causal_lm(tiny_model_dir)
    model.config.model_type = "gpt2"  # not one whose attention is known to honour a 4D mask
    assert not packable(model)
    batch = _batch(model)
    a = forward_tokens(model, batch.input_ids, batch.attention_mask, batch.mask, pack_tokens=16).logprobs
    b = forward_tokens(model, batch.input_ids, batch.attention_mask, batch.mask).logprobs
    assert torch.equal(a, b)
