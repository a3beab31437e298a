"""Dotted `key.sub=value` overrides on the raw YAML data, and what happens when one switches a component."""

from __future__ import annotations

import re
from typing import Any

import yaml
from pydantic import BaseModel

from rlvr.config.base import ComponentSpec
from rlvr.config.registries import registry_for
from rlvr.config.rollout import RolloutConfig
from rlvr.errors import ConfigError


def parse_override(item: str) -> tuple[list[str], Any]:
    """`a.b.c=value` -> (["a","b","c"], value), the value parsed as YAML (numbers, bools, lists)."""
    if "=" not in item:
        raise ConfigError(f"override '{item}': expected key.sub=value")
    key, raw = item.split("=", 1)
    key = key.strip()
    if not re.fullmatch(r"[A-Za-z_][\w]*(\.[\w]+)*", key):
        raise ConfigError(f"override '{item}': '{key}' is not a dotted key like train.steps")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.split("."), value


def _component_default(schema: type[BaseModel] | None, path: list[str]) -> dict[str, Any]:
    """For a missing section that is a component (task, algorithm.advantage, ...), its default name."""
    model: Any = schema
    field = None
    for part in path:
        field = getattr(model, "model_fields", {}).get(part) if model is not None else None
        if field is None:
            return {}
        model = field.annotation if isinstance(field.annotation, type) else None
    if field is not None and model is not None and issubclass(model, ComponentSpec) and field.default_factory:
        return {"name": field.default_factory().name}  # type: ignore[call-arg]
    return {}



# Sections that select a registered component: (path to the section, key holding the name, key holding the
# parameters or None when they sit beside the name, keys of the section that are not the component's own).
_SWITCHABLE: tuple[tuple[tuple[str, ...], str, str | None, frozenset[str]], ...] = (
    (("task",), "name", None, frozenset()),
    (("sampling",), "name", None, frozenset()),
    (("algorithm", "advantage"), "name", None, frozenset()),
    (("algorithm", "loss"), "name", None, frozenset()),
    (("rewards", "*"), "name", None, frozenset({"weight", "gate", "gate_threshold", "process_only"})),
    (("rollout",), "engine", "engine_options", frozenset()),
    (("agent", "environment"), "name", None, frozenset()),
    (("agent", "tools", "*"), "name", None, frozenset()),
)


def _sections(data: Any, path: tuple[str, ...]) -> list[tuple[tuple[str, ...], Any]]:
    """The sections of `data` at `path` ('*' = every list item), with their concrete paths."""
    found: list[tuple[tuple[str, ...], Any]] = [((), data)]
    for part in path:
        nxt: list[tuple[tuple[str, ...], Any]] = []
        for where, node in found:
            if part == "*" and isinstance(node, list):
                nxt += [((*where, str(i)), item) for i, item in enumerate(node)]
            elif isinstance(node, dict) and part in node:
                nxt.append(((*where, part), node[part]))
        found = nxt
    return found


def _component_name(section: Any, name_key: str) -> str | None:
    if isinstance(section, str):
        return section if name_key == "name" else None
    if isinstance(section, dict) and isinstance(section.get(name_key), str):
        return section[name_key]
    return None


def drop_stale_parameters(before: dict[str, tuple[Any, str | None]], data: dict[str, Any],
                          explicit: set[tuple[str, ...]]) -> list[str]:
    """After overrides switched a component's name, drop the old component's parameters the new one does not
    take, unless an override set them explicitly (those still fail validation, naming the key).

    `before` maps each switchable section's concrete path (dotted) to (the section object, its name) before
    the overrides; `explicit` holds every overridden key path. Returns one info line per switched section.
    """
    notes: list[str] = []
    for path, name_key, params_key, own in _SWITCHABLE:
        for where, section in _sections(data, path):
            dotted = ".".join(where)
            if dotted not in before or not isinstance(section, dict):
                continue
            old_section, old_name = before[dotted]
            if old_name is None and name_key == "engine" and isinstance(old_section, dict):
                old_name = RolloutConfig.model_fields["engine"].default  # the recipe kept the default engine
            new_name = _component_name(section, name_key)
            if section is not old_section or old_name is None or new_name in (None, old_name):
                continue  # replaced as a whole (its keys are the override's), or not switched
            registry = registry_for(path)
            if new_name not in registry:
                continue  # validation reports the unknown name
            valid = set(registry.params_model(new_name).model_fields)
            holder, holder_path = section, where
            if params_key is not None:
                holder, holder_path = section.get(params_key), (*where, params_key)
                if not isinstance(holder, dict):
                    continue
            dropped = [k for k in list(holder) if k not in valid and k not in own and k != name_key
                       and (*holder_path, k) not in explicit and holder_path not in explicit]
            for k in dropped:
                del holder[k]
            if dropped:
                keys = ", ".join(".".join((*holder_path, k)) for k in dropped)
                notes.append(f"{dotted}.{name_key} changed from {old_name!r} to {new_name!r}: dropped {keys} "
                             f"({new_name!r} does not take {'it' if len(dropped) == 1 else 'them'})")
    return notes


# An override already parsed: (key path, value, how an error names it), e.g. a stage's key (`rlvr.config.stages`).
Assignment = tuple[list[str], Any, str]


def _parsed(item: str | Assignment) -> Assignment:
    if isinstance(item, tuple):
        return item
    path, value = parse_override(item)
    return path, value, item


def apply_overrides(data: dict[str, Any], overrides: list[str | Assignment], schema: type[BaseModel] | None = None,
                    notes: list[str] | None = None) -> dict[str, Any]:
    """Apply `key.sub=value` overrides (or already parsed `Assignment`s) in order. When one switches a
    component's name (task.name=..., rollout.engine=...), the previous component's parameters that the new one
    does not take are dropped (an info line per switch is appended to `notes`); parameters given explicitly
    are kept, so they still fail."""
    before = {".".join(where): (section, _component_name(section, name_key))
              for path, name_key, _, _ in _SWITCHABLE for where, section in _sections(data, path)}
    parsed = [_parsed(item) for item in overrides]
    explicit = {tuple(path) for path, _, _ in parsed}
    _apply(data, parsed, schema)
    found = drop_stale_parameters(before, data, explicit)
    if notes is not None:
        notes.extend(found)
    return data


def _apply(data: dict[str, Any], overrides: list[Assignment], schema: type[BaseModel] | None) -> None:
    for path, value, item in overrides:
        node: Any = data
        for i, part in enumerate(path[:-1]):
            if isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
                continue
            nxt = node.get(part) if isinstance(node, dict) else None
            if nxt is None:
                nxt = _component_default(schema, path[: i + 1])
                node[part] = nxt
            elif isinstance(nxt, str) and i + 1 < len(path):
                nxt = {"name": nxt}  # `task: addition` then `task.digits=...`
                node[part] = nxt
            elif not isinstance(nxt, (dict, list)):
                raise ConfigError(f"override '{item}': '{'.'.join(path[: i + 1])}' is a value, not a section")
            node = nxt
        last = path[-1]
        if isinstance(node, list):
            if not (last.isdigit() and int(last) < len(node)):
                raise ConfigError(f"override '{item}': list index '{last}' out of range")
            node[int(last)] = value
        else:
            node[last] = value
