"""Online filters (dynamic, difficulty_filter) and Reinforce-Ada against hand-computed cases, with a fake rollout
whose rewards are scripted per prompt (each prompt's rewards are consumed in order across calls)."""

from __future__ import annotations

import logging

import pytest
import torch

from rlvr.algorithms import ADVANTAGES
from rlvr.config import load_config
from rlvr.sampling import SAMPLERS, StepContext
from rlvr.sampling.adaptive import balanced_selection, global_baseline_advantages, pool_baselines
from rlvr.sampling.common import is_useful, pass_rate
from rlvr.types import Batch, Group, Sample, TaskRecord


class ScriptedRollout:
    """ctx.rollout stand-in: prompt i's k-th sample ever drawn gets rewards[i][k] (1.0 = correct)."""

    def __init__(self, rewards: dict[str, list[float]], tokens: int = 3):
        self.rewards = rewards
        self.drawn = {k: 0 for k in rewards}
        self.calls: list[tuple[list[str], int]] = []
        self.tokens = tokens

    def __call__(self, records, n):
        self.calls.append(([r.id for r in records], n))
        groups = []
        for r in records:
            samples = []
            for _ in range(n):
                k = self.drawn[r.id]
                self.drawn[r.id] += 1
                reward = self.rewards[r.id][k]
                samples.append(Sample(prompt_ids=[7, 8], response_ids=[1] * self.tokens, logprobs=[-0.5] * self.tokens,
                                      reward=reward, correct=reward > 0.5, meta={"draw": k}))
            groups.append(Group(record=r, prompt_ids=[7, 8], samples=samples))
        return groups


def records(n: int) -> list[TaskRecord]:
    return [TaskRecord(id=f"p{i}", question=str(i)) for i in range(n)]


def ctx(rollout, prompts_per_step=2, n=4, step=1) -> StepContext:
    return StepContext(step=step, prompts_per_step=prompts_per_step, n=n, rollout=rollout, total_steps=10)


def unshuffled(sampler):
    sampler.order.shuffle = False
    return sampler


ALL_RIGHT, ALL_WRONG, MIXED = [1.0] * 64, [0.0] * 64, [1.0, 0.0] * 32


def test_useful_and_pass_rate():
    g = ScriptedRollout({"p0": [1, 0, 0, 0]})(records(1), 4)[0]
    assert is_useful(g) and pass_rate(g) == 0.25
    assert not is_useful(ScriptedRollout({"p0": ALL_WRONG})(records(1), 4)[0])


def test_a_sample_excluded_for_a_non_finite_reward_does_not_make_a_group_useful():
    g = ScriptedRollout({"p0": ALL_WRONG})(records(1), 4)[0]
    g.samples[0].reward, g.samples[0].meta["non_finite_reward"] = 0.5, ["shape"]  # differs, but excluded
    assert not is_useful(g)
    del g.samples[0].meta["non_finite_reward"]
    assert is_useful(g)


# -- dynamic (DAPO) ----------------------------------------------------------------------------------------


def test_dynamic_drops_zero_variance_groups_and_resamples_until_full():
    script = {"p0": ALL_RIGHT, "p1": MIXED, "p2": ALL_WRONG, "p3": ALL_WRONG, "p4": MIXED, "p5": MIXED}
    rollout = ScriptedRollout(script)
    sampler = unshuffled(SAMPLERS.build("dynamic", {}, prompts=records(6), seed=0))
    groups, m = sampler.next_batch(ctx(rollout, prompts_per_step=2))
    # round 1: p0 (all right, dropped), p1 kept; round 2: p2, p3 dropped; round 3: p4 kept -> full
    assert [g.record.id for g in groups] == ["p1", "p4"]
    assert [c[0] for c in rollout.calls] == [["p0", "p1"], ["p2", "p3"], ["p4", "p5"]]
    assert m["groups_kept"] == 2 and m["useful_groups"] == 2
    assert m["groups_dropped"] == 4  # p0, p2, p3 and the surplus p5
    assert m["groups_surplus"] == 1
    assert m["samples_generated"] == 24 and m["tokens_generated"] == 72
    assert m["samples_per_useful_group"] == 12.0
    assert m["rounds"] == 3 and m["cap_hit"] == 0.0


