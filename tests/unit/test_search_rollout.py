"""Search wired to an engine (rlvr.sampling.search), the `tree` estimator, the `search` config section, search at
evaluation, and MCTS progressive widening: a scripted engine with hand-computed trees, then the built-in model."""

from __future__ import annotations

import pytest
import torch

from rlvr.algorithms import ADVANTAGES
from rlvr.config import ConfigError, load_config
from rlvr.rollout import SamplingParams
from rlvr.sampling.search import (
    LeafRollout,
    SearchResult,
    SearchSettings,
    SearchStats,
    rollout_advantage,
    search_prompt,
    tree_training_group,
)
from rlvr.search import Budget, SearchTree, backup, mcts
from rlvr.types import Batch, Sample, TaskRecord

EOS = 9


class ScriptedEngine:
    """generate(prompt + prefix) -> the next `params.n` continuations scripted for that prefix (cycled), each
    cut at max_new_tokens, at the first '|' token (7) when a stop is given, and after EOS (9). Log-prob of
    every token: -0.5. Records every call."""

    def __init__(self, script: dict[tuple[int, ...], list[list[int]]], prompt_len: int):
        self.script, self.prompt_len, self.calls, self.eos_ids = script, prompt_len, [], [EOS]

    def generate(self, prompts, params):
        out = []
        for p in prompts:
            prefix = tuple(p[self.prompt_len :])
            options = self.script[prefix]
            self.calls.append((prefix, params.n, params.max_new_tokens, tuple(params.stop)))
            group = []
            for i in range(params.n):
                ids = list(options[i % len(options)])[: params.max_new_tokens]
                if params.stop and 7 in ids:
                    ids = ids[: ids.index(7) + 1]
                if EOS in ids:
                    ids = ids[: ids.index(EOS) + 1]
                group.append(Sample(prompt_ids=list(p), response_ids=ids, logprobs=[-0.5] * len(ids)))
            out.append(group)
        return out


def correct_if_ends_with(good: list[int]):
    """score: 1 for a response ending with `good` + EOS, else 0."""
    def score(samples):
        return [1.0 if s.response_ids[-len(good) - 1 :] == good + [EOS] else 0.0 for s in samples]
    return score


def test_expansion_segments_terminals_rollouts_and_token_accounting():
    # prompt [5]; from the root the engine proposes "1 7" twice (merged) and "2 7"; after "1 7": "3 9" / "4 9"
    script = {(): [[1, 7, 3], [1, 7, 4], [2, 7, 3]],
              (1, 7): [[3, EOS], [4, EOS]], (2, 7): [[3, EOS]],
              (1, 7, 3, EOS): [], (1, 7, 4, EOS): [], (2, 7, 3, EOS): []}
    engine = ScriptedEngine(script, prompt_len=1)
    settings = SearchSettings(strategy="beam_prm", strategy_params={"beam_width": 2}, max_tokens=100, branch=3,
                              segment_tokens=4, delimiter="|", leaf_rollouts=1)
    res = search_prompt(engine, SamplingParams(max_new_tokens=8), [5], settings, correct_if_ends_with([3]), [EOS])
    root = res.tree.root
    assert [c.token_ids for c in root.children] == [(1, 7), (2, 7)]  # segments end at the delimiter; duplicate merged
    assert engine.calls[0] == ((), 3, 4, ("|",))                        # k continuations of <= segment_tokens
    # each partial child got one rollout to the end (no stop string, the whole remaining length)
    assert [(r.node.token_ids, r.token_ids, r.reward) for r in res.rollouts] == [((1, 7), [3, EOS], 1.0),
                                                                                 ((2, 7), [3, EOS], 1.0)]
    assert ((1, 7), 1, 6, ()) in engine.calls
    a = root.children[0]
    assert [c.token_ids for c in a.children] == [(3, EOS), (4, EOS)]
    assert all(c.terminal for c in a.children) and [c.value for c in a.children] == [1.0, 0.0]
    assert [c.token_ids for c in root.children[1].children] == [(3, EOS)]
    # tokens: 3 expansions of 3 two-token segments (root, a, b; 1 + 1 + 2 merged) and 2 two-token rollouts
    assert res.stats.expansion_tokens == 18 and res.stats.rollout_tokens == 4 and res.stats.calls == 5
    assert res.tree.tokens == res.stats.tokens == 22
    assert res.best_response() == ([1, 7, 3, EOS], 1.0)


