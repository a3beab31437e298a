"""scripts/demo_table.py regenerates README's demo table, as a range over several runs."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("demo_table", ROOT / "scripts/demo_table.py")
demo_table = importlib.util.module_from_spec(spec)
assert spec.loader is not None
spec.loader.exec_module(demo_table)


def _run(tmp_path: Path, name: str, before: float, after: float, steps: int = 2) -> Path:
    run = tmp_path / name
    run.mkdir()
    common = {"num_prompts": 200, "n": 8, "temperature": 1.0}
    (run / "eval_before.json").write_text(json.dumps({**common, "seconds": 10.0, "pass@k": {"1": before, "8": 0.93},
                                                      "maj@k": {"1": before, "8": 0.657}}))
    (run / "eval_after.json").write_text(json.dumps({**common, "seconds": 12.0, "pass@k": {"1": after, "8": 0.99},
                                                     "maj@k": {"1": after, "8": 0.985}}))
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": i + 1, "step_s": 1.5}) + "\n"
                                               for i in range(steps)))
    (run / "versions.json").write_text(json.dumps({"torch_threads": 2}))
    return run


def test_one_run_gives_its_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _run(tmp_path, "a", 0.343125, 0.947)
    demo_table.main([str(run), "--machine", "the test box"])
    out = capsys.readouterr().out
    assert "| pass@1 | 34.3% | 94.7% | +60.4 pts |" in out
    assert "| pass@8 | 93.0% | 99.0% | +6.0 pts |" in out
    assert "| maj@8 | 65.7% | 98.5% | +32.8 pts |" in out
    assert "Measured on the test box" in out and "(1 run; 2 GRPO steps; 25 s wall time" in out  # 10 + 12 + 2 x 1.5


def test_several_runs_give_ranges(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = [_run(tmp_path, "a", 0.343, 0.947), _run(tmp_path, "b", 0.343, 0.952, steps=4)]
    demo_table.main([str(r) for r in runs])
    out = capsys.readouterr().out
    assert "| pass@1 | 34.3% | 94.7-95.2% | +60.4-+60.9 pts |" in out
    assert "| pass@8 | 93.0% | 99.0% | +6.0 pts |" in out  # equal in both runs: one value
    assert "2 runs; 2/4 GRPO steps; 25-28 s" in out


def test_missing_eval_file_names_it(tmp_path: Path) -> None:
    run = _run(tmp_path, "a", 0.3, 0.9)
    (run / "eval_after.json").unlink()
    with pytest.raises(SystemExit, match="eval_after.json is missing"):
        demo_table.main([str(run)])
