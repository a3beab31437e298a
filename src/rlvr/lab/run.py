"""`rlvr lab`: run a finding's arms x seeds through the sweep runner, then intervals, a table, a plot, a verdict.

    rlvr lab dr_grpo_length                       # a shipped finding at its seeds
    rlvr lab dr_grpo_length --seeds 5 --first-seed 100 --out runs/lab/dr
    rlvr lab compare my.yaml grpo --seeds 5       # does my recipe beat GRPO here?
    rlvr lab all                                  # every shipped finding, one after another

Every (arm, seed) is an ordinary `rlvr train` (or, for a `train: false` arm, `rlvr eval`) run in
OUT/runs/ARM/seedS, so an interrupted finding continues where it stopped. OUT gets finding.yaml (the definition
as run), lab.json (every value per seed, the intervals and the verdict), lab.md (the table) and lab.png.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from rlvr.config import ConfigError
from rlvr.lab.finding import PREPARE_REF, Finding, dump_finding, lab_common, resolve_recipe
from rlvr.lab.metrics import is_rate, run_metric, train_steps
from rlvr.lab.plots import CURVES, plot_curves, plot_forest, plot_results
from rlvr.lab.premise import measure_premise, plan_premise, premise_line
from rlvr.lab.stats import (
    Method, difference_interval, equivalence_power, mean_interval, paired_power, seeds_for_equivalence,
    seeds_for_power, t_quantile, verdict,
)
from rlvr.lab.work import arm_work, work_issues, work_summary
from rlvr.runtime import console
from rlvr.trainer.sweep import PlannedArm, SweepRun, plan_runs, run_sweep


def finding_overrides(finding: Finding) -> list[str]:
    """The overrides every arm of `finding` shares: the lab's task and model, the budget, the evaluation."""
    ev = finding.eval
    common = [*lab_common(finding.task), f"train.steps={finding.steps}", f"eval.n={ev.n}", f"eval.ks={list(ev.ks)}"]
    if finding.rollout_tokens is not None:
        common.append(f"train.rollout_token_budget={finding.rollout_tokens}")
    if ev.size is not None:
        common.append(f"eval.size={ev.size}")
    return [*common, *finding.common]


def _expand(overrides: list[str], out: Path) -> list[str]:
    """{prepare.NAME} -> that preparation step's run directory for the run's seed ({seed}: see plan_runs)."""
    return [PREPARE_REF.sub(lambda m: str(out / "prepare" / "runs" / m[1] / "seed{seed}"), o) for o in overrides]


def plan_prepare(finding: Finding, out: Path) -> list[list[SweepRun]]:
    """The preparation steps, in order, each one run per seed in OUT/prepare/runs/NAME/seedS: a `train` step
    is a lab run (the lab's task and model), an `rm` step an `rlvr rm`; done once its final/ is written."""
    stages = []
    for name, step in finding.prepare.items():
        arm = PlannedArm(name, resolve_recipe(step.recipe, f"prepare.{name}.recipe"), _expand(step.overrides, out),
                         verb=step.command, done_file="final/config.json")
        common = lab_common(finding.task) if step.command == "train" else ["logging.progress=false"]
        stages.append(plan_runs([arm], finding.seed_list(), out / "prepare", common))
    return stages


def plan_finding(finding: Finding, out: Path) -> list[SweepRun]:
    """Every (arm, seed) run, each config validated before anything starts."""
    arms = [PlannedArm(name, resolve_recipe(arm.recipe, f"arms.{name}.recipe"), _expand(arm.overrides, out),
                       None if arm.train else (arm.model or finding.model()))
            for name, arm in finding.arms.items()]
    return plan_runs(arms, finding.seed_list(), out, finding_overrides(finding))


