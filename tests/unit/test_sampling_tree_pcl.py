"""Tree rollouts (ettrl_tree, cure) and Prompt Curriculum Learning (pcl): hand-computed cases with fake engines
and entropies, plus token-in/token-out exactness of branches with the real HF engine on the tiny model."""

from __future__ import annotations

import pytest
import torch

from rlvr.models.byte_tokenizer import save_byte_tokenizer
from rlvr.rollout.base import SamplingParams
from rlvr.sampling import SAMPLERS, StepContext, tree
from rlvr.sampling import pcl as pcl_module
from rlvr.sampling.pcl import RidgeValueModel
from rlvr.sampling.tree import top_entropy_positions, truncate
from rlvr.types import Batch, Group, Sample, TaskRecord


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return save_byte_tokenizer(tmp_path_factory.mktemp("tok"))


class TrunkRollout:
    """Trunks: response [10, 11, 12, 13, 14] with log-probs -0.1 .. -0.5, reward 0."""

    def __call__(self, records, n):
        return [Group(r, [1, 2], [Sample([1, 2], [10, 11, 12, 13, 14], logprobs=[-0.1, -0.2, -0.3, -0.4, -0.5])
                                  for _ in range(n)]) for r in records]


class FakeEngine:
    """Continuations [90, 91, 92, 93] with log-probs -1.0, for every prompt; records what it was asked."""

    def __init__(self):
        self.prompts, self.params = [], []

    def generate(self, prompts, params):
        self.prompts.append([list(p) for p in prompts])
        self.params.append(params)
        return [[Sample(list(p), [90, 91, 92, 93], logprobs=[-1.0] * 4, finish_reason="stop") for _ in range(params.n)]
                for p in prompts]


def scored():
    calls = []

    def score(groups):
        calls.append([len(g.samples) for g in groups])
        for g in groups:
            for s in g.samples:
                s.reward = float(90 in s.response_ids or s.meta.get("reconcatenated", False))
    return score, calls


def tree_ctx(tokenizer, engine, score, n=4, max_new_tokens=6):
    return StepContext(step=1, prompts_per_step=1, n=n, rollout=TrunkRollout(), score=score, engine=engine,
                       params=SamplingParams(n=n, max_new_tokens=max_new_tokens), policy=object(), tokenizer=tokenizer)


def test_top_entropy_positions():
    ent = [9.0, 0.1, 0.7, 0.7, 0.2]
    assert top_entropy_positions(ent, 2) == [2, 3]  # position 0 excluded (no prefix), ties earlier first
    assert top_entropy_positions(ent, 2, min_position=0) == [0, 2]
    assert top_entropy_positions(ent, 3, allowed=[True, True, False, True, True]) == [3, 4, 1]


def test_truncate_keeps_exact_tokens_and_marks_length(tokenizer):
    s = Sample([1], [65, 66, 67], logprobs=[-1.0, -2.0, -3.0], text="ABC")
    t = truncate(s, 2, tokenizer)
    assert t.response_ids == [65, 66] and t.logprobs == [-1.0, -2.0] and t.finish_reason == "length"
    assert t.text == tokenizer.decode([65, 66]) and truncate(s, 5, tokenizer) is s


