"""The shipped lab model loads, plays Countdown in the worked format, and meets its pass@1 band in a short eval."""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr.models.loading import resolve_model_path

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def test_lab_model_is_shipped_small_and_described():
    path = resolve_model_path("builtin-lab")
    size = sum(f.stat().st_size for f in path.iterdir())
    assert size <= 10 * 2**20, f"builtin-lab is {size / 2**20:.1f} MiB; the lab issue allows 10"
    info = json.loads((path / "build_info.json").read_text())
    assert "python scripts/build_lab_model.py" in info["command"] and "--seed" in info["command"]
    assert 0.10 <= info["heldout_eval"]["pass@1"] <= 0.35


def test_lab_model_meets_its_pass_at_1_band_in_a_short_eval(tmp_path):
    out = tmp_path / "eval.json"
    done = subprocess.run([sys.executable, "-m", "rlvr", "eval", "builtin-lab", "--task", "countdown", "--n", "8",
                           "--k", "1,8", "--size", "48", "--out", str(out), "rollout.max_new_tokens=64",
                           "logging.progress=false"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    rates = [p["correct"] / p["n"] for p in result["problems"]]
    p1 = result["pass@k"]["1"]
    # The band is the full held-out set's (10%..35%); 48 problems estimate it with a standard error from the
    # spread of the per-problem rates, and the check allows three of them either side.
    se = statistics.stdev(rates) / math.sqrt(len(rates))
    assert 0.10 - 3 * se <= p1 <= 0.35 + 3 * se, (p1, se)
    # sampling is broad: pass@8 well above pass@1 (problem-specific failures, not a fixed answer per prompt)
    assert result["pass@k"]["8"] >= 1.5 * p1
    # it writes the worked format: steps, then the graded expression
    assert result["truncated_frac"] < 0.05


def test_the_running_total_model_is_shipped_small_and_described():
    path = resolve_model_path("builtin-lab-total")
    size = sum(f.stat().st_size for f in path.iterdir())
    assert size <= 10 * 2**20, f"builtin-lab-total is {size / 2**20:.1f} MiB; the lab issue allows 10"
    info = json.loads((path / "build_info.json").read_text())
    assert "python scripts/build_lab_total_model.py" in info["command"] and "--seed" in info["command"]
    assert info["held_out"]["training_examples_in_pool"] == 0
    assert 0.10 <= info["heldout_eval"]["pass@1"] <= 0.40


def test_the_running_total_model_meets_its_bands_in_a_short_eval(tmp_path):
    out = tmp_path / "eval.json"
    done = subprocess.run([sys.executable, "-m", "rlvr", "eval", "builtin-lab-total", "--task", "running_total",
                           "--n", "16", "--k", "1,16", "--size", "32", "--out", str(out),
                           "rollout.max_new_tokens=160", "logging.progress=false"],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    rates = [p["correct"] / p["n"] for p in result["problems"]]
    p1 = result["pass@k"]["1"]
    # the full held-out set's band is 10%..40%; 32 problems estimate pass@1 with a standard error from the spread
    # of the per-problem rates, and the check allows three of them either side
    se = statistics.stdev(rates) / math.sqrt(len(rates))
    assert 0.10 - 3 * se <= p1 <= 0.40 + 3 * se, (p1, se)
    assert result["truncated_frac"] < 0.05  # it ends its answers well inside the lab's budget
    # it writes the worked format with checks and rambling somewhere among its samples, and lengths vary
    assert result["length"]["p90"] >= 1.5 * result["length"]["p10"], result["length"]
