"""Multi-stage recipes (`stages:`): how a stage's config is built (top level, then the stage's keys, then the
command line's overrides, then its own), errors that name `stages[i].<key>` before anything runs, and one small
real two-stage run on the built-in model: stage 2 starts from stage 1's final weights, and a rerun of the same
command skips the finished stage and resumes the cut-off one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from rlvr.cli import app
from rlvr.config import ConfigError, load_config
from rlvr.config.stages import load_stages

BASE = {"model": {"path": "builtin"}, "task": {"name": "addition", "digits": [3, 4]},
        "train": {"steps": 4, "prompts_per_step": 2}, "optim": {"lr": 1e-4}}


def _recipe(tmp_path: Path, stages, **top) -> Path:
    path = tmp_path / "staged.yaml"
    path.write_text(yaml.safe_dump({**BASE, **top, "stages": stages}, sort_keys=False))
    return path


def _error(tmp_path: Path, stages, overrides=(), **top) -> str:
    with pytest.raises(ConfigError) as err:
        load_stages(_recipe(tmp_path, stages, **top), list(overrides))
    return str(err.value)


def test_a_stage_is_the_top_level_config_then_its_keys_then_the_overrides(tmp_path):
    stages = [{"name": "first"},
              {"name": "second", "train": {"steps": 7}, "optim.lr": 3e-4, "task.name": "vl_count_text"}]
    notes: list[str] = []
    staged = load_stages(_recipe(tmp_path, stages), ["run.dir=" + str(tmp_path / "run"), "train.prompts_per_step=3",
                                                      "stages.second.train.ppo_epochs=2", "stages.0.rollout.n=3"],
                         notes)
    first, second = staged.stages
    assert staged.run_dir == tmp_path / "run" and staged.name == "staged"
    # stage 0: the file's top level, the shared override, its own override
    assert (first.cfg.train.steps, first.cfg.optim.lr, first.cfg.task.name) == (4, 1e-4, "addition")
    assert list(first.cfg.task.params["digits"]) == [3, 4]
    assert (first.cfg.train.prompts_per_step, first.cfg.rollout.n, first.cfg.train.ppo_epochs) == (3, 3, 1)
    # stage 1: nested and dotted keys, the shared override, the override by name; not stage 0's override
    assert (second.cfg.train.steps, second.cfg.optim.lr, second.cfg.train.ppo_epochs) == (7, 3e-4, 2)
    assert (second.cfg.train.prompts_per_step, second.cfg.rollout.n) == (3, 8)
    # switching the task dropped addition's digits, as task.name=vl_count_text on the command line does
    assert second.cfg.task.name == "vl_count_text" and "digits" not in second.cfg.task.params
    assert any(n.startswith("stages[1]: task.name changed from 'addition' to 'vl_count_text'") for n in notes)
    # each stage its own directory and name; stage 1 starts from stage 0's final/
    assert Path(first.cfg.run.dir) == tmp_path / "run/stages/0-first" and first.cfg.run.name == "staged-first"
    assert Path(second.cfg.run.dir) == tmp_path / "run/stages/1-second"
    assert (first.cfg.model.path, first.chained) == ("builtin", False)
    assert (second.cfg.model.path, second.chained) == (str(tmp_path / "run/stages/0-first/final"), True)


def test_model_path_of_a_stage_and_of_the_command_line(tmp_path):
    stages = [{"name": "a"}, {"name": "b", "model": {"path": "builtin-vl"}}, {"name": "c"}]
    a, b, c = load_stages(_recipe(tmp_path, stages), ["model.path=builtin-teacher"]).stages
    assert a.cfg.model.path == "builtin-teacher"  # the command line's model.path is where the first stage starts
    assert (b.cfg.model.path, b.chained) == ("builtin-vl", False)  # a stage's own model.path wins
    assert c.cfg.model.path.endswith("stages/1-b/final") and c.chained
    by_override = load_stages(_recipe(tmp_path, stages), ["stages.c.model.path=builtin"]).stages[2]
    assert (by_override.cfg.model.path, by_override.chained) == ("builtin", False)


def test_the_default_run_dir_has_no_timestamp_so_a_rerun_continues(tmp_path):
    staged = load_stages(_recipe(tmp_path, [{"name": "a"}], run={"name": "mine", "output_dir": str(tmp_path)}))
    assert staged.run_dir == tmp_path / "mine"
    assert Path(staged.stages[0].cfg.run.dir) == tmp_path / "mine/stages/0-a"


def test_every_stage_is_validated_and_errors_name_the_stage_key(tmp_path):
    msg = _error(tmp_path, [{"name": "a"}, {"name": "b", "train": {"stepz": 3}, "optim.lr": -1}],
                 ["optim.warmup_steps=-1"])
    assert "- stages[1].train.stepz: unknown key. Did you mean 'steps'?" in msg
    assert "- stages[1].optim.lr: expected greater than 0; got -1" in msg
    # a problem not in a stage's own keys (here the command line's) is listed once per stage it breaks
    assert "- optim.warmup_steps (stage 0 'a'): expected greater" in msg
    assert "- optim.warmup_steps (stage 1 'b'): expected greater" in msg
    # a component's own parameter (the second, binding, pass) is checked too
    assert "- stages[0].task.digitz: unknown key" in _error(tmp_path, [{"name": "a", "task.digitz": 3}])
    assert "- stages[1].task.digitz: unknown key" in _error(tmp_path, [{"name": "a"}, {"name": "b"}],
                                                            ["stages.1.task.digitz=3"])


@pytest.mark.parametrize("stages, overrides, expected", [
    ({"name": "a"}, [], "stages: expected a list of stages"),
    ([], [], "stages: expected a list of stages"),
    ([{"train.steps": 3}], [], "stages[0].name: required"),
    (["text"], [], "stages[0]: expected a mapping"),
    ([{"name": "a b"}], [], "stages[0].name: required, letters, digits"),
    ([{"name": "a"}, {"name": "a"}], [], "stages[1].name: 'a' is used by an earlier stage"),
    ([{"name": "7"}], [], "stages[0].name: '7' is a number"),
    ([{"name": "a", "run": {"dir": "x"}}], [], "stages[0].run.dir: a stage runs in RUN/stages/0-a"),
    ([{"name": "a", "stages": []}], [], "stages[0].stages: a stage cannot hold stages"),
    ([{"name": "a"}], ["stages.b.train.steps=3"], "override 'stages.b.train.steps=3': no stage 'b' (stages: 0 or a)"),
    ([{"name": "a"}], ["stages.3.train.steps=3"], "no stage '3'"),
    ([{"name": "a"}], ["stages.a=3"], "expected stages.<index or name>.key=value"),
    ([{"name": "a"}], ["stages.a.run.dir=x"], "a stage runs in RUN/stages/<i>-<name>; set run.dir instead"),
])
def test_bad_stages_are_refused(tmp_path, stages, overrides, expected):
    assert expected in _error(tmp_path, stages, overrides)


def test_load_config_refuses_a_staged_recipe_and_names_the_fix(tmp_path):
    with pytest.raises(ConfigError, match=r"multi-stage recipe \(stages: a, b\); `rlvr train` runs it"):
        load_config(_recipe(tmp_path, [{"name": "a"}, {"name": "b"}]))


def test_cli_fails_before_any_stage_runs_and_config_show_prints_each_stage(tmp_path):
    recipe = _recipe(tmp_path, [{"name": "a"}, {"name": "b", "train.stepz": 2}])
    res = CliRunner().invoke(app, ["train", str(recipe), f"run.dir={tmp_path / 'run'}"])
    assert res.exit_code == 2 and "stages[1].train.stepz: unknown key" in res.output
    assert not (tmp_path / "run").exists()  # stage 0 was valid, but nothing ran
    recipe = _recipe(tmp_path, [{"name": "a"}, {"name": "b", "train.steps": 2}])
    res = CliRunner().invoke(app, ["config", "show", str(recipe), f"run.dir={tmp_path / 'run'}"])
    docs = [d for d in yaml.safe_load_all(res.output)]
    assert res.exit_code == 0 and [d["train"]["steps"] for d in docs] == [4, 2]
    assert docs[1]["model"]["path"] == str(tmp_path / "run/stages/0-a/final")
    (tmp_path / "run").mkdir()
    (tmp_path / "run/stages.json").write_text("{}")
    res = CliRunner().invoke(app, ["train", "--resume", str(tmp_path / "run")])
    assert res.exit_code == 2 and "is a multi-stage run; continue it by rerunning the command" in res.output


def _weights(model_dir: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(model_dir / "model.safetensors"))


def test_two_stages_run_chain_and_a_rerun_skips_the_finished_stage(tmp_path):
    """Stage `b` learns with lr 1e-12: Adam moves a weight by about lr per step, far below float32 resolution of
    the weights, so b's final weights equal a's to 1e-9 exactly when b started from a's final/ (a moved them by
    ~1e-3 from builtin). The first invocation stops b after 1 of its 2 steps; the rerun skips a and resumes b."""
    from rlvr.tracking import read_metrics
    from rlvr.trainer.stages import run_stages

    tiny = {"model": {"path": "builtin"}, "task": {"name": "addition", "digits": [1, 1], "eval_size": 8},
            "train": {"steps": 1, "prompts_per_step": 4, "mini_batches": 1},
            "rollout": {"n": 4, "max_new_tokens": 20},  # builtin solves ~20% of one-digit sums: a gradient
            "optim": {"lr": 1e-3, "warmup_steps": 0},
            "checkpoint": {"every": 1}, "logging": {"progress": False, "rollouts_every": 0}}
    recipe = tmp_path / "two.yaml"
    recipe.write_text(yaml.safe_dump({**tiny, "stages": [
        {"name": "a"}, {"name": "b", "train.steps": 2, "optim.lr": 1e-12}]}))
    run = tmp_path / "run"
    staged = load_stages(recipe, [f"run.dir={run}"])
    run_stages(staged, stop_after=1)  # a runs its one step; b stops after 1 of 2 steps (a checkpoint)
    a, b = run / "stages/0-a", run / "stages/1-b"
    summary = json.loads((run / "stages.json").read_text())
    assert [s["status"] for s in summary["stages"]] == ["done", "stopped"]
    assert summary["stages"][1]["model_path"] == str(a / "final")
    assert (a / "final").is_dir() and not (b / "final").exists() and (b / "checkpoints").is_dir()
    a_written = (a / "final/model.safetensors").stat().st_mtime_ns

    run_stages(load_stages(recipe, [f"run.dir={run}"]))  # the same command again
    assert (a / "final/model.safetensors").stat().st_mtime_ns == a_written  # a was skipped
    assert [m["step"] for m in read_metrics(a)] == [1]
    assert [m["step"] for m in read_metrics(b)] == [1, 2]  # b resumed from its step-1 checkpoint
    assert [s["status"] for s in json.loads((run / "stages.json").read_text())["stages"]] == ["done", "done"]

    from rlvr.models.loading import BUILTIN_DIR

    builtin = _weights(BUILTIN_DIR)
    start, end = _weights(a / "final"), _weights(b / "final")
    assert max((start[k] - builtin[k]).abs().max().item() for k in start) > 1e-4  # stage a learned
    assert max((end[k] - start[k]).abs().max().item() for k in start) < 1e-9  # b started from a's final/


def test_a_failed_stage_is_recorded_and_a_rerun_with_other_stages_is_refused(tmp_path, monkeypatch):
    import rlvr.trainer.stages as driver

    def fake_train(cfg, resume, stop_after):  # stage a finishes, stage b fails after writing its config
        run_dir = Path(cfg.run.dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text("")
        if cfg.run.name.endswith("-b"):
            raise RuntimeError("out of memory")
        (run_dir / "final").mkdir()
        (run_dir / "final/config.json").write_text("{}")
        return run_dir

    monkeypatch.setattr(driver, "train", fake_train)
    recipe = _recipe(tmp_path, [{"name": "a"}, {"name": "b"}], run={"dir": str(tmp_path / "run")})
    with pytest.raises(RuntimeError, match="out of memory"):
        driver.run_stages(load_stages(recipe))
    stages = json.loads((tmp_path / "run/stages.json").read_text())["stages"]
    assert [s["status"] for s in stages] == ["done", "failed"]
    assert stages[1]["error"] == "RuntimeError: out of memory"
    calls = []
    monkeypatch.setattr(driver, "train", lambda cfg, resume, stop_after: calls.append((cfg.run.name, resume)))
    other = tmp_path / "other"
    other.mkdir()
    renamed = load_stages(_recipe(other, [{"name": "a"}, {"name": "c"}], run={"dir": str(tmp_path / "run")}))
    with pytest.raises(ConfigError, match=r"holds a staged run with stages \['a', 'b'\], this recipe has \['a', 'c'\]"):
        driver.run_stages(renamed)
    driver.run_stages(load_stages(recipe))  # the same recipe again: a skipped, b resumed (its config.yaml exists)
    assert calls == [("staged-b", True)]
