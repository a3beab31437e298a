"""The lab's premise, power, equal-work and definition checks, on hand-made run directories (no training)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from rlvr.config import ConfigError
from rlvr.lab.finding import load_finding
from rlvr.lab.plots import forest_rows, plot_forest
from rlvr.lab.premise import measure_premise, plan_premise
from rlvr.lab.stats import equivalence_power, seeds_for_equivalence
from rlvr.lab.run import (
    check_same_definition, earlier_analyses, finding_overrides, plan_finding, power_report,
    run_finding,
)
from rlvr.lab.work import work_issues


def write(path: Path, **changes) -> Path:
    data = {"name": "tiny", "paper": "test", "claim": "dr_grpo beats grpo",
            "arms": {"grpo": {"recipe": "grpo"}, "dr_grpo": {"recipe": "dr_grpo"}},
            "control": "grpo", "treatment": "dr_grpo", "metric": "pass@1", "direction": "higher",
            "min_effect": 0.02, "steps": 2, "seeds": 2, "eval": {"n": 4, "ks": [1, 4]}}
    data.update(changes)
    path.write_text(yaml.safe_dump(data))
    return path


def fake_eval(run_dir: Path, **values) -> None:
    """A finished evaluation-only run: eval_after.json with pass@k/maj@k as given (e.g. pass_1=0.2)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    result = {"pass@k": {}, "maj@k": {}, "problems": [], "accuracy": 0.0}
    for key, v in values.items():
        kind, k = key.split("_")
        result[f"{kind}@k"][k] = v
    (run_dir / "eval_after.json").write_text(json.dumps(result))


PREMISE = {"text": "the vote beats a single sample by 10 points",
           "runs": {"base": {"recipe": "grpo", "train": False}},
           "checks": [{"left": "base.maj@4", "minus": "base.pass@1", "op": ">=", "value": 0.10}]}


def test_a_k_that_is_not_evaluated_is_an_error_before_anything_runs(tmp_path):
    with pytest.raises(ConfigError, match=r"pass@16 needs k=16 in eval.ks"):
        load_finding(write(tmp_path / "f.yaml", metric="pass@16"))
    with pytest.raises(ConfigError, match=r"report: maj@8 needs k=8"):
        load_finding(write(tmp_path / "f.yaml", report=["maj@8"]))
    bad = {**PREMISE, "checks": [{"left": "base.maj@16", "op": ">=", "value": 0.8}]}
    with pytest.raises(ConfigError, match=r"premise.checks\[0\].left: maj@16 needs k=16"):
        load_finding(write(tmp_path / "f.yaml", premise=bad))


def test_equal_with_no_band_and_bad_premise_references_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="min_effect > 0"):
        load_finding(write(tmp_path / "f.yaml", direction="equal", min_effect=0.0))
    with pytest.raises(ConfigError, match="RUN one of the premise's runs"):
        load_finding(write(tmp_path / "f.yaml", premise={**PREMISE, "checks": [{"left": "nope.pass@1"}]}))
    with pytest.raises(ConfigError, match="not one of the arms"):
        load_finding(write(tmp_path / "f.yaml", premise={**PREMISE, "runs": {"base": {"arm": "ppo"}}}))
    with pytest.raises(ConfigError, match="either an arm"):
        load_finding(write(tmp_path / "f.yaml", premise={**PREMISE, "runs": {"base": {"arm": "grpo",
                                                                                       "recipe": "grpo"}}}))


def test_premise_not_met_is_the_verdict_and_no_arm_is_spent(tmp_path):
    finding = load_finding(write(tmp_path / "f.yaml", premise=PREMISE))
    out = tmp_path / "out"
    # the premise's own run, already finished: maj@4 0.25 against pass@1 0.2 is 5 points, not 10
    fake_eval(out / "premise" / "runs" / "base" / "seed0", pass_1=0.2, maj_4=0.25, pass_4=0.5)
    result = run_finding(finding, out, jobs=1)
    assert result["verdict"] == "premise not met"
    assert result["premise"]["met"] is False
    assert result["premise"]["checks"][0]["value"] == pytest.approx(0.05)
    assert "base.maj@4 - base.pass@1 >= 0.1" in result["premise"]["checks"][0]["check"]
    assert not (out / "runs").exists()  # no arm ran
    saved = json.loads((out / "lab.json").read_text())
    assert saved["verdict"] == "premise not met" and "--run-anyway" in saved["why"]
    assert "premise not met" in (out / "lab.md").read_text() and (out / "lab.png").stat().st_size > 0


def test_a_premise_check_on_an_arm_reuses_that_arms_first_seed_run(tmp_path):
    premise = {"text": "t", "runs": {"control": {"arm": "grpo"}},
               "checks": [{"left": "control.pass@1", "op": ">=", "value": 0.3}]}
    finding = load_finding(write(tmp_path / "f.yaml", premise=premise, seeds=3, first_seed=4))
    out = tmp_path / "out"
    runs = plan_finding(finding, out)
    planned = plan_premise(finding, out, runs, finding_overrides(finding))
    assert planned["control"].run_dir == out / "runs" / "grpo" / "seed4"
    run_dir = planned["control"].run_dir
    fake_eval(run_dir, pass_1=0.35)
    (run_dir / "final").mkdir()
    (run_dir / "final" / "config.json").write_text("{}")
    measured = measure_premise(finding, planned)
    assert measured["met"] and measured["checks"][0]["value"] == pytest.approx(0.35)
    # an unfinished run is not a measurement, and does not hold
    (run_dir / "eval_after.json").unlink()
    assert measure_premise(finding, planned)["met"] is False