def test_solved_at_stops_the_search_and_budget_counts_rollouts():
    script = {(): [[1, 7], [2, 7]], (1, 7): [[3, EOS]], (2, 7): [[4, EOS]]}
    engine = ScriptedEngine(script, prompt_len=1)
    settings = SearchSettings(strategy="mcts", max_tokens=1000, branch=2, segment_tokens=2, delimiter="|")
    res = search_prompt(engine, SamplingParams(max_new_tokens=8), [5], settings, correct_if_ends_with([3]), [EOS],
                        solved_at=1.0)
    # root expanded (2 calls' worth: 1 call), first child valued by one rollout that is correct: stop there
    assert res.tree.stopped and len(engine.calls) == 2 and res.stats.tokens == 4 + 2
    # a token budget smaller than one rollout: the rollout is not made (value 0) once the budget is spent
    engine = ScriptedEngine(script, prompt_len=1)
    res = search_prompt(engine, SamplingParams(max_new_tokens=8), [5], SearchSettings(
        strategy="mcts", max_tokens=4, branch=2, segment_tokens=2, delimiter="|"), correct_if_ends_with([3]), [EOS])
    assert len(engine.calls) == 1 and res.tree.tokens == 4 and res.rollouts == []


def _hand_tree():
    """root -> a [1, 2] -> leaf [3, EOS] (reward 1); a's rollout [4, EOS] (reward 0); root -> b [5] -> leaf
    [6, EOS] (reward 0). Values by backup: a: (1 + 0)/2 = 0.5, b: 0, root: 1/3."""
    tree = SearchTree(Budget(max_nodes=10), [8])
    a, b = tree.add_children(tree.root, [([1, 2], [-0.1, -0.2]), ([5], [-0.3])])
    (leaf_a,) = tree.add_children(a, [([3, EOS], [-0.4, -0.5])])
    (leaf_b,) = tree.add_children(b, [([6, EOS], [-0.6, -0.7])])
    leaf_a.terminal = leaf_b.terminal = True
    backup(leaf_a, 1.0)
    backup(a, 0.0)  # a's rollout
    backup(leaf_b, 0.0)
    rollout = LeafRollout(node=a, token_ids=[4, EOS], logprobs=[-0.8, -0.9], reward=0.0)
    rewards = {(1, 2, 3, EOS): 1.0, (1, 2, 4, EOS): 0.0, (5, 6, EOS): 0.0}
    return SearchResult(tree=tree, rollouts=[rollout], stats=SearchStats(), rewards=rewards), a, b


def test_training_group_samples_and_tree_advantages_by_hand():
    res, a, b = _hand_tree()
    assert a.value == pytest.approx(0.5) and b.value == 0.0 and res.tree.root.value == pytest.approx(1 / 3)
    record = TaskRecord(id="p", question="q", answer="1")
    g = tree_training_group(res, record, None, "parent", [EOS])
    assert [s.response_ids for s in g.samples] == [[1, 2, 3, EOS], [5, 6, EOS], [1, 2, 4, EOS]]
    assert g.samples[2].logprobs == [-0.1, -0.2, -0.8, -0.9] and g.samples[1].logprobs == [-0.3, -0.6, -0.7]
    # parent: A(a) = 0.5 - 1/3, A(leaf_a) = 1 - 0.5; A(b) = 0 - 1/3, A(leaf_b) = 0; rollout: 0 - V(a) = -0.5
    assert g.samples[0].advantage == pytest.approx([1 / 6, 1 / 6, 0.5, 0.5])
    assert g.samples[1].advantage == pytest.approx([-1 / 3, 0.0, 0.0])
    assert g.samples[2].advantage == pytest.approx([1 / 6, 1 / 6, -0.5, -0.5])
    # treerl on the rollout tokens: (0 - 1/3) + (0 - 0.5); siblings: 0 - mean(rollouts of a) = 0
    assert rollout_advantage(res.rollouts[0], "treerl", res.rollouts) == pytest.approx(-5 / 6)
    assert rollout_advantage(res.rollouts[0], "siblings", res.rollouts) == 0.0
    g_tr = tree_training_group(res, record, None, "treerl", [EOS])
    assert g_tr.samples[0].advantage == pytest.approx([1 / 3, 1 / 3, 5 / 3 - 0.5, 5 / 3 - 0.5])
    # rewards mode: no advantage on the samples (the learner's estimator computes them)
    assert all(s.advantage is None for s in tree_training_group(res, record, None, "rewards", [EOS]).samples)
    # the `tree` estimator passes the per-token advantages through Batch.from_groups unchanged
    batch = Batch.from_groups([g], pad_id=0)
    out = ADVANTAGES.bind("tree")(batch.advantages, batch.mask)
    assert out[0, 1:5].tolist() == pytest.approx([1 / 6, 1 / 6, 0.5, 0.5])
    assert out[2, 1:5].tolist() == pytest.approx([1 / 6, 1 / 6, -0.5, -0.5])
    assert torch.equal(out * (1 - batch.mask), torch.zeros_like(out)) and out[1, 4] == 0


