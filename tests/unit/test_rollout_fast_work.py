"""The fast engine's work savers: shared prompt prefill, the compiled decode step and its eager fallback, and
`model.dtype=auto` staying fp32 on CPU."""

from __future__ import annotations

import logging

import pytest
import torch

from rlvr.models import load_causal_lm, load_tokenizer
from rlvr.models.loading import resolve_dtype
from rlvr.rollout import SamplingParams
from rlvr.rollout.fast import FastEngine

TEXTS = ["1+2=", "99+1234=", "5=", "12+3456789="]  # different lengths: padding must not matter
U = 2.0 ** -24  # fp32 unit roundoff


@pytest.fixture(scope="module")
def model_and_tok(tiny_model_dir):
    return load_causal_lm(tiny_model_dir), load_tokenizer(tiny_model_dir)


def _prompts(tok, texts):
    return [tok(t)["input_ids"] for t in texts]


def _run(engine, prompts, params, seed=7):
    torch.manual_seed(seed)
    return engine.generate(prompts, params)


def _ids(out):
    return [[s.response_ids for s in g] for g in out]


def _lps(out):
    return torch.tensor([lp for g in out for s in g for lp in s.logprobs])


def test_shared_prefill_gives_the_unshared_samples(model_and_tok):
    """Prefill has no randomness, so sharing it leaves the RNG stream (and so the tokens) unchanged; the
    log-probs may differ only by the rounding of a different matmul batch size."""
    model, tok = model_and_tok
    prompts = _prompts(tok, TEXTS)
    params = SamplingParams(n=5, temperature=1.0, max_new_tokens=12)
    shared = _run(FastEngine(model, tok, batch_size=64), prompts, params)
    unshared = _run(FastEngine(model, tok, batch_size=64, share_prefill=False), prompts, params)
    assert _ids(shared) == _ids(unshared)
    assert [s.finish_reason for g in shared for s in g] == [s.finish_reason for g in unshared for s in g]
    # A BLAS kernel may block a P-row and an N-row matmul differently: a few ulps of the log-probs (|lp| < 20).
    torch.testing.assert_close(_lps(shared), _lps(unshared), rtol=0, atol=64 * 20 * U)


def test_shared_prefill_with_groups_split_over_chunks(model_and_tok):
    """n = 1 (prefill straight into the cache) and groups cut across chunks agree with unshared prefill."""
    model, tok = model_and_tok
    prompts = _prompts(tok, TEXTS[:3])
    for n, batch in ((1, 64), (3, 4)):
        params = SamplingParams(n=n, temperature=1.0, max_new_tokens=4)
        a = _run(FastEngine(model, tok, batch_size=batch), prompts, params)
        b = _run(FastEngine(model, tok, batch_size=batch, share_prefill=False), prompts, params)
        assert [len(g) for g in a] == [n] * 3
        assert _ids(a) == _ids(b)


def test_a_failing_compile_falls_back_to_eager_with_a_warning(model_and_tok, monkeypatch, caplog):
    model, tok = model_and_tok
    prompts = _prompts(tok, TEXTS)
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=8)
    eager = _run(FastEngine(model, tok), prompts, params)

    def broken_compile(fn, **kwargs):
        def run(*args):
            raise RuntimeError("InductorError: no C++ compiler found\nmore detail")
        return run

    monkeypatch.setattr(torch, "compile", broken_compile)
    engine = FastEngine(model, tok, compile=True)
    with caplog.at_level(logging.WARNING, logger="rlvr.rollout.fast"):
        out = _run(engine, prompts, params)
        again = _run(engine, prompts, params)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # said once; later steps and calls go straight to eager
    assert "decoding eagerly" in warnings[0] and "no C++ compiler found" in warnings[0]
    assert "more detail" not in warnings[0]
    assert _ids(out) == _ids(eager) == _ids(again)
    assert torch.equal(_lps(out), _lps(eager))