def test_the_equal_work_check_flags_a_short_arm_and_a_distant_one(tmp_path):
    finding = load_finding(write(tmp_path / "f.yaml", rollout_tokens=240_000,
                                 arms={"grpo": {"recipe": "grpo"}, "dr_grpo": {"recipe": "dr_grpo"},
                                       "other": {"recipe": "grpo"}}))
    work = {"grpo": {"rollout_tokens": 240_500.0}, "dr_grpo": {"rollout_tokens": 235_680.0},  # 1.8% short
            "other": {"rollout_tokens": 239_000.0}}
    issues = work_issues(finding, work)
    assert issues == ["dr_grpo stopped at its step cap 1.8% short of the 240,000-token budget"]
    work["other"]["rollout_tokens"] = 260_000.0  # 8.1% more than the control, and not short
    issues = work_issues(finding, work)
    assert len(issues) == 2 and "other sampled +8.1% rollout tokens against grpo" in issues[1]
    # without a declared budget only the control comparison applies
    plain = load_finding(write(tmp_path / "g.yaml"))
    assert work_issues(plain, {"grpo": {"rollout_tokens": 100.0}, "dr_grpo": {"rollout_tokens": 104.0}}) == []


def test_power_is_stated_from_the_declared_spread(tmp_path):
    finding = load_finding(write(tmp_path / "f.yaml", seeds=5, min_effect=0.5,
                                 spread={"sd": 1.0, "source": "a pilot"}))
    report = power_report(finding)
    assert report["seeds_for_80"] == 34 and 0.0 < report["power"] < 0.5  # d = 0.5 at 5 seeds: about 0.11
    assert "seeds for 80%: 34" in report["line"] and "a pilot" in report["line"]
    assert power_report(load_finding(write(tmp_path / "g.yaml"))) is None
    # equivalence with a band twice the sd: 2 * Phi(2 * sqrt(20) - t(0.975, 19)) - 1
    from scipy.stats import norm, t

    expected = 2 * norm.cdf(2 * math.sqrt(20) - t.ppf(0.975, 19)) - 1
    assert equivalence_power(20, 1.0, 2.0) == pytest.approx(expected)
    assert equivalence_power(1, 1.0, 2.0) == 0.0
    need = seeds_for_equivalence(1.0, 0.5)
    assert equivalence_power(need, 1.0, 0.5) >= 0.8 > equivalence_power(need - 1, 1.0, 0.5)


def test_an_out_made_with_other_recipe_contents_is_refused(tmp_path):
    recipe = tmp_path / "mine.yaml"
    recipe.write_text((Path(__file__).resolve().parents[2] / "recipes" / "grpo.yaml").read_text())
    finding = load_finding(write(tmp_path / "f.yaml", arms={"grpo": {"recipe": "grpo"},
                                                            "mine": {"recipe": str(recipe)}}, treatment="mine"))
    out = tmp_path / "out"
    out.mkdir()
    from rlvr.lab.finding import dump_finding
    from rlvr.lab.run import definition_record

    (out / "finding.yaml").write_text(dump_finding(finding))
    (out / "definition.json").write_text(json.dumps(definition_record(finding)))
    check_same_definition(finding, out)  # the same: fine
    recipe.write_text(recipe.read_text().replace("lr: 1.0e-4", "lr: 3.0e-4"))
    with pytest.raises(ConfigError, match="the contents of arms.mine's recipe"):
        check_same_definition(finding, out)


def test_a_second_analysis_keeps_the_first(tmp_path):
    (tmp_path / "lab.json").write_text(json.dumps({"seeds": [0, 1, 2, 3, 4], "verdict": "inconclusive",
                                                   "why": "w", "effects": {}, "interval_method": "t"}))
    history = earlier_analyses(tmp_path, {"seeds": list(range(10))})
    assert history == [{"seeds": [0, 1, 2, 3, 4], "verdict": "inconclusive", "why": "w", "effects": {},
                        "interval_method": "t"}]
    assert earlier_analyses(tmp_path, {"seeds": [0, 1, 2, 3, 4]}) == []  # the same seeds: a re-analysis


def test_the_forest_plot_scales_by_min_effect_and_signs_by_direction(tmp_path):
    suite = {"findings": [
        {"finding": "a", "verdict": "reproduced", "direction": "lower", "min_effect": 0.02,
         "effect": {"mean": -0.04, "lo": -0.06, "hi": -0.02, "n": 5}},
        {"finding": "b", "verdict": "premise not met", "direction": "higher", "min_effect": 0.02, "effect": None},
        {"finding": "c", "verdict": "inconclusive", "direction": "equal", "min_effect": 0.05,
         "effect": {"mean": 0.01, "lo": -0.04, "hi": 0.06, "n": 5}},
    ]}
    rows = forest_rows(suite)
    assert rows[0]["scaled"] == pytest.approx((2.0, 1.0, 3.0))  # a decrease, claimed: to the right
    assert rows[1]["scaled"] is None
    assert rows[2]["scaled"] == pytest.approx((0.2, -0.8, 1.2))
    plot_forest(suite, tmp_path / "suite.png")
    assert (tmp_path / "suite.png").stat().st_size > 1000
