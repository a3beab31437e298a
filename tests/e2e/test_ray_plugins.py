"""Ray workers import the run's plugins: a plugin's task is built by name inside a Ray reward worker and a Ray
rollout worker serves it, in a 2-step training (the controller never sends the plugin's code; each worker
imports the plugin file at start-up: without it the reward worker's `TASKS.get('doubling')` fails)."""

from __future__ import annotations

from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from rlvr.config import load_config  # noqa: E402
from rlvr.tracking import read_metrics  # noqa: E402
from rlvr.trainer.loop import train  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_ray_reward_and_rollout_workers_import_the_plugins(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert not ray.is_initialized()  # rlvr starts the runtime itself, with the plugins in its worker set-up
    cfg = load_config(ROOT / "examples" / "plugins" / "doubling.yaml", [
        f"run.dir={tmp_path / 'run'}", "train.steps=2", "train.prompts_per_step=2", "rollout.n=4",
        "rollout.max_new_tokens=64", "checkpoint.every=0", "eval.before=false", "eval.after=false",
        "logging.progress=false", "distributed.backend=ray", "distributed.num_cpus=2",
        "distributed.rollout_workers=1", "distributed.reward_workers=1"])
    try:
        metrics = read_metrics(train(cfg))
        # the remote reward worker (a fresh process, not a fork) built the `doubling` task by name, which only
        # the plugin registers, and verified every sample
        assert len(metrics) == 2 and all(m["reward/correctness/verify_calls_per_s"] > 0 for m in metrics)
    finally:
        ray.shutdown()
