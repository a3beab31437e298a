r"""Policy-guided tree search (PGTS): a small learned policy over search actions, trained by REINFORCE.

At each search step the action policy sees features of the tree state at the current node and picks one of

    EXPAND     a new child of the current node, and move to it (go deeper)
    BRANCH     a new sibling of the current node (an alternative step), and move to it
    BACKTRACK  move to the current node's parent
    TERMINATE  stop the search

masked to the valid ones (`action_mask`): no BRANCH or BACKTRACK at the root, no EXPAND at a finished
(terminal) node, TERMINATE only at a finished node (PGTS's rule: the search ends on an answer; if nothing else is
valid, TERMINATE is). A search also ends when the budget is spent or after `max_actions` actions. Every node
reached is evaluated once (N = 1, Q = value(node): the verifier's reward for a finished response, the mean
reward of its rollouts for a partial one).

The policy (`ActionPolicy`) is a linear softmax over hand-defined node features x(s) (`FEATURES`):

    pi(a | s) = softmax_a( W x(s) + b )  over the valid actions         (W, b start at 0: uniform over them)

and learns from whole searches (episodes) by REINFORCE. An episode is s_0, a_0, ..., s_T; with c = `action_cost`
and R the task reward of the node f the search ended on if f is a finished response (0 otherwise: PGTS gives
the task reward only on terminating at an answer; the knob `reward=best` pays instead the best value any node
reached),

    r_t = Q(s_{t+1}) - Q(s_t) - c   (+ R on the last action)      intermediate rewards: the change of node value
    G_t = r_t + gamma * G_{t+1}
    A_t = G_t - b,   b = mean of G_t over every action of the batch of episodes   (a baseline)
    loss = -(1 / E) * sum_e sum_t A_t * log pi(a_t | s_t) - beta * mean H(pi)   (E episodes; one Adam step)

Source: Li, "Policy Guided Tree Search for Enhanced LLM Reasoning", arXiv:2502.06813. Its action set (continue =
EXPAND, branch, backtrack, terminate), the action masks and the per-action costs are kept; not kept: its graph
network over the whole tree (here a linear policy over features of the current node), multi-step backtracks,
PPO with a value head and GAE (here REINFORCE with a batch-mean baseline), and its PRM as the source of
intermediate rewards (here the node values of the search: verifier rewards and rollout means).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence  # noqa: F401  (Sequence: get_type_hints resolves ExpandFn here)
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Literal

import torch
from pydantic import Field

from rlvr.search.strategies import SEARCH_STRATEGIES
from rlvr.search.tree import ExpandFn, Node, SearchTree, ValueFn


class PGTSAction(str, Enum):
    """The four actions of a policy-guided tree search step (PGTS)."""

    EXPAND = "expand"        # add a child to the current node and move to it (go deeper)
    BRANCH = "branch"        # add a sibling of the current node (an alternative step) and move to it
    BACKTRACK = "backtrack"  # move to the current node's parent
    TERMINATE = "terminate"  # stop the search


ACTIONS: tuple[PGTSAction, ...] = tuple(PGTSAction)


@dataclass
class PGTSState:
    """Where a policy-guided search is: the tree, the current node, and the actions taken so far. `pending`
    holds, per node, proposals of an expansion not made into children yet (the engine proposes k segments at a
    time; a later EXPAND or BRANCH there uses them before asking the engine again)."""

    tree: SearchTree
    current: Node
    actions: list[PGTSAction] = field(default_factory=list)
    done: bool = False
    pending: dict[int, list[tuple[tuple[int, ...], Any]]] = field(default_factory=dict)


def _next_proposal(node: Node, expand: ExpandFn, state: PGTSState) -> Node | None:
    """One new child of `node`: the first pending proposal that is not a child already, else the first new one of
    expand(node). Every proposed token counts against the budget when it is generated (a proposal kept for later
    is spent already); a node whose expansion is [] becomes terminal."""
    tree = state.tree
    have = {c.token_ids for c in node.children}
    queue = state.pending.setdefault(id(node), [])
    queue[:] = [p for p in queue if p[0] not in have]
    if not queue and not node.terminal:
        proposals = list(expand(node))
        node.expansions += 1
        if not proposals and not node.children:
            node.expanded = node.terminal = True
        for seg, lp in proposals:
            ids = tuple(int(t) for t in seg)
            tree.tokens += len(ids)  # generated now, whether or not it becomes a node
            if ids not in have and all(ids != q[0] for q in queue):
                queue.append((ids, lp))
    if not queue:
        return None
    ids, lp = queue[0]
    tree.tokens -= len(ids)  # add_children counts the node's tokens itself
    kids = tree.add_children(node, [(ids, lp)])
    if not kids:  # it does not fit the budget
        tree.tokens += len(ids)
        return None
    queue.pop(0)
    return kids[0]


def pgts_step(state: PGTSState, action: PGTSAction, expand: ExpandFn) -> PGTSState:
    """Apply one PGTS action to `state` (in place). An action that cannot apply (backtrack at the root,
    branch at the root, expand a terminal node, nothing new to propose, budget spent) leaves the node as is.
    """
    state.actions.append(action)
    cur = state.current
    if action is PGTSAction.TERMINATE:
        state.done = True
    elif action is PGTSAction.BACKTRACK:
        state.current = cur.parent or cur
    elif action is PGTSAction.EXPAND and not cur.terminal:
        state.current = _next_proposal(cur, expand, state) or cur
    elif action is PGTSAction.BRANCH and cur.parent is not None:
        state.current = _next_proposal(cur.parent, expand, state) or cur
    if state.tree.exhausted():
        state.done = True
    return state


def action_mask(state: PGTSState) -> list[bool]:
    """Which of `ACTIONS` (expand, branch, backtrack, terminate) are valid at the current node: expand unless it
    is terminal; branch and backtrack unless it is the root; terminate only at a terminal node, or when nothing
    else is valid."""
    cur = state.current
    at_root = cur.parent is None
    mask = [not cur.terminal, not at_root, not at_root, cur.terminal and not at_root]
    if not any(mask):
        mask[-1] = True
    return mask


FEATURES: tuple[str, ...] = (
    "bias", "is_root", "terminal", "value", "value_minus_parent", "improved", "worse", "best_terminal_value",
    "depth", "children", "siblings", "budget_spent",
)


def node_features(state: PGTSState) -> list[float]:
    """x(s): features of the current node and the tree, each in [-1, 1] (names in `FEATURES`):

        bias 1; is_root; terminal (a finished response); value Q; Q - Q(parent) (0 at the root);
        improved / worse: Q > / < Q(parent) (by more than 1e-9); the best Q of a terminal node so far (0: none);
        depth d / (d + 4); children k / (k + 1) of the node and of its parent (siblings, itself included);
        the budget spent (the larger of nodes / max_nodes and tokens / max_tokens)."""
    cur, tree = state.current, state.tree
    parent = cur.parent
    q, q_parent = cur.value, (parent.value if parent is not None else cur.value)
    best = max((n.value for n in tree.all_nodes() if n.terminal and n.visits), default=0.0)
    b = tree.budget
    spent = max(tree.nodes / b.max_nodes if b.max_nodes else 0.0, tree.tokens / b.max_tokens if b.max_tokens else 0.0)
    depth = cur.depth
    kids = len(cur.children)
    sibs = len(parent.children) if parent is not None else 0
    return [1.0, float(parent is None), float(cur.terminal), q, q - q_parent, float(q > q_parent + 1e-9),
            float(q < q_parent - 1e-9), best, depth / (depth + 4), kids / (kids + 1), sibs / (sibs + 1),
            min(spent, 1.0)]


def discounted_returns(rewards: torch.Tensor, episode: torch.Tensor, gamma: float) -> torch.Tensor:
    """G_i = r_i + gamma * G_{i+1} within each episode (actions of one episode contiguous and in order)."""
    out = torch.zeros_like(rewards)
    running = 0.0
    for i in range(len(rewards) - 1, -1, -1):
        if i == len(rewards) - 1 or episode[i + 1] != episode[i]:
            running = 0.0
        running = float(rewards[i]) + gamma * running
        out[i] = running
    return out


def reinforce_loss(logits: torch.Tensor, masks: torch.Tensor, actions: torch.Tensor, episode: torch.Tensor,
                   rewards: torch.Tensor, gamma: float, entropy_coef: float = 0.0
                   ) -> tuple[torch.Tensor, dict[str, float]]:
    r"""REINFORCE on a batch of searches (module docstring): per action i (of episode e(i)), with its reward r_i,

        G_i = r_i + gamma * G_{i+1} (within the episode),  A_i = G_i - mean_j G_j,
        loss = -(1/E) * sum_i A_i * log pi(a_i | s_i)  -  beta * mean_i H(pi(. | s_i))   (beta = entropy_coef)

    `logits` (n, 4) and `masks` (n, 4, bool) per action, `actions` (n,) indices into `ACTIONS`, `episode` (n,)
    the episode index of each action (contiguous, in order, 0..E-1), `rewards` (n,)."""
    num_episodes = int(episode.max()) + 1
    returns = discounted_returns(rewards, episode, gamma)
    adv = returns - returns.mean()
    logp_all = torch.log_softmax(logits.masked_fill(~masks, -math.inf), dim=-1)
    logp = logp_all.gather(1, actions[:, None])[:, 0]
    entropy = -(logp_all.exp() * logp_all.masked_fill(~masks, 0.0)).sum(-1).mean()
    loss = -(adv * logp).sum() / num_episodes - entropy_coef * entropy
    with torch.no_grad():
        first = torch.ones(len(episode), dtype=torch.bool)
        first[1:] = episode[1:] != episode[:-1]
    return loss, {"return": float(returns[first].mean()), "actions_per_search": len(episode) / num_episodes,
                  "entropy": float(entropy.detach())}


class _Adam:
    """Adam (Kingma and Ba, arXiv:1412.6980; beta 0.9, 0.999, eps 1e-8) for the policy's two tensors. Written
    out because constructing a torch.optim optimizer imports torch's compiler stack (about 10 s on a loaded
    CPU), which `rlvr eval` would pay for a frozen policy."""

    def __init__(self, params: list[torch.nn.Parameter], lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8):
        self.params, self.lr, self.betas, self.eps = params, lr, betas, eps
        self.t = 0
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]

    @torch.no_grad()
    def step(self) -> None:
        self.t += 1
        b1, b2 = self.betas
        for p, m, v in zip(self.params, self.m, self.v):
            if p.grad is None:
                continue
            m.mul_(b1).add_(p.grad, alpha=1 - b1)
            v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            m_hat, v_hat = m / (1 - b1**self.t), v / (1 - b2**self.t)
            p.sub_(self.lr * m_hat / (v_hat.sqrt() + self.eps))

    def state_dict(self) -> dict[str, Any]:
        return {"t": self.t, "m": [x.clone() for x in self.m], "v": [x.clone() for x in self.v]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.t = int(state["t"])
        self.m = [x.clone() for x in state["m"]]
        self.v = [x.clone() for x in state["v"]]


class ActionPolicy:
    """The PGTS action policy: a linear softmax over `node_features`, sampled with its own seeded generator;
    it records every search as an episode (features, mask, action and reward of each step) and learns from
    them by `update` (REINFORCE, `reinforce_loss`). Weights start at zero (uniform over the valid actions).
    `state_dict` holds the weights, the optimizer, the generator and the episodes not learned from yet, so a
    resumed run continues exactly."""

    def __init__(self, *, lr: float = 0.05, action_cost: float = 0.01, gamma: float = 0.9, entropy: float = 0.05,
                 greedy: bool = False, seed: int = 0):
        if lr < 0 or action_cost < 0 or not 0 <= gamma <= 1:
            raise ValueError(f"ActionPolicy: lr >= 0, action_cost >= 0 and 0 <= gamma <= 1; got {lr}, "
                             f"{action_cost}, {gamma}")
        self.lr, self.action_cost, self.gamma, self.greedy = lr, action_cost, gamma, greedy
        self.entropy = entropy
        self.linear = torch.nn.Linear(len(FEATURES), len(ACTIONS), dtype=torch.float64)
        torch.nn.init.zeros_(self.linear.weight)
        torch.nn.init.zeros_(self.linear.bias)
        self.adam = _Adam(list(self.linear.parameters()), lr)
        self.generator = torch.Generator().manual_seed(int(seed))
        self.episodes: list[dict[str, Any]] = []  # finished, not learned from yet
        self._steps: list[list[Any]] = []  # the search under way: [features, mask, action, Q before, reward]

    def probs(self, state: PGTSState) -> torch.Tensor:
        """pi(. | s) over `ACTIONS`, 0 on the invalid ones."""
        with torch.no_grad():
            x = torch.tensor(node_features(state), dtype=torch.float64)
            mask = torch.tensor(action_mask(state))
            return torch.softmax(self.linear(x).masked_fill(~mask, -math.inf), dim=-1)

    def __call__(self, state: PGTSState) -> PGTSAction:
        self._close_step(state.current.value)
        x, mask = node_features(state), action_mask(state)
        p = self.probs(state)
        a = int(p.argmax()) if self.greedy else int(torch.multinomial(p, 1, generator=self.generator))
        self._steps.append([x, mask, a, state.current.value, None])
        return ACTIONS[a]

    def _close_step(self, value_now: float, final: float = 0.0) -> None:
        """The reward of the last action, now that its result is known: Q(s') - Q(s) - c (+ R if it was the
        last action of the search)."""
        if self._steps and self._steps[-1][4] is None:
            self._steps[-1][4] = value_now - self._steps[-1][3] - self.action_cost + final

    def end_search(self, final_value: float, reward: float) -> None:
        """Close the search under way as an episode: `final_value` is Q of the node it ended on (the last
        action's value change), `reward` = R is added to the last action's reward (nothing recorded: no-op)."""
        self._close_step(final_value, final=reward)
        if self._steps:
            self.episodes.append({"steps": [tuple(st) for st in self._steps], "reward": float(reward)})
        self._steps = []

    def update(self) -> dict[str, float]:
        """One REINFORCE step on the recorded episodes (then cleared); returns its metrics (none without
        episodes). With lr = 0 the episodes are only measured (a frozen policy)."""
        episodes, self.episodes = self.episodes, []
        if not episodes:
            return {}
        steps = [st for ep in episodes for st in ep["steps"]]
        x = torch.tensor([st[0] for st in steps], dtype=torch.float64)
        masks = torch.tensor([st[1] for st in steps])
        actions = torch.tensor([st[2] for st in steps])
        rewards = torch.tensor([st[4] for st in steps], dtype=torch.float64)
        episode = torch.tensor([i for i, ep in enumerate(episodes) for _ in ep["steps"]])
        loss, metrics = reinforce_loss(self.linear(x), masks, actions, episode, rewards, self.gamma, self.entropy)
        if self.lr > 0:
            self.linear.zero_grad()
            loss.backward()
            self.adam.step()
        counts = torch.bincount(actions, minlength=len(ACTIONS)).double() / len(steps)
        metrics["final_reward"] = sum(ep["reward"] for ep in episodes) / len(episodes)
        metrics.update({f"action_{a.value}": float(c) for a, c in zip(ACTIONS, counts)})
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {"linear": {k: v.clone() for k, v in self.linear.state_dict().items()},
                "optimizer": self.adam.state_dict(), "generator": self.generator.get_state(),
                "episodes": [dict(ep) for ep in self.episodes], "features": list(FEATURES)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if list(state.get("features", [])) != list(FEATURES):
            raise ValueError(f"the saved action policy has features {state.get('features')}, this rlvr has "
                             f"{list(FEATURES)}; train it again")
        self.linear.load_state_dict(state["linear"])
        self.adam.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.episodes = [dict(ep) for ep in state.get("episodes", [])]
        self._steps = []


def load_action_policy(path: str | Path, **kwargs: Any) -> ActionPolicy:
    """An `ActionPolicy` trained by `rlvr train ... search.name=policy_guided`, from a checkpoint directory of
    that run (its trainer_state.pt) or the run directory (its newest checkpoint). Errors name search.policy_from."""
    p = Path(path).expanduser()
    state_file = p / "trainer_state.pt"
    if not state_file.is_file() and (p / "checkpoints").is_dir():
        found = sorted((p / "checkpoints").glob("step_*/trainer_state.pt"))
        state_file = found[-1] if found else state_file
    if not state_file.is_file():
        raise ValueError(f"search.policy_from: no trainer_state.pt in '{path}' (nor in its checkpoints/); give a "
                         "checkpoint directory of a run trained with search.name=policy_guided, e.g. "
                         "runs/pgts/checkpoints/step_000020, or its run directory")
    state = torch.load(state_file, map_location="cpu", weights_only=False)
    saved = (state.get("sampler") or {}).get("action_policy")
    if saved is None:
        raise ValueError(f"search.policy_from: {state_file} holds no action policy (the run was not trained with "
                         "search.name=policy_guided)")
    policy = ActionPolicy(**kwargs)
    try:
        policy.load_state_dict(saved)
    except ValueError as err:
        raise ValueError(f"search.policy_from: {err}") from None
    return policy


@SEARCH_STRATEGIES.register("policy_guided")
def policy_guided(
    tree: SearchTree,
    expand: ExpandFn,
    value: ValueFn,
    policy: Callable[[PGTSState], PGTSAction] | None = None,
    *,
    max_actions: Annotated[int, Field(ge=1)] = 1_000,
    action_cost: Annotated[float, Field(ge=0.0)] = 0.01,
    lr: Annotated[float, Field(ge=0.0)] = 0.05,
    gamma: Annotated[float, Field(ge=0.0, le=1.0)] = 0.9,
    entropy: Annotated[float, Field(ge=0.0)] = 0.05,
    greedy: bool = False,
    policy_from: str | None = None,
    reward: Literal["final", "best"] = "final",
) -> SearchTree:
    r"""Policy-guided tree search: a policy picks expand / branch / backtrack / terminate at each step.

        s_0 = (tree, root);  a_k = policy(s_k);  s_{k+1} = pgts_step(s_k, a_k);  stop on terminate, budget or
        max_actions; every node reached is evaluated once: N = 1, Q = value(node)

    `policy` is an `ActionPolicy` (the learned one; module docstring) or any callable (tests script one);
    without one, an untrained `ActionPolicy` (uniform over the valid actions) is used. An `ActionPolicy`
    records the search as an episode with R (`reward`): `final` (PGTS) Q of the node the search ended on if that
    is a finished response (terminal), else 0; `best` the highest Q of any node the search evaluated (with one
    rollout per partial node and the verifier as the value, 1 if the search found a correct answer anywhere:
    what `rlvr eval`'s verifier selection counts). The knobs `action_cost`, `lr`, `gamma`, `entropy`, `greedy`
    and `policy_from` configure the `ActionPolicy` the caller builds (the search sampler in training, rlvr
    eval: `rlvr.sampling.search.build_action_policy`); here they only apply to the default one.

    Source: Li, "Policy Guided Tree Search for Enhanced LLM Reasoning", arXiv:2502.06813 (see the module).
    """
    if policy is None:
        policy = ActionPolicy(lr=lr, action_cost=action_cost, gamma=gamma, entropy=entropy, greedy=greedy)
    state = PGTSState(tree=tree, current=tree.root)
    _score_once(tree.root, value)
    for _ in range(max_actions):
        if state.done or tree.exhausted():  # (a value callback may stop the search: a verified answer)
            break
        pgts_step(state, policy(state), expand)
        _score_once(state.current, value)
    if isinstance(policy, ActionPolicy):
        final = state.current
        if reward == "best":  # the best value any node reached (with one rollout per node: the best answer found)
            r = max((n.value for n in tree.all_nodes() if n.visits), default=0.0)
        else:  # PGTS: the task reward of the answer the search ended on
            r = final.value if final.terminal else 0.0
        policy.end_search(final.value, r)
    return tree


def _score_once(node: Node, value: ValueFn) -> None:
    if node.visits == 0:
        node.visits, node.value_sum = 1, float(value(node))