def test_the_search_sampler_makes_one_rewarded_tree_group_per_prompt():
    from rlvr.sampling import SAMPLERS, StepContext

    script = {(): [[1, 7], [2, 7]], (1, 7): [[3, EOS]], (2, 7): [[4, EOS]]}
    engine = ScriptedEngine(script, prompt_len=1)

    class Renderer:
        def render(self, record):
            return [5], "q"

    class Tok:
        eos_token_id = EOS

        def decode(self, ids, skip_special_tokens=True):
            return " ".join(map(str, ids))

    def reward(groups):  # 1 for responses ending "3 EOS"
        for g in groups:
            for s in g.samples:
                s.reward = 1.0 if s.response_ids[-2:] == [3, EOS] else 0.0

    records = [TaskRecord(id=str(i), question="q") for i in range(3)]
    settings = SearchSettings(strategy="mcts", max_tokens=100, branch=2, segment_tokens=2, delimiter="|",
                              advantage="parent")
    sampler = SAMPLERS.build("search", {}, prompts=records, seed=0, search=settings)
    ctx = StepContext(step=1, prompts_per_step=2, n=8, rollout=None, score=reward, engine=engine,
                      renderer=Renderer(), params=SamplingParams(max_new_tokens=8), tokenizer=Tok())
    groups, metrics = sampler.next_batch(ctx)
    assert len(groups) == 2 and metrics["groups_kept"] == 2
    # MCTS (UCT, c = 1): expand the root -> a = [1 7], b = [2 7]; value a by a rollout [3 9] (1); b is then
    # selected unvisited, expanded ([4 9] twice, merged) and its child valued (0); a is expanded ([3 9]) and
    # valued (1); every leaf is then terminal. Group: the two leaves and a's rollout.
    for g in groups:
        assert sorted(s.response_ids for s in g.samples) == [[1, 7, 3, EOS]] * 2 + [[2, 7, 4, EOS]]
        assert all(s.reward == (1.0 if s.response_ids[2] == 3 else 0.0) for s in g.samples)
        assert all(len(s.advantage) == 4 for s in g.samples) and g.samples[0].text == "1 7 3 9"
    # per prompt: root expansion 4 tokens, one 2-token rollout, two expansions of 2 x 2 tokens
    assert metrics["tokens_per_prompt"] == 4 + 2 + 8 and metrics["samples_generated"] == 6
    with pytest.raises(ValueError, match="search.name=mcts"):
        SAMPLERS.build("search", {}, prompts=records, seed=0)


def test_a_tree_with_nothing_finished_trains_on_its_unfinished_leaves():
    tree = SearchTree(Budget(max_tokens=3), [8])
    tree.add_children(tree.root, [([1, 2], [-0.1, -0.2]), ([3], [-0.3])])
    res = SearchResult(tree=tree, rollouts=[], stats=SearchStats(), rewards={})
    g = tree_training_group(res, TaskRecord(id="p", question="q"), None, "rewards", [EOS])
    assert [(s.response_ids, s.finish_reason) for s in g.samples] == [([1, 2], "length"), ([3], "length")]


def test_progressive_widening_offers_a_sampled_node_new_children():
    calls: dict[int, int] = {}

    def expand(node):  # a policy that proposes one segment per call; each call to a node proposes a new one
        if len(node.response_ids()) >= 2:
            return []
        k = calls[id(node)] = calls.get(id(node), 0) + 1
        return [((k,), 0.0)]

    plain = mcts(SearchTree(Budget(max_nodes=30)), expand, lambda n: 0.0, c=1.0)
    assert len(plain.root.children) == 1 and plain.nodes == 2  # a chain: fully explored after one answer
    calls.clear()
    wide = mcts(SearchTree(Budget(max_nodes=30)), expand, lambda n: 0.0, c=1.0, widen=0.5)
    # |children| < (N + 1)^0.5 lets the root widen as its visits grow; the node budget is spent exactly
    assert wide.nodes == 30 and len(wide.root.children) >= 3
    assert all(len(n.children) <= max(1, (n.visits + 1) ** 0.5) + 1 for n in wide.all_nodes())


