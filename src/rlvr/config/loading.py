"""Reading a recipe: YAML, overrides, two-pass validation (errors formatted to name the key and the fix),
and `dump_config` for writing the resolved config back."""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pydantic
import yaml
from pydantic import BaseModel

from rlvr.config.base import Strict
from rlvr.config.overrides import apply_overrides
from rlvr.config.schema import Config
from rlvr.errors import ConfigError
from rlvr.plugins import load_plugins


def read_yaml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"recipe file '{path}' not found (looked for {p.resolve()})")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of sections at the top, got {type(data).__name__}")
    return data


def validate(schema: type[Strict], data: dict[str, Any], source: str | None = None) -> Any:
    """Validate in two passes. The first checks the plain schema (unknown keys, types, ranges) without binding
    components, so it imports no registry and hence no torch: a typo is reported in a fraction of a second.
    The second binds each component to its registry entry (which imports torch)."""
    for context in ({"bind_components": False}, None):
        try:
            cfg = schema.model_validate(data, context=context)
        except pydantic.ValidationError as err:
            raise ConfigError(format_validation_error(err, schema), source) from None
    return cfg


def info(line: str) -> None:
    """An info line for the person at the console (stderr, so `rlvr config show > x.yaml` stays clean)."""
    print(f"info: {line}", file=sys.stderr)


def with_plugins(data: dict[str, Any], plugins: list[str] | None, source: str | None = None,
                 record: bool = True) -> dict[str, Any]:
    """Import the recipe's `plugins:` and the extra `plugins` (the command line's `--plugin`), recording the
    extra ones in `data['plugins']` (if `record`: the schema has the key) so the saved config.yaml imports them
    again on resume."""
    listed = data.get("plugins") or []
    if not isinstance(listed, list):
        raise ConfigError(f"plugins: expected a list of Python files or module names; got {listed!r}", source)
    merged = [*listed, *[p for p in plugins or [] if p not in listed]]
    load_plugins(listed, "plugins")
    load_plugins(merged[len(listed):], "--plugin")
    if merged and record:
        data["plugins"] = merged
    return data


def load_config(path: str | Path | dict[str, Any] | None, overrides: list[str] | None = None,
                schema: type[Strict] = Config, notes: list[str] | None = None, plugins: list[str] | None = None):
    """Read a recipe (a YAML path, or its contents as a dict), import its plugins (and `plugins`, e.g. from
    `--plugin`), apply `key.sub=value` overrides and validate. Raises ConfigError.

    Info lines (parameters dropped by a component switch) go to `notes` if given, else to stderr."""
    if isinstance(path, dict):
        data, path = copy.deepcopy(path), None
    else:
        data = read_yaml(path) if path is not None else {}
    data = with_plugins(data, plugins, str(path) if path else None, record="plugins" in schema.model_fields)
    if "stages" in data:
        listed = data["stages"] if isinstance(data["stages"], list) else []
        names = [s.get("name") for s in listed if isinstance(s, dict)]
        raise ConfigError(f"stages: {path} is a multi-stage recipe (stages: {', '.join(map(str, names))}); "
                          "`rlvr train` runs it and `rlvr config show` prints every stage. For one stage's config "
                          "use its run's RUN/stages/<i>-<name>/config.yaml (docs/configuration.md, Stages)",
                          str(path))
    found: list[str] = []
    data = apply_overrides(data, list(overrides or []), schema, found)
    if isinstance(data.get("plugins"), list):  # an override may add plugins (plugins=[x.py])
        load_plugins(data["plugins"], "plugins")
    if notes is not None:
        notes.extend(found)
    else:
        for line in found:
            info(line)
    cfg = validate(schema, data, str(path) if path else None)
    if cfg.run.name is None:
        cfg.run.name = Path(path).stem if path else schema.__name__.lower().replace("config", "") or "run"
    return cfg


def dump_config(cfg: BaseModel) -> str:
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False, default_flow_style=None)


def format_validation_error(err: pydantic.ValidationError, schema: type[BaseModel]) -> list[str]:
    from rlvr.registry import format_pydantic_errors

    return format_pydantic_errors(err, schema)
