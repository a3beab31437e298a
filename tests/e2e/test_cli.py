"""The command line: help texts, config show, eval, and bad input that stops with one clear message."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlvr.cli import app

ROOT = Path(__file__).resolve().parents[2]
GRPO = str(ROOT / "recipes" / "grpo.yaml")
runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


@pytest.mark.parametrize("command", [[], ["train"], ["sft"], ["eval"], ["config"], ["config", "show"]])
def test_help_is_complete(command):
    res = invoke(*command, "--help")
    assert res.exit_code == 0, res.output
    assert "Usage" in res.output
    if command == []:
        for sub in ("train", "sft", "eval", "config"):
            assert sub in res.output
    if command == ["train"]:
        assert "--resume" in res.output and "key.sub=value" in res.output
    if command == ["eval"]:
        for flag in ("--task", "--n", "--k", "--out"):
            assert flag in res.output


def test_version():
    res = invoke("--version")
    assert res.exit_code == 0 and res.output.startswith("rlvr ")


def test_config_show_prints_the_resolved_config():
    res = invoke("config", "show", GRPO, "train.steps=3", "task.digits=[2,3]")
    assert res.exit_code == 0, res.output
    assert "steps: 3" in res.output
    assert "digits: [2, 3]" in res.output
    assert "eval_size: 200" in res.output  # the task's own default is filled in
    assert "std_scope: group" in res.output


def test_config_errors_exit_2_with_the_key_named():
    res = runner.invoke(app, ["config", "show", GRPO, "train.stpes=3", "rollout.temperature=-1"])
    assert res.exit_code == 2
    out = " ".join(res.output.split())
    assert "train.stpes: unknown key" in out and "Did you mean 'steps'" in out
    assert "rollout.temperature" in out and "greater than 0" in out and "-1" in out
    assert "Traceback" not in res.output


def _train_fails(tmp_path: Path, *overrides: str) -> str:
    run_dir = tmp_path / "run"
    # a short run, so that a check that fails to fire costs seconds, not a whole training
    res = runner.invoke(app, ["train", GRPO, f"run.dir={run_dir}", "train.steps=1", "eval.before=false",
                              "eval.after=false", *overrides])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    assert not run_dir.exists(), "bad input must be caught before the run directory is made"
    return " ".join(res.output.split())


def test_missing_model_directory(tmp_path):
    out = _train_fails(tmp_path, f"model.path={tmp_path / 'missing'}")
    assert "model.path" in out and "does not exist" in out


def test_tokenizer_without_eos(tmp_path, no_eos_model_dir):
    out = _train_fails(tmp_path, f"model.path={no_eos_model_dir}")
    assert "no EOS token" in out


def test_dataset_missing_its_answer_column(tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"question": f"{i}+1", "solution": str(i + 1)}) + "\n" for i in range(20)))
    out = _train_fails(tmp_path, f"task={{name: jsonl, path: '{data}', prompt_column: question}}")
    assert "task.answer_column" in out and "'answer' not found" in out and "solution" in out


def test_n_equal_one_with_a_group_normalized_estimator(tmp_path):
    out = _train_fails(tmp_path, "rollout.n=1")
    assert "rollout.n" in out and ">= 2" in out


def test_existing_run_directory_is_not_overwritten(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("run: {}\n")
    res = runner.invoke(app, ["train", GRPO, f"run.dir={run_dir}"])
    assert res.exit_code == 2
    assert "--resume" in res.output


def test_eval_builtin_writes_json(tmp_path):
    out = tmp_path / "res.json"
    res = invoke("eval", "builtin", "--task", "addition", "--n", "2", "--k", "1,2", "--size", "6", "--out", str(out),
                 "rollout.max_new_tokens=96")
    assert res.exit_code == 0, res.output
    result = json.loads(out.read_text())
    assert result["num_prompts"] == 6 and result["n"] == 2
    assert set(result["pass@k"]) == {"1", "2"}
    assert 0.0 <= result["pass@k"]["1"] <= result["pass@k"]["2"] <= 1.0
    assert len(result["problems"]) == 6


def test_eval_rejects_k_larger_than_n(tmp_path):
    res = runner.invoke(app, ["eval", "builtin", "--n", "2", "--k", "1,4"])
    assert res.exit_code == 2
    assert "eval.ks" in res.output


def test_vllm_that_cannot_start_stops_with_a_clear_message(tmp_path, monkeypatch):
    """Selecting vLLM where it cannot run (here: its import fails as if it were not installed) stops before the
    run directory exists, naming why and the fix, with the brackets of the hint intact."""
    import builtins

    real = builtins.__import__

    def no_vllm(name, *args, **kwargs):
        if name == "vllm" or name.startswith("vllm."):
            raise ModuleNotFoundError("No module named 'vllm'", name="vllm")
        return real(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_vllm)
    out = _train_fails(tmp_path, "rollout.engine=vllm")
    assert "rollout.engine: 'vllm' cannot start: vLLM is not installed" in out
    assert "make install-vllm" in out and "rollout.engine=fast" in out
