"""DUMP's bandit, difficulty curricula, DRIVE's hard-focus pool, one-shot RLVR and turn budgets, against
hand-computed cases with a fake rollout whose rewards depend on the prompt."""

from __future__ import annotations

import math

import pytest

from rlvr.sampling import SAMPLERS, TURN_BUDGETS, StepContext
from rlvr.sampling.bandit import group_abs_advantages, softmax, ucb_scores
from rlvr.types import Group, Sample, TaskRecord


class RewardByRecord:
    """ctx.rollout stand-in: every sample of record r gets rewards[r.id][k % len] (k = sample index)."""

    def __init__(self, rewards):
        self.rewards = rewards
        self.calls: list[list[str]] = []

    def __call__(self, records, n):
        self.calls.append([r.id for r in records])
        out = []
        for r in records:
            pattern = self.rewards(r) if callable(self.rewards) else self.rewards[r.id]
            samples = [Sample([5], [1, 2], logprobs=[-1.0, -1.0], reward=float(pattern[k % len(pattern)]),
                              correct=pattern[k % len(pattern)] > 0.5) for k in range(n)]
            out.append(Group(record=r, prompt_ids=[5], samples=samples))
        return out


def ctx(rollout, step=1, prompts_per_step=4, n=4, total_steps=10):
    return StepContext(step=step, prompts_per_step=prompts_per_step, n=n, rollout=rollout, total_steps=total_steps)


# -- DUMP -------------------------------------------------------------------------------------------------


def test_ucb_and_softmax_hand_computed():
    scores = ucb_scores([0.866, 0.0], [4, 4], exploration=1.0)
    bonus = math.sqrt(2 * math.log(9) / 5)
    assert scores == pytest.approx([0.866 + bonus, bonus])
    w = softmax(scores, 0.1)
    assert w[1] == pytest.approx(1 / (1 + math.exp(8.66)))
    assert sum(w) == pytest.approx(1.0)
    # unexplored arms get the larger bonus
    assert ucb_scores([0.0, 0.0], [100, 0], 1.0)[1] > ucb_scores([0.0, 0.0], [100, 0], 1.0)[0]


def test_group_abs_advantage_is_grpo_magnitude():
    g = RewardByRecord({"x": [1, 0, 1, 0]})([TaskRecord("x", "x")], 4)[0]
    assert group_abs_advantages(g, eps=0.0) == pytest.approx([0.5 / math.sqrt(1 / 3)] * 4)
    assert group_abs_advantages(g, normalize=False) == pytest.approx([0.5] * 4)


def two_source_split():
    return [TaskRecord(f"{s}{i}", f"{s}{i}", source=s, difficulty=1 + (i % 2)) for s in "ab" for i in range(6)]


def test_dump_learns_to_draw_from_the_source_with_larger_advantages():
    split = two_source_split()
    rollout = RewardByRecord(lambda r: [1, 0] if r.source == "a" else [0])  # only source a has signal
    sampler = SAMPLERS.build("dump", {}, prompts=split, seed=0)
    groups, m = sampler.next_batch(ctx(rollout, step=1, prompts_per_step=8))
    assert m["weight/a"] == pytest.approx(0.5) and m["weight/b"] == pytest.approx(0.5)
    n_a = sum(g.record.source == "a" for g in groups)
    assert sampler.counts == [4 * n_a, 4 * (8 - n_a)]
    expected = softmax(ucb_scores([0.5 / math.sqrt(1 / 3) / (1 + 1e-6 / math.sqrt(1 / 3)), 0.0],
                                  sampler.counts, 1.0), 0.1)
    assert sampler.weights() == pytest.approx(expected, rel=1e-4)
    for step in range(2, 5):
        groups, m = sampler.next_batch(ctx(rollout, step=step, prompts_per_step=8))
    assert m["weight/a"] > 0.99
    assert all(g.record.source == "a" for g in groups)
    assert m["abs_adv/b"] == 0.0 and m["abs_adv/a"] == pytest.approx(0.866, abs=1e-3)


