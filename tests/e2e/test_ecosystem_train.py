"""Short real trainings of the built-in model through `rlvr.trainer.loop.train` on environments from the
ecosystem: a single-turn and a multi-turn verifiers environment, and an OpenEnv server rlvr starts.

They check the wiring end to end (the rubric's functions in the metrics, the episodes' rubric scores in the
rollouts, finite losses). That the built-in model learns the single-turn environment is measured by a longer run
in docs/environments.md, not here.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from rlvr.config import load_config
from rlvr.tracking import read_metrics
from rlvr.trainer.loop import train

pytestmark = pytest.mark.slow  # real trainings: about 30-90 s each on 2 loaded cores

ROOT = Path(__file__).resolve().parents[2]
ENVS = ROOT / "tests" / "fixtures" / "envs"
COMMON = ["train.steps=2", "train.prompts_per_step=2", "rollout.n=4", "rollout.max_new_tokens=64", "eval.before=false", "eval.after=false",
          "checkpoint.every=0", "logging.progress=false", "logging.rollouts_every=1"]


@pytest.fixture(autouse=True)
def fixture_envs():
    sys.path.insert(0, str(ENVS))
    yield
    sys.path.remove(str(ENVS))


def run(tmp_path, overrides):
    cfg = load_config(ROOT / "recipes" / "grpo.yaml", [f"run.dir={tmp_path / 'run'}", *COMMON, *overrides])
    run_dir = train(cfg)
    metrics = read_metrics(run_dir)
    assert len(metrics) == 2
    for m in metrics:
        for key in ("reward_mean", "pg_loss", "entropy", "grad_norm"):
            assert math.isfinite(m[key]), (m["step"], key, m[key])
    rollouts = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    return metrics, rollouts


def test_single_turn_verifiers_environment_trains(tmp_path):
    pytest.importorskip("verifiers.v1")
    metrics, _ = run(tmp_path, ["task.name=verifiers", "task.env=rlvr_vf_arith", "task.env_args={num_tasks: 200}",
                                "task.eval_size=20", "rewards=[{name: verifiers_rubric}]"])
    for m in metrics:
        assert 0 <= m["reward/verifiers_rubric/correct_answer"] <= 1
        assert m["reward/verifiers_rubric/has_answer_line"] > 0.5  # the built-in model writes `A:` lines
        assert m["reward_mean"] == pytest.approx(m["reward/verifiers_rubric/correct_answer"]
                                                 + 0.1 * m["reward/verifiers_rubric/has_answer_line"])


def test_multi_turn_verifiers_environment_trains(tmp_path):
    pytest.importorskip("verifiers.v1")
    metrics, rollouts = run(tmp_path, [
        "task.name=verifiers", "task.env=rlvr_vf_arith_retry", "task.env_args={num_tasks: 100}",
        "task.eval_size=10", "rewards=[{name: verifiers_rubric}]",
        "agent={environment: verifiers, max_turns: 2, max_total_tokens: 200}"])
    assert all("agent/turns_mean" in m and "reward/verifiers_rubric/solved" in m for m in metrics)
    text = json.dumps(rollouts)
    assert "env_episode" in text or "rubric" in text


def test_openenv_environment_trains(tmp_path):
    pytest.importorskip("openenv.core.env_server")
    from rlvr.rollout.ecosystem import openenv_env

    try:
        metrics, _ = run(tmp_path, [
            "task.name=openenv", "task.eval_size=4", "rewards=[{name: env_reward}]",
            "agent={environment: {name: openenv, server: 'rlvr_openenv_arith.server:app', start_timeout: 120}, "
            "max_turns: 2, max_total_tokens: 200}"])
    finally:
        openenv_env.stop_servers()
    assert all(0 <= m["reward/env_reward"] <= 1 and "agent/turns_mean" in m for m in metrics)
