"""`rlvr lab`: a finding's arms x seeds as real runs through the sweep runner, its table, plot and verdict."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlvr.config import ConfigError
from rlvr.lab.finding import list_findings, load_finding
from rlvr.lab.run import check_same_definition, plan_finding, plan_prepare, run_finding, run_suite

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TINY = ["task={name: countdown, eval_size: 6}", "train.prompts_per_step=2", "rollout.n=2", "eval.n=2",
        "train.micro_batch_size=8"]


def write_finding(path: Path, **changes) -> Path:
    data = {
        "name": "tiny", "paper": "test", "claim": "dr_grpo differs from grpo",
        "arms": {"base": {"recipe": "grpo", "train": False}, "grpo": {"recipe": "grpo"},
                 "dr_grpo": {"recipe": "dr_grpo"}},
        "control": "grpo", "treatment": "dr_grpo", "metric": "pass@1",
        "report": ["pass@2", "wrong_length_growth", "entropy_final", "rollout_tokens"],
        "direction": "higher", "min_effect": 0.02, "steps": 2, "seeds": 2, "first_seed": 7,
        "eval": {"n": 2, "ks": [1, 2]}, "common": TINY,
    }
    data.update(changes)
    path.write_text(yaml.safe_dump(data))
    return path


def test_lab_runs_arms_by_seeds_and_writes_table_plot_and_verdict(tmp_path):
    finding = load_finding(write_finding(tmp_path / "tiny.yaml"))
    out = tmp_path / "out"
    result = run_finding(finding, out, jobs=2)
    assert result["failed_runs"] == []
    assert result["seeds"] == [7, 8]
    for arm in ("base", "grpo", "dr_grpo"):
        row = result["arms"][arm]["pass@1"]
        assert row["n"] == 2 and set(row["values"]) == {"7", "8"}
        assert 0.0 <= row["mean"] <= 1.0 and row["lo"] <= row["mean"] <= row["hi"]
    # training arms have curve metrics, the evaluation-only arm has none
    assert result["arms"]["grpo"]["rollout_tokens"]["mean"] > 0
    assert result["arms"]["base"]["rollout_tokens"]["mean"] == 0
    assert result["verdict"] in ("reproduced", "not reproduced", "inconclusive")
    assert "dr_grpo - grpo on pass@1" in result["why"]
    # paired over the two seeds: the effect is the mean of the per-seed differences
    values = result["arms"]
    diffs = [values["dr_grpo"]["pass@1"]["values"][s] - values["grpo"]["pass@1"]["values"][s] for s in ("7", "8")]
    assert result["effects"]["pass@1"]["mean"] == pytest.approx(sum(diffs) / 2)
    table = (out / "lab.md").read_text()
    assert "| grpo | 2 |" in table and "| dr_grpo | 2 |" in table and "Verdict: **" in table
    assert (out / "lab.png").stat().st_size > 0
    assert json.loads((out / "lab.json").read_text())["finding"] == "tiny"
    assert yaml.safe_load((out / "finding.yaml").read_text())["seeds"] == 2
    assert (out / "runs" / "base" / "seed7" / "eval_after.json").is_file()
    assert (out / "runs" / "grpo" / "seed8" / "final" / "config.json").is_file()
    # the base arm evaluated the lab model, the training arms trained it on the lab task
    cfg = yaml.safe_load((out / "runs" / "grpo" / "seed7" / "config.yaml").read_text())
    assert cfg["model"]["path"] == "builtin-lab" and cfg["task"]["name"] == "countdown"
    assert cfg["train"]["steps"] == 2 and cfg["run"]["seed"] == 7

    # the same command again re-runs nothing and writes the same numbers
    stamp = (out / "runs" / "grpo" / "seed7" / "eval_after.json").stat().st_mtime
    again = run_finding(finding, out, jobs=1)
    assert (out / "runs" / "grpo" / "seed7" / "eval_after.json").stat().st_mtime == stamp
    assert again["arms"] == result["arms"] and again["verdict"] == result["verdict"]


def test_a_finding_on_running_total_trains_its_model_and_measures_lengths(tmp_path):
    """2 arms x 2 seeds x 2 steps on the second lab task: its model, its budget, the length metrics, the curves."""
    finding = load_finding(write_finding(
        tmp_path / "total.yaml", task="running_total", metric="eval_length", direction="higher", min_effect=1.0,
        arms={"grpo": {"recipe": "grpo"}, "dr_grpo": {"recipe": "dr_grpo"}},
        report=["pass@1", "right_length", "length_growth", "maj@2"],
        common=["task={name: running_total, eval_size: 6}", *TINY[1:]]))
    out = tmp_path / "out"
    result = run_finding(finding, out, jobs=2)
    assert result["failed_runs"] == [] and result["seeds"] == [7, 8]
    cfg = yaml.safe_load((out / "runs" / "grpo" / "seed7" / "config.yaml").read_text())
    assert cfg["model"]["path"] == "builtin-lab-total" and cfg["task"]["name"] == "running_total"
    assert cfg["rollout"]["max_new_tokens"] == 160
    for arm in ("grpo", "dr_grpo"):
        assert result["arms"][arm]["eval_length"]["mean"] > 5  # tokens of a worked answer
        assert 0.0 <= result["arms"][arm]["maj@2"]["mean"] <= 1.0
    assert result["verdict"] in ("reproduced", "not reproduced", "inconclusive")
    assert (out / "curves.png").stat().st_size > 0 and result["curves"] == "curves.png"


def test_lab_cli_list_compare_plan_and_errors(tmp_path):
    rlvr = [sys.executable, "-m", "rlvr", "lab"]
    listed = subprocess.run([*rlvr, "--list"], capture_output=True, text=True, cwd=ROOT)
    assert listed.returncode == 0, listed.stderr
    for name in list_findings():
        assert name in listed.stdout + listed.stderr  # rich's table goes to the console rlvr prints on
    assert {"boundary", "nsr_passk", "entropy", "dr_grpo_length"} <= set(list_findings())
    # every shipped finding plans: its recipes exist and every arm's config validates
    for name in list_findings():
        finding = load_finding(name)
        runs = plan_finding(finding, tmp_path / name)
        assert len(runs) == len(finding.arms) * finding.seeds
        assert [len(stage) for stage in plan_prepare(finding, tmp_path / name)] == [finding.seeds] * len(
            finding.prepare)

    bad = subprocess.run([*rlvr, "no_such_finding"], capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode != 0 and "not a shipped finding" in bad.stderr + bad.stdout

    with pytest.raises(ConfigError, match="control"):
        load_finding(write_finding(tmp_path / "a.yaml", control="nope"))
    with pytest.raises(ConfigError, match="metric 'pass_at_one' is unknown"):
        load_finding(write_finding(tmp_path / "b.yaml", metric="pass_at_one"))
    with pytest.raises(ConfigError, match=r"\{prepare.rm\} names no earlier preparation step"):
        load_finding(write_finding(tmp_path / "p.yaml", arms={
            "grpo": {"recipe": "grpo", "overrides": ["eval.select_model={prepare.rm}/final"]},
            "dr_grpo": {"recipe": "dr_grpo"}}))
    with pytest.raises(ConfigError, match="prepare.rm"):  # a step may name only the steps before it
        load_finding(write_finding(tmp_path / "q.yaml", prepare={
            "rm": {"command": "rm", "recipe": "rm_bt", "overrides": ["data.path={prepare.rm}/x.jsonl"]}}))
    # an OUT made by another definition of the finding is refused; more seeds or new prose continue it
    made = load_finding(write_finding(tmp_path / "made.yaml"))
    (tmp_path / "made").mkdir()
    (tmp_path / "made" / "finding.yaml").write_text(yaml.safe_dump(
        {k: v for k, v in made.model_dump(mode="json").items() if k != "prepare"}))  # written before `prepare`
    check_same_definition(load_finding(write_finding(tmp_path / "more.yaml", seeds=9, notes="x")), tmp_path / "made")
    with pytest.raises(ConfigError, match=r"holds runs of another definition of 'tiny' \(it differs in eval, steps\)"):
        check_same_definition(load_finding(write_finding(tmp_path / "other.yaml", steps=3, eval={"n": 4, "ks": [1, 2]})),
                              tmp_path / "made")
    with pytest.raises(ConfigError, match="eval.ks"):
        load_finding(write_finding(tmp_path / "c.yaml", eval={"n": 2, "ks": [4]}))
    with pytest.raises(ConfigError, match="recipe 'no_such_recipe' not found"):
        plan_finding(load_finding(write_finding(tmp_path / "d.yaml", arms={
            "grpo": {"recipe": "grpo"}, "dr_grpo": {"recipe": "no_such_recipe"}})), tmp_path / "d")

    # compare: my recipe against grpo, at explicit seeds; 2 steps each, the lab's defaults otherwise
    mine = tmp_path / "mine.yaml"
    mine.write_text((ROOT / "recipes" / "dr_grpo.yaml").read_text())
    out = tmp_path / "cmp"
    done = subprocess.run([*rlvr, "compare", str(mine), "grpo", "eval.n=2", "eval.ks=[1]", f"common={TINY}",
                           "--seed-list", "3", "--steps", "1", "--out", str(out)], capture_output=True, text=True,
                          cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads((out / "lab.json").read_text())
    assert result["treatment"] == "mine" and result["control"] == "grpo" and result["seeds"] == [3]
    assert result["verdict"] == "inconclusive"  # one seed: an infinite interval decides nothing


def test_lab_prepares_a_reward_model_per_seed_and_compares_its_pick_with_the_vote(tmp_path):
    """rm_best_of in miniature: a GRPO run stores its rollouts, `rlvr rm` trains on them, and two evaluation
    arms of the same samples pick by majority vote and by the reward model."""
    finding = load_finding(write_finding(
        tmp_path / "rm.yaml", seeds=1, first_seed=3, metric="best_of@2", report=["pass@1", "maj@2", "rm@2"],
        prepare={"mine": {"recipe": "grpo", "overrides": ["train.steps=2", "eval.after=false",
                                                          "logging.rollouts_every=1", "logging.rollouts_per_step=64",
                                                          "train.prompts_per_step=16", "rollout.n=4"]},
                 "rm": {"command": "rm", "recipe": "rm_bt", "overrides": [
                     "data.path={prepare.mine}/rollouts.jsonl", "model.path=builtin-lab", "train.steps=2",
                     "train.eval_every=1", "data.max_length=160"]}},
        arms={"vote": {"recipe": "grpo", "train": False},
              "picked": {"recipe": "grpo", "train": False, "overrides": ["eval.select_model={prepare.rm}/final"]}},
        control="vote", treatment="picked", common=[*TINY[:1], "task.eval_size=4", "eval.n=2"]))
    out = tmp_path / "out"
    result = run_finding(finding, out)
    assert result["failed_runs"] == []
    seed_dir = out / "prepare" / "runs"
    assert (seed_dir / "mine" / "seed3" / "rollouts.jsonl").is_file()
    assert (seed_dir / "rm" / "seed3" / "final" / "config.json").is_file()
    rm_cfg = yaml.safe_load((seed_dir / "rm" / "seed3" / "config.yaml").read_text())
    assert rm_cfg["data"]["path"] == str(seed_dir / "mine" / "seed3" / "rollouts.jsonl") and rm_cfg["run"]["seed"] == 3
    vote = json.loads((out / "runs" / "vote" / "seed3" / "eval_after.json").read_text())
    picked = json.loads((out / "runs" / "picked" / "seed3" / "eval_after.json").read_text())
    assert "rm@k" not in vote and set(picked["rm@k"]) == {"1", "2"}
    # the same seed draws the same samples: only the selection differs
    assert [p["sample_correct"] for p in vote["problems"]] == [p["sample_correct"] for p in picked["problems"]]
    arms = result["arms"]
    assert arms["vote"]["best_of@2"]["values"]["3"] == pytest.approx(vote["maj@k"]["2"])
    assert arms["picked"]["best_of@2"]["values"]["3"] == pytest.approx(picked["rm@k"]["2"])
    # a second run finds everything done
    again = run_finding(finding, out)
    assert again["arms"] == result["arms"]


def test_lab_all_runs_each_finding_in_turn_and_reports_one_that_cannot_run(tmp_path):
    """`rlvr lab all` as run_suite: two tiny findings, one of whose OUT holds another definition; the other
    still runs and the suite table names both."""
    ok = load_finding(write_finding(tmp_path / "ok.yaml", name="ok", seeds=1, steps=1,
                                    arms={"grpo": {"recipe": "grpo"}, "dr_grpo": {"recipe": "dr_grpo"}}))
    clash = load_finding(write_finding(tmp_path / "clash.yaml", name="clash", seeds=1, steps=1))
    (tmp_path / "suite" / "clash").mkdir(parents=True)
    (tmp_path / "suite" / "clash" / "finding.yaml").write_text(yaml.safe_dump(
        {**clash.model_dump(mode="json"), "steps": 5}))
    suite = run_suite([clash, ok], tmp_path / "suite", jobs=2)
    rows = {r["finding"]: r for r in suite["findings"]}
    assert [r["finding"] for r in suite["findings"]] == ["clash", "ok"]
    assert rows["clash"]["verdict"] == "error" and "another definition of 'clash'" in rows["clash"]["why"]
    assert rows["ok"]["verdict"] == "inconclusive"  # one seed: an infinite interval decides nothing
    assert rows["ok"]["metric"] == "pass@1" and rows["ok"]["failed_runs"] == []
    assert (tmp_path / "suite" / "ok" / "lab.json").is_file()
    table = (tmp_path / "suite" / "suite.md").read_text()
    assert "| clash | error |" in table and "| ok | inconclusive | pass@1: " in table
    assert "points (1 seed: no interval)" in table  # a rate's effect is signed, in points
    assert "2 findings in" in table and "2 runs at a time" in table
    assert json.loads((tmp_path / "suite" / "suite.json").read_text())["findings"][1]["finding"] == "ok"

    # the command line: bad --jobs and a budget flag meant for `compare` are refused before anything runs
    rlvr = [sys.executable, "-m", "rlvr", "lab"]
    for args, message in ((["all", "--steps", "3"], "--steps/--rollout-tokens are for `compare`"),
                          (["all", "--jobs", "0"], "--jobs: expected a positive number")):
        bad = subprocess.run([*rlvr, *args, "--out", str(tmp_path / "no")], capture_output=True, text=True, cwd=ROOT)
        assert bad.returncode != 0 and message in bad.stderr + bad.stdout, bad.stderr
        assert not (tmp_path / "no").exists()