def test_dump_arms_by_difficulty_and_resume():
    split = two_source_split()
    rollout = RewardByRecord(lambda r: [1, 0, 0, 0] if r.difficulty == 2 else [1])
    a = SAMPLERS.build("dump", {"arms": "difficulty"}, prompts=split, seed=3)
    assert a.arm_names == ["d1", "d2"]
    a.next_batch(ctx(rollout, step=1))
    state = a.state_dict()
    b = SAMPLERS.build("dump", {"arms": "difficulty"}, prompts=split, seed=3)
    b.load_state_dict(state)
    ga, ma = a.next_batch(ctx(rollout, step=2))
    gb, mb = b.next_batch(ctx(rollout, step=2))
    assert [g.record.id for g in ga] == [g.record.id for g in gb] and ma == mb
    with pytest.raises(ValueError, match="arms"):
        SAMPLERS.build("dump", {"arms": "source"}, prompts=split, seed=3).load_state_dict(state)


# -- difficulty curriculum --------------------------------------------------------------------------------


def leveled_split():
    return [TaskRecord(f"d{d}-{i}", "q", difficulty=d) for d in (1, 2, 3, 4) for i in range(5)]


def test_linear_difficulty_schedule_admits_harder_prompts_over_the_run():
    sampler = SAMPLERS.build("curriculum", {}, prompts=leveled_split(), seed=0)
    rollout = RewardByRecord(lambda r: [1, 0])
    groups, m = sampler.next_batch(ctx(rollout, step=1, total_steps=10, prompts_per_step=6))
    assert m["difficulty_target"] == 1.0 and {g.record.difficulty for g in groups} == {1}
    groups, m = sampler.next_batch(ctx(rollout, step=4, total_steps=10, prompts_per_step=6))
    assert m["difficulty_target"] == pytest.approx(2.0)  # 1 + 3 * 3/9
    assert {g.record.difficulty for g in groups} <= {1, 2}
    groups, m = sampler.next_batch(ctx(rollout, step=10, total_steps=10, prompts_per_step=40))
    assert m["difficulty_target"] == 4.0 and {g.record.difficulty for g in groups} == {1, 2, 3, 4}


def test_window_mode_trains_on_a_moving_band():
    sampler = SAMPLERS.build("curriculum", {"mode": "window", "width": 0.4, "ramp": 0.5}, prompts=leveled_split(),
                             seed=0)
    rollout = RewardByRecord(lambda r: [1, 0])
    _, m = sampler.next_batch(ctx(rollout, step=1, total_steps=11))
    groups, m = sampler.next_batch(ctx(rollout, step=6, total_steps=11))  # ramp done at step 6
    assert m["difficulty_target"] == 4.0 and {g.record.difficulty for g in groups} == {4}
    groups, m = sampler.next_batch(ctx(rollout, step=3, total_steps=11))  # target 1 + 3 * 2/5 = 2.2
    assert {g.record.difficulty for g in groups} == {2}


def test_curriculum_needs_difficulty():
    with pytest.raises(ValueError, match="difficulty"):
        SAMPLERS.build("curriculum", {}, prompts=[TaskRecord("a", "a")], seed=0)


# -- DRIVE hard focus -------------------------------------------------------------------------------------


def test_hard_focus_retains_the_hardest_prompts():
    split = [TaskRecord(f"p{i}", "q") for i in range(4)]
    rates = {"p0": [1, 1, 1, 1], "p1": [1, 0, 0, 0], "p2": [1, 1, 0, 0], "p3": [0, 0, 0, 0]}
    rollout = RewardByRecord(rates)
    sampler = SAMPLERS.build("hard_focus", {"pool_size": 4, "keep_frac": 0.5, "phase_steps": 1},
                             prompts=split, seed=0)
    _, m = sampler.next_batch(ctx(rollout, step=1, prompts_per_step=4))
    assert m["pool_size"] == 4
    groups, m = sampler.next_batch(ctx(rollout, step=2, prompts_per_step=1))
    assert m["pool_size"] == 2
    assert sorted(split[i].id for i in sampler.pool) == ["p1", "p3"]  # pass rates 0.25 and 0
    state = sampler.state_dict()
    groups, _ = sampler.next_batch(ctx(rollout, step=3, prompts_per_step=1))
    assert [split[i].id for i in sampler.pool] == ["p3"]  # half of 2, the floor min_pool = prompts_per_step = 1
    other = SAMPLERS.build("hard_focus", {"pool_size": 4, "keep_frac": 0.5, "phase_steps": 1}, prompts=split, seed=0)
    other.load_state_dict(state)
    g2, _ = other.next_batch(ctx(rollout, step=3, prompts_per_step=1))
    assert [g.record.id for g in g2] == [g.record.id for g in groups]


# -- one-shot RLVR ----------------------------------------------------------------------------------------