def run_finding(finding: Finding, out: Path, *, jobs: int = 1, method: Method = "t",
                run_anyway: bool = False) -> dict[str, Any]:
    """Run (or continue) the finding in `out` and write its results; returns lab.json's content. The premise
    is measured first: when it is not met the arms are not run (unless `run_anyway`) and the verdict is
    "premise not met"."""
    stages = plan_prepare(finding, out)
    runs = plan_finding(finding, out)
    premise_runs = plan_premise(finding, out, runs, finding_overrides(finding))
    check_same_definition(finding, out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "finding.yaml").write_text(dump_finding(finding))
    (out / "definition.json").write_text(json.dumps(definition_record(finding), indent=2) + "\n")
    console.print(f"lab: {finding.name}: {len(finding.arms)} arms x {finding.seeds} seeds "
                  f"(seeds {finding.seed_list()}) -> {out}")
    power = power_report(finding)
    if power is not None:
        console.print(f"lab: {power['line']}")
        if power["power"] < 0.5:
            console.print(f"[yellow]lab: warning: {finding.seeds} seeds give {power['power']:.0%} power at "
                          f"min_effect; {power['seeds_for_80']} would give 80%[/yellow]")
    premise = None
    if premise_runs:
        distinct = list({r.run_dir: r for r in premise_runs.values()}.values())  # two checks may share a run
        own = [r for r in distinct if r.run_dir.is_relative_to(out / "premise")]
        arm_first = [r for r in distinct if r not in own]
        premise_failed = run_sweep(own, out / "premise", jobs, summarize=False)["failed"] if own else []
        if arm_first:
            premise_failed += run_sweep(arm_first, out, jobs, summarize=False)["failed"]
        premise = measure_premise(finding, premise_runs)
        premise["failed_runs"] = premise_failed
        console.print(f"lab: {premise_line(premise)}")
        if not premise["met"] and not run_anyway:
            result = premise_result(finding, premise, method)
            result["power"] = power
            write_results(result, out)
            return result
    failed = []
    for name, stage in zip(finding.prepare, stages):
        console.print(f"lab: preparation '{name}'")
        failed += [f"prepare {f}" for f in run_sweep(stage, out / "prepare", jobs, summarize=False)["failed"]]
    summary = run_sweep(runs, out, jobs)
    result = analyze(finding, runs, method=method)
    result["failed_runs"] = failed + summary.get("failed", [])
    result["power"] = power
    result["observed"] = observed_power(finding, result)
    work = arm_work(finding, runs)
    result["work"] = work_summary(work)
    result["work_issues"] = work_issues(finding, work)
    if result["work_issues"]:
        result["verdict"] += f" (unequal work: {'; '.join(result['work_issues'])})"
    if premise is not None:
        result["premise"] = premise
        if not premise["met"]:
            result["verdict"] = f"premise not met (arms run anyway: {result['verdict']})"
    result["analyses"] = earlier_analyses(out, result)
    if plot_curves(step_curves(runs), out / "curves.png", finding.name):
        result["curves"] = "curves.png"
    write_results(result, out)
    return result


def step_curves(runs: list[SweepRun]) -> dict[str, dict[int, dict[str, list[float]]]]:
    """Per training arm and seed, the per-step values of the curve metrics (plots.CURVES) from metrics.jsonl."""
    curves: dict[str, dict[int, dict[str, list[float]]]] = {}
    for run in runs:
        if run.model is not None or not (run.run_dir / "metrics.jsonl").is_file():
            continue
        steps = train_steps(run.run_dir)  # training steps, not evaluation lines
        curves.setdefault(run.name, {})[run.seed] = {
            key: [float(s[key]) for s in steps if isinstance(s.get(key), (int, float))] for key, _ in CURVES}
    return curves


def premise_result(finding: Finding, premise: dict[str, Any], method: Method) -> dict[str, Any]:
    """lab.json for a finding whose premise failed: the measurement, no arms spent."""
    return {"finding": finding.name, "version": finding.version, "paper": finding.paper, "claim": finding.claim,
            "metric": finding.metric, "direction": finding.direction, "min_effect": finding.min_effect,
            "control": finding.control, "treatment": finding.treatment, "seeds": finding.seed_list(),
            "interval_method": method, "arms": {}, "effects": {}, "premise": premise,
            "verdict": "premise not met", "why": premise_line(premise) + "; the arms were not run "
            "(--run-anyway runs them)", "failed_runs": premise.get("failed_runs", [])}