def test_dynamic_cap_warns_naming_the_knob_and_trains_on_what_it_found(caplog):
    script = {"p0": ALL_WRONG, "p1": MIXED, "p2": ALL_WRONG, "p3": ALL_RIGHT}
    sampler = unshuffled(SAMPLERS.build("dynamic", {"max_rounds": 2}, prompts=records(4), seed=0))
    with caplog.at_level(logging.WARNING, logger="rlvr.sampling"):
        groups, m = sampler.next_batch(ctx(ScriptedRollout(script), prompts_per_step=2))
    assert [g.record.id for g in groups] == ["p1"]
    assert "sampling.max_rounds" in caplog.text
    assert m["cap_hit"] == 1.0 and m["groups_kept"] == 1 and m["groups_dropped"] == 3


def test_dynamic_cap_with_nothing_useful_falls_back_to_dropped_groups(caplog):
    script = {f"p{i}": ALL_WRONG for i in range(4)}
    sampler = unshuffled(SAMPLERS.build("dynamic", {"max_rounds": 2}, prompts=records(4), seed=0))
    with caplog.at_level(logging.WARNING, logger="rlvr.sampling"):
        groups, m = sampler.next_batch(ctx(ScriptedRollout(script), prompts_per_step=2))
    assert [g.record.id for g in groups] == ["p0", "p1"]
    assert m["useful_groups"] == 0 and m["groups_dropped"] == 2
    assert m["samples_per_useful_group"] == 16.0  # 16 samples, max(useful, 1) = 1


def test_dynamic_fill_with_dropped_keeps_the_batch_size():
    script = {"p0": ALL_WRONG, "p1": MIXED, "p2": ALL_WRONG, "p3": ALL_RIGHT}
    sampler = unshuffled(SAMPLERS.build("dynamic", {"max_rounds": 1, "fill_with_dropped": True},
                                        prompts=records(4), seed=0))
    groups, m = sampler.next_batch(ctx(ScriptedRollout(script), prompts_per_step=2))
    assert [g.record.id for g in groups] == ["p1", "p0"]
    assert m["useful_groups"] == 1 and m["groups_kept"] == 2


def test_round_prompts_sets_the_generation_batch():
    script = {f"p{i}": MIXED for i in range(8)}
    rollout = ScriptedRollout(script)
    sampler = unshuffled(SAMPLERS.build("dynamic", {"round_prompts": 3}, prompts=records(8), seed=0))
    groups, m = sampler.next_batch(ctx(rollout, prompts_per_step=2))
    assert rollout.calls == [(["p0", "p1", "p2"], 4)]
    assert len(groups) == 2 and m["groups_surplus"] == 1


# -- difficulty filter ------------------------------------------------------------------------------------


def test_difficulty_filter_keeps_pass_rates_inside_the_band():
    script = {"p0": [1, 1, 1, 0] * 16,   # 0.75: kept (inclusive)
              "p1": [1, 0, 0, 0] * 16,   # 0.25: kept
              "p2": [1, 1, 1, 1] * 16,   # 1.0: dropped
              "p3": [1, 0, 0, 0] * 16}
    sampler = unshuffled(SAMPLERS.build("difficulty_filter", {"low": 0.3, "high": 0.8},
                                        prompts=records(4), seed=0))
    groups, m = sampler.next_batch(ctx(ScriptedRollout(script), prompts_per_step=1))
    assert [g.record.id for g in groups] == ["p0"]
    sampler = unshuffled(SAMPLERS.build("difficulty_filter", {"low": 0.25, "high": 0.75},
                                        prompts=records(4), seed=0))
    groups, m = sampler.next_batch(ctx(ScriptedRollout(script), prompts_per_step=2))
    assert [g.record.id for g in groups] == ["p0", "p1"]
    assert m["pass_rate_mean"] == pytest.approx(0.5)


def test_difficulty_filter_band_must_be_ordered():
    with pytest.raises(ValueError, match="sampling.low"):
        SAMPLERS.build("difficulty_filter", {"low": 0.8, "high": 0.2}, prompts=records(2), seed=0)


