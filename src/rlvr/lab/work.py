"""Equal work, measured: what each arm of a finding spent (updates, rollout tokens, trained tokens, the forward
tokens of a teacher or reference), checked against the declared rollout-token budget and the control."""

from __future__ import annotations

import statistics
from typing import Any

from rlvr.lab.finding import Finding
from rlvr.lab.metrics import WORK_METRICS, run_metric
from rlvr.trainer.sweep import SweepRun

SHORT = 0.01  # an arm that stops more than 1% short of the declared budget (at its step cap) is flagged
APART = 0.05  # an arm whose rollout tokens differ from the control's by more than 5% is flagged


def arm_work(finding: Finding, runs: list[SweepRun]) -> dict[str, dict[str, float]]:
    """Per training arm, each work metric's mean over its finished seeds."""
    per: dict[str, dict[str, list[float]]] = {}
    for run in runs:
        if not run.done or not finding.arms[run.name].train:
            continue
        for m in WORK_METRICS:
            per.setdefault(run.name, {}).setdefault(m, []).append(run_metric(m, run.run_dir))
    return {arm: {m: statistics.fmean(v) for m, v in ms.items()} for arm, ms in per.items()}


def work_issues(finding: Finding, work: dict[str, dict[str, float]]) -> list[str]:
    """What makes the arms' work unequal, in words (empty when nothing does)."""
    issues = []
    budget = finding.rollout_tokens
    control = work.get(finding.control, {}).get("rollout_tokens")
    for arm, w in work.items():
        tokens = w["rollout_tokens"]
        if budget and tokens < (1 - SHORT) * budget:
            issues.append(f"{arm} stopped at its step cap {1 - tokens / budget:.1%} short of the "
                          f"{budget:,}-token budget")
        if control and arm != finding.control and abs(tokens / control - 1) > APART:
            issues.append(f"{arm} sampled {tokens / control - 1:+.1%} rollout tokens against {finding.control}")
    return issues


def work_summary(work: dict[str, dict[str, float]]) -> dict[str, Any]:
    return {arm: {m: round(v, 1) for m, v in w.items()} for arm, w in work.items()}