def definition_record(finding: Finding) -> dict[str, Any]:
    """What else defines a finding's runs besides its YAML: each recipe's contents (a hash) and rlvr's version."""
    import hashlib
    import importlib.metadata

    recipes = {}
    for where, recipe in ([(f"arms.{n}", a.recipe) for n, a in finding.arms.items()]
                          + [(f"prepare.{n}", st.recipe) for n, st in finding.prepare.items()]
                          + [(f"premise.runs.{n}", r.recipe) for n, r in
                             (finding.premise.runs.items() if finding.premise else []) if r.recipe]):
        path = resolve_recipe(recipe, f"{where}.recipe")
        recipes[where] = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return {"rlvr": importlib.metadata.version("rlvr"), "recipes": recipes}


def power_report(finding: Finding) -> dict[str, Any] | None:
    """The power of the finding's seeds at min_effect, from its declared spread (None without one)."""
    if finding.spread is None or finding.min_effect <= 0:
        return None
    sd, m, n = finding.spread.sd, finding.min_effect, finding.seeds
    if finding.direction == "equal":
        power, need = equivalence_power(n, sd, m), seeds_for_equivalence(sd, m)
    else:
        power, need = paired_power(n, sd, m), seeds_for_power(sd, m)
    return {"sd": sd, "source": finding.spread.source, "seeds": n, "power": power, "seeds_for_80": need,
            "line": f"power at min_effect {m:g} with {n} seeds: {power:.0%} (per-seed sd {sd:.3g}, "
                    f"{finding.spread.source}); seeds for 80%: {need if need else '> 1000'}"}


def observed_power(finding: Finding, result: dict[str, Any]) -> dict[str, Any] | None:
    """The per-seed sd of the paired effect this run observed, and the power it implies at min_effect."""
    effect = result["effects"].get(finding.metric)
    if not effect or effect.get("n", 0) < 2 or not math.isfinite(effect["hi"]) or finding.min_effect <= 0:
        return None
    n = effect["n"]
    sd = (effect["hi"] - effect["lo"]) / 2 * math.sqrt(n) / t_quantile(0.975, n - 1)
    if sd == 0:
        return {"sd": 0.0, "seeds": n, "power": 1.0, "seeds_for_80": 2}
    if finding.direction == "equal":
        return {"sd": sd, "seeds": n, "power": equivalence_power(n, sd, finding.min_effect),
                "seeds_for_80": seeds_for_equivalence(sd, finding.min_effect)}
    return {"sd": sd, "seeds": n, "power": paired_power(n, sd, finding.min_effect),
            "seeds_for_80": seeds_for_power(sd, finding.min_effect)}


def earlier_analyses(out: Path, result: dict[str, Any]) -> list[dict[str, Any]]:
    """The analyses an earlier invocation wrote to OUT/lab.json on other seeds (e.g. before more seeds were
    added), kept in order; the current one is this result itself."""
    path = out / "lab.json"
    if not path.is_file():
        return []
    try:
        before = json.loads(path.read_text())
    except json.JSONDecodeError:
        return []
    history = list(before.get("analyses", []))
    if before.get("seeds") != result["seeds"] and "verdict" in before:
        history.append({k: before.get(k) for k in ("seeds", "verdict", "why", "effects", "interval_method")})
    return history


# What may change between invocations in one OUT: the seeds (more seeds continue a finding) and the prose.
_FREE_KEYS = ("seeds", "first_seed", "seed_values", "minutes", "notes", "title")