# -- Reinforce-Ada ----------------------------------------------------------------------------------------


def test_balanced_selection():
    P = [Sample([0], [1], reward=1.0) for _ in range(5)]
    N = [Sample([0], [1], reward=0.0) for _ in range(5)]
    assert [s.reward for s in balanced_selection(P, N, 4)] == [1, 1, 0, 0]
    assert [s.reward for s in balanced_selection(P[:1], N, 4)] == [1, 0, 0, 0]
    assert [s.reward for s in balanced_selection(P, N[:1], 4)] == [1, 1, 1, 0]
    assert [s.reward for s in balanced_selection([], N, 4)] == [0, 0, 0, 0]
    assert len(balanced_selection(P[:1], N[:1], 4)) == 2  # everything there is
    assert [s.reward for s in balanced_selection(P, N, 5)] == [1, 1, 0, 0, 0]


def test_reinforce_ada_balanced_exit_and_global_statistics():
    # n = 4 (2 right + 2 wrong to exit), 4 samples per round, at most 3 rounds.
    script = {
        "p0": [1, 0, 1, 0] + [9] * 60,                  # exits after round 1
        "p1": [0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0],      # 1 right after round 2, 2 right after round 3: exits
        "p2": [1] * 12,                                 # never exits: fallback, all positive
    }
    rollout = ScriptedRollout(script)
    sampler = unshuffled(SAMPLERS.build("reinforce_ada", {"round_n": 4, "max_rounds": 3}, prompts=records(3),
                                        seed=0))
    groups, m = sampler.next_batch(ctx(rollout, prompts_per_step=3, n=4))
    assert [c for c in rollout.calls] == [(["p0", "p1", "p2"], 4), (["p1", "p2"], 4), (["p1", "p2"], 4)]
    by_id = {g.record.id: g for g in groups}
    assert [s.meta["draw"] for s in by_id["p0"].samples] == [0, 2, 1, 3]
    assert [s.meta["draw"] for s in by_id["p1"].samples] == [6, 8, 0, 1]  # first 2 positives, first 2 negatives
    assert [s.reward for s in by_id["p2"].samples] == [1, 1, 1, 1]
    s1 = by_id["p1"].samples[0].meta
    assert s1["prompt_samples"] == 12 and s1["prompt_positives"] == 2
    assert s1["prompt_mean_reward"] == pytest.approx(2 / 12) == s1["baseline"]
    assert s1["prompt_std_reward"] == pytest.approx(torch.tensor([1.0] * 2 + [0.0] * 10).std().item())
    assert by_id["p0"].samples[0].meta["prompt_mean_reward"] == 0.5
    assert m["prompts_finished"] == 2 and m["prompts_unfinished"] == 1
    assert m["samples_generated"] == 12 + 8 + 8
    assert m["samples_discarded"] == 28 - 12
    assert m["useful_groups"] == 2 and m["samples_per_useful_group"] == 14.0
    assert m["mean_retire_round"] == pytest.approx((1 + 3) / 2)


def test_reinforce_ada_leaves_samples_with_a_non_finite_reward_out_of_its_pools():
    class WithNaN(ScriptedRollout):
        def __call__(self, records, n):
            groups = super().__call__(records, n)
            for s in (s for g in groups for s in g.samples if s.reward != s.reward):
                s.reward, s.meta["non_finite_reward"] = 0.0, ["shape"]  # as RewardFunction leaves it
            return groups

    nan = float("nan")
    rollout = WithNaN({"p0": [1, nan, nan, 1, 0, nan, 0, 1] + [0] * 8})
    sampler = unshuffled(SAMPLERS.build("reinforce_ada", {"round_n": 4, "max_rounds": 3}, prompts=records(1),
                                        seed=0))
    groups, _ = sampler.next_batch(ctx(rollout, prompts_per_step=1, n=4))
    assert rollout.calls == [(["p0"], 4), (["p0"], 4)]  # round 1 had one negative only: the NaNs are not negatives
    assert [s.meta["draw"] for s in groups[0].samples] == [0, 3, 4, 6]
    meta = groups[0].samples[0].meta
    assert meta["prompt_samples"] == 5 and meta["prompt_mean_reward"] == pytest.approx(3 / 5)  # 1, 1, 0, 0, 1