def test_ettrl_tree_branches_at_the_highest_entropy_token(monkeypatch, tokenizer):
    monkeypatch.setattr(tree, "response_entropies",
                        lambda policy, samples, temperature: [[0.0, 0.2, 0.9, 0.1, 0.3]] * len(samples))
    engine = FakeEngine()
    score, calls = scored()
    sampler = SAMPLERS.build("ettrl_tree", {}, prompts=[TaskRecord("p", "q")], seed=0)
    groups, m = sampler.next_batch(tree_ctx(tokenizer, engine, score, n=4, max_new_tokens=6))
    (g,) = groups
    assert len(g.samples) == 4  # 2 trunks + 2 branches
    assert engine.prompts == [[[1, 2, 10, 11], [1, 2, 10, 11]]]  # prompt + trunk prefix y_<2
    assert engine.params[0].n == 1 and engine.params[0].max_new_tokens == 4
    b = g.samples[2]
    assert b.prompt_ids == [1, 2]
    assert b.response_ids == [10, 11, 90, 91, 92, 93]
    assert b.logprobs == [-0.1, -0.2, -1.0, -1.0, -1.0, -1.0]
    assert b.loss_mask == [1] * 6 and b.meta["fork_position"] == 2
    assert calls == [[4]]  # the whole tree scored together
    assert m["tokens_saved"] == 4  # 2 branches x 2 reused prefix tokens
    assert m["tokens_generated"] == 2 * 5 + 2 * 4
    assert m["tokens_saved_frac"] == pytest.approx(4 / 22)
    assert m["mean_fork_entropy"] == pytest.approx(0.9) and m["useful_groups"] == 1
    batch = Batch.from_groups(groups, pad_id=0)
    assert batch.old_logprobs[2, 2:8].tolist() == pytest.approx(b.logprobs)


def test_ettrl_branch_respects_the_length_budget(monkeypatch, tokenizer):
    monkeypatch.setattr(tree, "response_entropies", lambda p, s, t: [[0.0, 0.0, 0.0, 0.0, 5.0]] * len(s))
    sampler = SAMPLERS.build("ettrl_tree", {}, prompts=[TaskRecord("p", "q")], seed=0)
    groups, _ = sampler.next_batch(tree_ctx(tokenizer, FakeEngine(), scored()[0], n=2, max_new_tokens=6))
    b = groups[0].samples[1]
    assert b.response_ids == [10, 11, 12, 13, 90, 91] and b.finish_reason == "length"  # 4 + 2 = budget 6


def test_cure_reconcatenates_the_prefix_into_the_prompt(monkeypatch, tokenizer):
    monkeypatch.setattr(tree, "response_entropies", lambda p, s, t: [[0.0, 0.5, 0.9, 0.1, 0.3]] * len(s))
    engine = FakeEngine()
    score, calls = scored()
    sampler = SAMPLERS.build("cure", {"branches": 3, "top_k": 1}, prompts=[TaskRecord("p", "q")], seed=0)
    groups, m = sampler.next_batch(tree_ctx(tokenizer, engine, score, n=8, max_new_tokens=10))
    (g,) = groups
    assert len(g.samples) == 2 + 2 * 3  # n1 = 8 // (1 + 3) = 2 trunks, 3 branches each
    b = g.samples[2]
    assert b.prompt_ids == [1, 2, 10, 11] and b.response_ids == [90, 91, 92, 93]  # prefix is context
    assert b.logprobs == [-1.0] * 4 and b.meta["reconcatenated"]
    assert b.text == tokenizer.decode([10, 11, 90, 91, 92, 93], skip_special_tokens=True)
    assert engine.params[0].n == 3 and calls == [[8]]
    assert m["branches"] == 6


def test_cure_picks_among_the_top_k_and_skips_special_tokens(monkeypatch, tokenizer):
    eos = tokenizer.eos_token_id
    sampler = SAMPLERS.build("cure", {"top_k": 2}, prompts=[TaskRecord("p", "q")], seed=0)
    ctx = StepContext(step=1, prompts_per_step=1, n=4, rollout=None, tokenizer=tokenizer)
    picks = {sampler.choose_forks([0, 0.1, 0.9, 0.8, 5.0], [65, 66, 67, 68, eos], ctx,
                                  torch.Generator().manual_seed(s))[0] for s in range(20)}
    assert picks == {2, 3}  # EOS (entropy 5.0) skipped, then the top 2


