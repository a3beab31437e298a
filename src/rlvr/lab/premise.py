"""A finding's premise: the property of the starting model (or of a short pilot) that its claim needs, measured
before the arms run. Its runs are one of the finding's own arms for the first seed (reused, never repeated) or
runs of their own in OUT/premise/runs/NAME/seedS; its checks compare their metrics with thresholds."""

from __future__ import annotations

import math
import operator
from pathlib import Path
from typing import Any

from rlvr.lab.finding import Finding, resolve_recipe
from rlvr.lab.metrics import run_metric
from rlvr.trainer.sweep import PlannedArm, SweepRun, plan_runs

_OPS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}


def plan_premise(finding: Finding, out: Path, arm_runs: list[SweepRun], common: list[str]) -> dict[str, SweepRun]:
    """The premise's runs by name, for the finding's first seed (none without a premise)."""
    if finding.premise is None:
        return {}
    seed = finding.seed_list()[0]
    planned: dict[str, SweepRun] = {}
    for name, spec in finding.premise.runs.items():
        if spec.arm is not None:
            planned[name] = next(r for r in arm_runs if r.name == spec.arm and r.seed == seed)
            continue
        arm = PlannedArm(name, resolve_recipe(spec.recipe or "", f"premise.runs.{name}.recipe"), list(spec.overrides),
                         None if spec.train else (spec.model or finding.model()))
        planned[name] = plan_runs([arm], [seed], out / "premise", common)[0]
    return planned


def _value(ref: str, runs: dict[str, SweepRun]) -> float:
    name, _, metric = ref.partition(".")
    run = runs[name]
    if not run.done:
        return math.nan
    try:
        return run_metric(metric, run.run_dir)
    except (OSError, KeyError, ValueError):
        return math.nan


def measure_premise(finding: Finding, runs: dict[str, SweepRun]) -> dict[str, Any]:
    """Each check's measured value and whether it holds; the premise is met when every check holds (a value
    that could not be measured does not hold)."""
    assert finding.premise is not None
    checks = []
    for check in finding.premise.checks:
        value = _value(check.left, runs)
        if check.minus is not None:
            value -= _value(check.minus, runs)
        met = not math.isnan(value) and bool(_OPS[check.op](value, check.value))
        checks.append({"check": check.text(), "value": None if math.isnan(value) else value, "met": met})
    return {"text": finding.premise.text, "seed": finding.seed_list()[0],
            "runs": {name: str(r.run_dir) for name, r in runs.items()},
            "checks": checks, "met": all(c["met"] for c in checks)}


def premise_line(premise: dict[str, Any]) -> str:
    measured = "; ".join(f"{c['check']}: measured {c['value']:.4g}" if c["value"] is not None
                         else f"{c['check']}: not measured" for c in premise["checks"])
    return f"premise {'met' if premise['met'] else 'NOT met'} ({measured})"
