"""A real two-node Ray cluster on this machine (tests/e2e/ray_cluster.py): roles pinned to nodes by custom
resources, no shared filesystem, and a node lost mid-run, both when it comes back and when it does not.

The controller (`rlvr train`, a subprocess) runs in a work directory holding the model and the task's data file,
named by *relative* paths; the second node's `ray start` (and so its workers) runs in another, empty directory.
So a path that leaked to a worker instead of the files would not resolve there, and the run would fail.

Every run here is the same 3-step training (1 CPU per node: the rollout and reward workers share the second
node's CPU, the learner trains in the controller); the uninterrupted one (`straight`) is the reference the
interrupted ones must reproduce exactly.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

pytest.importorskip("ray")

from safetensors.torch import load_file  # noqa: E402

from rlvr.models.loading import BUILTIN_DIR  # noqa: E402
from rlvr.tracking import read_metrics  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from ray_cluster import HEAD, SECOND, two_node_cluster  # noqa: E402

PLACEMENT_TIMEOUT_S = 5  # how long a lost node has to come back before the run stops (the config knob)
RUN_TIMEOUT_S = 600  # a 3-step run of the built-in model takes ~30 s; this bounds a hang, it is not a speed test
TIMING = ("_s", "tokens_per_s", "samples_per_s")

CONFIG = f"""\
run: {{name: cluster, seed: 0}}
model: {{path: model}}                      # relative: only the controller's working directory has it
task: {{name: jsonl, path: data.jsonl, eval_fraction: 0.2}}
rollout: {{n: 4, temperature: 1.0, max_new_tokens: 24}}
train: {{steps: 3, prompts_per_step: 2, mini_batches: 1}}
algorithm:
  advantage: {{name: grpo, std_scope: group}}
  loss: {{name: ppo_clip, clip_low: 0.2, clip_high: 0.2}}
optim: {{lr: 1.0e-3, warmup_steps: 1}}
checkpoint: {{every: 1, keep_last: 3}}
eval: {{before: false, after: false}}
logging: {{progress: false}}
distributed:
  backend: ray
  rollout_workers: 1
  cpus_per_rollout_worker: 0.5
  rollout_worker_resources: {{{SECOND}: 0.1}}   # the second node declares {SECOND}: 1
  reward_workers: 1
  cpus_per_reward_worker: 0.5
  reward_worker_resources: {{{SECOND}: 0.1}}
  placement_timeout_s: {PLACEMENT_TIMEOUT_S}
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("second_node_cwd")  # empty: nothing of the controller's is here
    with two_node_cluster(elsewhere) as c:
        yield c


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """The controller's working directory: the model, the data file and the config, by relative paths."""
    work = tmp_path_factory.mktemp("controller")
    shutil.copytree(BUILTIN_DIR, work / "model")
    rng = random.Random(0)
    with (work / "data.jsonl").open("w") as f:
        for _ in range(40):
            a, b = rng.randint(10, 99), rng.randint(10, 99)
            f.write(json.dumps({"prompt": f"What is {a} + {b}?", "answer": str(a + b)}) + "\n")
    (work / "run.yaml").write_text(CONFIG)
    return work


def _train(cluster, work: Path, run: str, *, resume: bool = False, faults: str = "") -> subprocess.Popen:
    args = ["--resume", run] if resume else ["run.yaml", f"run.dir={run}", f"distributed.address={cluster.address}"]
    env = {**os.environ, "RLVR_FAULTS": faults, "RLVR_FAULT_DIR": str(work), "RAY_AUTH_MODE": "disabled",
           "COLUMNS": "1000"}  # error messages on one line
    return subprocess.Popen([sys.executable, "-m", "rlvr", "train", *args], cwd=work, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(proc: subprocess.Popen) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"the run hung (> {RUN_TIMEOUT_S} s):\n{out[-4000:]}")
    return proc.returncode, out


def _wait_paused(proc: subprocess.Popen, work: Path, step: int) -> None:
    flag = work / f"paused-worker-{step}"
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not flag.exists():
        if proc.poll() is not None:
            pytest.fail(f"the run ended before its generation request {step}:\n{proc.stdout.read()[-4000:]}")
        assert time.monotonic() < deadline, "the run never reached the pause"
        time.sleep(0.2)
    flag.unlink()


