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


@pytest.mark.slow
def test_weights_broadcast_over_a_process_group_train_exactly_like_the_object_store(tmp_path):
    small = ["train.steps=3", "train.prompts_per_step=4", "rollout.n=4", "rollout.max_new_tokens=48"]
    store = train(load_config(GRPO, [f"run.dir={tmp_path / 'store'}", *COMMON, *small]))
    group = train(load_config(GRPO, [f"run.dir={tmp_path / 'group'}", *COMMON, *small,
                                     "distributed.weight_sync=broadcast"]))
    key = "distributed/weight_broadcast"
    assert [m[key] for m in read_metrics(store)] == [0.0] * 3
    assert [m[key] for m in read_metrics(group)] == [1.0] * 3  # every sync went over the process group

    def rest(run: Path) -> list[dict]:
        return [{k: v for k, v in m.items() if k != key} for m in _metrics(run)]

    assert rest(store) == rest(group)


@pytest.mark.slow
def test_a_worker_replaced_under_broadcast_gets_weights_through_the_object_store(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_FAULTS", "kill:worker:3")
    run = train(load_config(GRPO, [f"run.dir={tmp_path / 'run'}", *COMMON, "train.steps=4", "train.mini_batches=1",
                                   "train.prompts_per_step=4", "rollout.n=4", "rollout.max_new_tokens=48",
                                   "distributed.weight_sync=broadcast"]))
    metrics = read_metrics(run)
    assert len(metrics) == 4
    assert metrics[-1]["distributed/rollout_worker_restarts"] == 1.0
    assert all(m["approx_kl_old"] < 1e-6 for m in metrics)  # every worker sampled from the current weights
    assert metrics[0]["distributed/weight_broadcast"] == 1.0 and metrics[-1]["distributed/weight_broadcast"] == 0.0


def test_async_needs_ray_and_the_uniform_sampler():
    with pytest.raises(ConfigError, match="distributed.backend=ray"):
        load_config(GRPO, ["distributed.mode=async"])


@pytest.mark.slow
def test_reward_and_reference_workers_train_exactly_like_the_controller(tmp_path):
    """Verifier actors and a reference-model actor change where the work runs, not the numbers."""
    small = ["train.steps=2", "train.prompts_per_step=4", "rollout.n=4", "rollout.max_new_tokens=48",
             "algorithm.kl_coef=0.05", "distributed.cpus_per_rollout_worker=0.5"]
    here = train(load_config(GRPO, [f"run.dir={tmp_path / 'here'}", *COMMON, *small]))
    actors = train(load_config(GRPO, [f"run.dir={tmp_path / 'actors'}", *COMMON, *small,
                                      "distributed.reward_workers=2", "distributed.cpus_per_reward_worker=0.25",
                                      "distributed.reference_worker=true",
                                      "distributed.cpus_per_reference_worker=0.25"]))
    assert _metrics(here) == _metrics(actors)
    assert all(m["kl"] != 0 for m in read_metrics(actors)[1:])  # the reference was used
    assert all(m["reward/correctness/reward_worker_restarts"] == 0 for m in read_metrics(actors))


def test_a_dead_reward_worker_is_replaced_and_results_match_local_verification():
    from rlvr.distributed.ray_groups import RayVerifierPool
    from rlvr.tasks import build_task

    cfg = load_config(GRPO, ["distributed.backend=ray", "distributed.reward_workers=2",
                             "distributed.cpus_per_reward_worker=0.25"])
    task = build_task(cfg.task.name, cfg.task.params)
    records = list(task.train[:6])
    pairs = [(f"answer: {r.answer if i % 2 else 'nonsense'}", r) for i, r in enumerate(records)]
    expected = [(v.reward, v.correct) for v in (task.verify(t, r) for t, r in pairs)]
    pool = RayVerifierPool(cfg, processes=1, timeout=5.0)
    try:
        assert [(v.reward, v.correct) for v in pool.map(pairs)] == expected
        assert any(c for _, c in expected) and not all(c for _, c in expected)
        ray.kill(pool.actors[0])  # a node or process dying
        assert [(v.reward, v.correct) for v in pool.map(pairs)] == expected
        stats = pool.stats()
        # the killed actor's counters (its 3 calls of the first batch) died with it
        assert stats["actor_restarts"] == 1 and stats["calls"] == 2 * len(pairs) - 3
    finally:
        pool.close()


def test_an_actor_the_cluster_cannot_place_stops_with_the_knob_to_turn():
    from rlvr.distributed.ray_groups import RewardWorker, start_actor

    with pytest.raises(RuntimeError, match="Lower distributed.cpus_per_reward_worker"):
        start_actor(ray, RewardWorker, (None, "addition", {}, 1, 5.0), num_cpus=64, num_gpus=0, what="reward worker",
                    knob="distributed.cpus_per_reward_worker", timeout=2.0)


def test_worker_groups_need_the_ray_backend():
    with pytest.raises(ConfigError, match="distributed.reward_workers: reward workers are Ray actors"):
        load_config(GRPO, ["distributed.reward_workers=2"])
    with pytest.raises(ConfigError, match="distributed.reference_worker: the reference worker is a Ray actor"):
        load_config(GRPO, ["distributed.reference_worker=true"])
    with pytest.raises(ConfigError, match="distributed.weight_sync: only Ray rollout workers receive weights"):
        load_config(GRPO, ["distributed.weight_sync=broadcast"])
    with pytest.raises(ConfigError, match="the reward workers run the `correctness` verifier"):
        load_config(GRPO, ["distributed.backend=ray", "distributed.reward_workers=1",
                           "rewards=[{name: format}]"])


def test_the_reference_worker_matches_a_local_reference_and_survives_a_kill():
    import torch

    from rlvr.distributed.ray_groups import RemoteReference
    from rlvr.models import load_causal_lm
    from rlvr.models.logprobs import forward_tokens
    from rlvr.types import Batch, Group, Sample, TaskRecord

    cfg = load_config(GRPO, ["distributed.backend=ray", "distributed.reference_worker=true",
                             "distributed.cpus_per_reference_worker=0.25", "train.micro_batch_size=2"])
    samples = [Sample(prompt_ids=[5, 6, 7], response_ids=[8, 9, 10, 11][: 2 + i], reward=0.0) for i in range(3)]
    batch = Batch.from_groups([Group(TaskRecord(id="0", question=""), [5, 6, 7], samples)], pad_id=0)
    local = forward_tokens(load_causal_lm(cfg.model.path), batch.input_ids, batch.attention_mask, batch.mask).logprobs
    ref = RemoteReference(cfg, str(cfg.model.path))
    try:
        torch.testing.assert_close(ref.token_logprobs(batch, 1.0), local)
        ref.load_state_dict({k: v * 0 for k, v in load_causal_lm(cfg.model.path).state_dict().items()})  # a reset
        ray.kill(ref.actor)
        zeroed = ref.token_logprobs(batch, 1.0)  # a new actor, given the reset weights again
        assert ref.restarts == 1 and not torch.allclose(zeroed, local)
        assert all(float(v.abs().sum()) == 0 for v in ref.state_dict().values() if v.is_floating_point())
    finally:
        ref.close()
