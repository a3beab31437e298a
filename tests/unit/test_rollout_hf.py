"""The transformers-generate engine: groups of n, behaviour log-probs, stop handling, determinism."""

from __future__ import annotations

import pytest
import torch

from rlvr.models import load_causal_lm, load_tokenizer
from rlvr.models.logprobs import token_logprobs
from rlvr.rollout import SamplingParams
from rlvr.rollout.hf import HFEngine
from rlvr.types import Batch, Group, TaskRecord


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    tok = load_tokenizer(tiny_model_dir)
    model = load_causal_lm(tiny_model_dir)
    return HFEngine(model, tok, batch_size=64)


def _prompts(engine, texts):
    return [engine.tokenizer(t)["input_ids"] for t in texts]


def test_n_samples_per_prompt_with_aligned_fields(engine):
    prompts = _prompts(engine, ["12+3=", "4+5678="])
    torch.manual_seed(0)
    out = engine.generate(prompts, SamplingParams(n=3, temperature=1.0, max_new_tokens=12))
    assert [len(g) for g in out] == [3, 3]
    for p, group in zip(prompts, out):
        for s in group:
            assert s.prompt_ids == p
            assert 1 <= len(s.response_ids) <= 12
            assert len(s.logprobs) == len(s.response_ids) == len(s.loss_mask)
            assert all(lp <= 0 for lp in s.logprobs)
            assert s.finish_reason in ("stop", "length")
            if s.finish_reason == "length":
                assert len(s.response_ids) == 12
            else:
                assert s.response_ids[-1] in engine.eos_ids
            assert s.text == engine.tokenizer.decode(s.response_ids, skip_special_tokens=True)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_behaviour_logprobs_match_the_learner(engine, temperature):
    """Left-padded incremental sampling and the learner's right-padded forward agree on every token."""
    prompts = _prompts(engine, ["1+2=", "99+1234=", "5="])
    torch.manual_seed(1)
    out = engine.generate(prompts, SamplingParams(n=2, temperature=temperature, max_new_tokens=10))
    groups = [Group(TaskRecord(id=str(i), question=""), p, g) for i, (p, g) in enumerate(zip(prompts, out))]
    for g in groups:
        for s in g.samples:
            s.advantage = 0.0
    batch = Batch.from_groups(groups, pad_id=engine.pad_id)
    with torch.no_grad():
        lp, _ = token_logprobs(engine.model, batch.input_ids, batch.attention_mask, batch.mask, temperature)
    m = batch.mask.bool()
    torch.testing.assert_close(lp[m], batch.old_logprobs[m], atol=2e-4, rtol=0)


def test_same_seed_same_samples(engine):
    prompts = _prompts(engine, ["7+8="])
    params = SamplingParams(n=4, temperature=1.0, max_new_tokens=8)
    torch.manual_seed(123)
    a = engine.generate(prompts, params)
    torch.manual_seed(123)
    b = engine.generate(prompts, params)
    assert [s.response_ids for s in a[0]] == [s.response_ids for s in b[0]]


def test_batching_does_not_change_group_structure(engine):
    small = HFEngine(engine.model, engine.tokenizer, batch_size=2)
    out = small.generate(_prompts(engine, ["1=", "22=", "333="]), SamplingParams(n=3, max_new_tokens=4))
    assert [len(g) for g in out] == [3, 3, 3]
    assert [g[0].prompt_ids for g in out] == _prompts(engine, ["1=", "22=", "333="])


def test_greedy_is_deterministic_and_logprobs_are_untempered(engine):
    prompts = _prompts(engine, ["3+4="])
    out1 = engine.generate(prompts, SamplingParams(n=2, temperature=0.0, max_new_tokens=6))
    assert out1[0][0].response_ids == out1[0][1].response_ids


def test_stop_string_cuts_the_response_after_the_match(engine):
    prompts = _prompts(engine, ["1+1="])
    torch.manual_seed(5)
    free = engine.generate(prompts, SamplingParams(n=1, temperature=1.0, max_new_tokens=20))[0][0]
    if len(free.text) < 3:
        pytest.skip("sampled response too short to pick a stop string")
    stop = free.text[1:3]
    torch.manual_seed(5)
    cut = engine.generate(prompts, SamplingParams(n=1, temperature=1.0, max_new_tokens=20, stop=[stop]))[0][0]
    assert stop in cut.text
    assert cut.text.endswith(stop) or cut.text.index(stop) + len(stop) == len(cut.text)
    assert cut.finish_reason == "stop"
    assert cut.response_ids == free.response_ids[: len(cut.response_ids)]
    assert len(cut.logprobs) == len(cut.response_ids)


def test_policy_version_is_recorded(engine):
    engine.sync_weights(engine.model, version=7)
    out = engine.generate(_prompts(engine, ["1="]), SamplingParams(n=1, max_new_tokens=2))
    assert out[0][0].policy_version == 7
    engine.sync_weights(engine.model, version=0)
