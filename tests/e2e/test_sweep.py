"""The ablation harness: recipes x seeds as real `rlvr train` subprocesses, a summary, and resumption."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr.config import ConfigError
from rlvr.trainer.sweep import plan_sweep, run_sweep

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TINY = ["task={name: addition, digits: [1, 2], eval_size: 8}", "train.prompts_per_step=2", "rollout.n=2",
        "rollout.max_new_tokens=24", "eval.n=2", "eval.ks=[1, 2]", "checkpoint.every=0"]


def test_sweep_runs_summarises_and_skips_finished_runs(tmp_path):
    recipes = [ROOT / "recipes" / "grpo.yaml", ROOT / "recipes" / "rloo.yaml"]
    runs = plan_sweep(recipes, seeds=2, steps=2, out=tmp_path, task=None, eval_every=1, overrides=TINY)
    assert [(r.name, r.seed) for r in runs] == [("grpo", 0), ("grpo", 1), ("rloo", 0), ("rloo", 1)]
    summary = run_sweep(runs, tmp_path, jobs=2)
    assert summary["failed"] == []
    for name in ("grpo", "rloo"):
        row = summary["recipes"][name]
        assert row["seeds"] == 2
        assert 0.0 <= row["final_pass@1"]["mean"] <= 1.0 and row["steps"]["mean"] == 2
        assert row["rollout_tokens"]["mean"] > 0
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert set(saved["recipes"]) == {"grpo", "rloo"}
    table = (tmp_path / "summary.md").read_text()
    assert "| grpo | 2 |" in table and "| rloo | 2 |" in table
    assert (tmp_path / "curves.png").stat().st_size > 0
    assert all((r.run_dir / "final" / "model.safetensors").is_file() for r in runs)

    # running the same sweep again does nothing but summarise
    before = {r.run_dir: (r.run_dir / "eval_after.json").stat().st_mtime for r in runs}
    again = run_sweep(plan_sweep(recipes, 2, 2, tmp_path, None, 1, TINY), tmp_path, jobs=1)
    assert {r.run_dir: (r.run_dir / "eval_after.json").stat().st_mtime for r in runs} == before
    assert again["recipes"].keys() == summary["recipes"].keys()


def test_sweep_rejects_a_bad_override_before_running(tmp_path):
    with pytest.raises(ConfigError, match="rollout.n"):
        plan_sweep([ROOT / "recipes" / "grpo.yaml"], 1, 2, tmp_path, None, None, ["rollout.n=zero"])
    assert not (tmp_path / "runs").exists()
