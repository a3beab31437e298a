"""`rlvr sft` learns from prompt/completion pairs; reasoning-gym and JSONL tasks run through training."""

from __future__ import annotations

import json
import math

from transformers import AutoModelForCausalLM
from typer.testing import CliRunner

from rlvr.cli import app
from rlvr.config import load_config
from rlvr.tracking import read_metrics
from rlvr.trainer.loop import train

runner = CliRunner()


def test_sft_lowers_the_loss_and_exports_a_loadable_model(tmp_path, tiny_model_dir):
    data = tmp_path / "pairs.jsonl"
    rows = [{"prompt": f"{i}+{i}=", "completion": str(2 * i)} for i in range(50)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows) + "not json\n")
    recipe = tmp_path / "sft.yaml"
    recipe.write_text(f"model: {{path: '{tiny_model_dir}'}}\ndata: {{path: '{data}'}}\n"
                      "train: {steps: 40, batch_size: 16, micro_batch_size: 8}\noptim: {lr: 3.0e-3}\n"
                      "logging: {progress: false, console_every: 100}\n")
    res = runner.invoke(app, ["sft", str(recipe), f"run.dir={tmp_path / 'run'}"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "(1 skipped)" in res.output
    metrics = read_metrics(tmp_path / "run")
    assert len(metrics) == 40
    first = sum(m["loss"] for m in metrics[:5]) / 5
    last = sum(m["loss"] for m in metrics[-5:]) / 5
    assert last < 0.7 * first, (first, last)
    model = AutoModelForCausalLM.from_pretrained(str(tmp_path / "run" / "final"))
    assert model.config.model_type == "qwen2"


def test_sft_with_a_missing_column_fails_clearly(tmp_path, tiny_model_dir):
    data = tmp_path / "pairs.jsonl"
    data.write_text(json.dumps({"prompt": "a", "answer": "b"}) + "\n")
    res = runner.invoke(app, ["sft", f"model.path={tiny_model_dir}", f"data.path={data}",
                              f"run.dir={tmp_path / 'run'}"])
    assert res.exit_code == 2
    assert "data.completion_column" in res.output and "answer" in res.output


def _short(tmp_path, model_dir, *overrides):
    return load_config(None, [f"model.path={model_dir}", f"run.dir={tmp_path / 'run'}", "train.steps=2",
                              "train.prompts_per_step=2", "rollout.n=2", "rollout.max_new_tokens=12",
                              "logging.progress=false", "eval.after=true", "eval.size=3", "eval.n=2", *overrides])


def test_reasoning_gym_task_trains_through_the_chat_template(tmp_path, tiny_chat_model_dir):
    run = train(_short(tmp_path, tiny_chat_model_dir,
                       "task={name: reasoning_gym, dataset: leg_counting, eval_size: 3, train_size: 50}"))
    metrics = read_metrics(run)
    assert len(metrics) == 2 and all(math.isfinite(m["loss"] if "loss" in m else m["pg_loss"]) for m in metrics)
    result = json.loads((run / "eval_after.json").read_text())
    assert result["num_prompts"] == 3
    assert all("leg_counting" in p["source"] for p in result["problems"])


def test_jsonl_task_trains(tmp_path, tiny_model_dir):
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps({"q": f"{i}*2", "a": str(2 * i)}) + "\n" for i in range(40)))
    run = train(_short(tmp_path, tiny_model_dir,
                       f"task={{name: jsonl, path: '{data}', prompt_column: q, answer_column: a, verifier: numeric}}"))
    assert len(read_metrics(run)) == 2
    assert json.loads((run / "eval_after.json").read_text())["num_prompts"] == 3


def test_code_task_trains_through_the_sandbox(tmp_path, tiny_model_dir):
    run = train(_short(tmp_path, tiny_model_dir, "task={name: code, eval_size: 3, train_size: 20, timeout: 2}"))
    metrics = read_metrics(run)
    assert len(metrics) == 2
    # a random model writes no passing program: every reward is a clean 0, not an error
    assert all(m["reward_mean"] == 0.0 for m in metrics)
    assert not any(k.startswith("reward_failures/") for m in metrics for k in m)
