"""The three routes for the user's own code, each a tiny real training that must use it: a reward function
named in one override (examples/rewards), a plugin recipe with its own task and advantage estimator
(examples/plugins), and the ten-line script on the Python API (examples/train_script.py). A reward function
that fails on every call must not stop the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import rlvr
from rlvr import plugins
from rlvr.config import load_config
from rlvr.tracking import read_metrics
from rlvr.trainer.loop import train

ROOT = Path(__file__).resolve().parents[2]
TINY = ["train.steps=2", "train.prompts_per_step=2", "rollout.n=4", "rollout.max_new_tokens=64",
        "checkpoint.every=0", "eval.before=false", "eval.after=false", "logging.progress=false",
        "logging.rollouts_every=1"]


@pytest.fixture(autouse=True)
def _registries_restored():
    """What a test's plugins register is gone after it (other tests in this process see the built-ins only)."""
    from rlvr.registry import ALL_REGISTRIES

    saved = [(reg, dict(reg._entries), dict(reg.origins)) for reg in ALL_REGISTRIES]
    loaded = dict(plugins._loaded)
    yield
    for reg, entries, origins in saved:
        reg._entries, reg.origins = entries, origins
    for key, module in list(plugins._loaded.items()):
        if key not in loaded:
            del plugins._loaded[key]
            if Path(key).is_absolute() and sys.modules.get(module.__name__) is module:  # a plugin file
                del sys.modules[module.__name__]


@pytest.fixture(autouse=True)
def _at_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # the examples name their files relative to the repository root, as documented


def _rollouts(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]


def test_a_reward_function_in_one_override_scores_and_logs_its_components(tmp_path):
    cfg = load_config(ROOT / "recipes" / "grpo.yaml", [
        f"run.dir={tmp_path / 'run'}", *TINY,
        "rewards=[{name: python, function: examples/rewards/format_and_answer.py:score}]"])
    metrics = read_metrics(train(cfg))
    assert len(metrics) == 2
    for m in metrics:
        # the function's components, logged per step; its reward is 0.2 * format + 0.8 * answer per sample
        assert m["reward/python"] == pytest.approx(0.2 * m["reward/python/format"] + 0.8 * m["reward/python/answer"])
        assert m["accuracy"] == pytest.approx(m["reward/python/answer"])  # `correct` set the sample's verdict
        assert m["reward/python/failed"] == 0
    assert any(m["reward/python/format"] > 0 for m in metrics)  # the built-in model writes its scratchpad


def test_a_reward_function_that_always_raises_never_stops_the_run(tmp_path):
    broken = tmp_path / "broken_reward.py"
    broken.write_text("def score(response, record):\n    raise KeyError('answer_field')\n")
    cfg = load_config(ROOT / "recipes" / "grpo.yaml", [
        f"run.dir={tmp_path / 'run'}", *TINY,
        f"rewards=[{{name: correctness}}, {{name: python, function: '{broken}:score', weight: 0.5}}]"])
    run_dir = train(cfg)
    metrics = read_metrics(run_dir)
    assert len(metrics) == 2 and (run_dir / "final").is_dir()
    for step, m in enumerate(metrics, start=1):
        assert m["reward/python"] == 0 and m["reward/python/failed"] == 8 == m["reward/python/failed_error"]
        assert m["reward_failures/python: KeyError"] == 8 * step  # the run's count so far
        assert m["reward_mean"] == pytest.approx(m["reward/correctness"])  # the verifier still scores
    reasons = {row["reasons"]["python"] for row in _rollouts(run_dir) if "reasons" in row}
    assert reasons == {"reward function error: KeyError: 'answer_field'"}


def test_a_plugin_recipe_trains_with_its_own_task_and_estimator(tmp_path):
    cfg = load_config(ROOT / "examples" / "plugins" / "doubling.yaml", [f"run.dir={tmp_path / 'run'}", *TINY])
    plugin = sys.modules["doubling"]
    before = plugin.CALLS["mean_baseline"]
    run_dir = train(cfg)
    assert plugin.CALLS["mean_baseline"] - before == 2  # one advantage computation per step
    prompts = {row["prompt"] for row in _rollouts(run_dir)}
    assert prompts and all(a == b.rstrip("=") for a, b in (p.split("+") for p in prompts))  # n+n=
    assert "plugins: [examples/plugins/doubling.py]" in (run_dir / "config.yaml").read_text()


def test_the_ten_line_script_trains_with_its_function_and_evaluates(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "examples/train_script.py", f"run.dir={tmp_path / 'run'}", *TINY],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    assert len((ROOT / "examples" / "train_script.py").read_text().splitlines()) <= 20
    run_dir, passk = out.stdout.strip().splitlines()[-1].split(" ", 1)
    assert Path(run_dir) == tmp_path / "run"
    metrics = read_metrics(Path(run_dir))
    assert len(metrics) == 2 and all("reward/python/right" in m for m in metrics)
    assert "__main__:shorter_is_better" in (Path(run_dir) / "config.yaml").read_text()
    assert set(eval(passk)) == {"1", "4"}  # noqa: S307  (the script prints the dict of pass@k)


def test_evaluate_is_rlvr_eval(tmp_path):
    result = rlvr.evaluate("builtin", task="addition", n=2, k=[1, 2], size=8, out=tmp_path / "eval.json")
    assert set(result["pass@k"]) == {"1", "2"}
    assert json.loads((tmp_path / "eval.json").read_text())["pass@k"] == result["pass@k"]
