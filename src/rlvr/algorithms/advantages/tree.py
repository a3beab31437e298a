r"""Tree-structured advantages: the per-token advantages a search rollout computed from its node values.

    A[i, t] = tree_advantages[i, t] * mask[i, t]

The search sampler (`rlvr.sampling.search`, `search.advantage=parent|treerl|siblings`) sets each sample's
per-token advantage from the values Q of the tree nodes its tokens belong to (`rlvr.search.output`:
A(n) = V(n) - V(parent), TreeRL's global + local, or TreeRPO's sibling-relative); this estimator passes them
through unchanged, so the loss sees exactly the tree's credit assignment. Sources: TreeRL (Hou et al.,
arXiv:2506.11902), TreeRPO (Yang et al., arXiv:2506.05183).
"""

from __future__ import annotations

import torch

from rlvr.algorithms.advantages.common import ADVANTAGES


@ADVANTAGES.register("tree")
def tree_advantages(tree_advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The precomputed per-token advantages [N, T], zero outside the response mask."""
    return tree_advantages.to(torch.float32) * mask
