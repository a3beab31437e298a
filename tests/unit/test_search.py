"""Tree search core (rlvr.search): UCT/PUCT and backup on a hand-built tree, budgets, tree advantages, and a
toy environment (a hidden target over a 3-token vocabulary) where MCTS and beam search with a process reward
find the target within budgets that uniform random sampling does not."""

from __future__ import annotations

import math
import random

import pytest

from rlvr.registry import RegistryError
from rlvr.search import (
    SEARCH_STRATEGIES,
    Budget,
    PGTSAction,
    PGTSState,
    SearchTree,
    backup,
    beam_prm,
    mcts,
    node_advantage,
    pgts_step,
    policy_guided,
    puct_score,
    run_search,
    select_child,
    tree_group,
    tree_samples,
    uct_score,
)
from rlvr.types import Batch, TaskRecord

TARGET = [2, 0, 1, 1, 2, 0, 2, 1]  # 3^8 = 6561 possible responses


def expand_toy(node):
    """Every next token is allowed, uniform prior; a full-length response is terminal."""
    if len(node.response_ids()) >= len(TARGET):
        return []
    return [((t,), math.log(1 / 3)) for t in range(3)]


def value_toy(node):
    """Fraction of the target recovered by the prefix (matching positions / target length)."""
    return sum(a == b for a, b in zip(node.response_ids(), TARGET)) / len(TARGET)


def found(tree):
    """The target is a leaf (terminal, or a full-length frontier leaf where the budget ran out)."""
    return any(leaf.response_ids() == TARGET for leaf in tree.leaves(terminal_only=False))


