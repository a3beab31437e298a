"""Faults a long run meets, each made to happen: SIGKILL mid-step and mid-checkpoint, NaN losses, hung and
crashing verifiers, a config that cannot fit, a full disk, SIGTERM/SIGINT. See docs/reliability.md."""

from __future__ import annotations

import errno
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from rlvr.algorithms import group_normalized_advantages
from rlvr.cli import app
from rlvr.config import load_config
from rlvr.rewards import REWARDS, RewardOutput
from rlvr.tasks import TASKS
from rlvr.tasks.addition import AdditionTask
from rlvr.tracking import read_metrics, read_rollouts
from rlvr.trainer.checkpoint import latest_checkpoint, list_checkpoints
from rlvr.trainer.loop import TrainingError, train

ROOT = Path(__file__).resolve().parents[2]
GRPO = ROOT / "recipes" / "grpo.yaml"
SMALL = ["train.steps=4", "train.prompts_per_step=4", "rollout.n=4", "rollout.max_new_tokens=48",
         "checkpoint.every=1", "checkpoint.keep_last=2", "eval.before=false", "eval.after=false",
         "logging.progress=false", "logging.rollouts_every=1", "optim.warmup_steps=1"]
TIMING = ("_s", "tokens_per_s")


def _comparable(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.endswith(TIMING) and not k.startswith("reward/correctness/")}
            for r in read_metrics(run_dir)]


