"""The fast engine's cross-call prefix KV cache: the cache by hand, prefill from a reused prefix, the same samples
with the cache on and off (built-in model and a tiny random Qwen2), partial hits, eviction, invalidation."""

from __future__ import annotations

import contextlib
import math

import pytest
import torch

from rlvr.models import load_causal_lm, load_tokenizer
from rlvr.rollout import SamplingParams
from rlvr.rollout.fast import FastEngine, _Decoder
from rlvr.rollout.prefix_cache import PrefixKVCache, common_prefix_len

# Log-probs with and without the cache differ only by fp32 rounding: the reused K/V were computed by decode steps
# (one token per matmul) instead of one prefill over the whole prompt, so sums are taken in another order. A bound:
# eps_fp32 * sqrt(longest reduction) * |logit| = 1.19e-7 * sqrt(384) * 30 ~ 7e-5 (the built-in model's MLP width
# 384, logits below 30 in magnitude); measured at most 8.3e-6 on the built-in model.
LOGPROB_ATOL = 1e-4


def _kv(n: int, fill: float = 0.0) -> torch.Tensor:
    return torch.full((1, 2, 1, n, 2), fill)  # [layers, 2, kv_heads, n, head_dim]: 16 bytes a position


def test_common_prefix_len_by_hand():
    assert common_prefix_len((1, 2, 3), (1, 2, 3, 4)) == 3
    assert common_prefix_len((1, 2, 3, 4), (1, 2, 9, 4)) == 2
    assert common_prefix_len((5,), (6,)) == 0
    assert common_prefix_len((), (1,)) == 0
    for k in range(9):  # every divergence point of an 8-token key
        b = tuple(range(8))[:k] + (99,) * (8 - k)
        assert common_prefix_len(tuple(range(8)), b) == k


def test_cache_lookup_insert_and_eviction_by_hand():
    c = PrefixKVCache(max_bytes=16 * 10, max_entries=3)  # 10 positions of _kv
    assert c.insert([1, 2, 3, 4], _kv(4, 1.0))
    n, kv = c.lookup([1, 2, 9, 9])  # a partial hit: the entry diverges after two tokens
    assert n == 2 and kv is not None and float(kv[0, 0, 0, 0, 0]) == 1.0
    assert c.lookup([1, 2, 3, 4, 5], limit=3)[0] == 3  # capped (the engine always runs the last token)
    assert c.lookup([7]) == (0, None)
    assert not c.insert([1, 2], _kv(2))  # covered by [1, 2, 3, 4]: nothing new
    assert c.insert([1, 2, 3, 4, 5], _kv(5, 2.0))  # supersedes [1, 2, 3, 4]
    assert list(c.entries) == [(1, 2, 3, 4, 5)] and c.bytes == 16 * 5
    assert c.insert([8, 8], _kv(2)) and c.insert([9, 9], _kv(2))  # 9 positions, 3 entries
    assert c.insert([7, 7], _kv(2))  # 4 entries > 3: the least recently used one goes, [1..5]
    assert list(c.entries) == [(8, 8), (9, 9), (7, 7)] and c.stats.evicted == 1
    c.lookup([8, 8, 1])  # served: [8, 8] becomes the most recently used
    assert c.insert([6, 6, 6, 6, 6], _kv(5))  # 11 positions > 10: evict by bytes, oldest first ([9, 9])
    assert list(c.entries) == [(7, 7), (8, 8), (6, 6, 6, 6, 6)] and c.bytes == 16 * 9
    assert not c.insert(list(range(11)), _kv(11))  # larger than the whole budget: not stored
    s = c.stats
    assert (s.lookups, s.hits, s.reused_tokens, s.stored, s.evicted) == (4, 3, 7, 6, 2)
    with pytest.raises(ValueError, match="3 positions for 2 token ids"):
        c.insert([1, 2], _kv(3))
    with pytest.raises(ValueError, match="max_bytes > 0"):
        PrefixKVCache(0)
    c.clear()
    assert len(c) == 0 and c.bytes == 0 and c.stats.cleared == 1


@pytest.fixture(scope="module")
def builtin():
    return load_causal_lm("builtin"), load_tokenizer("builtin")


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    return load_causal_lm(tiny_model_dir), load_tokenizer(tiny_model_dir)