@pytest.mark.parametrize("overrides, needle", [
    (["search.name=mcts"], "search.max_tokens"),
    (["search.name=pgts", "search.max_tokens=10"], "search.name"),
    (["search.name=policy_guided", "search.max_tokens=10", "search.action_cots=0.1"], "search.action_cots"),
    (["search.name=policy_guided", "search.max_tokens=10", "search.gamma=2"], "search.gamma"),
    (["search.name=mcts", "search.max_tokens=10", "search.cc=1"], "search.cc"),
    (["search.name=mcts", "search.max_tokens=10", "search.advantage=treerl"], "algorithm.advantage=tree"),
    (["algorithm.advantage.name=tree"], "search.advantage=parent"),
    (["search.name=mcts", "search.max_tokens=10", "sampling.name=dynamic"], "replaces the batch sampler"),
    (["search.name=beam_prm", "search.max_nodes=0"], "search.max_nodes"),
    (["search.name=sampling", "search.max_nodes=5"], "search.max_tokens"),
])
def test_search_config_errors_name_the_key(overrides, needle):
    with pytest.raises(ConfigError) as info:
        load_config(None, overrides)
    assert needle in str(info.value)


def test_search_config_binds_strategy_knobs():
    cfg = load_config(None, ["search.name=mcts", "search.max_tokens=300", "search.c=0.3", "search.widen=0.5",
                             "search.advantage=parent", "algorithm.advantage.name=tree"])
    s = cfg.search.settings()
    assert s.strategy == "mcts" and s.max_tokens == 300 and s.strategy_params["c"] == 0.3
    assert s.strategy_params["rule"] == "uct" and s.advantage == "parent"  # defaults filled in


def test_search_on_the_builtin_model_and_at_evaluation():
    from rlvr.eval.search import evaluate_search
    from rlvr.models import load_causal_lm, load_tokenizer
    from rlvr.rollout import build_engine
    from rlvr.sampling.search import group_scorer
    from rlvr.tasks import PromptRenderer, build_task

    torch.set_num_threads(1)  # many tiny decode calls: one thread is faster (conftest restores the count)
    tok = load_tokenizer("builtin")
    engine = build_engine("fast", {}, 64, load_causal_lm("builtin"), tok)
    task = build_task("addition", {"digits": (3, 3)})
    renderer = PromptRenderer(task, tok, None)
    record = list(task.heldout)[0]
    prompt_ids, _ = renderer.render(record)
    from rlvr.rewards import CorrectnessReward, RewardFunction

    verify = RewardFunction([("correctness", 1.0, CorrectnessReward())])
    score = group_scorer(record, prompt_ids, tok, lambda gs: verify(gs, task))
    torch.manual_seed(0)
    params = SamplingParams(max_new_tokens=64)
    res = search_prompt(engine, params, prompt_ids, SearchSettings(strategy="mcts", strategy_params={"widen": 0.5},
                        max_tokens=200, branch=2, delimiter="|"), score, engine.eos_ids)
    bar = tok.encode("|", add_special_tokens=False)[-1]
    for n in res.tree.all_nodes()[1:]:  # every segment ends at a step delimiter or EOS, or is cut at 16
        assert n.token_ids[-1] in (bar, *engine.eos_ids) or len(n.token_ids) == 16
    assert res.tree.tokens == res.stats.tokens >= 200 - 64  # stopped at the budget (within one call)
    g = tree_training_group(res, record, tok, "rewards", engine.eos_ids)
    assert g.samples and all(len(s.logprobs) == len(s.response_ids) for s in g.samples)
    Batch.from_groups([g], pad_id=0)
    torch.manual_seed(0)
    records = list(task.heldout)[:2]
    for name in ("mcts", "sampling"):
        out = evaluate_search(engine, renderer, task, records, params,
                              SearchSettings(strategy=name, max_tokens=100, branch=2, delimiter="|"), tok)
        assert out["num_prompts"] == 2 and 0 <= out["solve_rate"] <= 1
        for p in out["problems"]:  # a solved problem stops at its first verified answer; none overshoots much
            assert 0 < p["tokens"] <= 100 + 2 * 64
