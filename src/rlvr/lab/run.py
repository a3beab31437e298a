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
from rlvr.lab.finding import LAB_COMMON, PREPARE_REF, Finding, dump_finding, resolve_recipe
from rlvr.lab.metrics import is_rate, run_metric
from rlvr.lab.stats import Method, difference_interval, mean_interval, verdict
from rlvr.runtime import console
from rlvr.trainer.sweep import PlannedArm, SweepRun, plan_runs, run_sweep


def finding_overrides(finding: Finding) -> list[str]:
    """The overrides every arm of `finding` shares: the lab's task and model, the budget, the evaluation."""
    ev = finding.eval
    common = [*LAB_COMMON, f"train.steps={finding.steps}", f"eval.n={ev.n}", f"eval.ks={list(ev.ks)}"]
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
        common = LAB_COMMON if step.command == "train" else ["logging.progress=false"]
        stages.append(plan_runs([arm], finding.seed_list(), out / "prepare", common))
    return stages


def plan_finding(finding: Finding, out: Path) -> list[SweepRun]:
    """Every (arm, seed) run, each config validated before anything starts."""
    arms = [PlannedArm(name, resolve_recipe(arm.recipe, f"arms.{name}.recipe"), _expand(arm.overrides, out),
                       None if arm.train else arm.model)
            for name, arm in finding.arms.items()]
    return plan_runs(arms, finding.seed_list(), out, finding_overrides(finding))


def run_finding(finding: Finding, out: Path, *, jobs: int = 1, method: Method = "t") -> dict[str, Any]:
    """Run (or continue) the finding in `out` and write its results; returns lab.json's content."""
    stages = plan_prepare(finding, out)
    runs = plan_finding(finding, out)
    check_same_definition(finding, out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "finding.yaml").write_text(dump_finding(finding))
    console.print(f"lab: {finding.name}: {len(finding.arms)} arms x {finding.seeds} seeds "
                  f"(seeds {finding.seed_list()}) -> {out}")
    failed = []
    for name, stage in zip(finding.prepare, stages):
        console.print(f"lab: preparation '{name}'")
        failed += [f"prepare {f}" for f in run_sweep(stage, out / "prepare", jobs, summarize=False)["failed"]]
    summary = run_sweep(runs, out, jobs)
    result = analyze(finding, runs, method=method)
    result["failed_runs"] = failed + summary.get("failed", [])
    write_results(result, out)
    return result


# What may change between invocations in one OUT: the seeds (more seeds continue a finding) and the prose.
_FREE_KEYS = ("seeds", "first_seed", "seed_values", "minutes", "notes", "title")


def check_same_definition(finding: Finding, out: Path) -> None:
    """Refuse to continue in an OUT whose finished runs were made by another definition of the finding (other
    arms, budget or evaluation): they would count as done and be analysed as if they were this one's."""
    import yaml

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
    return {"finding": finding.name, "paper": finding.paper, "claim": finding.claim, "metric": finding.metric,
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
    if result.get("failed_runs"):
        lines.append(f"Failed runs (left out): {', '.join(result['failed_runs'])}")
    return "\n".join(lines)


def plot_results(result: dict[str, Any], path: Path) -> None:
    """One panel per metric: each arm's seeds as dots and its mean with the 95% interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = list(next(iter(result["arms"].values())))
    arms = list(result["arms"])
    fig, axes = plt.subplots(1, len(metrics), figsize=(3.6 * len(metrics), 3.4), squeeze=False)
    for ax, m in zip(axes[0], metrics):
        for i, arm in enumerate(arms):
            d = result["arms"][arm][m]
            vals = list(d.get("values", {}).values())
            ax.scatter([i] * len(vals), vals, s=12, alpha=0.6)
            if d.get("n"):
                lo = d["lo"] if math.isfinite(d["lo"]) else d["mean"]
                hi = d["hi"] if math.isfinite(d["hi"]) else d["mean"]
                ax.errorbar([i + 0.15], [d["mean"]], yerr=[[d["mean"] - lo], [hi - d["mean"]]], fmt="o", color="k",
                            capsize=4)
        ax.set_xticks(range(len(arms)), arms, rotation=20, fontsize=8)
        ax.set_title(m + (" (verdict)" if m == result["metric"] else ""), fontsize=9)
        ax.grid(alpha=0.3)
    fig.suptitle(f"{result['finding']}: {result['verdict']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_results(result: dict[str, Any], out: Path) -> None:
    (out / "lab.json").write_text(json.dumps(result, indent=2) + "\n")
    table = results_table(result)
    (out / "lab.md").write_text(table + "\n")
    plot_results(result, out / "lab.png")
    console.print(table)


def findings_listing(names: list[str]) -> list[tuple[str, str, str, str]]:
    """(name, arms, seeds x budget, measured minutes) for `rlvr lab --list`."""
    from rlvr.lab.finding import load_finding

    rows = []
    for name in names:
        try:
            f = load_finding(name)
        except ConfigError as err:
            rows.append((name, "(invalid)", str(err).splitlines()[-1], ""))
            continue
        trains = any(a.train for a in f.arms.values())
        budget = (f"{f.steps} steps" + (f", {f.rollout_tokens:,} tokens" if f.rollout_tokens else "")
                  if trains else "evaluation only")
        if f.prepare:
            budget += f"; prepared: {', '.join(f.prepare)}"
        rows.append((name, " vs ".join(f.arms), f"{f.seeds} seeds x {budget}",
                     f"{f.minutes:.1f} min" if f.minutes is not None else "not yet run"))
    return rows


def run_suite(findings: list[Finding], out: Path, *, jobs: int = 1, method: Method = "t") -> dict[str, Any]:
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
            result = run_finding(finding, out / finding.name, jobs=jobs, method=method)
        except ConfigError as err:
            row.update(verdict="error", why=str(err), failed_runs=[])
        else:
            effect = result["effects"].get(result["metric"])
            row.update(verdict=result["verdict"], metric=result["metric"], effect=effect, why=result["why"],
                       failed_runs=result["failed_runs"])
        row["minutes"] = (time.perf_counter() - t0) / 60
        rows.append(row)
        suite = _write_suite(rows, out, jobs, (time.perf_counter() - started) / 60)  # current: nothing lost on a stop
    console.print(suite_table(suite))
    return suite


def _write_suite(rows: list[dict[str, Any]], out: Path, jobs: int, minutes: float) -> dict[str, Any]:
    suite = {"jobs": jobs, "minutes": minutes, "findings": rows}
    out.mkdir(parents=True, exist_ok=True)
    (out / "suite.json").write_text(json.dumps(suite, indent=2) + "\n")
    (out / "suite.md").write_text(suite_table(suite) + "\n")
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
