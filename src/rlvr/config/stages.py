"""Multi-stage recipes: a `stages:` list of named changes to the file's top-level config, run in order by
`rlvr train` (`rlvr.trainer.stages`), each stage a whole run in `RUN/stages/<i>-<name>/`.

    run: {name: lmm_r1}
    model: {path: builtin-vl}
    task: {name: vl_count_text}
    stages:
      - name: text                        # the top-level config as it is
      - name: multimodal                  # then the keys this stage changes
        task: {name: vl_count}            # nested, as in the file ...
        train.steps: 20                   # ... or dotted, as on the command line

Stage i's config is the top-level config, then the stage's own keys, then the command line's overrides (every
stage), then `stages.<i or name>.key=value` overrides (that stage only), each with the semantics of a dotted
override (`rlvr.config.overrides`: a nested mapping sets its leaves; switching a component drops the old
component's parameters). A stage after the first starts from the previous stage's `final/` unless its own keys
(or its own overrides) set `model.path`. Every stage is validated before the first one runs.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr.config.loading import info, read_yaml, validate, with_plugins
from rlvr.config.overrides import Assignment, apply_overrides, parse_override
from rlvr.config.schema import Config
from rlvr.errors import ConfigError

STAGE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
# keys the driver sets for each stage: the run directory is RUN/stages/<i>-<name>
DRIVER_KEYS = (("run", "dir"), ("run", "output_dir"))


@dataclass
class Stage:
    """One stage of a multi-stage recipe: its validated config (run.dir set to its own directory)."""

    index: int
    name: str
    cfg: Config
    keys: list[str] = field(default_factory=list)  # the dotted keys the stage (and its overrides) set
    chained: bool = False  # model.path is the previous stage's final/

    @property
    def label(self) -> str:
        return f"stages[{self.index}] ({self.name})"


@dataclass
class StagedRun:
    """A multi-stage recipe resolved: the top-level run directory and every stage, validated."""

    source: str
    name: str
    run_dir: Path
    stages: list[Stage]


def has_stages(data: dict[str, Any]) -> bool:
    return "stages" in data


def stage_dir(run_dir: Path, index: int, name: str) -> Path:
    return Path(run_dir) / "stages" / f"{index}-{name}"


def _flatten(mapping: dict[str, Any], prefix: list[str], where: str) -> list[Assignment]:
    """A stage's keys as dotted assignments: nested mappings set their leaves (as `train.steps=5` would), dotted
    keys are split, lists and scalars are set whole."""
    out: list[Assignment] = []
    for key, value in mapping.items():
        if not isinstance(key, str) or not re.fullmatch(r"[A-Za-z_]\w*(\.\w+)*", key):
            raise ConfigError(f"{where}.{key}: not a key like train or train.steps")
        path = [*prefix, *key.split(".")]
        if isinstance(value, dict) and value:
            out += _flatten(value, path, where)
        else:
            out.append((path, copy.deepcopy(value), f"{where}.{'.'.join(path)}"))
    return out


def _stage_specs(raw: Any, source: str) -> list[tuple[str, list[Assignment]]]:
    """(name, assignments) of each entry of `stages:`, checked for shape; errors name stages[i]."""
    if not isinstance(raw, list) or not raw:
        raise ConfigError("stages: expected a list of stages, each a mapping with a name and the keys it changes "
                          f"(e.g. `- {{name: text, task.name: vl_count_text}}`); got {raw!r}", source)
    specs: list[tuple[str, list[Assignment]]] = []
    for i, entry in enumerate(raw):
        where = f"stages[{i}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: expected a mapping with a name and the keys the stage changes; got "
                              f"{entry!r}", source)
        entry = dict(entry)
        name = entry.pop("name", None)
        if not isinstance(name, str) or not STAGE_NAME.fullmatch(name):
            raise ConfigError(f"{where}.name: required, letters, digits, '-' or '_' (it names the stage's "
                              f"directory RUN/stages/{i}-<name>); got {name!r}", source)
        if name in (n for n, _ in specs) or name.isdigit():
            why = "a number (it would read as a stage index)" if name.isdigit() else "used by an earlier stage"
            raise ConfigError(f"{where}.name: '{name}' is {why}; give each stage its own name", source)
        assignments = _flatten(entry, [], where)
        for path, _, label in assignments:
            if path[0] == "stages":
                raise ConfigError(f"{label}: a stage cannot hold stages", source)
            if tuple(path[:2]) in DRIVER_KEYS or path == ["run"]:
                raise ConfigError(f"{label}: a stage runs in RUN/stages/{i}-{name}; set run.dir (or run.output_dir) "
                                  "at the top level or on the command line", source)
        specs.append((name, assignments))
    return specs


def _split_overrides(overrides: list[str], names: list[str]) -> tuple[list[str], dict[int, list[Assignment]]]:
    """Command-line overrides: those for every stage, and `stages.<index or name>.key=value` per stage."""
    shared: list[str] = []
    per_stage: dict[int, list[Assignment]] = {}
    for item in overrides:
        path, value = parse_override(item)
        if path[0] != "stages":
            shared.append(item)
            continue
        listed = ", ".join(f"{i} or {n}" for i, n in enumerate(names))
        if len(path) < 3:
            raise ConfigError(f"override '{item}': expected stages.<index or name>.key=value (stages: {listed})")
        pick = path[1]
        index = int(pick) if pick.isdigit() else names.index(pick) if pick in names else None
        if index is None or index >= len(names):
            raise ConfigError(f"override '{item}': no stage '{pick}' (stages: {listed})")
        rest = path[2:]
        if tuple(rest[:2]) in DRIVER_KEYS:
            raise ConfigError(f"override '{item}': a stage runs in RUN/stages/<i>-<name>; set run.dir instead")
        per_stage.setdefault(index, []).append((rest, value, f"override '{item}'"))
    return shared, per_stage


def _touches(key: str, paths: list[str]) -> bool:
    return any(key == p or key.startswith(p + ".") or p.startswith(key + ".") for p in paths)


def _stage_problems(err: ConfigError, stage: int, name: str, keys: list[str]) -> list[str]:
    """A validation error of stage i: a problem in a key the stage set is named `stages[i].<key>`, any other
    (a top-level key or a command-line override) `<key> (stage i 'name')`."""
    out = []
    for line in err.problems:
        key, sep, rest = line.partition(":")
        dotted = re.sub(r"\[(\d+)\]", r".\1", key)
        if sep and _touches(dotted, keys):
            out.append(f"stages[{stage}].{key}{sep}{rest}")
        else:
            out.append(f"{key} (stage {stage} '{name}'){sep}{rest}" if sep else f"stage {stage} '{name}': {line}")
    return out


def load_stages(path: str | Path, overrides: list[str] | None = None,
                notes: list[str] | None = None, plugins: list[str] | None = None) -> StagedRun:
    """Read a multi-stage recipe and validate every stage (both passes) before anything runs. Raises ConfigError
    naming `stages[i].<key>` for a problem in a stage's own keys. Info lines (parameters dropped by a component
    switch) go to `notes` if given, else to stderr."""
    source = str(path)
    data = with_plugins(read_yaml(path), plugins, source)  # imported before any stage is validated
    if not has_stages(data):
        raise ConfigError(f"{source} has no stages: list; run it as a single recipe", source)
    specs = _stage_specs(data.pop("stages"), source)
    names = [n for n, _ in specs]
    shared, per_stage = _split_overrides(list(overrides or []), names)

    # a command-line model.path is where the first stage starts (a stage's own model.path still wins); every
    # other override wins over the stages' keys
    start = [o for o in shared if parse_override(o)[0] == ["model", "path"]]
    rest = [o for o in shared if o not in start]
    top = apply_overrides(copy.deepcopy(data), list(shared), Config)  # the run section every stage shares
    run = top.get("run") if isinstance(top.get("run"), dict) else {}
    name = run.get("name") or Path(path).stem
    run_dir = Path(run["dir"]) if run.get("dir") else Path(run.get("output_dir") or "runs") / str(name)

    stages: list[Stage] = []
    problems: list[str] = []
    for i, (stage_name, assignments) in enumerate(specs):
        own = [*assignments, *per_stage.get(i, [])]
        keys = [".".join(p) for p, _, _ in own]
        found: list[str] = []
        cfg_data = copy.deepcopy(data)
        apply_overrides(cfg_data, list(start), Config, found)  # model.path: the top level's, under the stage's
        apply_overrides(cfg_data, list(assignments), Config, found)
        apply_overrides(cfg_data, list(rest), Config, found)
        apply_overrides(cfg_data, list(per_stage.get(i, [])), Config, found)
        chained = i > 0 and "model.path" not in keys and "model" not in keys
        driver: list[str | Assignment] = [(["run", "dir"], str(stage_dir(run_dir, i, stage_name)), "run.dir")]
        if "run.name" not in keys:
            driver.append((["run", "name"], f"{name}-{stage_name}", "run.name"))
        if chained:
            driver.append((["model", "path"], str(stage_dir(run_dir, i - 1, specs[i - 1][0]) / "final"),
                           f"stages[{i}].model.path"))
        apply_overrides(cfg_data, driver, Config)
        for line in (f"stages[{i}]: {line}" for line in found):  # a component switched: what was dropped
            if notes is not None:
                notes.append(line)
            else:
                info(line)
        try:
            stages.append(Stage(i, stage_name, validate(Config, cfg_data), keys, chained))
        except ConfigError as err:  # every stage is checked, so one run of the command lists every problem
            problems += _stage_problems(err, i, stage_name, keys)
    if problems:
        raise ConfigError(problems, source)
    return StagedRun(source, str(name), run_dir, stages)
