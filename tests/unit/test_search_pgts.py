"""PGTS (`policy_guided`): the action masks, the features, proposals kept for later, the REINFORCE loss by hand,
the learned action policy against a uniform one on the toy environment, exact resume, the search sampler and
`rlvr eval`'s loading of a trained policy."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.config import ConfigError
from rlvr.rollout import SamplingParams
from rlvr.sampling.search import SearchSettings, build_action_policy
from rlvr.search import (
    ActionPolicy,
    Budget,
    PGTSAction,
    PGTSState,
    SearchTree,
    action_mask,
    node_features,
    pgts_step,
    policy_guided,
    reinforce_loss,
)
from rlvr.search.pgts import ACTIONS as ACTIONS_
from rlvr.search.pgts import FEATURES, discounted_returns
from rlvr.types import TaskRecord

E, B, K, T = PGTSAction.EXPAND, PGTSAction.BRANCH, PGTSAction.BACKTRACK, PGTSAction.TERMINATE
TARGET = [2, 0, 1, 1, 2, 0, 2, 1]  # the toy environment of bench/search_toy.py and tests/unit/test_search.py


def expand_toy(node):
    if len(node.response_ids()) >= len(TARGET):
        return []
    return [((t,), math.log(1 / 3)) for t in range(3)]


def value_toy(node):
    """Matching positions / 8; a full-length response is finished (terminal), as an engine's EOS would be."""
    ids = node.response_ids()
    if len(ids) >= len(TARGET):
        node.expanded = node.terminal = True
    return sum(a == b for a, b in zip(ids, TARGET)) / len(TARGET)


def test_action_masks():
    tree = SearchTree(Budget(max_nodes=20))
    state = PGTSState(tree=tree, current=tree.root)
    assert action_mask(state) == [True, False, False, False]  # root: only expand
    pgts_step(state, E, expand_toy)
    assert action_mask(state) == [True, True, True, False]    # partial node: no terminate
    state.current.terminal = True
    assert action_mask(state) == [False, True, True, True]    # finished: no expand; terminate allowed
    dead = SearchTree(Budget(max_nodes=5))
    dead.root.terminal = True                                  # nothing else valid: terminate
    assert action_mask(PGTSState(tree=dead, current=dead.root)) == [False, False, False, True]


def test_features_by_hand():
    tree = SearchTree(Budget(max_nodes=10, max_tokens=40))
    a, b = tree.add_children(tree.root, [((1, 2), -0.1), ((3,), -0.2)])
    (a1,) = tree.add_children(a, [((4,), -0.3)])
    tree.root.visits, a.visits, a.value_sum, a1.visits, a1.value_sum = 1, 1, 0.5, 1, 0.25
    a1.terminal = True
    x = dict(zip(FEATURES, node_features(PGTSState(tree=tree, current=a1))))
    assert x == pytest.approx({"bias": 1, "is_root": 0, "terminal": 1, "value": 0.25, "value_minus_parent": -0.25,
                               "improved": 0, "worse": 1, "best_terminal_value": 0.25, "depth": 2 / 6,
                               "children": 0, "siblings": 0.5, "budget_spent": 0.3})  # nodes 3/10, tokens 4/40
    x = dict(zip(FEATURES, node_features(PGTSState(tree=tree, current=a))))
    assert (x["improved"], x["value_minus_parent"], x["children"], x["siblings"]) == (1, 0.5, 0.5, 2 / 3)


def test_expansion_proposals_are_kept_and_counted_once():
    calls = []

    def expand(node):  # two proposals per call, 2 and 3 tokens
        calls.append(node.response_ids())
        return [((1, 1), -0.1), ((2, 2, 2), -0.2)]

    tree = SearchTree(Budget(max_tokens=100))
    state = PGTSState(tree=tree, current=tree.root)
    pgts_step(state, E, expand)
    assert state.current.token_ids == (1, 1) and tree.tokens == 5 and tree.nodes == 1  # both generated: 5 spent
    pgts_step(state, B, expand)  # the sibling is the kept proposal: no new engine call, no new tokens
    assert state.current.token_ids == (2, 2, 2) and tree.tokens == 5 and len(calls) == 1
    pgts_step(state, B, expand)  # the root's proposals are all children: asks again, both duplicates
    assert state.current.token_ids == (2, 2, 2) and len(calls) == 2 and tree.tokens == 10 and tree.nodes == 2
    pgts_step(state, K, expand)
    assert state.current is tree.root
    pgts_step(state, K, expand)  # backtrack at the root: no-op
    assert state.current is tree.root and not state.done
    pgts_step(state, T, expand)
    assert state.done


