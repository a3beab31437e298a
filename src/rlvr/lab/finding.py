"""A finding: a claim about an RL method, written as data before it is run.

    name: dr_grpo_length
    paper: "Understanding R1-Zero-Like Training: A Critical Perspective (Liu et al.), arXiv:2503.20783"
    claim: "GRPO's length normalisation lets wrong answers grow; Dr.GRPO removes that growth"
    arms:
      grpo: {recipe: grpo}
      dr_grpo: {recipe: dr_grpo}
    control: grpo
    treatment: dr_grpo
    metric: wrong_length_growth
    direction: lower          # treatment - control < 0
    min_effect: 2.0           # the smallest effect that would count (in the metric's unit)
    steps: 60                 # the cap; rollout_tokens is the equal budget every arm stops at
    rollout_tokens: 300000
    seeds: 5

Each arm is a shipped recipe with only the lab's task and model (`common`) and the arm's own knob (`overrides`)
changed. An arm with `train: false` evaluates the starting model instead (the base of a pass@k comparison).
Nothing here is tuned after a result: a negative stays a row with its diagnosis (docs/findings.md).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal, NamedTuple

import yaml
from pydantic import Field, model_validator

from rlvr.config import ConfigError
from rlvr.config.base import Strict

FINDINGS_DIR = Path(__file__).parent / "findings"


class LabTask(NamedTuple):
    """A lab task: the task, the built-in model that plays it, and the response budget its runs share."""
    model: str
    max_new_tokens: int
    about: str


# The lab's tasks (a finding's `task:`). Countdown: many right expressions, the target in the prompt, answers of
# fixed length (docs/lab.md). Running total: one right number not in the prompt, responses whose length varies
# (checks, retries, rambling after the answer): the task of the voting, label-free and length findings.
LAB_TASKS = {
    "countdown": LabTask("builtin-lab", 64, "reach a target from given numbers; many right expressions"),
    "running_total": LabTask("builtin-lab-total", 160, "apply operations to a running total; one right number, "
                             "responses of varying length"),
}


def lab_common(task: str = "countdown") -> list[str]:
    """What every lab run of `task` shares: its model on it, its response budget, evaluated once at the end,
    quietly."""
    spec = LAB_TASKS[task]
    return [f"model.path={spec.model}", f"task={{name: {task}}}", f"rollout.max_new_tokens={spec.max_new_tokens}",
            "eval.before=false", "eval.after=true", "logging.progress=false", "checkpoint.every=0"]


LabTaskName = Literal["countdown", "running_total"]


PREPARE_REF = re.compile(r"\{prepare\.([A-Za-z0-9_-]+)\}")


class Arm(Strict):
    recipe: str = Field(description="a shipped recipe's name (grpo) or a recipe file")
    overrides: list[str] = Field(default_factory=list, description="the arm's own knob(s), key=value")
    train: bool = Field(True, description="false: evaluate the starting model (no training)")
    model: str | None = Field(None, description="with train: false, the model to evaluate (default: the lab "
                              "task's model)")


class PrepareStep(Strict):
    command: Literal["train", "rm", "prm"] = Field("train", description="rlvr train (a lab run), rlvr rm (a reward "
                                                  "model) or rlvr prm (a process reward model)")
    recipe: str = Field(description="a shipped recipe's name or a recipe file")
    overrides: list[str] = Field(default_factory=list, description="key=value; {prepare.NAME} is an earlier "
                                 "step's directory for the same seed")


class PremiseRun(Strict):
    """A run the premise is measured on, for the finding's first seed: one of the finding's own arms (`arm`: its
    run is then reused, not repeated), or a run of its own (a recipe, evaluated or trained like an arm)."""
    arm: str | None = Field(None, description="one of the finding's arms: its first seed's run")
    recipe: str | None = Field(None, description="a shipped recipe's name or a recipe file (a run of its own)")
    overrides: list[str] = Field(default_factory=list, description="key=value, after the lab's own")
    train: bool = Field(False, description="false: evaluate `model` (no training)")
    model: str | None = Field(None, description="with train: false, the model to evaluate (default: the lab "
                              "task's model)")

    @model_validator(mode="after")
    def _one(self) -> "PremiseRun":
        if (self.arm is None) == (self.recipe is None):
            raise ValueError("a premise run names either an arm (arm: NAME) or a recipe (recipe: NAME), not both")
        if self.arm is not None and (self.overrides or self.train or self.model is not None):
            raise ValueError(f"premise run arm: {self.arm}: an arm's run is reused as it is; overrides, train and "
                             "model belong to a run of its own (recipe: ...)")
        return self


class PremiseCheck(Strict):
    """`RUN.METRIC [- RUN.METRIC] OP VALUE`, e.g. `teacher.pass@1 - control.pass@1 >= 0.06`."""
    left: str = Field(description="RUN.METRIC: a premise run's metric")
    minus: str | None = Field(None, description="RUN.METRIC subtracted from `left`")
    op: Literal[">=", ">", "<=", "<"] = ">="
    value: float = 0.0

    def text(self) -> str:
        return f"{self.left}{f' - {self.minus}' if self.minus else ''} {self.op} {self.value:g}"


class Premise(Strict):
    """The property of the starting model, or of a short pilot, that the claim needs, measured before the arms
    run. When a check fails the verdict is "premise not met" and the arms are not run (unless --run-anyway)."""
    text: str = Field(description="the property, in words, and why the claim needs it")
    runs: dict[str, PremiseRun]
    checks: list[PremiseCheck] = Field(min_length=1)


class Spread(Strict):
    """The per-seed standard deviation of the paired effect, from an earlier run: what the power is computed on."""
    sd: float = Field(gt=0.0, description="sd of the per-seed treatment - control differences (metric units)")
    source: str = Field(description="where it comes from: which run, how many seeds, how it was derived")


class EvalSpec(Strict):
    n: int = Field(16, ge=1, description="samples per held-out problem")
    ks: list[int] = Field(default_factory=lambda: [1, 16], description="pass@k reported")
    size: int | None = Field(None, ge=1, description="the first SIZE held-out problems (default: all)")

    @model_validator(mode="after")
    def _ks(self) -> "EvalSpec":
        bad = [k for k in self.ks if not 1 <= k <= self.n]
        if bad:
            raise ValueError(f"eval.ks: each k must be 1..eval.n={self.n}; got {bad}")
        return self


class Finding(Strict):
    name: str
    version: int = Field(1, ge=1, description="the definition's version: a changed design is a new version, "
                         "written before it runs; the earlier one stays in docs/findings.md as history")
    replaces: str = Field("", description="with version > 1: what was wrong with the previous version's design")
    title: str = ""
    task: LabTaskName = Field("countdown", description="the lab task the finding runs on (rlvr.lab.finding."
                              "LAB_TASKS): its built-in model and response budget come with it")
    paper: str = Field(description="the seed paper: title, authors, arXiv id")
    claim: str = Field(description="the paper's claim, in one sentence, as this finding tests it")
    arms: dict[str, Arm]
    control: str
    treatment: str
    metric: str = Field(description="the verdict's metric (rlvr.lab.metrics.METRICS)")
    report: list[str] = Field(default_factory=list, description="more metrics to tabulate (no verdict)")
    direction: Literal["higher", "lower", "equal"] = Field(description="the claimed sign of treatment - control")
    min_effect: float = Field(0.0, ge=0.0, description="the smallest effect that would count as the claim")
    steps: int = Field(60, ge=1, description="RL steps per training arm (the cap)")
    rollout_tokens: int | None = Field(None, ge=1, description="equal rollout-token budget per training arm")
    seeds: int = Field(5, ge=1)
    first_seed: int = Field(0, ge=0)
    seed_values: list[int] | None = Field(None, description="exactly these seeds (instead of seeds/first_seed)")
    eval: EvalSpec = Field(default_factory=EvalSpec)
    common: list[str] = Field(default_factory=list, description="overrides for every arm after the lab's own")
    prepare: dict[str, PrepareStep] = Field(default_factory=dict, description="runs made per seed before the arms, "
                                            "in order (e.g. a reward model); an arm's override names one's "
                                            "directory as {prepare.NAME}")
    premise: Premise | None = Field(None, description="what the claim needs of the starting model, measured first")
    spread: Spread | None = Field(None, description="the effect's per-seed sd from an earlier run (power)")
    minutes: float | None = Field(None, description="measured wall time of the whole finding at its defaults on "
                                  "2 idle cores, two runs at a time (docs/findings.md, 'Cost of the suite')")
    notes: str = ""

    @model_validator(mode="after")
    def _arms(self) -> "Finding":
        for key in ("control", "treatment"):
            if getattr(self, key) not in self.arms:
                raise ValueError(f"{key}: '{getattr(self, key)}' is not one of the arms ({', '.join(self.arms)})")
        if self.control == self.treatment:
            raise ValueError("treatment: must differ from control")
        names = list(self.prepare)
        for where, overrides, known in ([(f"prepare.{n}", st.overrides, names[:i])
                                          for i, (n, st) in enumerate(self.prepare.items())]
                                        + [(f"arms.{n}", a.overrides, names) for n, a in self.arms.items()]):
            for ref in PREPARE_REF.findall(" ".join(overrides)):
                if ref not in known:
                    raise ValueError(f"{where}: {{prepare.{ref}}} names no earlier preparation step "
                                     f"({', '.join(known) or 'none'})")
        from rlvr.lab.metrics import METRICS, metric_k, metric_known

        used = [("metric", self.metric), *[("report", m) for m in self.report]]
        if self.premise is not None:
            for i, check in enumerate(self.premise.checks):
                for key, ref in (("left", check.left), ("minus", check.minus)):
                    if ref is None:
                        continue
                    run, _, m = ref.partition(".")
                    if run not in self.premise.runs or not m:
                        raise ValueError(f"premise.checks[{i}].{key}: '{ref}' must be RUN.METRIC with RUN one of "
                                         f"the premise's runs ({', '.join(self.premise.runs)})")
                    used.append((f"premise.checks[{i}].{key}", m))
            for name, run in self.premise.runs.items():
                if run.arm is not None and run.arm not in self.arms:
                    raise ValueError(f"premise.runs.{name}.arm: '{run.arm}' is not one of the arms "
                                     f"({', '.join(self.arms)})")
        for key, m in used:
            if not metric_known(m):
                raise ValueError(f"{key}: metric '{m}' is unknown; expected one of {', '.join(METRICS)} "
                                 "(pass@K, maj@K, rm@K and best_of@K for any K in eval.ks)")
            k = metric_k(m)
            if k is not None and k not in self.eval.ks:
                raise ValueError(f"{key}: {m} needs k={k} in eval.ks (now {self.eval.ks}); add {k} to eval.ks "
                                 f"(and eval.n >= {k}) or use a k that is evaluated")
        if self.direction == "equal" and self.min_effect <= 0:
            raise ValueError("min_effect: a claim of 'equal' needs min_effect > 0 (the equivalence band); with 0 "
                             "it could never be reproduced")
        return self

    def model(self) -> str:
        """The lab task's built-in model: what a `train: false` arm evaluates unless it names another."""
        return LAB_TASKS[self.task].model

    def seed_list(self) -> list[int]:
        if self.seed_values:
            return list(self.seed_values)
        return list(range(self.first_seed, self.first_seed + self.seeds))


