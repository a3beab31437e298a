"""OpenEnv environments through rlvr's agent rollout (agent.environment=openenv): a server rlvr starts on
127.0.0.1 (the fixture tests/fixtures/envs/rlvr_openenv_arith, written to OpenEnv's server API), the same server
given by URL, and bad input (a reset that fails, a step that raises or times out, a non-number reward)."""

from __future__ import annotations

import re
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("openenv.core.env_server")

from agent_fakes import ScriptedEngine  # noqa: E402

from rlvr.config import AgentConfig  # noqa: E402
from rlvr.models.byte_tokenizer import build_byte_tokenizer  # noqa: E402
from rlvr.rewards import RewardFunction  # noqa: E402
from rlvr.rewards.agent import EnvironmentReward  # noqa: E402
from rlvr.rollout import SamplingParams, agent_rollout_groups  # noqa: E402
from rlvr.rollout.ecosystem import openenv_env  # noqa: E402
from rlvr.tasks import PromptRenderer, build_task  # noqa: E402

ENVS = Path(__file__).resolve().parents[1] / "fixtures" / "envs"
SERVER = "rlvr_openenv_arith.server:app"


@pytest.fixture(scope="module")
def server():
    """The fixture server, started by rlvr (once for the module) on 127.0.0.1."""
    sys.path.insert(0, str(ENVS))
    url = openenv_env.server_url(SERVER, start_timeout=120)
    yield url
    openenv_env.stop_servers()
    sys.path.remove(str(ENVS))


@pytest.fixture(scope="module")
def tok():
    return build_byte_tokenizer()


def add(text: str) -> int:
    a, b = re.search(r"(\d+)\+(\d+)=", text).groups()
    return int(a) + int(b)


def episodes(tok, policy, records=None, n=2, **env):
    task = build_task("openenv", {"train_size": 6, "eval_size": 2})
    cfg = AgentConfig(environment={"name": "openenv", **env}, max_turns=3, max_total_tokens=256, tool_workers=4)
    groups = agent_rollout_groups(ScriptedEngine(tok, policy), PromptRenderer(task, tok), task,
                                  records or list(task.train[:3]), SamplingParams(n=n, max_new_tokens=32), cfg)
    reward = RewardFunction([("env_reward", 1.0, EnvironmentReward())])
    reward(groups, task)
    return groups


def test_server_started_by_rlvr_plays_episodes(server, tok):
    def policy(context):  # wrong first, right after the server's "Wrong, try again."
        return (f"A:{add(context)}" if "Wrong" in context else "A:0"), "eos"

    groups = episodes(tok, policy, server=SERVER)
    for g in groups:
        for s in g.samples:
            assert s.meta["turns"] == 2 and s.reward == 1.0 and s.meta["turn_rewards"] == [0.0, 1.0]
            (a0, b0), (a1, b1) = s.meta["turn_spans"]
            assert "Wrong, try again." in tok.decode(s.response_ids[b0:a1]) and set(s.loss_mask[b0:a1]) == {0}
    # the record's seed fixes the problem: both samples of a group got the same prompt from reset
    assert all(len({s.prompt_ids and tuple(s.prompt_ids) for s in g.samples}) == 1 for g in groups)
    assert len({tuple(g.prompt_ids) for g in groups}) == 3


def test_server_given_by_url(server, tok):
    groups = episodes(tok, lambda ctx: (f"A:{add(ctx)}", "eos"), url=server)
    assert all(s.reward == 1.0 and s.meta["turns"] == 1 for g in groups for s in g.samples)


def test_a_step_that_raises_or_hangs_ends_the_episode_scored_zero(server, tok):
    task = build_task("openenv", {"train_size": 2, "eval_size": 1, "reset_kwargs": {"mode": "raise"}})
    groups = episodes(tok, lambda ctx: ("A:0", "eos"), records=list(task.train), n=1, url=server)
    for s in (s for g in groups for s in g.samples):
        assert s.reward == 0.0 and "environment exploded" in s.meta["env_episode"]["error"]
    task = build_task("openenv", {"train_size": 1, "eval_size": 1, "reset_kwargs": {"mode": "slow", "delay": 30}})
    start = time.monotonic()
    groups = episodes(tok, lambda ctx: ("A:0", "eos"), records=list(task.train), n=1, url=server, timeout=2)
    assert time.monotonic() - start < 25
    s = groups[0].samples[0]
    assert s.reward == 0.0 and "step failed" in s.meta["env_episode"]["error"]


def test_an_unreachable_server_scores_zero_with_the_reason(tok):
    groups = episodes(tok, lambda ctx: ("A:0", "eos"), n=1, url="http://127.0.0.1:9", timeout=5)
    for s in (s for g in groups for s in g.samples):
        assert s.reward == 0.0 and s.meta["env_episode"]["error"].startswith("reset failed: ")


def test_non_number_reward_is_zero_with_the_reason():
    env = openenv_env.OpenEnvEnvironment(url="http://127.0.0.1:9")
    assert env._reward("1.0") == 0.0 and env._reward(float("nan")) == 0.0
    assert env._reward(None) == 0.0 and env._reward(True) == 1.0 and env._reward(2) == 2.0
    assert len(env._reward_errors) == 2 and "'1.0', not a finite number" in env._reward_errors[0]


def test_observation_text_and_config_errors():
    env = openenv_env.OpenEnvEnvironment(url="http://x", observation_field="board")
    assert env._text({"board": "X.O"}) == "X.O"
    with pytest.raises(KeyError, match="has no field 'board'"):
        env._text({"text": "hi"})
    auto = openenv_env.OpenEnvEnvironment(url="http://x")
    assert auto._text({"score": 1, "message": "hello"}) == "hello" and auto._text({"n": 1}) == '{"n": 1}'
    with pytest.raises(ValueError, match="exactly one of url"):
        openenv_env.OpenEnvEnvironment()
    with pytest.raises(ValueError, match="exactly one of url"):
        openenv_env.OpenEnvEnvironment(url="http://x", server=SERVER)


def test_a_server_that_does_not_start_says_why(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the server's log file goes
    with pytest.raises(RuntimeError, match="exited with code") as err:
        openenv_env.OpenEnvServer("no_such_module_xyz:app", start_timeout=60)
    assert "no_such_module_xyz" in str(err.value)  # uvicorn's own message, read from the log before it is removed
    assert list(tmp_path.iterdir()) == []  # no log file left behind


def test_missing_openenv_names_the_install(monkeypatch):
    from rlvr.tasks.ecosystem import EnvironmentPackageError

    monkeypatch.setitem(sys.modules, "openenv.core", None)
    with pytest.raises(EnvironmentPackageError, match=r"pip install 'rlvr\[envs\]' && pip install --no-deps"):
        openenv_env.OpenEnvEnvironment(url="http://x")