def test_reinforce_loss_and_gradient_by_hand():
    # episode 0: two actions with rewards 0.1, 0.5; episode 1: one action, reward -0.2; gamma 0.5
    episode, rewards = torch.tensor([0, 0, 1]), torch.tensor([0.1, 0.5, -0.2], dtype=torch.float64)
    g = discounted_returns(rewards, episode, 0.5)
    assert g.tolist() == pytest.approx([0.35, 0.5, -0.2])
    masks = torch.tensor([[True, False, False, False], [True, True, True, False], [True, True, False, False]])
    logits = torch.zeros(3, 4, dtype=torch.float64, requires_grad=True)
    actions = torch.tensor([0, 1, 0])
    loss, metrics = reinforce_loss(logits, masks, actions, episode, rewards, gamma=0.5)
    adv = [0.35 - 0.65 / 3, 0.5 - 0.65 / 3, -0.2 - 0.65 / 3]  # minus the batch mean of G
    # log pi: 0 (one valid action), -ln 3, -ln 2; loss = -(1/2) sum A log pi
    assert loss.item() == pytest.approx(-0.5 * (adv[1] * -math.log(3) + adv[2] * -math.log(2)))
    assert metrics["return"] == pytest.approx((0.35 - 0.2) / 2) and metrics["actions_per_search"] == 1.5
    loss.backward()
    # d loss / d logit_j = -(1/E) A (1[j = a] - p_j) on valid j, 0 elsewhere
    assert logits.grad[0].tolist() == pytest.approx([0, 0, 0, 0])
    assert logits.grad[1].tolist() == pytest.approx([-0.5 * adv[1] * (0 - 1 / 3), -0.5 * adv[1] * (1 - 1 / 3),
                                                     -0.5 * adv[1] * (0 - 1 / 3), 0])
    assert logits.grad[2].tolist() == pytest.approx([-0.5 * adv[2] * 0.5, 0.5 * adv[2] * 0.5, 0, 0])
    # the entropy bonus: at uniform logits its gradient is 0, so only the loss value moves
    loss_h, _ = reinforce_loss(torch.zeros(3, 4, dtype=torch.float64), masks, actions, episode, rewards, 0.5, 0.1)
    entropy = (0 + math.log(3) + math.log(2)) / 3
    assert loss_h.item() == pytest.approx(loss.item() - 0.1 * entropy)


def test_episode_rewards_by_hand():
    def greedy_expander():  # expand while possible, then terminate
        policy = ActionPolicy(action_cost=0.02, greedy=True)
        with torch.no_grad():
            policy.linear.bias.copy_(torch.tensor([5.0, 0.0, -5.0, 10.0], dtype=torch.float64))
        return policy

    policy = greedy_expander()
    policy_guided(SearchTree(Budget(max_nodes=20)), expand_toy, value_toy, policy)
    (ep,) = policy.episodes
    # 8 expands down [0, 0, ..., 0] (matches at positions 1 and 5: Q = 1/8 from depth 2, 2/8 from depth 6), then
    # terminate at the finished response: R = 2/8. Rewards Q(s') - Q(s) - c, R added to the last
    assert [ACTIONS_[st[2]] for st in ep["steps"]] == [E] * 8 + [T] and ep["reward"] == 0.25
    q = [0, 0, 1 / 8, 1 / 8, 1 / 8, 1 / 8, 2 / 8, 2 / 8, 2 / 8]
    expected = [q[i + 1] - q[i] - 0.02 for i in range(8)] + [0.0 - 0.02 + 0.25]
    assert [st[4] for st in ep["steps"]] == pytest.approx(expected)
    # the budget ends the search at a partial node: R = 0 (no answer), the value change still counts
    policy = greedy_expander()
    policy_guided(SearchTree(Budget(max_nodes=3)), expand_toy, value_toy, policy)
    (ep,) = policy.episodes
    assert ep["reward"] == 0.0 and [st[4] for st in ep["steps"]] == pytest.approx([-0.02, 0.125 - 0.02, -0.02])
    # reward=best: R = the best value any node reached (1/8 at depth 2), whatever node the search ended on
    policy = greedy_expander()
    policy_guided(SearchTree(Budget(max_nodes=3)), expand_toy, value_toy, policy, reward="best")
    assert policy.episodes[0]["reward"] == 0.125 and policy.episodes[0]["steps"][-1][4] == pytest.approx(0.105)