def list_findings() -> list[str]:
    """The names of the shipped findings, in file order (NN-name.yaml)."""
    return [_stem_name(p) for p in sorted(FINDINGS_DIR.glob("*.yaml"))]


def _stem_name(path: Path) -> str:
    stem = path.stem
    return stem.split("-", 1)[1] if "-" in stem and stem.split("-", 1)[0].isdigit() else stem


def finding_path(name_or_path: str | Path) -> Path:
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml"):
        if not p.is_file():
            raise ConfigError(f"finding: file '{p}' does not exist")
        return p
    for f in sorted(FINDINGS_DIR.glob("*.yaml")):
        if _stem_name(f) == str(name_or_path):
            return f
    raise ConfigError(f"finding: '{name_or_path}' is not a shipped finding ({', '.join(list_findings())}) nor a "
                      "YAML file; `rlvr lab --list` names them")


def load_finding(name_or_path: str | Path, overrides: list[str] | None = None) -> Finding:
    """A shipped finding by name, or a finding file, with `key=value` overrides. Raises ConfigError naming the
    key."""
    from rlvr.config.loading import read_yaml, validate
    from rlvr.config.overrides import apply_overrides

    path = finding_path(name_or_path)
    data = apply_overrides(read_yaml(path), list(overrides or []), Finding)
    return validate(Finding, data, str(path))


