"""Ray mode on CPU: two rollout-worker actors, synchronous and asynchronous training, a worker dying mid-run."""

from __future__ import annotations

from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from rlvr.config import ConfigError, load_config  # noqa: E402
from rlvr.tracking import read_metrics  # noqa: E402
from rlvr.trainer.loop import train  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
GRPO = ROOT / "recipes" / "grpo.yaml"
COMMON = ["eval.before=false", "eval.after=false", "logging.progress=false", "checkpoint.every=0",
          "distributed.backend=ray", "distributed.rollout_workers=2", "distributed.num_cpus=2"]
TIMING = ("_s", "tokens_per_s", "samples_per_s", "idle_frac", "queue_depth")


@pytest.fixture(scope="module", autouse=True)
def ray_runtime():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _metrics(run: Path) -> list[dict]:
    return [{k: v for k, v in m.items() if not k.endswith(TIMING) and not k.startswith(("async/", "reward/correctness/"))}
            for m in read_metrics(run)]


@pytest.mark.slow
def test_two_rollout_workers_train_the_builtin_recipe_and_reward_rises(tmp_path):
    run = train(load_config(GRPO, [f"run.dir={tmp_path / 'run'}", *COMMON, "train.steps=20"]))
    metrics = read_metrics(run)
    first = sum(m["accuracy"] for m in metrics[:5]) / 5
    last = sum(m["accuracy"] for m in metrics[-5:]) / 5
    assert last > first + 0.1, (first, last)
    assert (run / "final" / "model.safetensors").is_file()


@pytest.mark.slow
def test_async_with_zero_staleness_reproduces_synchronous_training(tmp_path):
    small = ["train.steps=3", "train.prompts_per_step=4", "rollout.n=4", "rollout.max_new_tokens=48"]
    sync = train(load_config(GRPO, [f"run.dir={tmp_path / 'sync'}", *COMMON, *small]))
    asyn = train(load_config(GRPO, [f"run.dir={tmp_path / 'async'}", *COMMON, *small, "distributed.mode=async",
                                    "distributed.max_staleness=0", "distributed.off_policy_correction=none"]))
    assert _metrics(sync) == _metrics(asyn)
    assert all(m["async/staleness_0"] == 1.0 for m in read_metrics(asyn))


@pytest.mark.slow
def test_async_with_staleness_one_uses_one_step_old_samples_with_correction(tmp_path):
    run = train(load_config(GRPO, [f"run.dir={tmp_path / 'run'}", *COMMON, "train.steps=4",
                                   "train.prompts_per_step=4", "rollout.n=4", "rollout.max_new_tokens=48",
                                   "distributed.mode=async", "distributed.max_staleness=1"]))
    metrics = read_metrics(run)
    assert metrics[0]["async/staleness_0"] == 1.0          # the first batch is fresh
    assert all(m.get("async/staleness_1", 0.0) == 1.0 for m in metrics[1:])  # then one version behind
    assert all(m["grad_norm"] == m["grad_norm"] for m in metrics)


@pytest.mark.slow
def test_a_rollout_worker_killed_mid_run_is_replaced(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_FAULTS", "kill:worker:3")
    run = train(load_config(GRPO, [f"run.dir={tmp_path / 'run'}", *COMMON, "train.steps=4",
                                   "train.prompts_per_step=4", "rollout.n=4", "rollout.max_new_tokens=48"]))
    metrics = read_metrics(run)
    assert len(metrics) == 4
    assert metrics[-1]["distributed/rollout_worker_restarts"] == 1.0


def test_async_needs_ray_and_the_uniform_sampler():
    with pytest.raises(ConfigError, match="distributed.backend=ray"):
        load_config(GRPO, ["distributed.mode=async"])