def _cli(run_dir: Path, *extra: str, env: dict | None = None, resume: bool = False) -> subprocess.Popen:
    args = ["--resume", str(run_dir), *extra] if resume else [str(GRPO), f"run.dir={run_dir}", *SMALL, *extra]
    return subprocess.Popen([sys.executable, "-m", "rlvr", "train", *args], cwd=ROOT,
                            env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> Path:
    """The uninterrupted reference run."""
    run_dir = tmp_path_factory.mktemp("straight") / "run"
    return train(load_config(GRPO, [f"run.dir={run_dir}", *SMALL]))


def _resume_and_compare(run_dir: Path, straight: Path) -> None:
    proc = _cli(run_dir, resume=True)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    assert _comparable(run_dir) == _comparable(straight)
    a = load_file(str(straight / "final" / "model.safetensors"))
    b = load_file(str(run_dir / "final" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
@pytest.mark.parametrize("fault,last_complete", [
    ("kill:rollout:3", 2),      # killed after step 3's rollout: step 2's checkpoint is the latest
    ("kill:optimizer:3", 2),    # killed between backward and optimizer.step of step 3
    ("kill:checkpoint:3", 2),   # killed with step 3's checkpoint half written
])
def test_sigkill_resumes_from_the_last_complete_checkpoint(tmp_path, straight, fault, last_complete):
    run_dir = tmp_path / "run"
    proc = _cli(run_dir, env={"RLVR_FAULTS": fault})
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL, out
    assert latest_checkpoint(run_dir).name == f"step_{last_complete:06d}"
    if fault.startswith("kill:checkpoint"):
        leftovers = [p.name for p in (run_dir / "checkpoints").iterdir() if p.name.startswith(".")]
        assert leftovers, "the half-written checkpoint stays in a hidden temp dir, never under a checkpoint name"
    _resume_and_compare(run_dir, straight)
    hidden = [p.name for p in (run_dir / "checkpoints").iterdir() if p.name.startswith(".")]
    assert hidden == [], "the resume removed what the interrupted write left"
    if fault.startswith("kill:checkpoint"):
        assert "left by an interrupted checkpoint write" in (run_dir / "train.log").read_text()


@pytest.mark.slow
def test_sigkill_at_a_random_moment(tmp_path, straight):
    run_dir = tmp_path / "run"
    proc = _cli(run_dir)
    deadline = time.time() + 120
    while not (run_dir / "metrics.jsonl").exists() and time.time() < deadline:
        time.sleep(0.1)
    time.sleep(random.Random(os.getpid()).uniform(0.0, 2.0))
    proc.kill()
    proc.communicate(timeout=60)
    _resume_and_compare(run_dir, straight)


@pytest.mark.slow
def test_sigterm_checkpoints_and_exits_cleanly_then_resumes(tmp_path, straight):
    run_dir = tmp_path / "run"
    proc = _cli(run_dir, "train.steps=4", "checkpoint.every=0")
    deadline = time.time() + 120
    while not (run_dir / "metrics.jsonl").exists() and time.time() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, out
    assert "SIGTERM" in out and "--resume" in out
    steps = len(read_metrics(run_dir))
    if steps < 4:  # it stopped early: its checkpoint is the step it finished
        assert latest_checkpoint(run_dir).name == f"step_{steps:06d}"
    proc = _cli(run_dir, resume=True)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    metrics = _comparable(run_dir)
    # checkpoint.every differs from the reference run, which does not change any metric
    assert metrics == _comparable(straight)


@pytest.mark.slow
def test_a_second_signal_exits_immediately(tmp_path):
    run_dir = tmp_path / "run"
    proc = _cli(run_dir, "train.steps=50")
    deadline = time.time() + 120
    while not (run_dir / "metrics.jsonl").exists() and time.time() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGINT


@pytest.fixture(scope="module")
def two_steps(tmp_path_factory) -> Path:
    """The reference run's first two steps (checkpoints 1 and 2), to be damaged and resumed by tests."""
    run_dir = tmp_path_factory.mktemp("two_steps") / "run"
    return train(load_config(GRPO, [f"run.dir={run_dir}", *SMALL]), stop_after=2)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["trainer_state.pt", "model.safetensors"])
def test_a_truncated_newest_checkpoint_is_moved_aside_and_the_run_resumes_from_the_previous(tmp_path, two_steps,
                                                                                             straight, name):
    run_dir = tmp_path / "run"
    shutil.copytree(two_steps, run_dir)
    damaged = run_dir / "checkpoints" / "step_000002" / name
    damaged.write_bytes(damaged.read_bytes()[:1000])
    res = CliRunner().invoke(app, ["train", "--resume", str(run_dir)])
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    assert f"checkpoint step_000002 is damaged: {name} has 1000 bytes" in out
    assert "Resuming from step 1" in out and "Traceback" not in out
    assert (run_dir / "checkpoints" / "damaged" / "step_000002" / name).is_file()
    # steps 2..4 are trained again from checkpoint 1: the same metrics and weights as the uninterrupted run
    assert _comparable(run_dir) == _comparable(straight)
    a = load_file(str(straight / "final" / "model.safetensors"))
    b = load_file(str(run_dir / "final" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)


class NanForAThird:
    """A broken shaping reward: NaN for responses whose token ids sum to 0 mod 3, else 0."""

    def __call__(self, group, task):
        return [RewardOutput(float("nan") if sum(s.response_ids) % 3 == 0 else 0.0, "") for s in group.samples]


def test_a_reward_that_is_nan_for_a_third_of_the_samples_costs_only_those_samples(tmp_path):
    if "nan_for_a_third" not in REWARDS:
        REWARDS.register("nan_for_a_third")(NanForAThird)
    cfg = load_config(GRPO, [f"run.dir={tmp_path / 'run'}", *SMALL, "train.steps=3", "checkpoint.every=0",
                             "logging.rollouts_per_step=16",
                             "rewards=[{name: correctness}, {name: nan_for_a_third, weight: 0.5}]"])
    run = train(cfg)
    metrics = read_metrics(run)
    assert len(metrics) == 3  # before, with a third of the rewards NaN, every step was skipped: a stop at step 3
    rollouts = read_rollouts(run)
    assert len(rollouts) == 3 * 16  # every sample of every step (prompts_per_step 4 x rollout.n 4)
    for step, m in enumerate(metrics, start=1):
        rows = [r for r in rollouts if r["step"] == step]
        bad = [r for r in rows if r["reasons"]["nan_for_a_third"] == "non-finite reward nan"]
        assert m["reward_non_finite"] == len(bad) and m["reward_non_finite_frac"] == len(bad) / 16
        assert m["skipped_optimizer_steps"] == 0.0 and math.isfinite(m["grad_norm"])
        assert math.isfinite(m["reward_mean"]) and m["reward/nan_for_a_third"] == 0.0
        assert all(r["reward"] == 0.0 and r["advantage"] == 0.0 for r in bad)
        for g in {r["group"] for r in rows}:  # the others: GRPO over their group without the NaN samples
            good = [r for r in rows if r["group"] == g and r not in bad]
            if len(good) > 1:
                expected = group_normalized_advantages(torch.tensor([r["reward"] for r in good]),
                                                       torch.zeros(len(good), dtype=torch.long))
                assert [r["advantage"] for r in good] == pytest.approx(expected.tolist(), abs=1e-5)
    frac = sum(m["reward_non_finite"] for m in metrics) / (3 * 16)
    assert 0.15 < frac < 0.6, frac  # the fault really happened, at about a third of the samples
    assert metrics[-1]["reward_failures/nan_for_a_third: non-finite"] == frac * 3 * 16
    log = (run / "train.log").read_text()
    assert "reward 'nan_for_a_third' returned nan for sample" in log and "non-finite loss" not in log


def test_one_nan_step_is_skipped_and_logged(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_FAULTS", "nan:loss:2")
    run = train(load_config(GRPO, [f"run.dir={tmp_path / 'run'}", *SMALL, "train.steps=3"]))
    metrics = read_metrics(run)
    assert [m["skipped_optimizer_steps"] for m in metrics] == [0.0, 2.0, 0.0]  # both mini-batches of step 2
    assert "non-finite loss" in (run / "train.log").read_text()


def test_repeated_nan_stops_with_a_valid_checkpoint_and_untouched_optimizer(tmp_path, monkeypatch):
    ref = train(load_config(GRPO, [f"run.dir={tmp_path / 'ref'}", *SMALL]), stop_after=1)
    monkeypatch.setenv("RLVR_FAULTS", "nan:loss:2-9")
    run_dir = tmp_path / "run"
    with pytest.raises(TrainingError, match="2 consecutive steps had a non-finite"):
        train(load_config(GRPO, [f"run.dir={run_dir}", *SMALL, "train.max_fault_steps=2"]))
    last = latest_checkpoint(run_dir)
    assert last.name == "step_000003"
    # the skipped steps left weights and optimizer exactly as after step 1
    a = load_file(str(ref / "checkpoints" / "step_000001" / "model.safetensors"))
    b = load_file(str(last / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    sa = torch.load(ref / "checkpoints" / "step_000001" / "trainer_state.pt", weights_only=False)
    sb = torch.load(last / "trainer_state.pt", weights_only=False)
    for pa, pb in zip(sa["learner"]["optimizer"]["state"].values(), sb["learner"]["optimizer"]["state"].values()):
        assert torch.equal(pa["exp_avg"], pb["exp_avg"])


class HangingOrCrashingAddition(AdditionTask):
    """A verifier that hangs on some responses and kills its process on others."""

    def verify(self, response, record):
        bucket = sum(map(ord, response)) % 7
        if bucket == 0:
            time.sleep(600)
        if bucket == 1:
            os._exit(3)
        return super().verify(response, record)


def test_hung_and_crashed_verifiers_are_timed_out_replaced_and_counted(tmp_path):
    if "hang_or_crash" not in TASKS:
        TASKS.register("hang_or_crash")(HangingOrCrashingAddition)
    cfg = load_config(GRPO, [f"run.dir={tmp_path / 'run'}", *SMALL, "train.steps=2", "checkpoint.every=0",
                             "task.name=hang_or_crash", "rewards=[{name: correctness, workers: 2, timeout: 1.0}]"])
    started = time.time()
    run = train(cfg)
    assert time.time() - started < 120
    metrics = read_metrics(run)
    assert len(metrics) == 2
    last = metrics[-1]
    assert last["reward_failures/correctness: timeout"] >= 1
    assert last["reward_failures/correctness: crashed"] >= 1
    assert sum(m["reward/correctness/verifier_restarts"] for m in metrics) >= 2


def test_a_config_that_cannot_fit_stops_before_training_naming_the_knob(tmp_path):
    res = CliRunner().invoke(app, ["train", str(GRPO), f"run.dir={tmp_path / 'run'}",
                                   "rollout.max_new_tokens=200000", "rollout.batch_size=4096",
                                   "train.micro_batch_size=1"])
    assert res.exit_code == 2
    out = " ".join(res.output.split())
    assert "rollout KV cache" in out and "lower rollout.batch_size or rollout.max_new_tokens" in out
    assert not (tmp_path / "run").exists()


def test_a_full_disk_fails_the_write_without_corrupting_the_previous_checkpoint(tmp_path, monkeypatch):
    import rlvr.trainer.checkpoint as ckpt

    real = ckpt.save_hf_dir
    calls = {"n": 0}

    def full_disk(model, tokenizer, target, *a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(model, tokenizer, target, *a, **k)

    monkeypatch.setattr(ckpt, "save_hf_dir", full_disk)
    run_dir = tmp_path / "run"
    with pytest.raises(TrainingError, match="No space left on device.*step_000001.*intact"):
        train(load_config(GRPO, [f"run.dir={run_dir}", *SMALL]))
    assert [s for s, _ in list_checkpoints(run_dir)] == [1]
    state = torch.load(latest_checkpoint(run_dir) / "trainer_state.pt", weights_only=False)
    assert state["step"] == 1
    assert json.loads((latest_checkpoint(run_dir) / "config.json").read_text())["model_type"] == "qwen2"