def test_reinforce_ada_positive_exit_stops_at_the_first_correct_answer():
    script = {"p0": [0, 0, 0, 0, 0, 1, 0, 0] + [0] * 8, "p1": [1, 0, 0, 0] + [0] * 12}
    rollout = ScriptedRollout(script)
    sampler = unshuffled(SAMPLERS.build("reinforce_ada", {"exit_rule": "positive", "round_n": 4},
                                        prompts=records(2), seed=0))
    groups, m = sampler.next_batch(ctx(rollout, prompts_per_step=2, n=4))
    assert rollout.calls == [(["p0", "p1"], 4), (["p0"], 4)]
    assert [s.reward for s in groups[0].samples] == [1, 0, 0, 0]  # both signs kept
    assert m["prompts_finished"] == 2


def test_global_baseline_advantage_hand_computed():
    # p1 above: kept rewards [1, 1, 0, 0], pool mean 1/6: A = r - 1/6 (no std division, the paper's default)
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.0])
    mean, std = torch.full((4,), 1 / 6), torch.full((4,), 0.3892)
    adv = global_baseline_advantages(rewards, mean, std)
    assert torch.allclose(adv, torch.tensor([5 / 6, 5 / 6, -1 / 6, -1 / 6]))
    adv = global_baseline_advantages(rewards, mean, std, norm_by_std=True, eps=0.0)
    assert torch.allclose(adv, torch.tensor([5 / 6, 5 / 6, -1 / 6, -1 / 6]) / 0.3892)
    # the registered estimator (today's inputs: the kept group only): mean 1/2
    est = ADVANTAGES.bind("reinforce_ada", {})
    assert torch.allclose(est(rewards, torch.zeros(4, dtype=torch.long)), torch.tensor([0.5, 0.5, -0.5, -0.5]))


def test_pool_baselines_follow_batch_row_order():
    g1 = Group(TaskRecord("a", "a"), [0], [Sample([0], [1], reward=1.0, meta={"prompt_mean_reward": 0.1,
                                                                                  "prompt_std_reward": 0.3}),
                                           Sample([0], [1], reward=0.0, meta={"prompt_mean_reward": 0.1,
                                                                              "prompt_std_reward": 0.3})])
    g2 = Group(TaskRecord("b", "b"), [0], [Sample([0], [1], reward=1.0), Sample([0], [1], reward=0.0)])
    mean, std = pool_baselines([g1, g2])
    assert mean.tolist() == pytest.approx([0.1, 0.1, 0.5, 0.5])
    assert len(Batch.from_groups([g1, g2], pad_id=0)) == 4


def test_samplers_load_from_config_with_knobs():
    cfg = load_config(None, ["sampling={name: reinforce_ada, exit_rule: positive, round_n: 2}",
                             "algorithm.advantage.name=reinforce_ada"])
    assert cfg.sampling.name == "reinforce_ada" and cfg.sampling.params["round_n"] == 2
    from rlvr.config import ConfigError
    with pytest.raises(ConfigError, match="max_round"):
        load_config(None, ["sampling={name: dynamic, max_round: 3}"])


def test_dynamic_sampling_on_accuracy_ignores_shaping_differences():
    """All-correct groups whose rewards differ only by a shaping term (e.g. overlong) are dropped with
    metric accuracy, kept with the default metric reward."""
    from rlvr.sampling.filters import DynamicSampler
    from rlvr.types import Group, Sample, TaskRecord

    rec = TaskRecord(id="p", question="q", answer="1")
    samples = [Sample(prompt_ids=[1], response_ids=[2], reward=r, correct=True) for r in (1.0, 0.8)]
    group = Group(record=rec, prompt_ids=[1], samples=samples)
    assert DynamicSampler([rec]).keep(group)
    assert not DynamicSampler([rec], metric="accuracy").keep(group)
    samples[1].correct = False
    assert DynamicSampler([rec], metric="accuracy").keep(group)