def random_sampling_finds(tokens, seed):
    """Uniform random responses until `tokens` are spent: is the target among them?"""
    rng = random.Random(seed)
    return any([rng.randrange(3) for _ in TARGET] == TARGET for _ in range(tokens // len(TARGET)))


def _hand_tree():
    """root -> a (prior .75) -> {a1, a2};  root -> b (prior .25). Evaluations: a1 = 1, a2 = 0, b = 0.5."""
    tree = SearchTree(Budget(max_nodes=10), prompt_ids=[9, 9])
    a, b = tree.add_children(tree.root, [((1, 2), math.log(0.75)), ((6,), math.log(0.25))])
    a1, a2 = tree.add_children(a, [((3,), 0.0), ((4, 5), 0.0)])
    for leaf in (a1, a2, b):
        tree.add_children(leaf, [])  # terminal
    backup(a1, 1.0)
    backup(a2, 0.0)
    backup(b, 0.5)
    return tree, a, b, a1, a2


# -- the tree, selection and backup ----------------------------------------------------------------------


def test_backup_counts_and_means_on_a_hand_built_tree():
    tree, a, b, a1, a2 = _hand_tree()
    assert (tree.root.visits, tree.root.value_sum) == (3, 1.5)
    assert (a.visits, a.value, b.visits, b.value, a1.value, a2.value) == (2, 0.5, 1, 0.5, 1.0, 0.0)
    assert a.prior == pytest.approx(0.75) and b.prior == pytest.approx(0.25)
    assert a2.response_ids() == [1, 2, 4, 5] and a2.depth == 2
    assert (tree.nodes, tree.tokens) == (4, 6)  # segments (1, 2), (6,), (3,), (4, 5)


def test_uct_and_puct_scores_and_choices_by_hand():
    tree, a, b, _, _ = _hand_tree()
    # UCT, c = 1: a = .5 + sqrt(ln 3 / 2) = 1.24119 ; b = .5 + sqrt(ln 3 / 1) = 1.54815 -> b
    assert uct_score(a, 3, 1.0) == pytest.approx(0.5 + math.sqrt(math.log(3) / 2))
    assert uct_score(b, 3, 1.0) == pytest.approx(1.548147, abs=1e-6)
    assert select_child(tree.root, "uct", 1.0) is b
    # PUCT, c = 1: a = .5 + .75 sqrt(3) / 3 = 0.93301 ; b = .5 + .25 sqrt(3) / 2 = 0.71651 -> a
    assert puct_score(a, 3, 1.0) == pytest.approx(0.933013, abs=1e-6)
    assert puct_score(b, 3, 1.0) == pytest.approx(0.716506, abs=1e-6)
    assert select_child(tree.root, "puct", 1.0) is a
    # c = 0: pure exploitation; a tie (Q = .5 both) goes to the first child
    assert select_child(tree.root, "uct", 0.0) is a
    fresh = SearchTree(Budget(max_nodes=5))
    x, y = fresh.add_children(fresh.root, [((0,), 0.0), ((1,), 0.0)])
    backup(x, 1.0)
    assert uct_score(y, 1, 1.0) == math.inf and select_child(fresh.root, "uct") is y  # unvisited first
    with pytest.raises(ValueError, match="uct or puct"):
        select_child(tree.root, "ucb")  # type: ignore[arg-type]


def test_tree_advantages_and_samples_sharing_prefixes():
    tree, a, b, a1, a2 = _hand_tree()  # V: root .5, a .5, a1 1, a2 0, b .5
    assert [node_advantage(n, "parent") for n in (a, a1, a2, b)] == [0.0, 0.5, -0.5, 0.0]
    assert [node_advantage(n, "treerl") for n in (a, a1, a2, b)] == [0.0, 1.0, -1.0, 0.0]
    assert [node_advantage(n, "siblings") for n in (a, a1, a2, b)] == [0.0, 0.5, -0.5, 0.0]
    s1, s2, s3 = tree_samples(tree, "parent")
    assert (s1.token_ids, s1.prefix_len, s1.token_advantages) == ([1, 2, 3], 0, [0.0, 0.0, 0.5])
    assert (s2.token_ids, s2.prefix_len, s2.token_advantages) == ([1, 2, 4, 5], 2, [0.0, 0.0, -0.5, -0.5])
    assert (s3.token_ids, s3.prefix_len, s3.segment_lengths, s3.node_values) == ([6], 0, [1], [0.5])
    assert s2.node_values == [0.5, 0.0] and s2.node_advantages == [0.0, -0.5]
    with pytest.raises(ValueError, match="parent, treerl or siblings"):
        node_advantage(a1, "mean")  # type: ignore[arg-type]


def test_budgets_are_checked_and_never_exceeded():
    with pytest.raises(ValueError, match="max_nodes or max_tokens"):
        Budget()
    with pytest.raises(ValueError, match="max_nodes"):
        Budget(max_nodes=0)
    tree = SearchTree(Budget(max_tokens=6))
    kids = tree.add_children(tree.root, [((1, 1), 0.0), ((2, 2, 2), 0.0), ((3, 3), 0.0)])
    assert [k.token_ids for k in kids] == [(1, 1), (2, 2, 2)] and tree.tokens == 5  # (3, 3) would make 7
    with pytest.raises(ValueError, match="empty segment"):
        tree.add_children(kids[0], [((), 0.0)])
    for budget in (Budget(max_nodes=37), Budget(max_tokens=52), Budget(max_nodes=20, max_tokens=100)):
        for strategy in (mcts, beam_prm):
            t = strategy(SearchTree(budget), expand_toy, value_toy)
            assert t.nodes == len(t.all_nodes()) - 1 == t.tokens  # one token per node here
            limit = min(x for x in (budget.max_nodes, budget.max_tokens) if x is not None)
            assert t.nodes <= limit
    exact = mcts(SearchTree(Budget(max_nodes=37)), expand_toy, value_toy)
    assert exact.nodes == 37  # the search spends its whole budget, cutting the last expansion to fit


# -- strategies on the toy environment -------------------------------------------------------------------------


def test_mcts_finds_the_target_where_random_sampling_does_not():
    budget = 100  # nodes = tokens: 12 complete random responses
    tree = mcts(SearchTree(Budget(max_nodes=budget)), expand_toy, value_toy, rule="uct", c=0.1)
    assert found(tree) and tree.nodes <= budget
    hits = sum(random_sampling_finds(budget, seed) for seed in range(50))
    assert hits <= 2  # P(hit) = 1 - (1 - 1/6561)^12 = 0.18% per seed
    # the same search is deterministic
    again = mcts(SearchTree(Budget(max_nodes=budget)), expand_toy, value_toy, rule="uct", c=0.1)
    assert [n.response_ids() for n in again.all_nodes()] == [n.response_ids() for n in tree.all_nodes()]
    best = max(tree.leaves(), key=lambda n: n.value)
    assert best.response_ids() == TARGET and best.value == 1.0
    # stop_value: the search ends at the first terminal leaf that scores 1, before spending the budget
    early = mcts(SearchTree(Budget(max_nodes=budget)), expand_toy, value_toy, rule="uct", c=0.1, stop_value=1.0)
    assert found(early) and early.nodes < budget


def test_beam_prm_with_a_perfect_process_reward_finds_the_target():
    def prefix_correct(node):  # a perfect PRM: 1 if the prefix is a prefix of the target
        ids = node.response_ids()
        return float(ids == TARGET[: len(ids)])

    tree = beam_prm(SearchTree(Budget(max_nodes=3 * len(TARGET))), expand_toy, prefix_correct, beam_width=1)
    assert found(tree) and tree.nodes == 24  # exactly 3 children per depth
    # a misleading PRM plus a perfect pairwise judge: the re-ranking recovers the target
    def judge(x, y):
        return float(prefix_correct(x) > prefix_correct(y))

    tree = beam_prm(SearchTree(Budget(max_nodes=30)), expand_toy, lambda n: 0.0, judge, beam_width=1,
                    rerank_top=3)
    assert found(tree)
    # the judge only re-ranks the PRM's top `rerank_top` (default 2 * width = 2): token 2 is never judged
    tree = beam_prm(SearchTree(Budget(max_nodes=30)), expand_toy, lambda n: 0.0, judge, beam_width=1)
    assert not found(tree)
    tree = beam_prm(SearchTree(Budget(max_nodes=30)), expand_toy, lambda n: 0.0, beam_width=1)
    assert not found(tree)  # without the judge, the flat PRM keeps the first child: [0, 0, ...]


def test_policy_guided_actions_with_a_scripted_policy():
    tree = SearchTree(Budget(max_nodes=10))
    state = PGTSState(tree=tree, current=tree.root)
    for action in (PGTSAction.BACKTRACK, PGTSAction.EXPAND, PGTSAction.EXPAND, PGTSAction.BACKTRACK,
                   PGTSAction.BRANCH):
        pgts_step(state, action, expand_toy)
    assert [c.token_ids for c in tree.root.children] == [(0,), (1,)]
    assert [c.token_ids for c in tree.root.children[0].children] == [(0,)]
    assert state.current.response_ids() == [1] and not state.done
    pgts_step(state, PGTSAction.TERMINATE, expand_toy)
    assert state.done
    script = iter([PGTSAction.EXPAND] * 8 + [PGTSAction.TERMINATE])
    tree = policy_guided(SearchTree(Budget(max_nodes=50)), expand_toy, value_toy, lambda s: next(script))
    (leaf,) = tree_samples(tree, terminal_only=False)
    assert leaf.token_ids == [0] * 8 and leaf.node_values[-1] == pytest.approx(2 / 8)  # positions 1 and 5 match


def test_strategies_are_registered_with_checked_knobs():
    assert {"mcts", "beam_prm", "policy_guided"} <= set(SEARCH_STRATEGIES.names())
    run = SEARCH_STRATEGIES.bind("mcts", {"rule": "puct", "c": 1.5})
    tree = run(SearchTree(Budget(max_nodes=12)), expand_toy, value_toy)
    assert tree.nodes == 12
    with pytest.raises(RegistryError, match="rule"):
        SEARCH_STRATEGIES.bind("mcts", {"rule": "ucb"})
    with pytest.raises(RegistryError, match="beam_width"):
        SEARCH_STRATEGIES.bind("beam_prm", {"beam_width": 0})


def test_tree_group_feeds_the_batch_builder_with_per_token_advantages():
    tree = SearchTree(Budget(max_tokens=20), prompt_ids=[7, 7])
    a, b = tree.add_children(tree.root, [((1, 2), [-0.1, -0.2]), ((3,), [-0.5])])
    (a1,) = tree.add_children(a, [((4,), [-0.3])])
    for leaf in (a1, b):
        tree.add_children(leaf, [])
    backup(a1, 1.0)
    backup(b, 0.0)  # V: root .5, a 1, a1 1, b 0 -> parent advantages a +.5, a1 0, b -.5
    assert a.logprob == pytest.approx(-0.3) and a.token_logprobs == (-0.1, -0.2)
    group = tree_group(tree, TaskRecord(id="p0", question="q"))
    s1, s2 = group.samples
    assert (s1.response_ids, s1.advantage, s1.reward, s1.meta["prefix_len"]) == ([1, 2, 4], [0.5, 0.5, 0.0], 1.0, 0)
    assert s1.logprobs == pytest.approx([-0.1, -0.2, -0.3]) and s2.advantage == [-0.5]
    batch = Batch.from_groups([group], pad_id=0)
    assert batch.advantages.tolist() == [[0.0, 0.0, 0.5, 0.5, 0.0], [0.0, 0.0, -0.5, 0.0, 0.0]]
    with pytest.raises(ValueError, match="2 token log-probs for a segment of 1"):
        tree.add_children(b, [((5,), [-0.1, -0.1])])


def test_run_search_binds_knobs_and_prompt():
    tree = run_search("beam_prm", expand_toy, value_toy, Budget(max_nodes=9), params={"beam_width": 3},
                      prompt_ids=[5])
    assert tree.root.token_ids == (5,) and tree.nodes == 9
    with pytest.raises(RegistryError, match="search.beam_widht"):
        run_search("beam_prm", expand_toy, value_toy, Budget(max_nodes=9), params={"beam_widht": 3})
