r"""A searched tree as a training group: one sample per leaf, sharing prefixes, with tree-structured advantages.

Each root-to-leaf path is a sample. Its tokens are the concatenated segments; each token gets the advantage
of the node whose segment holds it. Node advantages come from the node values V (Q = mean backed-up value):

    parent:    A(n) = V(n) - V(parent(n))                                  (local: did this step help?)
    treerl:    A(n) = [V(n) - V(root)] + [V(n) - V(parent(n))]             (global + local)
    siblings:  A(n) = V(n) - mean_{m in siblings(n), m included} V(m)      (relative to the alternatives)

Sources: Hou et al., "TreeRL: LLM Reinforcement Learning with On-Policy Tree Search", arXiv:2506.11902
(process signal from tree values: a step's global advantage V(n) - V(root) plus its local advantage
V(n) - V(parent)); this implementation leaves out TreeRL's 1/sqrt(#leaves below n) reweighting and uses Q,
the mean of the values backed up through n (with 0/1 leaf rewards: the fraction of correct leaves below n).
Yang et al., "TreeRPO: Tree Relative Policy Optimization", arXiv:2506.05183 (advantages relative to the
sibling group); here only the mean is subtracted, not divided by the std. The default is `parent`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rlvr.search.tree import Node, SearchTree
from rlvr.types import Group, Sample, TaskRecord

TreeAdvantage = Literal["parent", "treerl", "siblings"]


@dataclass
class TreeSample:
    """One root-to-leaf path of a tree.

    `prefix_len`: response tokens this sample shares with an earlier sample of the group (0 for the first);
    `segment_lengths` / `node_values` / `node_advantages`: per node along the path (root excluded);
    `token_advantages`: one per response token.
    """

    token_ids: list[int]
    prefix_len: int
    segment_lengths: list[int]
    node_values: list[float]
    node_advantages: list[float]
    token_advantages: list[float]
    terminal: bool
    leaf: Node


def node_advantage(node: Node, mode: TreeAdvantage = "parent") -> float:
    """A(n) from node values (module docstring); 0 for the root."""
    if node.parent is None:
        return 0.0
    if mode == "parent":
        return node.value - node.parent.value
    if mode == "treerl":
        root = node.path()[0]
        return (node.value - root.value) + (node.value - node.parent.value)
    if mode == "siblings":
        sibs = node.parent.children
        return node.value - sum(s.value for s in sibs) / len(sibs)
    raise ValueError(f"unknown tree advantage '{mode}'; expected parent, treerl or siblings")


def tree_samples(tree: SearchTree, advantage: TreeAdvantage = "parent",
                 terminal_only: bool = True) -> list[TreeSample]:
    """The tree's leaves as one group of samples sharing prefixes (depth-first order).

    `terminal_only=False` also returns unfinished frontier leaves (a search cut by its budget).
    """
    samples: list[TreeSample] = []
    seen: set[int] = set()  # ids of nodes already on an earlier sample's path
    for leaf in tree.leaves(terminal_only=terminal_only):
        path = leaf.path()[1:]
        shared = 0
        for n in path:  # depth-first order: the shared nodes are a prefix of the path
            if id(n) not in seen:
                break
            shared += len(n.token_ids)
        seen.update(id(n) for n in path)
        advs = [node_advantage(n, advantage) for n in path]
        samples.append(TreeSample(
            token_ids=leaf.response_ids(),
            prefix_len=shared,
            segment_lengths=[len(n.token_ids) for n in path],
            node_values=[n.value for n in path],
            node_advantages=advs,
            token_advantages=[a for n, a in zip(path, advs) for _ in n.token_ids],
            terminal=leaf.terminal,
            leaf=leaf,
        ))
    return samples


def tree_group(tree: SearchTree, record: TaskRecord, samples: list[TreeSample] | None = None,
               advantage: TreeAdvantage = "parent") -> Group:
    """The tree as an rlvr `Group`: one `Sample` per leaf, with its per-token tree advantages set.

    `reward` is the leaf's value; `logprobs` are filled when every node on the path has per-token
    log-probs; `meta` carries `prefix_len`, `segment_lengths` and `node_values`. A leaf cut by the budget
    (not terminal) gets finish_reason "length".
    """
    samples = tree_samples(tree, advantage) if samples is None else samples
    prompt = list(tree.root.token_ids)
    out = []
    for s in samples:
        path = s.leaf.path()[1:]
        lps = None
        if all(n.token_logprobs is not None for n in path):
            lps = [lp for n in path for lp in n.token_logprobs]  # type: ignore[union-attr]
        out.append(Sample(prompt_ids=prompt, response_ids=list(s.token_ids), logprobs=lps,
                          finish_reason="stop" if s.terminal else "length", reward=s.leaf.value,
                          advantage=list(s.token_advantages),
                          meta={"prefix_len": s.prefix_len, "segment_lengths": s.segment_lengths,
                                "node_values": s.node_values}))
    return Group(record=record, prompt_ids=prompt, samples=out)
