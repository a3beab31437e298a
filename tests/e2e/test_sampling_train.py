"""One short real training per sampling family (wiring: the sampler, its metrics and any loss it pairs with
run inside the trainer, and every logged number is finite). Small on purpose: 2 steps, small batches."""

from __future__ import annotations

import math

import pytest

from rlvr.config import load_config
from rlvr.tracking import read_metrics
from rlvr.trainer.loop import train

pytestmark = pytest.mark.slow

BUILTIN = ["model.path=builtin", "task={name: addition, digits: [1, 2], eval_size: 20}",
           "rollout.max_new_tokens=40"]


def _run(tmp_path, *overrides, steps=2, model=BUILTIN):
    cfg = load_config(None, [*model, f"run.dir={tmp_path / 'run'}", f"train.steps={steps}",
                             "train.prompts_per_step=4", "rollout.n=4", "train.mini_batches=1",
                             "eval.before=false", "eval.after=false", "checkpoint.every=0",
                             "logging.progress=false", *overrides])
    metrics = read_metrics(train(cfg))
    assert len(metrics) == steps
    for m in metrics:
        for k, v in m.items():
            if isinstance(v, float) and k not in ("grad_norm",):
                assert math.isfinite(v), (k, v)
        assert math.isfinite(m["grad_norm"]) and m["skipped_optimizer_steps"] == 0
    return metrics


@pytest.mark.parametrize("sampling", [
    "{name: dynamic, max_rounds: 3}",
    "{name: difficulty_filter, low: 0.2, high: 0.8, max_rounds: 3}",
    "{name: dump, arms: difficulty}",
    "{name: curriculum}",
    "{name: hard_focus, pool_size: 16, phase_steps: 1}",
    "{name: one_shot, index: 3}",
    "{name: ettrl_tree}",
    "{name: cure, branches: 1}",
    "{name: pcl, warmup: 2}",
], ids=lambda s: s.split(",")[0].split(":")[1].strip(" }"))
def test_sampler_trains(tmp_path, sampling):
    metrics = _run(tmp_path, f"sampling={sampling}")
    for m in metrics:
        assert m["sampling/groups_kept"] >= 1 and m["sampling/samples_generated"] >= 16
        # tree rollouts reuse prefixes: what the learner sees is generated + reused
        assert m["sampling/tokens_generated"] + m.get("sampling/tokens_saved", 0.0) >= m["response_tokens"]


def test_reinforce_ada_with_its_estimator_trains(tmp_path):
    metrics = _run(tmp_path, "sampling={name: reinforce_ada, round_n: 4, max_rounds: 2}",
                   "algorithm.advantage={name: reinforce_ada}")
    assert all(m["sampling/prompts_finished"] + m["sampling/prompts_unfinished"] == 4 for m in metrics)


@pytest.mark.parametrize("loss", ["{name: luffy}", "{name: sft_mix}"], ids=["luffy", "sft_mix"])
def test_guidance_trains_with_off_policy_losses(tmp_path, loss):
    metrics = _run(tmp_path, "sampling={name: luffy, trigger: always}", f"algorithm.loss={loss}")
    assert all(m["sampling/off_policy_samples"] == 4 for m in metrics)


def test_brorl_many_rollouts_for_one_prompt(tmp_path, tiny_model_dir):
    """BroRL is configuration: rollout.n = 512 samples of one prompt per step."""
    cfg = load_config(None, [f"model.path={tiny_model_dir}", f"run.dir={tmp_path / 'run'}", "train.steps=1",
                             "train.prompts_per_step=1", "rollout.n=512", "rollout.max_new_tokens=4",
                             "train.mini_batches=1", "train.micro_batch_size=512", "eval.before=false",
                             "eval.after=false", "checkpoint.every=0", "logging.progress=false"])
    (m,) = read_metrics(train(cfg))
    assert m["response_tokens"] > 0 and math.isfinite(m["grad_norm"]) and math.isfinite(m["pg_loss"])


def test_rollout_token_budget_stops_at_equal_cost_and_resumes(tmp_path):
    """train.rollout_token_budget ends the run (final model, eval) once that many tokens were sampled, counting
    the groups dynamic sampling dropped; the count survives a resume."""
    common = [*BUILTIN, "train.steps=50", "train.prompts_per_step=4", "rollout.n=4", "train.mini_batches=1",
              "eval.before=false", "eval.after=true", "eval.n=2", "eval.ks=[1]", "eval.size=4",
              "checkpoint.every=1", "logging.progress=false", "sampling={name: dynamic, max_rounds: 3}",
              "train.rollout_token_budget=1500"]
    cfg = load_config(None, [*common, f"run.dir={tmp_path / 'run'}"])
    run_dir = train(cfg)
    metrics = read_metrics(run_dir)
    totals = [m["rollout_tokens_total"] for m in metrics]
    assert totals[-1] >= 1500 > totals[-2] and len(metrics) < 50
    assert totals == [sum(m["sampling/tokens_generated"] for m in metrics[: i + 1]) for i in range(len(metrics))]
    assert (run_dir / "final" / "model.safetensors").is_file() and (run_dir / "eval_after.json").is_file()

    # resume from a middle step: the spent count continues, so the run ends at the same step
    half = tmp_path / "half"
    cfg = load_config(None, [*common, f"run.dir={half}"])
    train(cfg, stop_after=2)
    resumed = read_metrics(train(load_config(None, [*common, f"run.dir={half}"]), resume=True))
    assert [m["rollout_tokens_total"] for m in resumed] == totals


def test_max_time_ends_the_run_normally(tmp_path):
    cfg = load_config(None, [*BUILTIN, f"run.dir={tmp_path / 'run'}", "train.steps=1000", "train.max_time_s=0.001",
                             "train.prompts_per_step=2", "rollout.n=2", "eval.before=false", "eval.after=false",
                             "checkpoint.every=0", "logging.progress=false"])
    run_dir = train(cfg)
    assert len(read_metrics(run_dir)) == 1
    assert (run_dir / "final" / "model.safetensors").is_file()
    assert (run_dir / "checkpoints").is_dir()