def test_prefill_from_a_reused_prefix_equals_the_whole_prefill(tiny):
    """prefill(prompt) == prefill(prompt[:j]) then prefill(prompt[j:], start=j): the logits and every K/V."""
    model, tok = tiny
    dec = _Decoder(model)
    ids = torch.tensor([tok("12+3456789=")["input_ids"]])
    L = ids.shape[1]
    whole, split = dec.new_cache(1, L), dec.new_cache(1, L)
    with torch.no_grad():
        ref = dec.prefill(ids, torch.tensor([L]), whole)
        for j in (1, 5, L - 1):
            split.zero_()
            dec.prefill(ids[:, :j], torch.tensor([j]), split)
            out = dec.prefill(ids[:, j:], torch.tensor([L - j]), split, start=j)
            torch.testing.assert_close(out, ref, atol=1e-5, rtol=0)
            torch.testing.assert_close(split, whole, atol=1e-5, rtol=0)


def _search_like_calls(engine: FastEngine, prompt: list[int], cache_bytes: int | None, max_entries: int = 256):
    """A tree search's call pattern: continuations of prompt + a growing prefix taken from earlier samples, one
    prefix that diverges from everything decoded (a partial hit), and the prompt alone again."""
    torch.manual_seed(0)
    engine.prefill_tokens = 0
    ctx = engine.prefix_cache(cache_bytes, max_entries) if cache_bytes else contextlib.nullcontext()
    outs, reused = [], []
    with ctx as cache:
        prefix: list[int] = []
        for i in range(5):
            before = cache.stats.reused_tokens if cache is not None else 0
            group = engine.generate([prompt + prefix], SamplingParams(n=3, max_new_tokens=8))[0]
            reused.append((cache.stats.reused_tokens if cache is not None else 0) - before)
            outs.append(group)
            prefix = prefix + group[i % 3].response_ids[: 2 + i % 3]
        seen = {t for g in outs for s in g for t in s.response_ids}
        other = next(t for t in range(3, 250) if t not in seen)  # a token no row sampled: no stored key has it
        before = cache.stats.reused_tokens if cache is not None else 0
        outs.append(engine.generate([prompt + prefix + [other, other]], SamplingParams(n=2, max_new_tokens=6))[0])
        reused.append((cache.stats.reused_tokens if cache is not None else 0) - before)
        before = cache.stats.reused_tokens if cache is not None else 0
        outs.append(engine.generate([prompt], SamplingParams(n=2, max_new_tokens=6))[0])
        reused.append((cache.stats.reused_tokens if cache is not None else 0) - before)
        stats = cache.stats if cache is not None else None
    return outs, engine.prefill_tokens, reused, prefix, stats


def _assert_same_samples(a, b):
    for ga, gb in zip(a, b, strict=True):
        for sa, sb in zip(ga, gb, strict=True):
            assert sa.response_ids == sb.response_ids and sa.finish_reason == sb.finish_reason
            torch.testing.assert_close(torch.tensor(sa.logprobs), torch.tensor(sb.logprobs), atol=LOGPROB_ATOL,
                                       rtol=0)


@pytest.mark.parametrize("which", ["builtin", "tiny"])
def test_cache_on_and_off_give_the_same_samples(which, builtin, tiny):
    model, tok = builtin if which == "builtin" else tiny
    engine = FastEngine(model, tok)
    prompt = tok("Add 1234+5678. Answer:")["input_ids"]
    off, prefilled_off, _, _, _ = _search_like_calls(engine, prompt, None)
    on, prefilled_on, reused, prefix, stats = _search_like_calls(engine, prompt, 2**24)
    _assert_same_samples(off, on)
    assert engine._prefix is None  # off again outside the block
    # Without the cache every call prefills its whole prompt; with it, the first call does, and every later one
    # reuses all but the tokens it adds (a prefix of an earlier row: all but its last token is served).
    assert prefilled_off == sum(len(g[0].prompt_ids) for g in off)
    # Reuse by hand: every decoded row is stored under prompt + response[:-1] (its last token was never fed), so
    # a call reuses the longest common prefix of its prompt with any earlier row's, capped at all but one token.
    for i, group in enumerate(on):
        query = tuple(group[0].prompt_ids)
        rows = [tuple(s.prompt_ids + s.response_ids[:-1]) for g in on[:i] for s in g]
        assert reused[i] == min(max([common_prefix_len(r, query) for r in rows], default=0), len(query) - 1)
    assert all(r > 0 for r in reused[1:])
    assert 0 < reused[5] <= len(prompt) + len(prefix) < len(on[5][0].prompt_ids) - 1  # a partial hit
    assert reused[6] == len(prompt) - 1
    assert prefilled_on == prefilled_off - stats.reused_tokens
    assert prefilled_on < prefilled_off / 3


