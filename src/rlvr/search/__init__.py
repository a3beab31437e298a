"""Tree search over partial responses: the tree, UCT/PUCT selection and backup (`tree`), strategies registered
in `SEARCH_STRATEGIES` (`strategies`: mcts, beam_prm, policy_guided) and the tree as a training group with
tree-structured advantages (`output`), a tree's traversal as one response with backtracks (`traversal`); `pgts` is policy_guided with its learned action policy (torch).
An engine plugs in through the `expand` and `value` callbacks (`rlvr.sampling.search`; docs/search.md)."""

from rlvr.search.output import TreeSample, node_advantage, tree_group, tree_samples
from rlvr.search.pgts import (
    ActionPolicy,
    PGTSAction,
    PGTSState,
    action_mask,
    load_action_policy,
    node_features,
    pgts_step,
    policy_guided,
    reinforce_loss,
)
from rlvr.search.strategies import SEARCH_STRATEGIES, beam_prm, mcts, run_search
from rlvr.search.traversal import Traversal, linearize_traversal, traversal_ids, traversal_text
from rlvr.search.tree import Budget, Node, SearchTree, backup, puct_score, select_child, uct_score

__all__ = [
    "SEARCH_STRATEGIES",
    "ActionPolicy",
    "Budget",
    "Node",
    "PGTSAction",
    "PGTSState",
    "SearchTree",
    "Traversal",
    "TreeSample",
    "action_mask",
    "backup",
    "beam_prm",
    "load_action_policy",
    "mcts",
    "node_advantage",
    "linearize_traversal",
    "node_features",
    "pgts_step",
    "policy_guided",
    "puct_score",
    "reinforce_loss",
    "run_search",
    "select_child",
    "traversal_ids",
    "traversal_text",
    "tree_group",
    "tree_samples",
    "uct_score",
]
