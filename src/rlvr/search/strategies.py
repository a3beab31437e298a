r"""Search strategies, registered by name in `SEARCH_STRATEGIES`.

A strategy grows a `SearchTree` in place through two callbacks, and never calls an engine itself:

    expand(node) -> [(segment token ids, log-prob), ...]    proposals for the next segment; [] = terminal
    value(node)  -> float                                   a leaf evaluation or a process reward

Positional parameters are these runtime arguments; keyword-only ones are config knobs (validated by the
registry, like every other component). Every strategy stops when its budget is spent.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Annotated

from pydantic import Field

from rlvr.registry import Registry
from rlvr.search.tree import (
    Budget,
    ExpandFn,
    Node,
    SearchTree,
    SelectionRule,
    ValueFn,
    backup,
    puct_score,
    select_child,
    uct_score,
)

SEARCH_STRATEGIES: Registry = Registry("search strategy")

CompareFn = Callable[[Node, Node], float]  # P(first is better than second), in [0, 1]


@SEARCH_STRATEGIES.register("mcts")
def mcts(
    tree: SearchTree,
    expand: ExpandFn,
    value: ValueFn,
    *,
    rule: SelectionRule = "uct",
    c: Annotated[float, Field(ge=0.0)] = 1.0,
    max_iterations: Annotated[int, Field(ge=1)] = 100_000,
    max_idle: Annotated[int, Field(ge=1)] = 200,
    stop_value: float | None = None,
    widen: Annotated[float, Field(gt=0.0, le=1.0)] | None = None,
) -> SearchTree:
    r"""Monte-Carlo tree search: select, expand, evaluate, back up, until the budget is spent.

        select:   from the root, follow argmax_c score(c) (UCT or PUCT, rlvr.search.tree) to a leaf
                  (with `widen` = alpha: stop early at a node that may widen: expanded < (N + 1)^alpha times)
        expand:   a leaf never expanded gets children = expand(leaf) (as many as the budget allows);
                  a node that may widen gets the proposals of expand(node) that are not children yet;
                  the search steps into the best-scoring new child
        evaluate: v = value(node)
        backup:   N += 1, W += v on the node and all its ancestors

    A leaf whose expansion is [] is terminal; selecting it again re-evaluates it (its Q is then a mean over
    evaluations, which matters for a noisy value). The search stops when a node to expand no longer fits the
    budget, when every leaf is terminal (and no node may widen), after `max_iterations` evaluations, after
    `max_idle` evaluations in a row that created no node (selection keeps returning to finished leaves), or as
    soon as a terminal leaf scores `stop_value` or more (e.g. 1.0: a verified correct answer).

    Progressive widening (`widen`, off by default) is for expansions that are samples, not an enumeration: a
    policy that proposes the same segment k times gives a node one child, and without widening that node is
    never offered an alternative. A widening whose proposals are all children already adds nothing; their
    tokens are still counted against a token budget (they were generated). Source: Coulom, "Computing Elo
    ratings of move patterns in the game of Go" (2007) and Couetoux et al., "Continuous upper confidence
    trees" (2011), with the constant 1.

    Source: R-MCTS of Yu et al., "Exact: Teaching AI Agents to Explore with Reflective-MCTS and Exploratory
    Learning", arXiv:2410.02052, without its multi-agent debate (value) and reflection (memory): that is the
    plain MCTS loop of Kocsis and Szepesvari (UCT) and AlphaZero (PUCT, arXiv:1712.01815).
    """
    idle = 0
    for _ in range(max_iterations):
        if tree.stopped:
            break
        node = tree.root
        while node.children and not _may_widen(node, widen):
            node = select_child(node, rule, c)
        idle += 1
        widened = False
        if node.children:  # widen: the proposals that are not children yet
            if tree.exhausted():
                break
            proposals = list(expand(node))
            node.expansions += 1
            have = {ch.token_ids for ch in node.children}
            new = [p for p in proposals if tuple(int(t) for t in p[0]) not in have]
            tree.tokens += sum(len(p[0]) for p in proposals) - sum(len(p[0]) for p in new)
            kids = tree.add_children(node, new) if new else []
            if kids:
                node, idle, widened = _best_of(node, kids, rule, c), 0, True
            else:  # nothing new here: descend as usual
                while node.children:
                    node = select_child(node, rule, c)
        if not widened:  # (a widened node's new child is evaluated as it is)
            if not node.expanded:  # a fresh leaf
                if tree.exhausted():
                    break
                proposals = expand(node)
                node.expansions += 1
                kids = tree.add_children(node, proposals)
                if proposals and not kids:
                    break  # the budget cannot hold even one proposed child
                if kids:
                    node, idle = select_child(node, rule, c), 0
            elif node.terminal and _fully_explored(tree.root, widen):
                break
        v = value(node)
        backup(node, v)
        if idle >= max_idle or (stop_value is not None and node.terminal and v >= stop_value):
            break
    return tree


def _may_widen(node: Node, widen: float | None) -> bool:
    """Progressive widening: a non-terminal node expanded fewer than (N + 1)^alpha times may be expanded again
    (counting expansions, not children: a widening that proposed only existing children still counts)."""
    return (widen is not None and bool(node.children) and not node.terminal
            and node.expansions < (node.visits + 1) ** widen)


def _best_of(parent: Node, kids: list[Node], rule: SelectionRule, c: float) -> Node:
    """The child among `kids` (new children of `parent`) that `select_child` would pick among them."""
    score = uct_score if rule == "uct" else puct_score
    best, best_score = kids[0], -math.inf
    for kid in kids:
        s = score(kid, parent.visits, c)
        if s > best_score:
            best, best_score = kid, s
    return best


def _fully_explored(root: Node, widen: float | None = None) -> bool:
    """True when every leaf below `root` is terminal and no node may widen (no expansion is left to try)."""
    stack = [root]
    while stack:
        n = stack.pop()
        if (not n.children and not n.terminal) or _may_widen(n, widen):
            return False
        stack.extend(n.children)
    return True


def _score(node: Node, value: ValueFn) -> None:
    """Evaluate a node once, as its own value (N = 1, Q = value(node)); ancestors are not touched."""
    if node.visits == 0:
        node.visits, node.value_sum = 1, float(value(node))


def _copeland_order(candidates: list[Node], compare: CompareFn) -> list[Node]:
    """Candidates by pairwise wins (compare(a, b) > 0.5 counts a win), then by their score, then by order."""
    wins = [sum(1 for j, b in enumerate(candidates) if j != i and compare(a, b) > 0.5)
            for i, a in enumerate(candidates)]
    order = sorted(range(len(candidates)), key=lambda i: (-wins[i], -candidates[i].value, i))
    return [candidates[i] for i in order]


@SEARCH_STRATEGIES.register("beam_prm")
def beam_prm(
    tree: SearchTree,
    expand: ExpandFn,
    value: ValueFn,
    compare: CompareFn | None = None,
    *,
    beam_width: Annotated[int, Field(ge=1)] = 2,
    rerank_top: Annotated[int, Field(ge=1)] | None = None,
) -> SearchTree:
    r"""Beam search scored by a process reward, with optional pairwise re-ranking of the best candidates.

        depth d:  C_d = children of every unfinished beam (expand, within the budget)
                  s(n) = value(n)                       process reward of each node (its Q, N = 1; the root too)
                  rank C_d by s; if `compare` is given, re-rank the top K (K = rerank_top, default 2 * width)
                  by Copeland score: #{m : compare(n, m) > 0.5}, ties by s
                  beams_{d+1} = first `beam_width` of the ranking

    A beam whose expansion is [] is finished (terminal) and leaves the beam. The search stops when no beam
    is left or the budget is spent.

    Source: Wang et al., "BPP-Search: Enhancing Tree of Thought Reasoning for Mathematical Modeling Problem
    Solving", arXiv:2411.17404 (beam search + process reward model + pairwise preference model). This
    implementation: the PRM and the preference model are the `value` and `compare` callbacks; the
    paper's random-greedy selection among near-ties is not implemented.
    """
    _score(tree.root, value)
    beams = [tree.root]
    while beams and not tree.stopped:
        candidates: list[Node] = []
        for beam in beams:
            if tree.exhausted():
                break
            candidates += tree.add_children(beam, expand(beam))
        if not candidates:
            break
        for node in candidates:
            _score(node, value)
        ranked = sorted(candidates, key=lambda n: -n.value)  # stable: expansion order breaks ties
        if compare is not None:
            k = rerank_top or 2 * beam_width
            ranked = _copeland_order(ranked[:k], compare) + ranked[k:]
        beams = ranked[:beam_width]
    return tree


def run_search(name: str, expand: ExpandFn, value: ValueFn, budget: Budget, *, params: dict | None = None,
               prompt_ids: Sequence[int] = (), **runtime: object) -> SearchTree:
    """Build a tree for `prompt_ids` and grow it with the strategy `name` (knobs `params`, validated by the
    registry; `runtime`: extra callbacks such as beam_prm's `compare` or policy_guided's `policy`)."""
    strategy = SEARCH_STRATEGIES.bind(name, params or {}, where="search")
    return strategy(SearchTree(budget, prompt_ids), expand, value, **runtime)