def test_tree_branches_are_token_exact_with_the_real_engine(tiny_model_dir):
    """Branch log-probs (trunk prefix + engine continuation) equal a fresh forward of the same policy."""
    from rlvr.models import load_causal_lm, load_tokenizer
    from rlvr.models.logprobs import forward_tokens
    from rlvr.rollout import ENGINES

    torch.manual_seed(0)
    tok = load_tokenizer(str(tiny_model_dir))
    policy = load_causal_lm(str(tiny_model_dir), dtype=torch.float32, device=torch.device("cpu"))
    engine = ENGINES.build("hf", {}, model=policy, tokenizer=tok)
    params = SamplingParams(n=2, max_new_tokens=8)
    prompt = list(tok("12+3=")["input_ids"])

    def rollout(records, n):
        return [Group(r, prompt, engine.generate([prompt], SamplingParams(n=n, max_new_tokens=8))[0]) for r in records]

    ctx = StepContext(step=1, prompts_per_step=1, n=4, rollout=rollout, score=lambda gs: None, engine=engine,
                      params=params, policy=policy, tokenizer=tok)
    groups, m = SAMPLERS.build("ettrl_tree", {}, prompts=[TaskRecord("p", "12+3")], seed=0).next_batch(ctx)
    batch = Batch.from_groups(groups, pad_id=tok.pad_token_id)
    fresh = forward_tokens(policy, batch.input_ids, batch.attention_mask, batch.mask, 1.0).logprobs
    assert torch.allclose(fresh * batch.mask, batch.old_logprobs * batch.mask, atol=1e-4)
    assert any(s.meta.get("branch") for s in groups[0].samples) and m["tokens_saved"] > 0


# -- PCL --------------------------------------------------------------------------------------------------


def test_ridge_value_model_hand_computed():
    v = RidgeValueModel(l2=1e-6)
    x = torch.tensor([[0.0], [1.0], [2.0]])
    v.add(x, torch.tensor([0.1, 0.3, 0.5]))
    assert v.predict(torch.tensor([[1.5], [10.0]])).tolist() == pytest.approx([0.4, 1.0], abs=1e-4)  # clamped
    state = v.state_dict()
    w = RidgeValueModel(l2=1e-6)
    w.load_state_dict(state)
    assert w.predict(torch.tensor([[1.5]])).item() == pytest.approx(0.4, abs=1e-4)
    assert RidgeValueModel().predict(torch.zeros(2, 3)).tolist() == [0.5, 0.5]


class Renderer:
    def render(self, record):
        return [int(record.difficulty)], record.question


def test_pcl_chooses_prompts_of_intermediate_predicted_difficulty(monkeypatch):
    # features = one-hot difficulty; pass rate falls with difficulty: d1 1.0, d2 0.5, d3 0.0
    monkeypatch.setattr(pcl_module, "prompt_features",
                        lambda policy, prompts: torch.nn.functional.one_hot(
                            torch.tensor([p[0] - 1 for p in prompts]), 3).float())
    split = [TaskRecord(f"d{d}-{i}", "q", difficulty=d) for i in range(30) for d in (1, 2, 3)]
    rates = {1: [1], 2: [1, 0], 3: [0]}

    def rollout(records, n):
        return [Group(r, [0], [Sample([0], [1], reward=float(rates[r.difficulty][k % len(rates[r.difficulty])]),
                                      correct=bool(rates[r.difficulty][k % len(rates[r.difficulty])]))
                               for k in range(n)]) for r in records]

    sampler = SAMPLERS.build("pcl", {"pool_factor": 3, "warmup": 6, "l2": 1e-3}, prompts=split, seed=0)
    sampler.order.shuffle = False

    def ctx(step):
        return StepContext(step=step, prompts_per_step=6, n=2, rollout=rollout, policy=object(), renderer=Renderer())

    groups, m = sampler.next_batch(ctx(1))  # warm-up: the first 6 candidates
    assert [g.record.difficulty for g in groups] == [1, 2, 3, 1, 2, 3] and m["value_fit_n"] == 6
    groups, m = sampler.next_batch(ctx(2))
    assert all(g.record.difficulty == 2 for g in groups)  # predicted 0.5: the intermediate ones
    assert m["predicted_pass_rate"] == pytest.approx(0.5, abs=0.01) and m["effective_ratio"] == 1.0
    assert m["candidates_scored"] == 18 and m["value_mae"] < 0.01