def _lose_second_node(cluster) -> None:
    cluster.kill_second()
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while SECOND in cluster.alive_nodes():  # the head declares it dead after missed health checks (~3 s here)
        assert time.monotonic() < deadline, "the cluster never noticed the lost node"
        time.sleep(0.5)


def _comparable(run_dir: Path) -> list[dict]:
    """Metrics without timings and without the restart counters (which differ by design)."""
    return [{k: v for k, v in m.items() if not k.endswith(TIMING) and "restarts" not in k}
            for m in read_metrics(run_dir)]


def _same_result(run_dir: Path, straight: Path) -> None:
    assert _comparable(run_dir) == _comparable(straight)
    a = load_file(str(straight / "final" / "model.safetensors"))
    b = load_file(str(run_dir / "final" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def straight(cluster, work) -> Path:
    """The uninterrupted run, with the rollout and reward workers on the second node."""
    code, out = _finish(_train(cluster, work, "runs/straight"))
    assert code == 0, out[-4000:]
    return work / "runs" / "straight"


@pytest.mark.slow
def test_workers_pinned_to_the_second_node_train_with_nothing_shared_on_disk(cluster, work, straight):
    placements = [line.split("placement: ", 1)[1] for line in (straight / "train.log").read_text().splitlines()
                  if "placement: " in line]
    by_role = {p.split(" on node ")[0]: p for p in placements}
    assert f"resources: {HEAD};" in by_role["controller"], placements  # the learner trains in the controller
    assert f"resources: {SECOND};" in by_role["rollout worker 0"], placements
    assert f"resources: {SECOND};" in by_role["reward worker"], placements
    log = (straight / "train.log").read_text()
    assert "model.path 'model' goes to the workers through the object store" in log
    # the set-up catches leaked paths: the second node's workers run where `model` and `data.jsonl` do not exist
    assert cluster.second.cwd != work and not (cluster.second.cwd / "model").exists()
    assert not (cluster.second.cwd / "data.jsonl").exists()
    metrics = read_metrics(straight)
    assert [m["step"] for m in metrics] == [1, 2, 3]
    assert all(m["distributed/rollout_worker_restarts"] == 0 for m in metrics)


def _lose_the_node_twice(cluster, work: Path, proc: subprocess.Popen) -> None:
    _wait_paused(proc, work, 2)  # step 1 is done; the controller is about to ask for step 2's samples
    _lose_second_node(cluster)
    cluster.start_second()  # the node comes back: a new raylet with the same resources
    (work / "resume-worker-2").touch()
    _wait_paused(proc, work, 3)  # step 2 ran on the replacement workers
    _lose_second_node(cluster)  # and now it stays lost
    (work / "resume-worker-3").touch()


@pytest.mark.slow
def test_a_lost_node_is_survived_when_it_comes_back_and_stops_the_run_when_not_then_resume_matches(
        cluster, work, straight):
    """One run meets both cases: its second node is lost before step 2's rollout and comes back (the run
    continues on it), then lost again before step 3's and stays lost (the run stops, bounded by
    distributed.placement_timeout_s, with an error naming --resume). Resumed with the node back, it ends
    exactly where the uninterrupted run does."""
    proc = _train(cluster, work, "runs/lost", faults="pause:worker:2,pause:worker:3")
    try:
        _lose_the_node_twice(cluster, work, proc)
        code, out = _finish(proc)  # bounded: the placement timeout, not a hang
    finally:
        if proc.poll() is None:  # a check above failed: leave no run behind
            proc.kill()
            proc.communicate()
    assert code != 0
    assert (f"no replacement could be placed within {PLACEMENT_TIMEOUT_S}s (distributed.placement_timeout_s)"
            in out), out[-4000:]
    assert "continue with: rlvr train --resume runs/lost" in out, out[-4000:]
    run = work / "runs" / "lost"
    metrics = read_metrics(run)
    assert [m["step"] for m in metrics] == [1, 2]
    assert [m["distributed/rollout_worker_restarts"] for m in metrics] == [0.0, 1.0]  # replaced once, at step 2
    replaced = [line for line in (run / "train.log").read_text().splitlines()
                if "placement: rollout worker 0 (replacement) on node" in line]
    assert len(replaced) == 1 and f"resources: {SECOND};" in replaced[0]

    cluster.start_second()
    code, out = _finish(_train(cluster, work, "runs/lost", resume=True))
    assert code == 0, out[-4000:]
    _same_result(run, straight)