def _train(policy, iterations, searches=8):
    for _ in range(iterations):
        for _ in range(searches):
            policy_guided(SearchTree(Budget(max_nodes=40)), expand_toy, value_toy, policy, max_actions=100)
        policy.update()


def _mean_final_value(policy, searches=40):
    policy.episodes = []
    for _ in range(searches):
        policy_guided(SearchTree(Budget(max_nodes=40)), expand_toy, value_toy, policy, max_actions=100)
    out = sum(e["reward"] for e in policy.episodes) / searches
    policy.episodes = []
    return out


def test_the_learned_action_policy_beats_a_uniform_one_on_the_toy():
    # 40 updates of 8 searches (40 nodes each); measured on 40 fresh searches, sampled (not greedy)
    uniform = _mean_final_value(ActionPolicy(seed=7))
    learned = ActionPolicy(lr=0.1, action_cost=0.01, entropy=0.1, seed=1)
    _train(learned, 40)
    value = _mean_final_value(learned)
    # measured: uniform 0.016 (it wanders and the budget ends it at a partial node: R = 0), learned 0.39 (seed 1;
    # 0.69 and 0.76 with seeds 2 and 3);
    # the learned policy expands after a step that matched and branches after one that did not
    assert uniform < 0.1 and value > 0.3
    p_expand_after_match = []
    for improved in (1.0, 0.0):
        x = torch.zeros(len(FEATURES), dtype=torch.float64)
        x[FEATURES.index("bias")], x[FEATURES.index("improved")], x[FEATURES.index("depth")] = 1.0, improved, 0.5
        p_expand_after_match.append(float(torch.softmax(learned.linear(x), -1)[0].detach()))
    assert p_expand_after_match[0] > p_expand_after_match[1]


def test_state_dict_resumes_exactly():
    a = ActionPolicy(lr=0.1, seed=5)
    _train(a, 2, searches=3)
    policy_guided(SearchTree(Budget(max_nodes=20)), expand_toy, value_toy, a)  # an episode not learned from yet
    state = a.state_dict()
    b = ActionPolicy(lr=0.1, seed=99)
    b.load_state_dict(state)
    for p in (a, b):
        _train(p, 2, searches=3)
    assert torch.equal(a.linear.weight, b.linear.weight) and torch.equal(a.linear.bias, b.linear.bias)
    ta = policy_guided(SearchTree(Budget(max_nodes=20)), expand_toy, value_toy, a)
    tb = policy_guided(SearchTree(Budget(max_nodes=20)), expand_toy, value_toy, b)
    assert [n.response_ids() for n in ta.all_nodes()] == [n.response_ids() for n in tb.all_nodes()]
    with pytest.raises(ValueError, match="features"):
        b.load_state_dict({**state, "features": ["bias"]})


class _Engine:
    """Two one-token segments per call (1 then 2, or EOS once 2 tokens are out); log-prob -0.5 per token."""

    eos_ids = [9]

    def generate(self, prompts, params):
        from rlvr.types import Sample

        out = []
        for p in prompts:
            done = len(p) - 1 >= 2
            ids = [[9]] * params.n if done else [[1 + i % 2] for i in range(params.n)]
            if params.max_new_tokens > 1 and not params.stop:  # a rollout: to the end
                ids = [[1, 9]] * params.n
            out.append([Sample(prompt_ids=list(p), response_ids=x, logprobs=[-0.5] * len(x)) for x in ids])
        return out


