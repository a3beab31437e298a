"""The fast (static KV cache) engine: exact logits, the HF engine's semantics, and greedy equivalence with it."""

from __future__ import annotations

import logging

import pytest
import torch

from rlvr.models import load_causal_lm, load_tokenizer
from rlvr.models.logprobs import token_logprobs
from rlvr.rollout import ENGINES, SamplingParams
from rlvr.rollout.fast import FastEngine, _Decoder, _sample, _truncate
from rlvr.rollout.hf import HFEngine
from rlvr.types import Batch, Group, TaskRecord

TEXTS = ["1+2=", "99+1234=", "5=", "12+3456789="]  # different lengths: padding must not matter


@pytest.fixture(scope="module")
def model_and_tok(tiny_model_dir):
    return load_causal_lm(tiny_model_dir), load_tokenizer(tiny_model_dir)


@pytest.fixture(scope="module")
def builtin():
    """The shipped model: its scratchpad text is varied, unlike a random model's."""
    return load_causal_lm("builtin"), load_tokenizer("builtin")


@pytest.fixture(scope="module")
def engine(model_and_tok):
    model, tok = model_and_tok
    return FastEngine(model, tok, batch_size=64)


def _prompts(engine, texts):
    return [engine.tokenizer(t)["input_ids"] for t in texts]


def _learner_logprobs(engine, prompts, out, temperature):
    groups = [Group(TaskRecord(id=str(i), question=""), p, g) for i, (p, g) in enumerate(zip(prompts, out))]
    for g in groups:
        for s in g.samples:
            s.advantage = 0.0
    batch = Batch.from_groups(groups, pad_id=engine.pad_id)
    with torch.no_grad():
        lp, _ = token_logprobs(engine.model, batch.input_ids, batch.attention_mask, batch.mask, temperature)
    m = batch.mask.bool()
    return lp[m], batch.old_logprobs[m]


def test_registered_and_supported(engine):
    assert ENGINES.get("fast") is FastEngine
    assert engine.supported


def test_prefill_and_decode_logits_equal_the_model(engine):
    """The engine's own forward gives the model's logits, for right-padded prompts of different lengths."""
    dec = _Decoder(engine.model)
    prompts = _prompts(engine, TEXTS)
    L = max(map(len, prompts))
    ids = torch.zeros(len(prompts), L, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, : len(p)] = torch.tensor(p)
    lengths = torch.tensor([len(p) for p in prompts])
    cache = dec.new_cache(len(prompts), L + 4)
    with torch.no_grad():
        first = dec.prefill(ids, lengths, cache)
        nxt = torch.tensor([5, 6, 7, 8])
        second = dec.step(nxt, lengths.clone(), cache, L + 1)
        for i, p in enumerate(prompts):
            ref = engine.model(input_ids=torch.tensor([p + [int(nxt[i])]])).logits[0]
            torch.testing.assert_close(first[i], ref[-2], atol=1e-5, rtol=0)
            torch.testing.assert_close(second[i], ref[-1], atol=1e-5, rtol=0)


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
                assert not set(s.response_ids) & set(engine.eos_ids)
            else:
                assert s.response_ids[-1] in engine.eos_ids
                assert not set(s.response_ids[:-1]) & set(engine.eos_ids)
            assert s.text == engine.tokenizer.decode(s.response_ids, skip_special_tokens=True)
            assert s.policy_version == engine.policy_version


@pytest.mark.parametrize("temperature,top_p,top_k", [(1.0, 1.0, 0), (0.7, 1.0, 0), (1.3, 0.8, 0), (1.0, 1.0, 5),
                                                     (0.9, 0.9, 20)])
def test_behaviour_logprobs_match_the_learner(engine, temperature, top_p, top_k):
    """Cached sampling with compaction and the learner's right-padded forward agree on every token; top-p/top-k
    do not change the recorded log-probs (they are of the untruncated tempered distribution)."""
    prompts = _prompts(engine, TEXTS)
    torch.manual_seed(1)
    out = engine.generate(prompts, SamplingParams(n=3, temperature=temperature, top_p=top_p, top_k=top_k,
                                                  max_new_tokens=16))
    learner, behaviour = _learner_logprobs(engine, prompts, out, temperature)
    torch.testing.assert_close(learner, behaviour, atol=2e-4, rtol=0)


def test_logprobs_match_the_learner_when_rows_finish_at_different_steps(builtin):
    """The built-in model ends its answers with EOS after varying lengths, so rows are compacted out of the
    batch many times; every token's log-prob still matches the learner's forward."""
    model, tok = builtin
    engine = FastEngine(model, tok)
    prompts = [tok(t)["input_ids"] for t in ["12+39=", "4821+397=", "5+5=", "999+1=", "70+8=", "1234+8766="]]
    torch.manual_seed(3)
    out = engine.generate(prompts, SamplingParams(n=4, temperature=1.0, max_new_tokens=64))
    lengths = {len(s.response_ids) for g in out for s in g}
    assert len(lengths) > 3 and all(s.finish_reason == "stop" for g in out for s in g)
    learner, behaviour = _learner_logprobs(engine, prompts, out, 1.0)
    torch.testing.assert_close(learner, behaviour, atol=2e-4, rtol=0)


