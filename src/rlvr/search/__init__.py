"""Tree search over partial responses: the tree, UCT/PUCT selection and backup (`tree`), strategies registered
in `SEARCH_STRATEGIES` (`strategies`: mcts, beam_prm, policy_guided) and the tree as a training group with
tree-structured advantages (`output`). Pure Python; an engine plugs in through the `expand` and `value`
callbacks (not wired yet: see docs/search.md)."""

from rlvr.search.output import TreeSample, node_advantage, tree_group, tree_samples
from rlvr.search.strategies import (
    SEARCH_STRATEGIES,
    PGTSAction,
    PGTSState,
    beam_prm,
    mcts,
    pgts_step,
    policy_guided,
    run_search,
)
from rlvr.search.tree import Budget, Node, SearchTree, backup, puct_score, select_child, uct_score

__all__ = [
    "SEARCH_STRATEGIES",
    "Budget",
    "Node",
    "PGTSAction",
    "PGTSState",
    "SearchTree",
    "TreeSample",
    "backup",
    "beam_prm",
    "mcts",
    "node_advantage",
    "pgts_step",
    "policy_guided",
    "puct_score",
    "run_search",
    "select_child",
    "tree_group",
    "tree_samples",
    "uct_score",
]