def check_same_definition(finding: Finding, out: Path) -> None:
    """Refuse to continue in an OUT whose finished runs were made by another definition of the finding (other
    arms, budget or evaluation, other recipe contents or another rlvr version): they would count as done and
    be analysed as if they were this one's."""
    import yaml

    record = out / "definition.json"
    if record.is_file():
        try:
            before_record = json.loads(record.read_text())
        except json.JSONDecodeError:
            before_record = None
        now_record = definition_record(finding)
        if before_record is not None and before_record != now_record:
            what = [k for k in ("rlvr",) if before_record.get(k) != now_record.get(k)]
            what += [f"the contents of {w}'s recipe" for w in sorted(set(before_record.get("recipes", {}))
                                                                      | set(now_record["recipes"]))
                     if before_record.get("recipes", {}).get(w) != now_record["recipes"].get(w)]
            raise ConfigError(f"--out: {out} holds runs made with {', '.join(what) or 'another definition'} "
                              f"different from now; pass a new --out, or remove {out} to start over")
    path = out / "finding.yaml"
    if not path.is_file():
        return
    try:
        before = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError:
        return
    now = finding.model_dump(mode="json")

    def earlier(key: str) -> Any:  # a key written before it existed: its default
        if key in before or key not in Finding.model_fields:
            return before.get(key)
        return Finding.model_fields[key].get_default(call_default_factory=True)

    changed = sorted(k for k in set(before) | set(now) if k not in _FREE_KEYS and earlier(k) != now.get(k))
    if changed:
        raise ConfigError(f"--out: {out} holds runs of another definition of '{finding.name}' (it differs in "
                          f"{', '.join(changed)}); pass a new --out, or remove {out} to start over")


def analyze(finding: Finding, runs: list[SweepRun], *, method: Method = "t") -> dict[str, Any]:
    """Per arm and metric: the value per seed and the mean's interval; per metric: the treatment - control
    interval; for the finding's metric: the verdict."""
    metrics = [finding.metric, *[m for m in finding.report if m != finding.metric]]
    values: dict[str, dict[str, dict[int, float]]] = {arm: {m: {} for m in metrics} for arm in finding.arms}
    for run in runs:
        if not run.done:
            continue
        for m in metrics:
            v = run_metric(m, run.run_dir)
            if not math.isnan(v):
                values[run.name][m][run.seed] = v
    arms: dict[str, Any] = {}
    for arm, by_metric in values.items():
        arms[arm] = {m: {"values": {str(s): v for s, v in sorted(vals.items())},
                         **(mean_interval(list(vals.values()), method=method).as_dict() if vals else {"n": 0})}
                     for m, vals in by_metric.items()}
    effects: dict[str, Any] = {}
    for m in metrics:
        t, c = values[finding.treatment][m], values[finding.control][m]
        if t and c:
            effects[m] = difference_interval(t, c, method=method).as_dict()
    primary = effects.get(finding.metric)
    if primary is None:
        decided = "inconclusive"
        why = "no finished runs in one of the arms"
    else:
        from rlvr.lab.stats import Interval

        effect = Interval.from_dict(primary)
        decided = verdict(effect, finding.direction, finding.min_effect)
        why = _why(finding, effect, decided)
    return {"finding": finding.name, "version": finding.version, "paper": finding.paper, "claim": finding.claim,
            "metric": finding.metric,
            "direction": finding.direction, "min_effect": finding.min_effect, "control": finding.control,
            "treatment": finding.treatment, "seeds": finding.seed_list(), "interval_method": method,
            "arms": arms, "effects": effects, "verdict": decided, "why": why}


def _why(finding: Finding, effect: Any, decided: str) -> str:
    side = {"higher": "> 0", "lower": "< 0", "equal": f"within ±{finding.min_effect:g}"}[finding.direction]
    return (f"{finding.treatment} - {finding.control} on {finding.metric}: {effect.mean:+.4g} "
            f"[{effect.lo:+.4g}, {effect.hi:+.4g}] (95%, {effect.method}, {effect.n} seeds"
            + (f"; seed(s) {', '.join(map(str, effect.dropped))} dropped: one arm did not finish them"
               if effect.dropped else "") + f"); claimed {side}"
            + ("" if finding.direction == "equal" else f", smallest effect that counts {finding.min_effect:g}")
            + f": {decided}")