def test_greedy_matches_the_hf_engine(engine):
    """Same tokens as transformers' generate (left-padded there, right-padded here), same log-probs."""
    hf = HFEngine(engine.model, engine.tokenizer, batch_size=64)
    prompts = _prompts(engine, TEXTS)
    params = SamplingParams(n=2, temperature=0.0, max_new_tokens=20)
    ours, theirs = engine.generate(prompts, params), hf.generate(prompts, params)
    for g_ours, g_theirs in zip(ours, theirs):
        for a, b in zip(g_ours, g_theirs):
            assert a.response_ids == b.response_ids
            assert a.finish_reason == b.finish_reason
            assert a.text == b.text
            torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=2e-4, rtol=0)


def test_greedy_matches_the_hf_engine_when_rows_end_early(model_and_tok):
    """EOS made the greedy choice wherever some common token was: rows end at different steps and are
    compacted out of the batch, and the tokens still equal transformers' generate."""
    model, tok = model_and_tok
    biased = load_causal_lm(model.name_or_path)
    prompts = [tok(t)["input_ids"] for t in TEXTS]
    params = SamplingParams(n=1, temperature=0.0, max_new_tokens=24)
    first = HFEngine(biased, tok).generate(prompts, params)
    common = max(set(first[0][0].response_ids[2:]), key=first[0][0].response_ids.count)
    with torch.no_grad():  # tied embeddings: the EOS row of the head (and embedding) becomes a scaled copy
        biased.lm_head.weight[tok.eos_token_id] = biased.lm_head.weight[common] * 1.05
    a = FastEngine(biased, tok).generate(prompts, params)
    b = HFEngine(biased, tok).generate(prompts, params)
    assert [s.response_ids for g in a for s in g] == [s.response_ids for g in b for s in g]
    assert [s.finish_reason for g in a for s in g] == [s.finish_reason for g in b for s in g]
    assert {s.finish_reason for g in a for s in g} == {"stop"} or len({len(s.response_ids) for g in a for s in g}) > 1


def test_same_seed_same_samples(engine):
    prompts = _prompts(engine, ["7+8=", "123+4="])
    params = SamplingParams(n=4, temperature=1.0, max_new_tokens=8)
    torch.manual_seed(123)
    a = engine.generate(prompts, params)
    torch.manual_seed(123)
    b = engine.generate(prompts, params)
    assert [[s.response_ids for s in g] for g in a] == [[s.response_ids for s in g] for g in b]
    assert [[s.logprobs for s in g] for g in a] == [[s.logprobs for s in g] for g in b]


def test_batching_does_not_change_group_structure(engine):
    small = FastEngine(engine.model, engine.tokenizer, batch_size=2)  # groups of 3 are split over chunks
    out = small.generate(_prompts(engine, ["1=", "22=", "333="]), SamplingParams(n=3, max_new_tokens=4))
    assert [len(g) for g in out] == [3, 3, 3]
    assert [g[0].prompt_ids for g in out] == _prompts(engine, ["1=", "22=", "333="])


def test_greedy_is_deterministic_across_batch_sizes(engine):
    prompts = _prompts(engine, TEXTS)
    params = SamplingParams(n=3, temperature=0.0, max_new_tokens=10)
    big = engine.generate(prompts, params)
    small = FastEngine(engine.model, engine.tokenizer, batch_size=2).generate(prompts, params)
    assert [[s.response_ids for s in g] for g in big] == [[s.response_ids for s in g] for g in small]
    assert all(len({tuple(s.response_ids) for s in g}) == 1 for g in big)


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
    assert cut.text.index(stop) + len(stop) == len(cut.text)
    assert cut.finish_reason == "stop"
    assert cut.response_ids == free.response_ids[: len(cut.response_ids)]
    assert len(cut.logprobs) == len(cut.response_ids)


@pytest.mark.parametrize("stops", [[";"], ["|", "A:"]])
def test_stop_strings_agree_with_the_hf_engine_in_greedy_mode(builtin, stops):
    """On the built-in model (varied scratchpad text) stop strings cut where the HF engine cuts."""
    model, tok = builtin
    fast, hf = FastEngine(model, tok), HFEngine(model, tok)
    prompts = [tok(t)["input_ids"] for t in ["12+39=", "4821+397=", "5+5=", "999+1="]]
    params = SamplingParams(n=1, temperature=0.0, max_new_tokens=40, stop=stops)
    a, b = fast.generate(prompts, params), hf.generate(prompts, params)
    assert [(s.response_ids, s.finish_reason) for g in a for s in g] == \
        [(s.response_ids, s.finish_reason) for g in b for s in g]
    assert all(any(x in s.text for x in stops) for g in a for s in g)


