"""Plugins: the user's own Python files or modules, imported before a config is validated, so the tasks,
rewards, advantage estimators and losses they register (`@TASKS.register(...)` and the like) can be named in
the same config.

Three ways in, all imported by `load_plugins` (which `rlvr.config.load_config` calls first):
- `plugins: [my_plugins.py, mypkg.rl]` in a recipe (a file path, relative to the working directory, or a
  module name on `sys.path`);
- `--plugin PATH` on the command line (`rlvr train`, `rlvr eval`, `rlvr config show`);
- installed packages that declare an entry point in the group `rlvr.plugins` (loaded once per process; an
  entry point naming a function is called with no arguments).

A file is imported as a module named after its stem (`my_plugins.py` -> `my_plugins`), so pickled objects
that refer to it resolve in processes that import the same plugins. Forked verifier processes inherit what
the trainer imported; Ray workers import the run's `plugins` at start-up (`RLVR_PLUGINS`, `load_from_env`).

    load_plugins(["examples/plugin/my_plugin.py"])      # registers its names
    fn = import_object("my_rewards.py:score", "rewards[0].function")
"""

from __future__ import annotations

import atexit
import hashlib
import importlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

import rlvr.registry as registry
from rlvr.errors import ConfigError

ENTRY_POINT_GROUP = "rlvr.plugins"
ENV_VAR = "RLVR_PLUGINS"  # os.pathsep-separated resolved specs, for worker processes (Ray)

_loaded: dict[str, ModuleType] = {}  # resolved spec (absolute file path or module name) -> module
_entry_points_done = False


def is_file_spec(spec: str) -> bool:
    """`x.py`, `dir/x.py` or `./x` name a file; `pkg.mod` names a module."""
    return spec.endswith(".py") or "/" in spec or os.sep in spec


def load_plugins(specs: Iterable[str] = (), where: str = "plugins", entry_points: bool = True) -> list[str]:
    """Import each plugin (and, once per process, the installed `rlvr.plugins` entry points). Returns the
    resolved specs, in order. Raises ConfigError naming `where[i]` for a missing file or module, or a plugin
    whose import fails."""
    if entry_points:
        load_entry_points()
    resolved = []
    for i, spec in enumerate(specs):
        if not isinstance(spec, str) or not spec.strip():
            raise ConfigError(f"{where}[{i}]: expected a Python file path or a module name; got {spec!r}")
        resolved.append(_load_one(spec.strip(), f"{where} {spec}" if where.startswith("--") else f"{where}[{i}]"))
    return resolved


def loaded() -> list[str]:
    """The resolved specs of every file or module imported here so far (plugins and reward functions' files;
    files as absolute paths)."""
    return list(_loaded)


def provided_names() -> dict[str, list[tuple[str, str]]]:
    """Per plugin: the (kind, name) pairs it registered, e.g. {'my_plugin.py': [('task', 'parity')]}."""
    out: dict[str, list[tuple[str, str]]] = {}
    for reg in registry.ALL_REGISTRIES:
        for name, origin in reg.origins.items():
            out.setdefault(origin, []).append((reg.kind, name))
    return {k: sorted(v) for k, v in out.items()}


def load_entry_points() -> list[str]:
    """Import the installed packages' `rlvr.plugins` entry points, once per process."""
    global _entry_points_done
    if _entry_points_done:
        return []
    _entry_points_done = True
    from importlib.metadata import entry_points

    names = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        label = f"entry point {ep.name} = {ep.value}"
        registry._loading_plugin.append(label)
        try:
            obj = ep.load()
            if callable(obj) and not isinstance(obj, ModuleType):
                obj()
        except Exception as err:
            raise ConfigError(f"{label} (group {ENTRY_POINT_GROUP}, from an installed package) failed to load: "
                              f"{type(err).__name__}: {err}; fix or uninstall that package") from err
        finally:
            registry._loading_plugin.pop()
        names.append(label)
    return names


SOURCES_VAR = "RLVR_PLUGIN_SOURCES"  # JSON {absolute path: source} of plugin files, for nodes without the files
MAX_SHIPPED_SOURCE = 96 * 1024  # an environment variable holds at most 128 KiB on Linux


