"""The Python API: `rlvr.train`, `rlvr.evaluate` and `rlvr.load_config` (docs/python-api.md).

Each is the command line's code path with Python arguments: `train` is `rlvr train` (load_config, then the
same trainer, or the stage runner for a multi-stage recipe), `evaluate` is `rlvr eval`, `load_config` is what
both use to read a recipe. Nothing here imports torch until a run starts.

    import rlvr

    def score(response, record):
        return float(response.strip().startswith(str(record.answer)))

    run_dir = rlvr.train("recipes/grpo.yaml", ["train.steps=20"], rewards=[score])
    print(rlvr.evaluate(run_dir / "final", task="addition", n=4, k=[1, 4])["pass@k"])
"""

from __future__ import annotations

import copy
import json
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rlvr.config import Config
from rlvr.config import load_config as _load_config
from rlvr.errors import ConfigError

Recipe = str | Path | Mapping[str, Any] | None

# Functions given to `train(rewards=[...])` that no module exposes by name (lambdas, closures): reachable as
# 'rlvr.api:inline.<key>' for the verifier pool's forked workers (which inherit this table). Such a run's saved
# config.yaml names them, so resuming it in a new process needs the function given again.
inline = types.SimpleNamespace()


def load_config(recipe: Recipe = None, overrides: Sequence[str] | Mapping[str, Any] | None = None, *,
                plugins: Sequence[str] | None = None, rewards: Sequence[Any] | None = None) -> Config:
    """A validated training config, as `rlvr train` would read it. `recipe`: a YAML path, a dict in the same
    shape, or None (every default). `overrides`: ['key.sub=value', ...] or {'key.sub': value}. `plugins`: like
    `--plugin`. `rewards`: replaces the recipe's reward list (see `train`). Raises ConfigError."""
    path, data = _recipe(recipe)
    assignments = _overrides(overrides)
    if rewards is not None:
        assignments.append((["rewards"], reward_specs(rewards), "rewards"))
    return _load_config(path if data is None else data, assignments, plugins=list(plugins or []))


def train(recipe: Recipe = None, overrides: Sequence[str] | Mapping[str, Any] | None = None, *,
          rewards: Sequence[Any] | None = None, plugins: Sequence[str] | None = None,
          resume: str | Path | None = None, stop_after: int | None = None) -> Path:
    """Train as `rlvr train` does; returns the run directory (config.yaml, metrics.jsonl, final/, ...).

    `rewards`: the run's reward list, replacing the recipe's. Each item is a Python function
    `fn(response, record)` (all functions together form one `python` reward, summed, each logged as
    `reward/python/<fn name>`), a 'file.py:function' string, a registered reward name ('correctness') or a
    dict ({'name': 'format', 'weight': 0.2}). `resume`: a run directory to continue (its saved config; the
    overrides apply on top). `stop_after`: stop with a checkpoint after that many steps."""
    from rlvr.config.stages import has_stages, load_stages

    if resume is not None:
        if recipe is not None:
            raise ConfigError(f"resume: the run in {resume} continues from its saved config; drop the recipe "
                              f"({recipe!r}) and keep only overrides")
        cfg = load_config(Path(resume) / "config.yaml", [*_strings(overrides), f"run.dir={resume}"],
                          plugins=plugins, rewards=rewards)
        return _run(cfg, True, stop_after)
    path, _ = _recipe(recipe)
    if path is not None and has_stages(_read(path)):
        if rewards is not None:
            raise ConfigError("rewards: a multi-stage recipe sets each stage's rewards; give them in the recipe "
                              "(rewards: [{name: python, function: file.py:fn}]) instead")
        from rlvr.trainer.stages import run_stages

        staged = load_stages(path, _strings(overrides), plugins=list(plugins or []))
        return run_stages(staged, stop_after=stop_after)
    return _run(load_config(recipe, overrides, plugins=plugins, rewards=rewards), False, stop_after)