def test_a_stop_string_is_matched_in_the_response_only(builtin):
    """A stop string that matches only across the prompt/response boundary does not stop the response (the
    HF engine's generate stops there, then reports finish_reason 'length' for the one-token response)."""
    model, tok = builtin
    engine = FastEngine(model, tok)
    prompt = [tok("12+39=")["input_ids"]]
    free = engine.generate(prompt, SamplingParams(n=1, temperature=0.0, max_new_tokens=30))[0][0]
    stop = "=" + free.text[0]
    if stop in free.text:
        pytest.skip("the boundary string also occurs inside the response")
    cut = engine.generate(prompt, SamplingParams(n=1, temperature=0.0, max_new_tokens=30, stop=[stop]))[0][0]
    assert (cut.response_ids, cut.finish_reason) == (free.response_ids, free.finish_reason)


@pytest.mark.parametrize("optimizer", ["sgd", "fused_adamw"])
def test_weight_updates_are_seen_without_a_sync(model_and_tok, optimizer):
    """Fused weight copies follow in-place parameter changes (an optimizer step), so sampling never uses
    stale weights; greedy output then still equals the HF engine's on the changed model. Fused AdamW (the
    trainer's default) updates parameters without bumping their version counters: it must be seen too."""
    model, tok = model_and_tok
    trained = load_causal_lm(model.name_or_path)
    fast, hf = FastEngine(trained, tok), HFEngine(trained, tok)
    prompts = [tok(t)["input_ids"] for t in TEXTS]
    params = SamplingParams(n=1, temperature=0.0, max_new_tokens=12)
    fast.generate(prompts, params)
    opt = (torch.optim.SGD(trained.parameters(), lr=0.5) if optimizer == "sgd"
           else torch.optim.AdamW(trained.parameters(), lr=0.05, fused=True))
    out = trained(input_ids=torch.tensor([prompts[0]])).logits
    (-out[0, -1, 7]).backward()  # push the next token towards byte 7
    opt.step()
    a, b = fast.generate(prompts, params), hf.generate(prompts, params)
    assert [s.response_ids for g in a for s in g] == [s.response_ids for g in b for s in g]
    # and the behaviour log-probs are those of the updated model
    torch.manual_seed(0)
    sampled = fast.generate(prompts, SamplingParams(n=2, temperature=1.0, max_new_tokens=12))
    learner, behaviour = _learner_logprobs(fast, prompts, sampled, 1.0)
    torch.testing.assert_close(learner, behaviour, atol=2e-4, rtol=0)


def test_policy_version_is_recorded(engine):
    engine.sync_weights(engine.model, version=7)
    out = engine.generate(_prompts(engine, ["1="]), SamplingParams(n=1, max_new_tokens=2))
    assert out[0][0].policy_version == 7
    engine.sync_weights(engine.model, version=0)


def test_unsupported_architecture_falls_back_to_generate(tmp_path, caplog):
    from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel

    from rlvr.models.byte_tokenizer import save_byte_tokenizer

    tok = save_byte_tokenizer(tmp_path)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=16, n_layer=1, n_head=2, n_positions=64,
                                       eos_token_id=tok.eos_token_id, bos_token_id=tok.eos_token_id))
    model.generation_config = GenerationConfig(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    with caplog.at_level(logging.INFO, logger="rlvr.rollout.fast"):
        eng = FastEngine(model, tok)
    assert not eng.supported
    assert "using transformers generate" in caplog.text
    torch.manual_seed(0)
    out = eng.generate([tok("1+1=")["input_ids"]], SamplingParams(n=2, max_new_tokens=4))
    assert [len(g) for g in out] == [2]


def test_truncation_matches_transformers_warpers():
    from transformers import TopKLogitsWarper, TopPLogitsWarper

    torch.manual_seed(0)
    logits = torch.randn(6, 50) * 3
    for k, p in [(5, 1.0), (0, 0.9), (10, 0.5), (0, 0.05), (50, 0.999)]:
        ref = logits.clone()
        if k:
            ref = TopKLogitsWarper(k)(None, ref)
        if p < 1:
            ref = TopPLogitsWarper(p)(None, ref)
        assert torch.equal(torch.isinf(_truncate(logits, k, p)), torch.isinf(ref))


def test_sampler_follows_the_distribution_and_never_picks_removed_tokens():
    torch.manual_seed(0)
    probs = torch.tensor([0.5, 0.0, 0.3, 0.2, 0.0])
    logp = probs.log().expand(20000, -1).contiguous()
    tokens = _sample(logp)
    freq = torch.bincount(tokens, minlength=5).float() / len(tokens)
    assert freq[1] == 0 and freq[4] == 0
    torch.testing.assert_close(freq, probs, atol=0.015, rtol=0)