def _fmt(m: str, d: dict[str, Any], *, signed: bool = False) -> str:
    """A mean [95% interval]; `signed` for a treatment - control effect (a rate's in percentage points)."""
    if not d.get("n"):
        return "n/a"
    scale, unit = (100.0, " points" if signed else "%") if is_rate(m) else (1.0, "")
    num = "+.3g" if signed else ".3g"
    lo, hi = d["lo"], d["hi"]
    if math.isinf(lo) or math.isinf(hi):
        return f"{scale * d['mean']:{num}}{unit} (1 seed: no interval)"
    if signed:
        return f"{scale * d['mean']:{num}} [{scale * lo:{num}}, {scale * hi:{num}}]{unit}"
    return f"{scale * d['mean']:{num}}{unit} [{scale * lo:{num}}, {scale * hi:{num}}]"


def results_table(result: dict[str, Any]) -> str:
    """The finding's markdown table: each arm's mean [95% interval] per metric, then the effect and verdict."""
    if not result["arms"]:
        lines = [f"**{result['finding']}**: {result['claim']} ({result['paper']})", "",
                 f"Verdict: **{result['verdict']}**. {result['why']}"]
        if result.get("power"):
            lines.append(f"Declared: {result['power']['line']}.")
        return "\n".join(lines)
    metrics = list(next(iter(result["arms"].values())))
    lines = [f"**{result['finding']}**: {result['claim']} ({result['paper']})", "",
             "| arm | seeds | " + " | ".join(metrics) + " |", "|" + "---|" * (len(metrics) + 2)]
    for arm, row in result["arms"].items():
        n = max((row[m].get("n", 0) for m in metrics), default=0)
        lines.append(f"| {arm} | {n} | " + " | ".join(_fmt(m, row[m]) for m in metrics) + " |")
    eff = result["effects"]
    lines.append(f"| {result['treatment']} − {result['control']} | paired | "
                 + " | ".join(_fmt(m, eff[m]) if m in eff else "n/a" for m in metrics) + " |")
    lines += ["", f"Verdict: **{result['verdict']}**. {result['why']}"]
    if result.get("premise"):
        lines.append(f"Premise ({result['premise']['text']}): {premise_line(result['premise'])}.")
    if result.get("power"):
        lines.append(f"Declared: {result['power']['line']}.")
    if result.get("observed"):
        o = result["observed"]
        lines.append(f"Observed: per-seed sd {o['sd']:.3g}, power at min_effect {o['power']:.0%} with {o['seeds']} "
                     f"seeds" + (f"; seeds for 80%: {o['seeds_for_80']}" if o.get("seeds_for_80") else "") + ".")
    if result.get("work"):
        cols = ["updates", "rollout_tokens", "train_tokens", "teacher_forward_tokens"]
        lines += ["", "| arm (work, mean over seeds) | " + " | ".join(cols) + " |", "|" + "---|" * (len(cols) + 1)]
        lines += [f"| {arm} | " + " | ".join(f"{w.get(c, 0):,.0f}" for c in cols) + " |"
                  for arm, w in result["work"].items()]
    if result.get("failed_runs"):
        lines.append(f"Failed runs (left out): {', '.join(result['failed_runs'])}")
    return "\n".join(lines)


def write_results(result: dict[str, Any], out: Path) -> None:
    (out / "lab.json").write_text(json.dumps(result, indent=2) + "\n")
    table = results_table(result)
    (out / "lab.md").write_text(table + "\n")
    plot_results(result, out / "lab.png")
    console.print(table)