def test_eviction_keeps_the_samples(builtin):
    """A cache of one entry, and one too small for any entry: evictions (or no entries), the same samples."""
    model, tok = builtin
    engine = FastEngine(model, tok)
    prompt = tok("Add 1234+5678. Answer:")["input_ids"]
    off = _search_like_calls(engine, prompt, None)[0]
    on, _, _, _, stats = _search_like_calls(engine, prompt, 2**24, max_entries=1)
    _assert_same_samples(off, on)
    assert stats.evicted > 0
    on, prefilled, _, _, stats = _search_like_calls(engine, prompt, 64)
    _assert_same_samples(off, on)
    assert stats.stored == 0 and stats.reused_tokens == 0


def test_a_weight_update_drops_the_cache(tiny, tiny_model_dir):
    """Inside a block, an in-place update (an SGD step, which bumps the parameters' version counters) and a
    publish (`sync_weights`) each empty the cache: the next call equals a fresh engine's on the new weights."""
    _, tok = tiny
    model = load_causal_lm(tiny_model_dir)
    engine = FastEngine(model, tok)
    prompt = tok("1+2=")["input_ids"]
    params = SamplingParams(n=2, max_new_tokens=8)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    with engine.prefix_cache(2**24) as cache:
        first = engine.generate([prompt], params)[0]
        assert len(cache) > 0
        longer = prompt + first[0].response_ids[:4]
        out = model(input_ids=torch.tensor([prompt])).logits
        (-out[0, -1, 7]).backward()
        opt.step()
        torch.manual_seed(1)
        after = engine.generate([longer], params)[0]
        assert cache.stats.cleared == 1 and cache.stats.reused_tokens == 0
        torch.manual_seed(1)
        fresh = FastEngine(model, tok).generate([longer], params)[0]
        _assert_same_samples([after], [fresh])
        assert len(cache) > 0
        engine.sync_weights(model, version=3)
        assert len(cache) == 0 and cache.stats.cleared == 2
    assert not math.isnan(after[0].logprobs[0])


def test_no_cache_without_shared_prefill(tiny):
    model, tok = tiny
    with FastEngine(model, tok, share_prefill=False).prefix_cache(2**20) as cache:
        assert cache is None


@pytest.mark.parametrize("name", ["mcts", "beam_prm"])
def test_search_with_and_without_the_cache_grows_the_same_tree(builtin, name):
    """One prompt's search on the built-in model: the same nodes, rollouts and log-probs with
    search.prefix_cache_mb=256 and 0, and far fewer prompt tokens prefilled with it (`evaluate_search` reports them)."""
    from rlvr.eval.search import evaluate_search
    from rlvr.rewards import CorrectnessReward, RewardFunction
    from rlvr.sampling.search import SearchSettings, group_scorer, search_prompt
    from rlvr.tasks import PromptRenderer, build_task

    model, tok = builtin
    engine = FastEngine(model, tok)
    task = build_task("addition", {"digits": (4, 4)})
    renderer = PromptRenderer(task, tok, None)
    record = list(task.heldout)[0]
    prompt_ids, _ = renderer.render(record)
    verify = RewardFunction([("correctness", 1.0, CorrectnessReward())])
    params = SamplingParams(max_new_tokens=64)
    knobs = {"widen": 0.5} if name == "mcts" else {"beam_width": 2}
    runs = []
    for mb in (0, 256):
        settings = SearchSettings(strategy=name, strategy_params=knobs, max_tokens=200, branch=2, delimiter="|",
                                  prefix_cache_mb=mb)
        score = group_scorer(record, prompt_ids, tok, lambda gs: verify(gs, task))
        torch.manual_seed(0)
        engine.prefill_tokens = 0
        res = search_prompt(engine, params, prompt_ids, settings, score, engine.eos_ids)
        runs.append((res, engine.prefill_tokens))
    (off, prefilled_off), (on, prefilled_on) = runs
    nodes_off, nodes_on = off.tree.all_nodes(), on.tree.all_nodes()
    assert [n.token_ids for n in nodes_off] == [n.token_ids for n in nodes_on] and len(nodes_on) > 3
    assert [r.token_ids for r in off.rollouts] == [r.token_ids for r in on.rollouts]
    lp_off = [lp for n in nodes_off[1:] for lp in n.token_logprobs]
    lp_on = [lp for n in nodes_on[1:] for lp in n.token_logprobs]
    torch.testing.assert_close(torch.tensor(lp_on), torch.tensor(lp_off), atol=LOGPROB_ATOL, rtol=0)
    assert off.stats.calls == on.stats.calls
    assert prefilled_on < prefilled_off / 2
    torch.manual_seed(0)
    out = evaluate_search(engine, renderer, task, [record], params, SearchSettings(
        strategy=name, strategy_params=knobs, max_tokens=200, branch=2, delimiter="|"), tok)
    assert 0 < out["prefill_tokens"] < prefilled_off and out["search"]["prefix_cache_mb"] == 256
