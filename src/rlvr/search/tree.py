r"""A search tree of partial responses that share prefixes, with UCT/PUCT selection, backup and budgets.

Each node adds one segment of token ids (a token, or a reasoning step) to its parent's prefix, so the
responses of one tree share every prefix up to their branching point. Node statistics: N (visits),
W (sum of backed-up values), Q = W / N (mean value), P (prior: the segment's policy probability, normalized
over its siblings).

    UCT  (Kocsis and Szepesvari 2006, "Bandit based Monte-Carlo Planning"; UCB1 of Auer et al. 2002):
        score(c) = Q(c) + c_uct * sqrt(ln N(parent) / N(c))           (unvisited children first)
    PUCT (Silver et al. 2017, "Mastering the game of Go without human knowledge"; AlphaZero, arXiv:1712.01815):
        score(c) = Q(c) + c_puct * P(c) * sqrt(N(parent)) / (1 + N(c))   (Q of an unvisited child: 0)
    backup: every node on the path from the root to the evaluated node gets N += 1, W += v.

Ties go to the first child in expansion order, so a search is deterministic given its callbacks.
The budget counts nodes created (the root, the prompt, is free) or tokens in their segments; an expansion
that would overrun it is cut to the children that fit, so a search never exceeds it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

# (segment token ids, log-prob of the segment under the policy: one float, or one per token)
Expansion = tuple[Sequence[int], "float | Sequence[float]"]
ExpandFn = Callable[["Node"], Sequence[Expansion]]
ValueFn = Callable[["Node"], float]
SelectionRule = Literal["uct", "puct"]


@dataclass(eq=False)
class Node:
    """One partial response: the parent's prefix plus `token_ids`."""

    token_ids: tuple[int, ...] = ()
    logprob: float = 0.0
    token_logprobs: tuple[float, ...] | None = None  # per token, when the expansion gave them
    parent: Node | None = None
    prior: float = 1.0
    children: list[Node] = field(default_factory=list)
    visits: int = 0
    value_sum: float = 0.0
    expanded: bool = False
    terminal: bool = False
    expansions: int = 0  # calls of expand(node) by a strategy that re-expands (mcts with widening)

    @property
    def value(self) -> float:
        """Q = W / N, the mean backed-up value (0 before any visit)."""
        return self.value_sum / self.visits if self.visits else 0.0

    @property
    def depth(self) -> int:
        return 0 if self.parent is None else self.parent.depth + 1

    def path(self) -> list[Node]:
        """The nodes from the root to this one, inclusive."""
        out, node = [], self
        while node is not None:
            out.append(node)
            node = node.parent
        return out[::-1]

    def response_ids(self) -> list[int]:
        """The response tokens from the root to here (the root's own tokens, the prompt, excluded)."""
        return [t for n in self.path()[1:] for t in n.token_ids]


@dataclass
class Budget:
    """How much a search may build: nodes created and/or tokens in their segments (None = unbounded)."""

    max_nodes: int | None = None
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        for key in ("max_nodes", "max_tokens"):
            v = getattr(self, key)
            if v is not None and v < 1:
                raise ValueError(f"search budget {key} must be >= 1 or None; got {v}")
        if self.max_nodes is None and self.max_tokens is None:
            raise ValueError("a search budget needs max_nodes or max_tokens (or both); got neither")


class SearchTree:
    """The root (the prompt), every node created, and the budget they are counted against."""

    def __init__(self, budget: Budget, prompt_ids: Sequence[int] = ()):
        self.budget = budget
        self.root = Node(token_ids=tuple(prompt_ids))
        self.nodes = 0   # created, root excluded
        self.tokens = 0  # in created segments (a caller may add tokens it spent elsewhere, e.g. rollouts)
        self.stopped = False  # set by a callback to end the search early (e.g. a verified answer was found)

    def fits(self, segment: Sequence[int]) -> bool:
        b = self.budget
        return ((b.max_nodes is None or self.nodes + 1 <= b.max_nodes)
                and (b.max_tokens is None or self.tokens + len(segment) <= b.max_tokens))

    def exhausted(self) -> bool:
        """True once not even a one-token node fits, or a callback has stopped the search."""
        return self.stopped or not self.fits((0,))

    def add_children(self, node: Node, expansions: Sequence[Expansion]) -> list[Node]:
        """Attach `expansions` under `node` as far as the budget allows; none at all marks it terminal.

        Priors are the segments' probabilities normalized over all proposed siblings (softmax of logprobs).
        A per-token log-prob list is kept on the node (`token_logprobs`) and summed for the segment's.
        """
        node.expanded = True
        if not expansions:
            node.terminal = True
            return []
        per_token = [None if isinstance(lp, (int, float)) else tuple(float(x) for x in lp) for _, lp in expansions]
        seg_lps = [float(lp) if tl is None else sum(tl) for (_, lp), tl in zip(expansions, per_token)]
        top = max(seg_lps)
        weights = [math.exp(lp - top) for lp in seg_lps]
        total = sum(weights)
        added = []
        for (segment, _), lp, tl, w in zip(expansions, seg_lps, per_token, weights):
            seg = tuple(int(t) for t in segment)
            if not seg:
                raise ValueError("expand(node) returned an empty segment; every child must add >= 1 token "
                                 "(return [] to mark the node terminal)")
            if tl is not None and len(tl) != len(seg):
                raise ValueError(f"expand(node) gave {len(tl)} token log-probs for a segment of {len(seg)} tokens")
            if not self.fits(seg):
                break  # keep expansion order: the budget cuts the tail, never reorders
            child = Node(token_ids=seg, logprob=lp, token_logprobs=tl, parent=node, prior=w / total)
            node.children.append(child)
            self.nodes += 1
            self.tokens += len(seg)
            added.append(child)
        return added

    def all_nodes(self) -> list[Node]:
        out, stack = [], [self.root]
        while stack:
            n = stack.pop()
            out.append(n)
            stack.extend(reversed(n.children))
        return out

    def leaves(self, terminal_only: bool = True) -> list[Node]:
        """Childless nodes (except the root) in depth-first order; only terminal ones if `terminal_only`."""
        return [n for n in self.all_nodes() if n is not self.root and not n.children
                and (n.terminal or not terminal_only)]


def uct_score(child: Node, parent_visits: int, c: float) -> float:
    """Q + c * sqrt(ln N_parent / N); +inf for an unvisited child."""
    if child.visits == 0:
        return math.inf
    return child.value + c * math.sqrt(math.log(max(parent_visits, 1)) / child.visits)


def puct_score(child: Node, parent_visits: int, c: float) -> float:
    """Q + c * P * sqrt(N_parent) / (1 + N)."""
    return child.value + c * child.prior * math.sqrt(parent_visits) / (1 + child.visits)


def select_child(node: Node, rule: SelectionRule = "puct", c: float = 1.0) -> Node:
    """The child with the highest UCT or PUCT score (the first one on ties)."""
    if not node.children:
        raise ValueError("select_child: the node has no children to select from")
    score = {"uct": uct_score, "puct": puct_score}.get(rule)
    if score is None:
        raise ValueError(f"unknown selection rule '{rule}'; expected uct or puct")
    best, best_score = node.children[0], -math.inf
    for child in node.children:
        s = score(child, node.visits, c)
        if s > best_score:
            best, best_score = child, s
    return best


def backup(node: Node, value: float) -> None:
    """N += 1 and W += value on `node` and every ancestor (so Q is the mean value of evaluations below)."""
    for n in node.path():
        n.visits += 1
        n.value_sum += float(value)