def findings_listing(names: list[str]) -> list[tuple[str, ...]]:
    """(name, task, arms, seeds x budget, measured minutes, premise, power at min_effect) for `rlvr lab --list`."""
    from rlvr.lab.finding import load_finding

    rows = []
    for name in names:
        try:
            f = load_finding(name)
        except ConfigError as err:
            rows.append((name, "", "(invalid)", str(err).splitlines()[-1], "", "", ""))
            continue
        trains = any(a.train for a in f.arms.values())
        budget = (f"{f.steps} steps" + (f", {f.rollout_tokens:,} tokens" if f.rollout_tokens else "")
                  if trains else "evaluation only")
        if f.prepare:
            budget += f"; prepared: {', '.join(f.prepare)}"
        power = power_report(f)
        premise = ("; ".join(c.text() for c in f.premise.checks) if f.premise else "none declared")
        rows.append((f"{name} (v{f.version})", f.task, " vs ".join(f.arms), f"{f.seeds} seeds x {budget}",
                     f"{f.minutes:.1f} min" if f.minutes is not None else "not measured", premise,
                     f"{power['power']:.0%} (80%: {power['seeds_for_80'] or '>1000'} seeds)" if power else "no spread"))
    return rows


def run_suite(findings: list[Finding], out: Path, *, jobs: int = 1, method: Method = "t",
              run_anyway: bool = False) -> dict[str, Any]:
    """`rlvr lab all`: each finding in turn in OUT/NAME (so each continues where `rlvr lab NAME` stopped), then
    OUT/suite.md and suite.json: each finding's verdict, its effect and this invocation's wall time. A finding
    that cannot run (its OUT holds another definition, a run fails) is reported and the suite goes on."""
    rows: list[dict[str, Any]] = []
    suite: dict[str, Any] = {"jobs": jobs, "minutes": 0.0, "findings": rows}
    started = time.perf_counter()
    for i, finding in enumerate(findings, start=1):
        console.print(f"lab all: [{i}/{len(findings)}] {finding.name}")
        t0 = time.perf_counter()
        row: dict[str, Any] = {"finding": finding.name, "out": str(out / finding.name)}
        try:
            result = run_finding(finding, out / finding.name, jobs=jobs, method=method, run_anyway=run_anyway)
        except ConfigError as err:
            row.update(verdict="error", why=str(err), failed_runs=[])
        else:
            effect = result["effects"].get(result["metric"])
            row.update(verdict=result["verdict"], metric=result["metric"], effect=effect, why=result["why"],
                       failed_runs=result["failed_runs"], direction=finding.direction, min_effect=finding.min_effect,
                       version=finding.version, premise=result.get("premise"), work_issues=result.get("work_issues"))
        row["minutes"] = (time.perf_counter() - t0) / 60
        rows.append(row)
        suite = _write_suite(rows, out, jobs, (time.perf_counter() - started) / 60)  # current: nothing lost on a stop
    console.print(suite_table(suite))
    return suite


def _write_suite(rows: list[dict[str, Any]], out: Path, jobs: int, minutes: float) -> dict[str, Any]:
    suite = {"jobs": jobs, "minutes": minutes, "findings": rows}
    out.mkdir(parents=True, exist_ok=True)
    (out / "suite.json").write_text(json.dumps(suite, indent=2) + "\n")
    plot_forest(suite, out / "suite.png")
    (out / "suite.md").write_text(suite_table(suite) + "\n\n![verdicts](suite.png)\n")
    return suite


def suite_table(suite: dict[str, Any]) -> str:
    """The suite's markdown table: per finding its verdict, the effect on its metric, failures and wall time."""
    lines = ["| finding | verdict | effect on the verdict's metric (95%) | failed runs | minutes |",
             "|---|---|---|---|---|"]
    for row in suite["findings"]:
        effect = _fmt(row["metric"], row["effect"], signed=True) if row.get("effect") else "n/a"
        what = f"{row['metric']}: {effect}" if row.get("metric") else row["why"].splitlines()[0]
        lines.append(f"| {row['finding']} | {row['verdict']} | {what} | {len(row['failed_runs'])} | "
                     f"{row['minutes']:.1f} |")
    lines += ["", f"{len(suite['findings'])} findings in {suite['minutes']:.1f} min, {suite['jobs']} runs at a "
              "time (minutes: this invocation's wall time; a finding continued from earlier runs costs less)."]
    return "\n".join(lines)
