"""Every path in a run directory is declared in rlvr.run_files (the source of docs/reference/run-directory.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlvr.run_files import RUN_FILES, declared


def test_patterns_by_hand():
    assert declared("eval_before.json").path == "eval_{tag}.json"
    assert declared("checkpoints/step_000002/trainer_state.pt").path == "checkpoints/step_{step}/"
    assert declared("final/model.safetensors").path == "final/"
    assert declared("final") is not None
    assert declared("checkpoints/step_000002") is not None
    # a pattern part stands for one segment, not a path: nothing below a non-opaque directory is declared by it
    assert declared("checkpoints/other.bin") is None
    assert declared("eval_before.json/x") is None
    assert declared("metrics.jsonl.bak") is None
    assert declared("unknown.txt") is None


def test_every_entry_is_described_once():
    paths = [f.path for f in RUN_FILES]
    assert len(paths) == len(set(paths))
    for f in RUN_FILES:
        assert f.description.strip() and f.when.strip(), f.path
        assert not f.opaque or f.is_dir, f"{f.path}: only a directory can be declared with its contents"


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    """Two steps of `rlvr train` on the built-in model with checkpoints, stored rollouts and evaluations."""
    import rlvr

    run_dir = tmp_path_factory.mktemp("run_files") / "run"
    return rlvr.train(None, ["model.path=builtin", "train.steps=2", "train.prompts_per_step=2", "rollout.n=2",
                             "checkpoint.every=1", "logging.rollouts_every=1", "eval.before=true",
                             "eval.after=true", "eval.n=2", "eval.ks=[1]", "eval.size=2",
                             "logging.progress=false", f"run.dir={run_dir}"])


def test_every_path_a_real_run_writes_is_declared(tiny_run: Path):
    paths = sorted(p.relative_to(tiny_run).as_posix() for p in tiny_run.rglob("*"))
    for must in ("config.yaml", "versions.json", "metrics.jsonl", "rollouts.jsonl", "eval_before.json",
                 "eval_after.json", "final/config.json", "report.html", "train.log"):
        assert must in paths, f"a run with these settings should write {must}; it wrote {paths}"
    assert any(p.startswith("checkpoints/step_") for p in paths)
    missing = [p for p in paths if declared(p) is None]
    assert not missing, f"written but not declared in src/rlvr/run_files.py: {missing}"
