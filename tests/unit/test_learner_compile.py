"""`train.compile`: the learner's decoder through torch.compile (learner/compiled.py). The compiled forward and
backward match eager ones to fp32 rounding, a failing backend leaves the decoder eager with one warning, and
the weights, their names and deep copies are unaffected."""

from __future__ import annotations

import copy
import functools
import logging

import pytest
import torch

from rlvr.config import Config
from rlvr.learner import Learner
from rlvr.learner.compiled import compile_decoder
from rlvr.models import load_causal_lm
from rlvr.models.logprobs import forward_tokens
from tests.conftest import make_tiny_model

U = 2.0**-24  # fp32 unit roundoff


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("compile_model"))


def _batch(rows: int, length: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 250, (rows, length), generator=g)
    attention = torch.ones_like(ids)
    attention[0, -3:] = 0  # a padded row
    mask = torch.zeros(rows, length)
    mask[:, length // 2:] = 1.0
    return ids, attention, mask * attention


def _grads(model, batch):
    model.zero_grad(set_to_none=True)
    ids, attention, mask = batch
    out = forward_tokens(model, ids, attention, mask)
    (-(out.logprobs * mask).sum() / mask.sum()).backward()
    return out.logprobs.detach(), {k: p.grad.clone() for k, p in model.named_parameters()}


@pytest.mark.slow  # inductor compiles C++ kernels for the forward and the backward: ~20-90 s on 2 cores
def test_compiled_forward_and_backward_match_eager_to_fp32_rounding(model_dir):
    """Inductor reorders and fuses reductions, so log-probs and gradients differ from eager by rounding only.
    A length-n fp32 dot product in any order is within n*u of the exact one relative to the size of its terms
    (Higham, 3.1); each layer adds such errors forward and backward, so every difference is bounded by
    2 * (layers + 1) * n_max * u * scale, with n_max the longest reduction (hidden, MLP width, or the tokens a
    weight gradient sums over) and scale the largest log-prob or gradient entry (the size of the terms)."""
    eager, compiled = load_causal_lm(model_dir), load_causal_lm(model_dir)
    assert compile_decoder(compiled), "compilation fell back to eager on this machine"
    cfg = eager.config
    for rows, length in ((4, 12), (6, 9)):  # a second shape reuses the dynamic graph
        batch = _batch(rows, length, seed=rows)
        lp_e, g_e = _grads(eager, batch)
        lp_c, g_c = _grads(compiled, batch)
        n_max = max(cfg.hidden_size, cfg.intermediate_size, rows * length)
        bound = 2 * (cfg.num_hidden_layers + 1) * n_max * U
        torch.testing.assert_close(lp_c, lp_e, rtol=0, atol=bound * float(lp_e.abs().max()))
        scale = max(float(g.abs().max()) for g in g_e.values())
        for name, g in g_e.items():
            torch.testing.assert_close(g_c[name], g, rtol=0, atol=bound * scale, msg=name)


def test_a_failing_backend_leaves_the_decoder_eager_with_one_warning(model_dir, caplog):
    model = load_causal_lm(model_dir)
    before = _grads(load_causal_lm(model_dir), _batch(4, 12, seed=0))
    with caplog.at_level(logging.WARNING, logger="rlvr.learner.compiled"):
        assert compile_decoder(model, backend="no-such-backend") is False
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "no-such-backend" in warnings[0] and "runs eagerly" in warnings[0]
    assert "forward" not in model.get_decoder().__dict__  # the class's own forward again
    assert all(p.grad is None for p in model.parameters())
    after = _grads(model, _batch(4, 12, seed=0))
    assert torch.equal(before[0], after[0])


def test_the_learner_compiles_on_request_and_falls_back(model_dir, caplog):
    def learner(**train):
        cfg = Config.model_validate({"model": {"path": str(model_dir)}, "train": {"steps": 2, **train}})
        return Learner(load_causal_lm(model_dir), cfg)

    assert learner().compiled is False
    assert learner(compile=True, compile_backend="eager").compiled is True  # dynamo only: no C++ compile
    with caplog.at_level(logging.WARNING, logger="rlvr.learner.compiled"):
        assert learner(compile=True, compile_backend="no-such-backend").compiled is False
    assert "train.compile" in caplog.text


def test_weights_names_and_deep_copies_are_unaffected(model_dir):
    plain, model = load_causal_lm(model_dir), load_causal_lm(model_dir)
    assert compile_decoder(model, backend="eager")
    assert list(model.state_dict()) == list(plain.state_dict())
    clone = copy.deepcopy(model)  # what LoRA's merge-for-saving does
    assert clone.get_decoder().forward.args[1] is clone.get_decoder()  # bound to the copy, not the original
    with torch.no_grad():
        for p in clone.parameters():
            p.mul_(0.5)
    ids, attention, mask = _batch(2, 8, seed=1)
    with torch.no_grad():
        ours = forward_tokens(model, ids, attention, mask).logprobs
        theirs = forward_tokens(clone, ids, attention, mask).logprobs
        reference = forward_tokens(plain, ids, attention, mask).logprobs
    assert torch.equal(ours, reference) or torch.allclose(ours, reference, rtol=0, atol=1e-5)
    assert not torch.allclose(theirs, reference, atol=1e-3)


def test_generate_runs_the_eager_forward(model_dir, monkeypatch):
    """Calls with a KV cache (generate: the hf engine, evaluation) bypass the compiled forward."""
    plain, model = load_causal_lm(model_dir), load_causal_lm(model_dir)
    assert compile_decoder(model, backend="eager")
    compiled = model.get_decoder().forward.args[0]
    calls = []

    def counting(*args, **kwargs):
        calls.append(kwargs.get("past_key_values"))
        return compiled(*args, **kwargs)

    model.get_decoder().forward = functools.partial(model.get_decoder().forward.func, counting, model.get_decoder())
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, do_sample=False)
        ref = plain.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, do_sample=False)
    assert torch.equal(out, ref)
    assert calls == []  # every generate call carried a cache and ran eagerly
    forward_tokens(model, *_batch(2, 8, seed=2))
    assert len(calls) == 1 and calls[0] is None  # the learner's call ran compiled