def load_from_env() -> None:
    """Import the plugins listed in `RLVR_PLUGINS` (a Ray worker's start-up hook; see `worker_env`). A plugin
    file missing on this node (no shared filesystem) is written from its shipped source into a private
    directory under the same file name, so its module name, and what pickles refer to, stay the same."""
    specs = [s for s in os.environ.get(ENV_VAR, "").split(os.pathsep) if s]
    sources = json.loads(os.environ.get(SOURCES_VAR) or "{}")
    local = []
    for spec in specs:
        if is_file_spec(spec) and not Path(spec).is_file() and spec in sources:
            root = tempfile.mkdtemp(prefix="rlvr-plugin-")
            atexit.register(shutil.rmtree, root, True)  # the copy lives as long as the worker process
            home = Path(root) / hashlib.sha1(spec.encode()).hexdigest()[:12]
            home.mkdir()
            (home / Path(spec).name).write_text(sources[spec])
            spec = str(home / Path(spec).name)
        local.append(spec)
    load_plugins(local, where=ENV_VAR)


def worker_env(specs: Iterable[str]) -> dict[str, str]:
    """Environment variables that make a worker process import the plugins `specs` (a run's `plugins`, files
    resolved to absolute paths here, since a worker's working directory may differ) with `load_from_env`.
    Plugin files travel as source too, so a node that does not share this filesystem imports the same code."""
    resolved = [str(Path(s).expanduser().resolve()) if is_file_spec(s) else s for s in specs]
    if not resolved and not _has_entry_points():
        return {}  # nothing to import: the workers need no start-up hook
    env = {ENV_VAR: os.pathsep.join(resolved)}  # an empty list still loads the entry points
    files = {spec: Path(spec).read_text() for spec in resolved if is_file_spec(spec) and Path(spec).is_file()}
    if files:
        shipped = json.dumps(files)
        if len(shipped) > MAX_SHIPPED_SOURCE:
            raise ConfigError(f"plugins: the plugin files add up to {len(shipped) // 1024} KiB, more than the "
                              f"{MAX_SHIPPED_SOURCE // 1024} KiB that can travel to Ray workers with the run; "
                              "install them as a package on every node and name the module instead")
        env[SOURCES_VAR] = shipped
    return env


def _has_entry_points() -> bool:
    from importlib.metadata import entry_points

    return bool(list(entry_points(group=ENTRY_POINT_GROUP)))


def import_object(spec: str, where: str) -> Any:
    """The object a `file.py:name` or `module:name` spec names (`name` may be dotted: `Class.method`).
    Raises ConfigError naming `where`, what was looked for and the fix."""
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise ConfigError(f"{where}: expected 'path/to/file.py:function' or 'module:function'; got {spec!r}")
    module = sys.modules["__main__"] if target == "__main__" else _loaded[_load_one(target, where)]
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            public = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
            raise ConfigError(f"{where}: {target} has no '{attr}' (functions there: {', '.join(public) or 'none'})")
        obj = getattr(obj, part)
    return obj


def _load_one(spec: str, where: str) -> str:
    """Import one file or module; return its resolved spec (the key in `_loaded`)."""
    if is_file_spec(spec):
        path = Path(spec).expanduser().resolve()
        key = str(path)
        if key not in _loaded:
            if not path.is_file():
                raise ConfigError(f"{where}: Python file '{spec}' not found (looked for {path}); give a path "
                                  "relative to the working directory, or an absolute one")
            _loaded[key] = _import_file(path, spec, where)
    else:
        key = spec
        if key not in _loaded:
            _loaded[key] = _import_module(spec, where)
    return key


def _run_plugin(label: str, where: str, body: Any) -> ModuleType:
    registry._loading_plugin.append(label)
    try:
        return body()
    except ConfigError:
        raise
    except Exception as err:
        raise ConfigError(f"{where}: importing {label} failed: {type(err).__name__}: {err}; fix the error there "
                          "(python -c 'import ...' shows the traceback)") from err
    finally:
        registry._loading_plugin.pop()


def _import_file(path: Path, spec: str, where: str) -> ModuleType:
    name = path.stem
    existing = sys.modules.get(name)
    if existing is not None:
        if getattr(existing, "__file__", None) and Path(existing.__file__).resolve() == path:
            return existing  # already imported the ordinary way
        name = f"{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"

    def body() -> ModuleType:
        module_spec = importlib.util.spec_from_file_location(name, path)
        assert module_spec is not None and module_spec.loader is not None
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        try:
            module_spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)
            raise
        return module

    return _run_plugin(spec, where, body)


def _import_module(name: str, where: str) -> ModuleType:
    if importlib.util.find_spec(name.split(".")[0]) is None:
        raise ConfigError(f"{where}: no module named '{name}' (not a file path either: a file needs a '.py' or a "
                          f"'/'); install it, add its folder to PYTHONPATH, or give the file's path")
    return _run_plugin(name, where, lambda: importlib.import_module(name))