def test_one_shot_repeats_one_example_by_index_or_id():
    split = [TaskRecord(f"p{i}", "q") for i in range(5)]
    rollout = RewardByRecord(lambda r: [1, 0])
    sampler = SAMPLERS.build("one_shot", {"index": 3}, prompts=split, seed=0)
    groups, m = sampler.next_batch(ctx(rollout, prompts_per_step=3))
    assert [g.record.id for g in groups] == ["p3"] * 3 and m["example_pass_rate"] == 0.5
    sampler = SAMPLERS.build("one_shot", {"id": "p1"}, prompts=split, seed=0)
    assert sampler.next_batch(ctx(rollout, step=7))[0][0].record.id == "p1"
    with pytest.raises(ValueError, match="sampling.id"):
        SAMPLERS.build("one_shot", {"id": "nope"}, prompts=split, seed=0)
    with pytest.raises(ValueError, match="sampling.index"):
        SAMPLERS.build("one_shot", {"index": 9}, prompts=split, seed=0)


# -- turn budgets -----------------------------------------------------------------------------------------


def test_turn_budget_schedules():
    staged = TURN_BUDGETS.build("scaling_inter_rl", {"start": 5, "increment": 5, "every": 100, "max_turns": 20})
    assert [staged.budget(t, 1000) for t in (0, 99, 100, 250, 10_000)] == [5, 5, 10, 15, 20]
    linear = TURN_BUDGETS.build("linear", {"start": 2, "end": 10})
    assert [linear.budget(t, 100) for t in (0, 50, 100, 200)] == [2, 6, 10, 10]
    assert TURN_BUDGETS.build("fixed", {"turns": 3}).budget(5, 10) == 3


# -- one-shot RLVR: the paper's choice of example, by historical accuracy variance --------------------------


def test_historical_accuracy_variance_by_hand():
    from rlvr.sampling.curriculum import historical_accuracy_variance

    rows = [  # prompt a: steps 1, 2 -> accuracies 0.5, 1.0: variance 0.0625
        {"step": 1, "prompt_id": "a", "correct": True}, {"step": 1, "prompt_id": "a", "correct": False},
        {"step": 2, "prompt_id": "a", "correct": True}, {"step": 2, "prompt_id": "a", "correct": True},
        # b: 0, 1, 0 -> mean 1/3, variance ((1/3)^2 * 2 + (2/3)^2) / 3 = 2/9
        {"step": 1, "prompt_id": "b", "correct": False}, {"step": 3, "prompt_id": "b", "correct": True},
        {"step": 5, "prompt_id": "b", "correct": False},
        {"step": 4, "prompt_id": "c", "correct": True},  # one step only: no variance
        {"step": 2, "prompt_id": "d", "correct": True}, {"step": 3, "prompt_id": "d", "correct": True},  # 0
        {"step": 3, "prompt_id": "e", "correct": None},  # unscored: ignored
    ]
    ranking = historical_accuracy_variance(rows)
    assert [r[0] for r in ranking] == ["b", "a", "d"]
    assert abs(ranking[0][1] - 2 / 9) < 1e-12 and ranking[0][2] == 3
    assert abs(ranking[1][1] - 0.0625) < 1e-12


def test_one_shot_sampler_takes_the_highest_variance_example_of_a_pilot(tmp_path):
    import json

    from rlvr.sampling.curriculum import OneShotSampler
    from rlvr.types import TaskRecord

    prompts = [TaskRecord(id=f"p{i}", question=f"q{i}", answer="1") for i in range(5)]
    rows = [{"step": s, "prompt_id": "p3", "correct": s % 2 == 0} for s in range(4)]
    rows += [{"step": s, "prompt_id": "p1", "correct": True} for s in range(4)]
    (tmp_path / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert OneShotSampler(prompts, history=str(tmp_path)).example.id == "p3"
    with pytest.raises(ValueError, match="sampling.history: .* does not exist"):
        OneShotSampler(prompts, history=str(tmp_path / "missing"))
    (tmp_path / "one.jsonl").write_text(json.dumps({"step": 1, "prompt_id": "p1", "correct": True}) + "\n")
    with pytest.raises(ValueError, match="two or more steps"):
        OneShotSampler(prompts, history=str(tmp_path / "one.jsonl"))
    with pytest.raises(ValueError, match="one of id and history"):
        OneShotSampler(prompts, id="p1", history=str(tmp_path))
