"""Process rewards: step scores on tokens, process-supervised GRPO, StepRAR/StepRVR and Trust-GRPO's reward."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import tensor as T

from rlvr.algorithms import ADVANTAGES
from rlvr.algorithms.advantages import group_normalized_advantages, process_grpo_advantages
from rlvr.algorithms.inputs import ADVANTAGE_INPUTS, call_with_inputs, check_inputs
from rlvr.config import ConfigError, load_config
from rlvr.config.schema import RewardSpec
from rlvr.rewards import REWARDS, RewardContext, RewardFunction
from rlvr.rewards.base import build_component
from rlvr.tasks.addition import AdditionTask, worked_solution
from rlvr.types import Batch, Group, Sample, TaskRecord

ROOT = Path(__file__).resolve().parents[2]
S3 = 1 / math.sqrt(3)  # |normalized 0| among step rewards {1, 0, 0}
R2 = 1 / math.sqrt(2)  # GRPO advantage of rewards {1, 0}


def close(actual, expected, atol=1e-5):
    torch.testing.assert_close(actual.to(torch.float64), T(expected, dtype=torch.float64), atol=atol, rtol=0)


def _inputs(step_rewards, step_mask, rewards=(1.0, 0.0), group_ids=(0, 0)):
    mask = T([[0, 1, 1, 1, 1]] * len(rewards), dtype=torch.float32)
    return {"rewards": T(rewards), "group_ids": T(group_ids), "mask": mask,
            "step_rewards": T(step_rewards, dtype=torch.float32), "step_mask": T(step_mask, dtype=torch.float32)}


# -- the estimator ---------------------------------------------------------------------------------------------


def test_process_grpo_is_registered_with_known_inputs():
    fn = ADVANTAGES.bind("process_grpo", {})
    assert check_inputs(fn, ADVANTAGE_INPUTS, "process_grpo") == []
    assert "arXiv:2402.03300" in ADVANTAGES.get("process_grpo").__doc__


def test_process_grpo_hand_computed():
    # sample A: steps ending at columns 2 (score 1) and 4 (score 0); sample B: one step ending at column 3 (0).
    # Group step rewards {1, 0, 0}: mean 1/3, unbiased std 1/sqrt(3) -> normalized 1 -> 2/sqrt(3), 0 -> -1/sqrt(3).
    inputs = _inputs([[0, 0, 1, 0, 0], [0, 0, 0, 0, 0]], [[0, 0, 1, 0, 1], [0, 0, 0, 1, 0]])
    process = process_grpo_advantages(**inputs, outcome_coef=0.0)
    close(process, [[0, S3, S3, -S3, -S3],  # 2/sqrt3 - 1/sqrt3 up to column 2, then only the last step
                     [0, -S3, -S3, -S3, 0]])  # nothing after B's last step
    both = process_grpo_advantages(**inputs)
    close(both, [[0, S3 + R2, S3 + R2, -S3 + R2, -S3 + R2], [0, -S3 - R2, -S3 - R2, -S3 - R2, -R2]])
    half = process_grpo_advantages(**inputs, outcome_coef=2.0, process_coef=0.5)
    close(half, [[0, S3 / 2 + 2 * R2, S3 / 2 + 2 * R2, -S3 / 2 + 2 * R2, -S3 / 2 + 2 * R2],
                 [0, -S3 / 2 - 2 * R2, -S3 / 2 - 2 * R2, -S3 / 2 - 2 * R2, -2 * R2]])


def test_process_grpo_edge_cases_no_step_one_step_all_equal():
    outcome = group_normalized_advantages(T([1.0, 0.0]), T([0, 0]))[:, None] * T([[0, 1, 1, 1, 1]] * 2)
    zeros = [[0] * 5] * 2
    no_steps = process_grpo_advantages(**_inputs(zeros, zeros))
    torch.testing.assert_close(no_steps, outcome)  # no step reward: exactly GRPO on the tokens
    one_step = process_grpo_advantages(**_inputs([[0, 0, 5, 0, 0], [0] * 5], [[0, 0, 1, 0, 0], [0] * 5]),
                                       outcome_coef=0.0)
    assert one_step.abs().max() == 0  # a single step is its own mean
    equal = process_grpo_advantages(**_inputs([[0, 0.5, 0, 0, 0.5], [0, 0, 0.5, 0, 0]],
                                              [[0, 1, 0, 0, 1], [0, 0, 1, 0, 0]]), outcome_coef=0.0)
    assert equal.abs().max() == 0  # all-equal step rewards carry no signal
    # groups are normalized separately: a lone group's steps do not leak into another
    two = process_grpo_advantages(**_inputs([[0, 1, 0, 0, 0], [0, 0, 0, 0, 0]], [[0, 1, 0, 0, 0], [0, 1, 0, 0, 0]],
                                            group_ids=(0, 1)), outcome_coef=0.0)
    assert two.abs().max() == 0


def test_excluded_rows_and_masked_positions():
    inputs = _inputs([[0, 0, 1, 0, 0], [0, 0, 0, 0, 0]], [[0, 0, 1, 0, 1], [0, 0, 0, 1, 0]])
    out = call_with_inputs(ADVANTAGES.bind("process_grpo", {}), inputs, "process_grpo")
    assert torch.isfinite(out).all() and (out[:, 0] == 0).all()


# -- the data protocol -------------------------------------------------------------------------------------------


def _sample(resp, **kw):
    return Sample(prompt_ids=[1, 2], response_ids=resp, logprobs=[-0.1] * len(resp), **kw)


def test_batch_carries_steps_only_when_some_sample_has_them():
    rec = TaskRecord(id="x", question="1+1")
    plain = Batch.from_groups([Group(rec, [1, 2], [_sample([3, 4, 5]), _sample([3])])], pad_id=0)
    assert plain.step_rewards is None and plain.step_mask is None  # the outcome-only path is unchanged
    stepped = Batch.from_groups([Group(rec, [1, 2], [_sample([3, 4, 5], step_rewards=[0.5, -1.0], step_ends=[0, 2]),
                                                     _sample([3])])], pad_id=0)
    close(stepped.step_rewards, [[0, 0, 0.5, 0, -1.0], [0, 0, 0, 0, 0]])
    close(stepped.step_mask, [[0, 0, 1, 0, 1], [0, 0, 0, 0, 0]])
    assert stepped.select([0]).step_mask.shape == (1, 5)


def test_sample_rejects_bad_steps():
    with pytest.raises(ValueError, match="both be set"):
        _sample([3, 4], step_rewards=[1.0])
    with pytest.raises(ValueError, match="increasing"):
        _sample([3, 4], step_rewards=[1.0, 1.0], step_ends=[1, 1])
    with pytest.raises(ValueError, match=r"in \[0, 2\)"):
        _sample([3, 4], step_rewards=[1.0], step_ends=[2])


# -- step rewards on the addition scratchpad -------------------------------------------------------------------


TASK = AdditionTask(eval_size=10)
REC = TaskRecord(id="r", question="4821+397", answer="5218", meta={"a": 4821, "b": 397})
GOOD, _ = worked_solution(4821, 397)  # 1+7=8;8|2+9=11;18|8+3+1=12;218|4+0+1=5;5218|A:5218
DROPPED = "1+7=8;8|2+9=11;18|8+3=11;118|4+0+1=5;5118|A:5118"  # carry dropped in column 3, then consistent


class CharTokenizer:
    """One token per character, like the built-in byte-level tokenizer on ASCII (without importing transformers)."""

    def encode(self, text):
        return [ord(c) for c in text]

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids)

    def batch_decode(self, batch, skip_special_tokens=True):
        return [self.decode(ids) for ids in batch]


def _group(texts, tok):
    samples = [Sample(prompt_ids=[0], response_ids=tok.encode(t), text=t) for t in texts]
    return Group(REC, [0], samples)


def test_key_steps_and_validity_of_the_addition_scratchpad():
    assert TASK.key_steps(REC) == ["1+7=8", "2+9=11", "8+3+1=12", "4+0+1=5"]
    assert [GOOD[a:b] for a, b in TASK.reasoning_steps(GOOD, REC)] == ["1+7=8;8", "2+9=11;18", "8+3+1=12;218",
                                                                        "4+0+1=5;5218"]
    assert TASK.step_validity(GOOD, REC) == ([1.0, 1.0, 1.0, 1.0], True)
    assert TASK.step_validity(DROPPED, REC) == ([1.0, 1.0, 0.0, 1.0], False)
    assert TASK.step_validity("A:5218", REC) == ([], False)
    assert TASK.step_validity("1+7=8;8|2+9=11;18|8+3+1=12;218|4+0+1=5;5218|A:5219", REC)[1] is False


def test_step_rewards_land_on_each_steps_last_token():
    tok = CharTokenizer()
    specs = [RewardSpec(name="correctness", weight=1.0, workers=0), RewardSpec(name="step_rar", weight=0.5),
             RewardSpec(name="step_rvr", weight=1.0, process_only=True)]
    fn = RewardFunction.from_config(specs, RewardContext(tokenizer=tok))
    group = _group([GOOD, DROPPED, "hello", "A:5218"], tok)
    fn([group], TASK)
    good, dropped, junk, bare = group.samples
    # StepRAR: 4/4 and 3/4 key steps (column 3's sum is not the reference's); StepRVR is process_only: logged, not in the reward
    assert good.rewards == {"correctness": 1.0, "step_rar": 1.0, "step_rvr": 1.0} and good.reward == 1.5
    assert dropped.rewards["step_rar"] == 0.75 and dropped.rewards["step_rvr"] == 0.0
    assert dropped.reward == pytest.approx(0.375)
    ends = [b - 1 for _, b in TASK.reasoning_steps(DROPPED, REC)]
    assert good.step_ends == [b - 1 for _, b in TASK.reasoning_steps(GOOD, REC)]
    assert good.step_rewards == [1.5] * 4  # 0.5 * rar + 1.0 * rvr on each step's last token
    assert dropped.step_ends == ends and dropped.step_rewards == [1.5, 1.5, 0.0, 1.5]
    assert junk.step_ends == [4] and junk.step_rewards == [0.0]  # one step, neither a key step nor valid
    assert bare.step_ends == [] and bare.step_rewards == []  # no steps: an empty list, not None
    batch = Batch.from_groups([group], pad_id=0)
    assert int(batch.step_mask.sum()) == 9


def test_without_a_step_reward_samples_carry_no_steps():
    tok = CharTokenizer()
    fn = RewardFunction.from_config([RewardSpec(name="correctness", workers=0)], RewardContext(tokenizer=tok))
    group = _group([GOOD, DROPPED], tok)
    fn([group], TASK)
    assert all(s.step_rewards is None and s.step_ends is None for s in group.samples)


def test_trust_thinking_hand_computed():
    tok = CharTokenizer()
    comp = build_component("trust_thinking", {"thinking": {"name": "step_rvr", "score": "fraction"}, "alpha": 0.3,
                                              "anneal_steps": 10.0}, RewardContext(tokenizer=tok), "test")
    # thinking (valid-step fraction): GOOD 1.0 (correct), DROPPED 0.75 (wrong): trusted, gamma = 1
    group = _group([GOOD, DROPPED], tok)
    for s in group.samples:
        s.policy_version = 5
    out = comp(group, TASK)
    anneal = math.exp(-0.5)
    assert [o.value for o in out] == pytest.approx([0.3 * anneal * 1.0, 0.3 * anneal * 0.75])
    # a wrong answer with tidier steps than the right one: mu_c = 0.75 < mu_w = 1 -> gamma = exp(-0.25)
    lucky = "1+7=8;8|2+9=11;18|8+3=11;118|4+0+1=5;5118|A:5218"  # right answer, broken steps (0.75)
    tidy = "1+7=8;8|2+9=11;18|8+3+1=12;218|4+0+1=5;5218|A:5218".replace("4+0+1=5;5218|A:5218", "4+0+1=5;5218|A:9")
    group = _group([lucky, tidy], tok)
    out = comp(group, TASK)
    gamma = math.exp(0.75 - 1.0)
    assert [o.value for o in out] == pytest.approx([0.3 * gamma * 0.75, 0.3 * gamma * 1.0])
    assert comp.metrics() == pytest.approx({"trust_mean": (1 + gamma) / 2, "trust_full_frac": 0.5})
    # all correct: nothing to compare, no thinking reward
    assert [o.value for o in comp(_group([GOOD, GOOD], tok), TASK)] == [0.0, 0.0]


# -- config --------------------------------------------------------------------------------------------------


def _error(overrides, recipe="recipes/grpo.yaml"):
    with pytest.raises(ConfigError) as info:
        load_config(ROOT / recipe, overrides)
    return str(info.value)


def test_config_errors_name_the_fix():
    assert "add a step reward" in _error(["algorithm.advantage.name=process_grpo"])
    assert "rewards[0].process_only" in _error(["rewards=[{name: correctness, process_only: true}]"])
    msg = _error(["task.name=guess_number"], "recipes/step_grpo.yaml")
    assert "reasoning_steps" in msg and "rewards[1]" in msg


@pytest.mark.parametrize("recipe", ["step_grpo", "trust_grpo"])
def test_recipes_load(recipe):
    cfg = load_config(ROOT / f"recipes/{recipe}.yaml", [])
    assert any(r.name in ("step_rar", "trust_thinking") for r in cfg.rewards)
    load_config(ROOT / "recipes/step_grpo.yaml", ["algorithm.advantage.name=process_grpo"])
    assert "step_rar" in REWARDS


# -- through the learner -------------------------------------------------------------------------------------


def test_learner_feeds_step_rewards_to_process_grpo_and_grpo_ignores_them(tiny_model_dir):
    from rlvr.config import Config
    from rlvr.learner.learner import Learner
    from rlvr.learner.step import record_advantages
    from rlvr.models import load_causal_lm

    model = load_causal_lm(tiny_model_dir)
    rec = TaskRecord(id="x", question="")
    a = Sample(prompt_ids=[5, 6], response_ids=[7, 8, 9, 10], logprobs=[-1.0] * 4, reward=1.0,
               step_rewards=[1.0, 0.0], step_ends=[1, 3])
    b = Sample(prompt_ids=[5, 6], response_ids=[7, 8, 9, 10], logprobs=[-1.0] * 4, reward=0.0,
               step_rewards=[0.0], step_ends=[2])
    groups = [Group(rec, [5, 6], [a, b])]

    def advantages(name, groups):
        cfg = Config.model_validate({"algorithm": {"advantage": {"name": name}}, "rollout": {"n": 2},
                                     "rewards": [{"name": "correctness"}, {"name": "step_rvr"}]})
        learner = Learner(model, cfg)
        batch, inputs = learner.prepare(Batch.from_groups(groups, pad_id=0))
        adv = learner.compute_advantages(batch, inputs)
        record_advantages(groups, adv, batch)
        return adv

    adv = advantages("process_grpo", groups)
    # the hand-computed case of test_process_grpo_hand_computed, shifted by the two prompt tokens
    close(adv[:, 2:], [[S3 + R2, S3 + R2, -S3 + R2, -S3 + R2], [-S3 - R2, -S3 - R2, -S3 - R2, -R2]])
    assert a.advantage == pytest.approx([S3 + R2, S3 + R2, -S3 + R2, -S3 + R2], abs=1e-5)
    with_steps = advantages("grpo", groups)
    for s in (a, b):
        s.step_rewards = s.step_ends = None
    torch.testing.assert_close(with_steps, advantages("grpo", groups), rtol=0, atol=0)


def test_rollouts_jsonl_records_the_steps(tmp_path):
    from rlvr.tracking import RolloutWriter
    from rlvr.tracking.rollouts import read_rollouts

    rec = TaskRecord(id="x", question="")
    samples = [_sample([3, 4, 5], step_rewards=[0.5, -1.0], step_ends=[0, 2]), _sample([3])]
    RolloutWriter(tmp_path, every=1, max_per_step=8).write(1, [Group(rec, [1, 2], samples)])
    rows = read_rollouts(tmp_path)
    assert rows[0]["steps"] == {"ends": [0, 2], "rewards": [0.5, -1.0]} and "steps" not in rows[1]
