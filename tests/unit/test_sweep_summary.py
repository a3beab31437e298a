"""The sweep summary over finished runs of every kind: training runs and evaluation-only arms, with plain or
search evaluations (which report the searched answer's solve_rate instead of pass@k)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rlvr.trainer.sweep import SweepRun, summarize_sweep, summary_table


def _eval_arm(root: Path, name: str, seed: int, result: dict) -> SweepRun:
    run_dir = root / name / f"seed{seed}"
    run_dir.mkdir(parents=True)
    (run_dir / "eval_after.json").write_text(json.dumps(result))
    return SweepRun(Path("recipes/grpo.yaml"), seed, run_dir, [], arm=name, model="builtin-lab")


def test_summary_of_plain_and_search_evaluations(tmp_path):
    runs = [_eval_arm(tmp_path, "plain", s, {"pass@k": {"1": v, "16": 0.7}}) for s, v in ((0, 0.2), (1, 0.3))]
    runs += [_eval_arm(tmp_path, "mcts", s, {"solve_rate": v, "tokens_per_problem": 250.0})
             for s, v in ((0, 0.5), (1, 0.7))]
    assert all(r.done for r in runs)
    summary = summarize_sweep(runs)["recipes"]
    assert summary["plain"]["final_pass@1"]["mean"] == pytest.approx(0.25)
    assert summary["plain"]["final_pass@16"]["mean"] == pytest.approx(0.7)
    assert summary["mcts"]["final_pass@1"]["mean"] == pytest.approx(0.6)  # the searched answer's pass@1
    assert summary["mcts"]["steps"]["mean"] == 0 and math.isnan(summary["mcts"]["final_entropy"]["mean"])
    table = summary_table({"recipes": summary})
    assert "| mcts | 2 | 60.0 ± 14.1% |" in table and "n/a" in table.splitlines()[-1]  # no pass@16 for mcts
