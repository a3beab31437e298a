r"""A searched tree's traversal as one response: the dead ends the search reached, each followed by a backtrack
marker, then the verified answer (R-MCTS's *exploratory learning* data, Yu et al., "ExACT: Teaching AI Agents to
Explore with Reflective-MCTS and Exploratory Learning", arXiv:2410.02052; cf. Stream of Search, Gandhi et al.,
arXiv:2404.03683).

A search reaches complete responses (attempts) one at a time: a finished leaf when it is evaluated, a leaf rollout
when it is sampled. In that visit order, with the chosen answer at index f:

    dead ends  D = the attempts before f whose score is below the answer's (ones that ended wrong), duplicates and
                   copies of the answer left out; only the last `max_dead_ends` are kept (the ones nearest the
                   answer in search time); attempts after f are never written (the traversal ends at the answer)
    response   = d_1  <back>  d_2  <back>  ...  d_m  <back>  answer

Every segment is a whole response from the root: after a marker the response restates the prefix of the node
the search returned to and continues from there. That node is the deepest tree node on the paths of both the
segment and an earlier one (with the tree given; without it, the longest common token prefix with an earlier
segment stands in): `returns_to[i]` is its prefix length in tokens, `return_depth[i]` its depth. The final segment is
exactly the chosen answer, so a task that grades only the text after the last marker (`task.answer_after`,
addition) grades a traversal by its final answer, and an answer written in a dead end never counts.

Pure Python over token ids: the caller decodes (`traversal_text`) or splices marker ids (`traversal_ids`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rlvr.search.tree import Node, SearchTree

Attempt = tuple[Sequence[int], float]  # a complete response's ids and its score (the verifier's reward)
DEFAULT_BACKTRACK = " <back> "


@dataclass
class Traversal:
    """Segments in the order written: the kept dead ends (visit order), then the answer.

    `visits[i]`: index of segment i in the attempts it was taken from; `rewards[i]`: its score;
    `returns_to[i]`: the prefix length (tokens) of the node segment i returns to, the deepest node it shares
    with an earlier segment (0 for the first; without a tree: the longest common token prefix);
    `return_depth[i]`: that node's depth (0: the root; None without a tree); `dropped`: dead ends left out by
    the cap."""

    segments: list[list[int]]
    rewards: list[float]
    visits: list[int]
    returns_to: list[int]
    return_depth: list[int | None]
    dropped: int

    @property
    def backtracks(self) -> int:
        return len(self.segments) - 1

    @property
    def answer(self) -> list[int]:
        return self.segments[-1]


def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def branch_node(tree: SearchTree, a: Sequence[int], b: Sequence[int]) -> Node:
    """The deepest node of `tree` whose response is a prefix of both responses `a` and `b` (the root at
    least): where the two attempts' paths part."""
    node, at = tree.root, 0
    while True:
        for child in node.children:
            seg, end = child.token_ids, at + len(child.token_ids)
            if tuple(a[at:end]) == seg and tuple(b[at:end]) == seg:
                node, at = child, end
                break
        else:
            return node


def linearize_traversal(attempts: Sequence[Attempt], final: int, *, max_dead_ends: int = 2,
                        tree: SearchTree | None = None) -> Traversal:
    """The traversal that ends at `attempts[final]` (module docstring). `attempts` are in visit order; `tree`,
    when given, says which node each backtrack returns to."""
    if not 0 <= final < len(attempts):
        raise ValueError(f"linearize_traversal: final={final} is not an index of the {len(attempts)} attempts")
    if max_dead_ends < 0:
        raise ValueError(f"linearize_traversal: max_dead_ends must be >= 0; got {max_dead_ends}")
    answer_ids, answer_score = [int(t) for t in attempts[final][0]], float(attempts[final][1])
    seen = {tuple(answer_ids)}
    dead: list[int] = []
    for i, (ids, score) in enumerate(attempts[:final]):
        key = tuple(int(t) for t in ids)
        if key in seen or not key or float(score) >= answer_score:
            continue
        seen.add(key)
        dead.append(i)
    kept = dead[max(0, len(dead) - max_dead_ends):] if max_dead_ends else []
    order = [*kept, final]
    segments = [[int(t) for t in attempts[i][0]] for i in order]
    returns_to: list[int] = [0]
    depth: list[int | None] = [0 if tree is not None else None]
    for j, seg in enumerate(segments[1:], start=1):
        if tree is None:
            returns_to.append(max(_lcp(seg, earlier) for earlier in segments[:j]))
            depth.append(None)
            continue
        node = max((branch_node(tree, seg, earlier) for earlier in segments[:j]), key=lambda n: n.depth)
        returns_to.append(len(node.response_ids()))
        depth.append(node.depth)
    return Traversal(segments=segments, rewards=[float(attempts[i][1]) for i in order], visits=order,
                     returns_to=returns_to, return_depth=depth, dropped=len(dead) - len(kept))


def traversal_ids(traversal: Traversal, marker_ids: Sequence[int]) -> tuple[list[int], list[int]]:
    """The traversal as one token sequence (segments joined by `marker_ids`) and the start of every marker."""
    ids: list[int] = []
    at: list[int] = []
    for j, seg in enumerate(traversal.segments):
        if j:
            at.append(len(ids))
            ids += [int(t) for t in marker_ids]
        ids += seg
    return ids, at


def traversal_text(traversal: Traversal, decode: Callable[[list[int]], str],
                   marker: str = DEFAULT_BACKTRACK) -> tuple[str, list[int]]:
    """The traversal as text (each segment decoded, joined by `marker`) and the character offset of every
    marker."""
    if not marker.strip():
        raise ValueError("traversal_text: the backtrack marker must contain a non-space character; got "
                         f"{marker!r}")
    parts = [decode(list(seg)) for seg in traversal.segments]
    at, text = [], ""
    for j, part in enumerate(parts):
        if j:
            at.append(len(text))
            text += marker
        text += part
    return text, at


def after_last_marker(text: str, marker: str) -> str:
    """The text after the last occurrence of `marker` (surrounding spaces of the marker ignored), or all of it:
    the final segment of a traversal, which is what is graded."""
    key = marker.strip()
    if not key:
        return text
    i = text.rfind(key)
    return text if i < 0 else text[i + len(key):]
