"""verifiers environments as rlvr tasks (task.name=verifiers): the dataset, the rubric as rewards, multi-turn
episodes through the agent rollout, and bad input (a rubric that raises, hangs or returns a non-number; an
environment that raises or hangs; a missing environment or package).

The environments are the fixture packages tests/fixtures/envs/rlvr_vf_arith (single-turn) and
rlvr_vf_arith_retry (multi-turn), written to verifiers 0.4's `verifiers.v1` API.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("verifiers.v1")

from agent_fakes import ScriptedEngine  # noqa: E402

from rlvr.config import AgentConfig, load_config  # noqa: E402
from rlvr.models.byte_tokenizer import build_byte_tokenizer  # noqa: E402
from rlvr.rewards import RewardFunction  # noqa: E402
from rlvr.rewards.ecosystem import VerifiersRubricReward  # noqa: E402
from rlvr.rollout import SamplingParams, agent_rollout_groups, rollout_groups  # noqa: E402
from rlvr.tasks import PromptRenderer, TaskError, build_task  # noqa: E402
from rlvr.tasks.ecosystem import EnvironmentPackageError  # noqa: E402
from rlvr.tasks.ecosystem import verifiers_task as vt  # noqa: E402

ENVS = Path(__file__).resolve().parents[1] / "fixtures" / "envs"


@pytest.fixture(scope="module", autouse=True)
def fixture_envs():
    sys.path.insert(0, str(ENVS))
    yield
    sys.path.remove(str(ENVS))


@pytest.fixture(scope="module")
def tok():
    return build_byte_tokenizer()


def arith(**args):
    params = {"env": "rlvr_vf_arith", "env_args": {"num_tasks": 40, **args.pop("env_args", {})}, "eval_size": 8}
    return build_task("verifiers", {**params, **args})


def retry(**env_args):
    return build_task("verifiers", {"env": "rlvr_vf_arith_retry", "env_args": {"num_tasks": 20, **env_args},
                                    "eval_size": 4})


def add(context: str) -> int:
    a, b = re.match(r"(\d+)\+(\d+)=", context).groups()
    return int(a) + int(b)


def answer_policy(text_for):
    """A scripted policy: `text_for(context)` is the reply, ended with EOS."""
    return lambda context: (text_for(context), "eos")


def test_dataset_becomes_records_with_held_out_split():
    task = arith()
    assert len(task.train) == 32 and len(task.heldout) == 8
    assert not {r.question for r in task.train} & {r.question for r in task.heldout}
    r = task.train[0]
    assert r.question.endswith("=") and r.answer == str(add(r.question))
    assert r.source == "verifiers:rlvr_vf_arith" and r.meta["vf_env"] == "rlvr_vf_arith"
    assert task.plain_prompt(r) == r.question
    assert task.chat_messages(r) == [{"role": "user", "content": r.question}]
    assert not task.multi_turn and retry().multi_turn


def test_rubric_scores_each_function_with_its_weight():
    task = arith()
    r = task.train[0]
    right = task.verify(f"1+2=3;3|A:{r.answer}", r)
    assert right.correct and right.reward == pytest.approx(1.1)  # correct_answer (x1.0) + has_answer_line (x0.1)
    assert right.reason == "correct_answer=1 (x1), has_answer_line=1 (x0.1)"
    assert right.meta["rubric"]["metrics"]["reply_chars"] > 0
    wrong = task.verify("A:0", r)
    assert not wrong.correct and wrong.reward == pytest.approx(0.1)
    assert task.correct_reward == "correct_answer"  # the heaviest function decides `correct`


@pytest.mark.parametrize(("mode", "reason"), [("raise", "RuntimeError: rubric exploded"),
                                              ("nan_string", "returned 'not a number', not a finite number"),
                                              ("hang", "timed out after 0.5s")])
def test_a_failing_rubric_function_scores_zero_with_the_reason(mode, reason):
    task = arith(env_args={"task": {"misbehave": mode}}, timeout=0.5)
    r = task.train[0]
    start = time.monotonic()
    result = task.verify(f"A:{r.answer}", r)
    assert time.monotonic() - start < 5
    assert result.reward == pytest.approx(0.1) and not result.correct  # the other function still counts
    assert f"correct_answer: {reason}" in result.reason


def test_a_hanging_sync_function_costs_its_timeout():
    task = arith(env_args={"task": {"misbehave": "hang_sync"}}, timeout=0.5)
    r = task.train[0]
    start = time.monotonic()
    result = task.verify(f"A:{r.answer}", r)
    assert time.monotonic() - start < 5
    assert result.reward == pytest.approx(1.0) and "has_answer_line: timed out after 0.5s" in result.reason


def test_rubric_reward_logs_each_function_and_sets_correct(tok):
    task = arith()
    records = list(task.train[:2])
    engine = ScriptedEngine(tok, answer_policy(lambda ctx: f"A:{add(ctx)}"))
    groups = rollout_groups(engine, PromptRenderer(task, tok), records, SamplingParams(n=2, max_new_tokens=32))
    reward = RewardFunction([("verifiers_rubric", 1.0, VerifiersRubricReward())])
    reward(groups, task)
    for s in (s for g in groups for s in g.samples):
        assert s.reward == pytest.approx(1.1) and s.correct
        assert s.meta["rubric"]["rewards"]["correct_answer"]["score"] == 1.0
    assert reward.last_metrics["reward/verifiers_rubric/correct_answer"] == 1.0
    assert reward.last_metrics["reward/verifiers_rubric/has_answer_line"] == 1.0
    assert reward.last_metrics["reward/verifiers_rubric/errors"] == 0.0


def test_rubric_reward_needs_a_verifiers_task(tok):
    reward = RewardFunction([("verifiers_rubric", 1.0, VerifiersRubricReward())])
    task = build_task("addition", {"digits": [2, 2], "eval_size": 5})
    engine = ScriptedEngine(tok, answer_policy(lambda ctx: "A:1"))
    groups = rollout_groups(engine, PromptRenderer(task, tok), list(task.train[:1]), SamplingParams(n=1))
    reward(groups, task)
    assert "set task.name=verifiers" in groups[0].samples[0].meta["reasons"]["verifiers_rubric"]


def multi_turn(tok, task, policy, records, **env):
    engine = ScriptedEngine(tok, policy)
    cfg = AgentConfig(environment={"name": "verifiers", **env}, max_turns=4, max_total_tokens=256)
    groups = agent_rollout_groups(engine, PromptRenderer(task, tok), task, records,
                                  SamplingParams(n=2, max_new_tokens=32), cfg)
    reward = RewardFunction([("verifiers_rubric", 1.0, VerifiersRubricReward())])
    reward(groups, task)
    return groups, engine, reward


def test_multi_turn_environment_runs_through_the_agent_rollout(tok):
    task = retry()
    records = list(task.train[:2])

    def policy(context):  # wrong first, right after "Wrong, try again."
        if "Wrong, try again." in context:
            return f"A:{add(context)}", "eos"
        return "A:0", "eos"

    groups, engine, reward = multi_turn(tok, task, policy, records)
    for g in groups:
        for s in g.samples:
            assert s.meta["turns"] == 2 and s.finish_reason == "stop"
            rubric = s.meta["env_episode"]["rubric"]
            assert rubric["rewards"]["solved"]["score"] == 1.0
            assert rubric["rewards"]["fewer_attempts"]["score"] == pytest.approx(0.5)
            assert s.reward == pytest.approx(1.25) and s.correct
            # token in, token out: each model turn is exactly what the engine returned; observations are masked
            (a0, b0), (a1, b1) = s.meta["turn_spans"]
            assert all(m == 1 for m in s.loss_mask[a0:b0] + s.loss_mask[a1:b1])
            assert all(m == 0 for m in s.loss_mask[b0:a1]) and b0 < a1
            assert "Wrong, try again." in tok.decode(s.response_ids[b0:a1])
    outputs = [ids for call in engine.calls for ids in call["outputs"]]
    spans = [s.response_ids[a:b] for g in groups for s in g.samples for a, b in s.meta["turn_spans"]]
    assert sorted(map(tuple, spans)) == sorted(map(tuple, outputs))
    assert reward.last_metrics["reward/verifiers_rubric/solved"] == 1.0


def test_stop_hook_and_turn_limit_end_the_episode(tok):
    task = retry()
    groups, _, _ = multi_turn(tok, task, lambda ctx: ("I give up", "eos"), list(task.train[:1]))
    s = groups[0].samples[0]
    assert s.meta["turns"] == 1 and s.reward == 0.0 and s.correct is False  # @vf.stop ended it after one reply
    long = retry(max_attempts=10)
    groups, _, _ = multi_turn(tok, long, lambda ctx: ("A:0", "eos"), list(long.train[:1]))
    s = groups[0].samples[0]
    assert s.meta["turns"] == 4 and s.meta["truncated"] == "max_turns" and s.reward == 0.0  # rlvr's max_turns


@pytest.mark.parametrize(("mode", "error"), [("raise", "RuntimeError: environment exploded"),
                                             ("hang", "did not answer within 1s")])
def test_a_failing_environment_ends_its_episode_scored_zero(tok, mode, error):
    task = retry(misbehave=mode)
    start = time.monotonic()
    groups, _, reward = multi_turn(tok, task, lambda ctx: ("A:0", "eos"), list(task.train[:2]), turn_timeout=1.0)
    assert time.monotonic() - start < 20
    for s in (s for g in groups for s in g.samples):
        assert error in s.meta["env_episode"]["error"]
        assert s.reward == 0.0 and error in s.meta["reasons"]["verifiers_rubric"]
    assert reward.failures  # counted as reward failures, and the run goes on


def test_missing_environment_lists_how_to_install():
    with pytest.raises(EnvironmentPackageError) as err:
        build_task("verifiers", {"env": "no_such_env_xyz"})
    text = str(err.value)
    assert "no verifiers environment 'no_such_env_xyz' is installed" in text
    assert "PYTHONPATH" in text and "textarena" in text  # the environments inside verifiers itself


def test_bad_env_args_name_the_fields():
    with pytest.raises(TaskError, match="num_tasks"):
        build_task("verifiers", {"env": "rlvr_vf_arith", "env_args": {"num_tasks": "many"}})


def test_missing_package_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "verifiers.v1", None)  # import verifiers.v1 -> ImportError
    monkeypatch.setattr(vt, "_LOADED", {})
    with pytest.raises(EnvironmentPackageError, match=r"pip install 'rlvr\[envs\]'"):
        build_task("verifiers", {"env": "rlvr_vf_arith"})


def test_the_config_accepts_the_documented_command():
    cfg = load_config(Path(__file__).resolve().parents[2] / "recipes" / "grpo.yaml",
                      ["task.name=verifiers", "task.env=rlvr_vf_arith", "task.env_args={num_tasks: 2000}",
                       "rewards=[{name: verifiers_rubric}]"])
    assert cfg.task.name == "verifiers" and cfg.task.params["env_args"] == {"num_tasks": 2000}


def test_default_correctness_reward_scores_the_rubric_in_the_worker_pool(tok):
    from rlvr.rewards import CorrectnessReward

    task = arith()
    engine = ScriptedEngine(tok, answer_policy(lambda ctx: f"A:{add(ctx)}"))
    groups = rollout_groups(engine, PromptRenderer(task, tok), list(task.train[:2]), SamplingParams(n=2))
    correctness = CorrectnessReward(workers=2, timeout=60)
    try:
        RewardFunction([("correctness", 1.0, correctness)])(groups, task)
    finally:
        correctness.close()
    assert all(s.reward == pytest.approx(1.1) and s.correct for g in groups for s in g.samples)