def test_the_search_sampler_trains_and_checkpoints_the_action_policy(tmp_path):
    from rlvr.sampling import SAMPLERS, StepContext

    class Renderer:
        def render(self, record):
            return [5], "q"

    class Tok:
        eos_token_id = 9

        def decode(self, ids, skip_special_tokens=True):
            return " ".join(map(str, ids))

    def reward(groups):  # 1 for a response that contains token 2
        for g in groups:
            for s in g.samples:
                s.reward = 1.0 if 2 in s.response_ids else 0.0

    records = [TaskRecord(id=str(i), question="q") for i in range(4)]
    settings = SearchSettings(strategy="policy_guided", strategy_params={"lr": 0.1, "action_cost": 0.05},
                              max_tokens=40, branch=2, segment_tokens=1)
    sampler = SAMPLERS.build("search", {}, prompts=records, seed=0, search=settings)
    ctx = StepContext(step=1, prompts_per_step=2, n=8, rollout=None, score=reward, engine=_Engine(),
                      renderer=Renderer(), params=SamplingParams(max_new_tokens=4), tokenizer=Tok())
    groups, metrics = sampler.next_batch(ctx)
    assert len(groups) == 2 and all(g.samples for g in groups)
    assert metrics["pgts_actions_per_search"] >= 1 and metrics["pgts_action_expand"] > 0
    assert sampler.action_policy.episodes == [] and sampler.action_policy.linear.weight.abs().sum() > 0  # learned
    state = sampler.state_dict()
    again = SAMPLERS.build("search", {}, prompts=records, seed=0, search=settings)
    again.load_state_dict(state)
    g1, m1 = sampler.next_batch(ctx)
    g2, m2 = again.next_batch(ctx)
    assert [[s.response_ids for s in g.samples] for g in g1] == [[s.response_ids for s in g.samples] for g in g2]
    assert m1 == m2 and torch.equal(sampler.action_policy.linear.weight, again.action_policy.linear.weight)
    with pytest.raises(ValueError, match="no PGTS action policy"):
        again.load_state_dict({"order": state["order"]})
    # rlvr eval loads the trained policy from a checkpoint's trainer_state.pt (frozen), errors name the key
    ckpt = tmp_path / "checkpoints" / "step_000001"
    ckpt.mkdir(parents=True)
    torch.save({"sampler": sampler.state_dict()}, ckpt / "trainer_state.pt")
    loaded = build_action_policy(SearchSettings(strategy="policy_guided",
                                                strategy_params={"policy_from": str(tmp_path)}), learn=False)
    assert loaded.lr == 0 and torch.equal(loaded.linear.weight, sampler.action_policy.linear.weight)
    for bad, needle in ((tmp_path / "nope", "no trainer_state.pt"), (None, "holds no action policy")):
        if bad is None:
            torch.save({"sampler": {"order": {}}}, ckpt / "trainer_state.pt")
            bad = ckpt
        with pytest.raises(ConfigError, match=f"search.policy_from: .*{needle}"):
            build_action_policy(SearchSettings(strategy="policy_guided", strategy_params={"policy_from": str(bad)}))
    assert build_action_policy(SearchSettings(strategy="mcts")) is None


def test_the_first_adam_step_moves_each_weight_by_lr_against_its_gradient():
    policy = ActionPolicy(lr=0.1, action_cost=0.0, entropy=0.0, seed=0)
    for _ in range(2):  # two toy searches, then one update
        policy_guided(SearchTree(Budget(max_nodes=10)), expand_toy, value_toy, policy, max_actions=20)
    steps = [st for ep in policy.episodes for st in ep["steps"]]
    logits = policy.linear(torch.tensor([st[0] for st in steps], dtype=torch.float64))
    loss, _ = reinforce_loss(logits, torch.tensor([st[1] for st in steps]), torch.tensor([st[2] for st in steps]),
                             torch.tensor([i for i, ep in enumerate(policy.episodes) for _ in ep["steps"]]),
                             torch.tensor([st[4] for st in steps], dtype=torch.float64), policy.gamma)
    (grad,) = torch.autograd.grad(loss, policy.linear.weight)
    policy.update()
    # Adam's first step: m^ = g, v^ = g^2, so w = 0 - lr * g / (|g| + eps), about -lr * sign(g)
    assert (grad.abs() > 1e-3).sum() >= 4
    assert torch.allclose(policy.linear.weight.detach(), -0.1 * grad / (grad.abs() + 1e-8), atol=1e-12)
    assert policy.adam.t == 1 and policy.episodes == []