def comparison_finding(mine: str, baseline: str, *, seeds: int, first_seed: int, steps: int,
                       rollout_tokens: int | None, direction: str = "higher", metric: str = "pass@1",
                       overrides: list[str] | None = None, task: str = "countdown") -> Finding:
    """`rlvr lab compare MINE BASELINE`: does my recipe beat the baseline on the lab task, at equal budget?"""
    from rlvr.lab.metrics import is_rate

    names = [Path(mine).stem, Path(baseline).stem]
    if names[0] == names[1]:
        names = [f"{names[0]}-mine", names[1]]
    data = {
        "name": f"{names[0]}-vs-{names[1]}", "paper": "(your comparison)", "task": task,
        "claim": f"{names[0]} reaches a {'higher' if direction == 'higher' else 'lower'} {metric} than "
                 f"{names[1]} at equal rollout budget",
        "arms": {names[0]: {"recipe": mine}, names[1]: {"recipe": baseline}},
        "control": names[1], "treatment": names[0], "metric": metric, "direction": direction,
        "min_effect": 0.02 if is_rate(metric) else 0.0,
        "steps": steps, "rollout_tokens": rollout_tokens, "seeds": seeds, "first_seed": first_seed,
    }
    from rlvr.config.loading import validate
    from rlvr.config.overrides import apply_overrides

    return validate(Finding, apply_overrides(data, list(overrides or []), Finding), "rlvr lab compare")


def resolve_recipe(recipe: str, key: str) -> Path:
    """A recipe file: the path itself, else recipes/NAME.yaml under the working directory or the source tree."""
    p = Path(recipe)
    if p.is_file():
        return p
    roots = [Path.cwd() / "recipes", Path(__file__).resolve().parents[3] / "recipes"]
    for root in roots:
        for cand in (root / recipe, root / f"{recipe}.yaml"):
            if cand.is_file():
                return cand
    raise ConfigError(f"{key}: recipe '{recipe}' not found (looked for the file, and for recipes/{recipe}.yaml "
                      "in the working directory and the rlvr source tree)")


def dump_finding(finding: Finding) -> str:
    return yaml.safe_dump(finding.model_dump(mode="json", exclude_defaults=False), sort_keys=False)