def test_an_unavailable_backend_falls_back_to_eager(model_and_tok, caplog):
    model, tok = model_and_tok
    with caplog.at_level(logging.WARNING, logger="rlvr.rollout.fast"):
        engine = FastEngine(model, tok, compile=True, compile_backend="no-such-backend")
    assert "no-such-backend" in caplog.text and "decoding eagerly" in caplog.text
    out = engine.generate(_prompts(tok, TEXTS[:2]), SamplingParams(n=2, temperature=0.0, max_new_tokens=4))
    assert [len(g) for g in out] == [2, 2]


@pytest.mark.slow  # inductor compiles C++ kernels: ~15-60 s on 2 cores, depending on the load
@pytest.mark.parametrize("backend", ["inductor", "zentorch"])
def test_compiled_step_matches_eager_to_fp32_rounding(model_and_tok, backend):
    """Inductor reorders and fuses the reductions, so compiled logits differ from eager ones by rounding only.
    Bound: a length-n fp32 dot product in any order is within n*u of the exact one, relative to the size of
    its terms (Higham, Accuracy and Stability, 3.1); each of the model's layers adds such errors to the
    residual stream, so |compiled - eager| <= 2 * (layers + 1) * n_max * u * max|logit| with n_max the longest
    reduction (hidden, MLP width, or the attended positions), the 2 for the two sides' own errors."""
    if backend == "zentorch":
        pytest.importorskip("zentorch", reason="the optional AMD ZenDNN plugin (pip install 'rlvr[zen]')")
    model, tok = model_and_tok
    prompts = _prompts(tok, TEXTS)
    eager = FastEngine(model, tok)
    compiled = FastEngine(model, tok, compile=True, compile_backend=backend)
    # The step on a cache filled by the same prefill, at several widths (one compilation: dynamic shapes).
    dec = eager._decoder
    cfg = model.config
    with torch.inference_mode():  # as in generate: the weights require grad
        ids = torch.tensor([prompts[1], prompts[3][: len(prompts[1])]])
        lengths = torch.tensor([len(prompts[1])] * 2)
        S = ids.shape[1] + 4
        dec.rope_tables(S)
        compiled._decoder.rope_tables(S)
        cache_e, cache_c = dec.new_cache(2, S), dec.new_cache(2, S)
        dec.prefill(ids, lengths, cache_e)
        dec.prefill(ids, lengths, cache_c)
        tokens, pos = torch.tensor([5, 9]), lengths.clone()
        for _ in range(3):
            width = int(pos.max()) + 1
            le = dec.step(tokens, pos, cache_e, width)
            lc = compiled._step_fn(tokens, pos, cache_c, width)
            n_max = max(cfg.hidden_size, cfg.intermediate_size, width)
            tol = 2 * (cfg.num_hidden_layers + 1) * n_max * U * float(le.abs().max())
            torch.testing.assert_close(lc, le, rtol=0, atol=tol)
            torch.testing.assert_close(cache_c, cache_e, rtol=0, atol=tol)
            tokens, pos = le.argmax(-1), pos + 1
    assert compiled._step_fn is not compiled._decoder.step, "compilation fell back to eager on this machine"


@pytest.mark.parametrize("bf16_supported", [True, False])
def test_auto_dtype_is_fp32_on_cpu_even_where_the_cpu_reports_bf16(monkeypatch, bf16_supported):
    """bf16 on CPU is slower than fp32 on many CPUs and loses precision in the learner; `auto` never picks it
    there (set model.dtype=bfloat16 explicitly to try it)."""
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: bf16_supported, raising=False)
    assert resolve_dtype("auto", torch.device("cpu")) is torch.float32
    assert resolve_dtype("bfloat16", torch.device("cpu")) is torch.bfloat16


def test_engine_options_validate_through_the_registry():
    from rlvr.registry import RegistryError
    from rlvr.rollout import ENGINES

    opts = ENGINES.resolve("fast", {"compile": True, "compile_backend": "zentorch", "share_prefill": False})
    assert opts["compile"] is True and opts["compile_backend"] == "zentorch" and opts["share_prefill"] is False
    assert ENGINES.resolve("fast", {})["share_prefill"] is True  # sharing is the default
    with pytest.raises(RegistryError, match="share_prefill"):
        ENGINES.resolve("fast", {"share_prefill": "sometimes"}, "rollout.engine_options")