def evaluate(model: str | Path = "builtin", *, task: str | None = None, n: int = 8, k: int | Sequence[int] = 1,
             recipe: str | Path | None = None, overrides: Sequence[str] | Mapping[str, Any] | None = None,
             temperature: float | None = None, size: int | None = None, out: str | Path | None = None,
             plugins: Sequence[str] | None = None) -> dict[str, Any]:
    """Evaluate `model` (a Hugging Face directory such as RUN/final, or 'builtin') on a task's held-out split,
    as `rlvr eval` does; returns its results (pass@k, accuracy, mean length, ...), also written to `out` as
    JSON if given. `recipe` supplies task, rollout and model settings, like `rlvr eval --config`."""
    from rlvr.eval.run import run_eval

    ks = [k] if isinstance(k, int) else list(k)
    extra = [f"eval.n={n}", f"eval.ks={ks}", f"model.path={model}"]
    if task is not None:
        extra.append(f"task.name={task}")
    if temperature is not None:
        extra.append(f"eval.temperature={temperature}")
    if size is not None:
        extra.append(f"eval.size={size}")
    cfg = load_config(recipe, [*extra, *_strings(overrides)], plugins=plugins)
    return run_eval(cfg, str(model), Path(out) if out is not None else None)


def reward_specs(rewards: Sequence[Any]) -> list[dict[str, Any]]:
    """`train(rewards=...)` items as the config's reward list: functions and 'file.py:fn' strings become one
    `python` reward (first in the list); names and dicts are reward specs as written."""
    if isinstance(rewards, str | bytes) or callable(rewards):
        raise ConfigError(f"rewards: expected a list (rewards=[fn]); got {type(rewards).__name__}")
    functions, specs = [], []
    for i, item in enumerate(rewards):
        if callable(item):
            functions.append(function_spec(item))
        elif isinstance(item, str) and ":" in item:
            functions.append(item)
        elif isinstance(item, str):
            specs.append({"name": item})
        elif isinstance(item, Mapping):
            specs.append(dict(item))
        else:
            raise ConfigError(f"rewards[{i}]: expected a function, 'file.py:function', a reward name or a dict; "
                              f"got {type(item).__name__} {item!r}")
    if functions:
        specs.insert(0, {"name": "python", "function": functions[0] if len(functions) == 1 else functions})
    if not specs:
        raise ConfigError("rewards: empty; give at least one function or reward")
    return specs


def function_spec(fn: Callable[..., Any]) -> str:
    """'module:qualname' for a function reachable by that name (a script's functions: '__main__:name'); a
    lambda or closure is kept in `inline` and named 'rlvr.api:inline.<key>'."""
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    obj: Any = sys.modules.get(module) if module else None
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    if obj is fn and "<" not in qualname:
        return f"{module}:{qualname}"
    name = getattr(fn, "__name__", "fn").strip("<>") or "fn"
    key = f"{name}_{len(vars(inline))}"
    setattr(inline, key, fn)
    return f"rlvr.api:inline.{key}"


def _run(cfg: Config, resume: bool, stop_after: int | None) -> Path:
    from rlvr.trainer.loop import train as run_train

    return run_train(cfg, resume=resume, stop_after=stop_after)


def _read(path: str | Path) -> dict[str, Any]:
    from rlvr.config import read_yaml

    return read_yaml(path)


def _recipe(recipe: Recipe) -> tuple[str | Path | None, dict[str, Any] | None]:
    if recipe is None or isinstance(recipe, str | Path):
        return recipe, None
    if isinstance(recipe, Mapping):
        return None, copy.deepcopy(dict(recipe))
    raise ConfigError(f"recipe: expected a YAML path, a dict or None; got {type(recipe).__name__}")


def _overrides(overrides: Sequence[str] | Mapping[str, Any] | None) -> list[Any]:
    if overrides is None:
        return []
    if isinstance(overrides, Mapping):  # {'train.steps': 3}: values as Python objects, no YAML parsing
        return [(str(key).split("."), value, str(key)) for key, value in overrides.items()]
    if isinstance(overrides, str):
        raise ConfigError(f"overrides: expected a list of 'key.sub=value' strings; got the string {overrides!r}")
    return list(overrides)


def _strings(overrides: Sequence[str] | Mapping[str, Any] | None) -> list[str]:
    """Overrides as 'key=value' strings (a multi-stage recipe routes them by key): a dict's values as JSON,
    which the override parser reads as YAML."""
    if isinstance(overrides, Mapping):
        return [f"{key}={json.dumps(value)}" for key, value in overrides.items()]
    return _overrides(overrides)
