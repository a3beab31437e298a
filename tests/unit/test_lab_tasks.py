"""The lab's tasks: a finding names its task (`task:`), which sets the model and response budget of every run;
the length metrics the running-total findings use, by hand values; the per-step curves picture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rlvr.config import ConfigError
from rlvr.lab.finding import LAB_TASKS, comparison_finding, lab_common, list_findings, load_finding
from rlvr.lab.metrics import run_metric
from rlvr.lab.plots import plot_curves
from rlvr.lab.run import finding_overrides, findings_listing, plan_finding, step_curves


def write(path: Path, **changes) -> Path:
    data = {"name": "tiny", "paper": "test", "claim": "grpo changes the length",
            "arms": {"base": {"recipe": "grpo", "train": False}, "grpo": {"recipe": "grpo"}},
            "control": "base", "treatment": "grpo", "metric": "eval_length", "direction": "higher",
            "min_effect": 1.0, "steps": 2, "seeds": 2, "eval": {"n": 4, "ks": [1, 4]}}
    data.update(changes)
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_finding_runs_on_its_task_with_that_tasks_model_and_budget(tmp_path):
    finding = load_finding(write(tmp_path / "f.yaml", task="running_total"))
    common = finding_overrides(finding)
    assert "model.path=builtin-lab-total" in common and "task={name: running_total}" in common
    assert f"rollout.max_new_tokens={LAB_TASKS['running_total'].max_new_tokens}" in common
    runs = {r.name: r for r in plan_finding(finding, tmp_path / "out")}
    assert runs["base"].model == "builtin-lab-total"  # an evaluation-only arm evaluates the task's model
    countdown = load_finding(write(tmp_path / "g.yaml"))  # no task: countdown, as every finding before
    assert countdown.task == "countdown" and "model.path=builtin-lab" in finding_overrides(countdown)
    assert {r.name: r for r in plan_finding(countdown, tmp_path / "out2")}["base"].model == "builtin-lab"
    assert lab_common("countdown")[0] == "model.path=builtin-lab"


def test_an_unknown_task_is_refused_with_the_choices(tmp_path):
    with pytest.raises(ConfigError, match="task"):
        load_finding(write(tmp_path / "f.yaml", task="addition"))


def test_compare_takes_a_task_and_the_listing_shows_each_findings_task(tmp_path):
    f = comparison_finding("dr_grpo", "grpo", seeds=2, first_seed=0, steps=2, rollout_tokens=None,
                           task="running_total")
    assert f.task == "running_total" and "model.path=builtin-lab-total" in finding_overrides(f)
    rows = {r[0].split(" ")[0]: r for r in findings_listing(list_findings())}
    assert rows["boundary"][1] == "countdown" and rows["length_rl"][1] == "running_total"
    tasks = {load_finding(n).task for n in list_findings()}
    assert tasks == set(LAB_TASKS)


def _run(tmp_path: Path, name: str, steps: list[dict], evaluation: dict) -> Path:
    run = tmp_path / name
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    (run / "eval_after.json").write_text(json.dumps(evaluation))
    return run


def test_length_metrics_by_hand(tmp_path):
    # ten training steps, lengths 30..39 (the first five average 32, the last five 37), then an eval line
    steps = [{"step": i + 1, "response_tokens": 100, "response_length_mean": 30 + i, "accuracy": i / 10}
             for i in range(10)] + [{"step": 10, "eval/pass@1": 0.5}]
    evaluation = {"pass@k": {"1": 0.5}, "mean_length": 44.0, "problems": [],
                  "length": {"p10": 20.0, "p50": 40.0, "p90": 70.0, "right_mean": 40.0, "wrong_mean": 50.0}}
    run = _run(tmp_path, "r", steps, evaluation)
    assert run_metric("length_growth", run) == pytest.approx(5.0)
    assert run_metric("eval_length", run) == 44.0
    assert run_metric("right_length", run) == 40.0 and run_metric("wrong_length", run) == 50.0
    assert run_metric("wrong_right_length_ratio", run) == pytest.approx(1.25)
    assert run_metric("length_spread", run) == pytest.approx(3.5)
    old = _run(tmp_path, "old", steps, {"pass@k": {"1": 0.5}, "problems": []})  # an evaluation from before
    assert run_metric("right_length", old) != run_metric("right_length", old)  # nan, not an error


def test_step_curves_read_training_steps_and_plot(tmp_path):
    finding = load_finding(write(tmp_path / "f.yaml", task="running_total"))
    out = tmp_path / "out"
    runs = plan_finding(finding, out)
    for run in runs:
        if run.model is None:
            run.run_dir.mkdir(parents=True)
            lines = [{"step": i, "response_tokens": 10, "response_length_mean": 40 + i + run.seed,
                      "accuracy": 0.1 * i} for i in range(1, 4)] + [{"step": 3, "eval/pass@1": 0.2}]
            (run.run_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    curves = step_curves(runs)
    assert set(curves) == {"grpo"}  # the evaluation-only arm has no curve
    assert curves["grpo"][0]["response_length_mean"] == [41.0, 42.0, 43.0]
    assert curves["grpo"][1]["accuracy"] == pytest.approx([0.1, 0.2, 0.3])
    assert plot_curves(curves, out / "curves.png", "tiny") and (out / "curves.png").stat().st_size > 0
    assert plot_curves({}, out / "none.png", "tiny") is False and not (out / "none.png").exists()


def test_the_cli_refuses_an_unknown_task_and_a_task_on_a_named_finding():
    from typer.testing import CliRunner

    from rlvr.cli import app

    bad = CliRunner().invoke(app, ["lab", "compare", "recipes/dr_grpo.yaml", "grpo", "--task", "addition"])
    assert bad.exit_code != 0 and "--task: expected one of countdown, running_total" in bad.output
    named = CliRunner().invoke(app, ["lab", "ttrl", "--task", "countdown"])
    assert named.exit_code != 0 and "a finding names its task" in named.output
