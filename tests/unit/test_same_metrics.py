"""scripts/same_metrics.py: runs that differ only in timing fields match; any other difference is reported."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("same_metrics", ROOT / "scripts" / "same_metrics.py")
same_metrics = importlib.util.module_from_spec(spec)
spec.loader.exec_module(same_metrics)


def _run(path: Path, rows: list[dict], evals: dict | None = None) -> Path:
    path.mkdir()
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if evals is not None:
        (path / "eval_after.json").write_text(json.dumps(evals))
    return path


def test_timing_fields_are_left_out(tmp_path, capsys):
    a = _run(tmp_path / "a", [{"step": 1, "loss": 0.5, "step_s": 1.0, "rollout_tokens_per_s": 9.0,
                               "reward/x/verify_calls_per_s": 3.0}], {"pass@1": 0.5, "seconds": 3.0})
    b = _run(tmp_path / "b", [{"step": 1, "loss": 0.5, "step_s": 2.5, "rollout_tokens_per_s": 4.0,
                               "reward/x/verify_calls_per_s": 1.0}], {"pass@1": 0.5, "seconds": 7.0})
    assert same_metrics.main([str(a), str(b)]) == 0
    assert "identical apart from timing (1 metric lines" in capsys.readouterr().out


def test_any_other_difference_is_reported(tmp_path, capsys):
    a = _run(tmp_path / "a", [{"step": 1, "loss": 0.5}, {"step": 2, "loss": 0.4}], {"pass@1": 0.5})
    b = _run(tmp_path / "b", [{"step": 1, "loss": 0.5}, {"step": 2, "loss": 0.41}], {"pass@1": 0.6})
    assert same_metrics.main([str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert "metrics.jsonl line 2: differs in loss" in out and "eval_after.json line 1: differs in pass@1" in out
    c = _run(tmp_path / "c", [{"step": 1, "loss": 0.5}], {"pass@1": 0.5})
    assert same_metrics.main([str(a), str(c)]) == 1
    assert "2 lines in A, 1 in B" in capsys.readouterr().out
