"""The toy search environment of docs/search.md: does `mcts` find a hidden 8-token target (3-token
vocabulary) within a node budget, for several selection rules and constants, against uniform random sampling
with the same number of tokens? Deterministic (no randomness in the search; random sampling is seeded).
Then `policy_guided`: its action policy untrained (uniform) and after 40 REINFORCE updates of 8 searches
(seeded), each with 40 nodes.

    PYTHONPATH=src python bench/search_toy.py
"""

from __future__ import annotations

import math
import random

from rlvr.search import ActionPolicy, Budget, SearchTree, beam_prm, mcts, policy_guided

TARGET = [2, 0, 1, 1, 2, 0, 2, 1]
BUDGETS = (40, 60, 100, 150, 200, 300)


def expand(node):
    if len(node.response_ids()) >= len(TARGET):
        return []
    return [((t,), math.log(1 / 3)) for t in range(3)]


def value(node):
    return sum(a == b for a, b in zip(node.response_ids(), TARGET)) / len(TARGET)


def prefix_correct(node):
    ids = node.response_ids()
    return float(ids == TARGET[: len(ids)])


def value_finishing(node):
    """`value`, and a full-length response is finished (terminal), as an engine's EOS would make it."""
    if len(node.response_ids()) >= len(TARGET):
        node.expanded = node.terminal = True
    return value(node)


def pgts_searches(policy, n):
    """n searches of 40 nodes: mean R (the finished answer's value) and the fraction that reached the target."""
    policy.episodes, hits = [], 0
    for _ in range(n):
        tree = policy_guided(SearchTree(Budget(max_nodes=40)), expand, value_finishing, policy, max_actions=100)
        hits += found(tree)
    mean_r = sum(e["reward"] for e in policy.episodes) / n
    policy.episodes = []
    return mean_r, hits / n


def found(tree):
    return any(leaf.response_ids() == TARGET for leaf in tree.leaves(terminal_only=False))


def random_finds(tokens, seed):
    rng = random.Random(seed)
    return any([rng.randrange(3) for _ in TARGET] == TARGET for _ in range(tokens // len(TARGET)))


def main() -> None:
    print("| rule, c | " + " | ".join(str(b) for b in BUDGETS) + " |")
    print("|---" * (len(BUDGETS) + 1) + "|")
    for rule, c in [("uct", 1.0), ("uct", 0.3), ("uct", 0.1), ("puct", 1.0), ("puct", 0.5), ("puct", 0.1)]:
        row = ["yes" if found(mcts(SearchTree(Budget(max_nodes=b)), expand, value, rule=rule, c=c)) else "no"
               for b in BUDGETS]
        print(f"| {rule.upper()} {c} | " + " | ".join(row) + " |")
    for b in BUDGETS:
        rate = sum(random_finds(b, s) for s in range(1000)) / 1000
        print(f"random sampling, {b} tokens: found in {rate:.1%} of 1000 seeds")
    for width in (1, 2, 3):
        tree = beam_prm(SearchTree(Budget(max_nodes=300)), expand, prefix_correct, beam_width=width)
        print(f"beam_prm width {width}, perfect PRM: found={found(tree)} with {tree.nodes} nodes")
    for seed in (1, 2, 3):
        uniform = pgts_searches(ActionPolicy(seed=seed), 100)
        learned = ActionPolicy(lr=0.1, action_cost=0.01, entropy=0.1, seed=seed)
        for _ in range(40):
            for _ in range(8):
                policy_guided(SearchTree(Budget(max_nodes=40)), expand, value_finishing, learned, max_actions=100)
            learned.update()
        r, hit = pgts_searches(learned, 100)
        print(f"policy_guided seed {seed}: uniform mean R {uniform[0]:.3f}, target found {uniform[1]:.0%}; "
              f"after 320 searches: mean R {r:.3f}, target found {hit:.0%} (100 searches each)")


if __name__ == "__main__":
    main()
