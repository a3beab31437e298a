"""Metric sinks and rollout samples, all written inside the run directory.

- `JsonlSink` (metrics.jsonl) is always on; it is what `read_metrics`, sweeps and reports read.
- `TensorBoardSink`, `WandbSink` (offline) and `MLflowSink` (local file store) are optional: each imports its
  package only when built, so none of them is needed to import rlvr, and none touches the network.
- `MetricsLogger` fans `log(step, metrics)` out to the sinks `build_sinks` made from `logging.sinks`.
- `RolloutWriter` keeps a few prompts and responses per step in rollouts.jsonl for the HTML report.

On resume every sink drops (or overwrites) what was logged after the checkpoint's step, so a resumed run's
logs read as if it had never stopped.
"""

from __future__ import annotations

import json
import logging
import math
import numbers
import os
import re
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from rlvr.config import ConfigError

log = logging.getLogger(__name__)

ROLLOUTS_FILE = "rollouts.jsonl"
METRICS_FILE = "metrics.jsonl"


class TrackingError(ConfigError):
    """A sink was named that does not exist or whose package is not installed."""


class Sink(Protocol):
    def log(self, step: int, metrics: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


# --------------------------------------------------------------------------------------------------------------
# JSONL (always on)


class JsonlSink:
    """Appends one JSON object per step. On resume, lines past the checkpoint's step are dropped first."""

    def __init__(self, path: Path, resume_from_step: int | None = None):
        self.path = path
        if resume_from_step is not None:
            truncate_jsonl(path, resume_from_step)
        self._f = path.open("a", encoding="utf-8")

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        record = {"step": step, **{k: _jsonable(v) for k, v in metrics.items()}}
        self._f.write(json.dumps(record) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


def truncate_jsonl(path: Path, last_step: int) -> None:
    """Keep only the lines of a step-keyed JSONL file whose `step` is <= last_step (atomic rewrite)."""
    if not path.exists():
        return
    kept = [line for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip() and (s := _step_of(line)) is not None and s <= last_step]
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
    os.replace(tmp, path)


def _step_of(line: str) -> int | None:
    try:
        return int(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError):
        return None


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None if math.isnan(v) else (1e308 if v > 0 else -1e308)
    return v


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    p = Path(path)
    if p.is_dir():
        p = p / METRICS_FILE
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]


def _scalars(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The finite real-valued entries, as floats: what the optional sinks can plot."""
    out = {}
    for k, v in metrics.items():
        if isinstance(v, numbers.Real) or (hasattr(v, "item") and getattr(v, "ndim", 1) == 0):
            try:
                f = float(v)
            except (TypeError, ValueError):
                continue
            if math.isfinite(f):
                out[k] = f
    return out


class MetricKeys:
    """Maps metric names to the keys an optional sink stores, so that no key is a path-prefix of another.

    Stores that keep metrics as files (MLflow's file store) cannot hold `reward/correctness` and
    `reward/correctness/verify_calls_per_s` together: the first is a file, the second needs it as a directory.
    So only the first `/` stays a group separator and deeper ones become `.`:
    `reward/correctness/verify_calls_per_s` -> `reward/correctness.verify_calls_per_s`. A top-level name that
    is also a group (`kl` and `kl/x`) would still clash; whichever is seen second is renamed, a leaf to
    `kl/value`, a group to `kl_/x`. The mapping is remembered, so a metric keeps its key for the whole run.
    """

    def __init__(self, sanitize: Callable[[str], str] = lambda k: k):
        self._sanitize = sanitize
        self._keys: dict[str, str] = {}
        self._leaves: set[str] = set()
        self._groups: dict[str, str] = {}  # group as named -> group as stored

    def map(self, names: Iterable[str]) -> dict[str, str]:
        """Keys for `names`; groups are registered before leaves, so one dict's names never clash."""
        names = list(names)
        for name in names:
            if "/" in name.strip("/") and name not in self._keys:
                group = name.strip("/").split("/", 1)[0]
                if group not in self._groups:
                    self._groups[group] = group + "_" if self._sanitize(group) in self._leaves else group
        for name in names:
            if name not in self._keys:
                self._keys[name] = self._key(name)
        return {name: self._keys[name] for name in names}

    def _key(self, name: str) -> str:
        parts = [p for p in name.split("/") if p]
        if len(parts) <= 1:
            leaf = parts[0] if parts else "_"
            key = self._sanitize(f"{leaf}/value" if leaf in self._groups else leaf)
            self._leaves.add(key)
            return key
        return self._sanitize(f"{self._groups[parts[0]]}/{'.'.join(parts[1:])}")


def _flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in config.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _need(package: str, sink: str, modules: Sequence[str] | None = None) -> Any:
    """Import the first importable module of `modules` (default: `package`), or fail naming the pip command."""
    import importlib

    for name in modules or [package]:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise TrackingError(f"tracking: the '{sink}' sink needs `pip install {package}` "
                        f"(logging.sinks lists '{sink}'; remove it or install the package)")


# --------------------------------------------------------------------------------------------------------------
# Optional sinks


class TensorBoardSink:
    """Scalars to RUN_DIR/tensorboard (torch.utils.tensorboard, else tensorboardX). View: tensorboard --logdir RUN_DIR.

    On resume, `purge_step` makes TensorBoard hide the events logged after the checkpoint.
    """

    name = "tensorboard"

    def __init__(self, run_dir: Path, config: Mapping[str, Any] | None = None, resume_from_step: int | None = None):
        module = _need("tensorboard", self.name, ["torch.utils.tensorboard", "tensorboardX"])
        self.log_dir = run_dir / "tensorboard"
        purge = resume_from_step + 1 if resume_from_step is not None else None
        self._writer = module.SummaryWriter(str(self.log_dir), purge_step=purge)
        self._keys = MetricKeys()
        if config and resume_from_step is None:
            self._writer.add_text("config", "```\n" + json.dumps(config, indent=2, default=str) + "\n```", 0)

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        scalars = _scalars(metrics)
        keys = self._keys.map(scalars)
        for k, v in scalars.items():
            self._writer.add_scalar(keys[k], v, step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class WandbSink:
    """Weights & Biases in offline mode (`mode="offline"`, as WANDB_MODE=offline; it wins over the environment):
    files under RUN_DIR/wandb, nothing sent. Upload later with
    `wandb sync RUN_DIR/wandb/offline-run-*`. The run id is kept in RUN_DIR/wandb/rlvr_run_id and reused by a
    resumed training, so its offline pieces sync into one W&B run."""

    name = "wandb"

    def __init__(self, run_dir: Path, config: Mapping[str, Any] | None = None, resume_from_step: int | None = None):
        wandb = _need("wandb", self.name)
        wandb_dir = run_dir / "wandb"
        wandb_dir.mkdir(parents=True, exist_ok=True)
        id_file = wandb_dir / "rlvr_run_id"
        run_id = id_file.read_text().strip() if id_file.exists() else uuid.uuid4().hex[:8]
        id_file.write_text(run_id + "\n")
        project = str(((config or {}).get("run") or {}).get("name") or "rlvr")
        # No `resume=`: offline W&B ignores it with a warning; reusing the id is what joins the pieces on sync.
        self._run = wandb.init(project=project, name=run_dir.name, id=run_id, dir=str(run_dir), mode="offline",
                               config=dict(config or {}))
        self._keys = MetricKeys()

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        scalars = _scalars(metrics)
        keys = self._keys.map(scalars)
        self._run.log({keys[k]: v for k, v in scalars.items()}, step=step)

    def close(self) -> None:
        self._run.finish()


_MLFLOW_BAD = re.compile(r"[^\w./\- ]")


def mlflow_key(name: str) -> str:
    """MLflow keys allow letters, digits, `_ - . / ` and space, and must be normalised paths:
    `eval/pass@1` becomes `eval/pass_at_1`."""
    import posixpath

    key = posixpath.normpath(_MLFLOW_BAD.sub("_", name.replace("@", "_at_"))).lstrip("/")
    return "_" + key if key.startswith(".") else key


class MLflowSink:
    """MLflow with a local file store at RUN_DIR/mlruns (`mlflow ui --backend-store-uri RUN_DIR/mlruns`).

    The config goes in as flattened params; the run id is kept in RUN_DIR/mlruns/rlvr_run_id so a resumed
    training continues the same MLflow run.
    """

    name = "mlflow"

    def __init__(self, run_dir: Path, config: Mapping[str, Any] | None = None, resume_from_step: int | None = None):
        # MLflow >= 3.13 refuses the file store unless this is set (it recommends SQLite); the run dir keeps it.
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        _need("mlflow", self.name)
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        store = (run_dir / "mlruns").resolve()
        store.mkdir(parents=True, exist_ok=True)
        self._client = MlflowClient(tracking_uri=store.as_uri())
        self._keys = MetricKeys(mlflow_key)
        experiment_name = str(((config or {}).get("run") or {}).get("name") or "rlvr")
        experiment = self._client.get_experiment_by_name(experiment_name)
        experiment_id = experiment.experiment_id if experiment else self._client.create_experiment(experiment_name)
        id_file = store / "rlvr_run_id"
        self.run_id = id_file.read_text().strip() if id_file.exists() else ""
        if not self.run_id:
            self.run_id = self._client.create_run(experiment_id, run_name=run_dir.name).info.run_id
            id_file.write_text(self.run_id + "\n")
            params = [Param(mlflow_key(k)[:250], json.dumps(v, default=str)[:250] if not isinstance(v, str)
                            else v[:250]) for k, v in _flatten(config or {}).items()]
            for i in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
                self._client.log_batch(self.run_id, params=params[i : i + 100])

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        scalars = _scalars(metrics)
        keys = self._keys.map(scalars)
        batch = [Metric(keys[k], v, now, step) for k, v in scalars.items()]
        for i in range(0, len(batch), 1000):
            self._client.log_batch(self.run_id, metrics=batch[i : i + 1000])

    def close(self) -> None:
        self._client.set_terminated(self.run_id)


SinkFactory = Callable[[Path, Mapping[str, Any], "int | None"], Sink]

SINKS: dict[str, SinkFactory] = {
    "jsonl": lambda run_dir, config, resume: JsonlSink(run_dir / METRICS_FILE, resume),
    "tensorboard": TensorBoardSink,
    "wandb": WandbSink,
    "mlflow": MLflowSink,
}
_PACKAGES = {"tensorboard": ("tensorboard", ["torch.utils.tensorboard", "tensorboardX"]),
             "wandb": ("wandb", ["wandb"]), "mlflow": ("mlflow", ["mlflow"])}


def check_sinks(names: Iterable[str]) -> list[str]:
    """Validate `logging.sinks` before a run starts: known names, packages installed. Returns the names to
    build, `jsonl` first (it is always on) and without duplicates."""
    from rlvr.registry import did_you_mean

    out = ["jsonl"]
    for name in names:
        if name not in SINKS:
            raise TrackingError(f"logging.sinks: unknown sink '{name}'.{did_you_mean(name, SINKS)} "
                                f"Available: {', '.join(SINKS)}")
        if name in _PACKAGES:
            package, modules = _PACKAGES[name]
            _need(package, name, modules)
        if name not in out:
            out.append(name)
    return out


def build_sinks(names: Iterable[str], run_dir: Path, config: Mapping[str, Any] | None = None,
                resume_from_step: int | None = None, enabled: bool = True) -> MetricsLogger:
    """The sinks named in `logging.sinks` (JSONL always included), wrapped in one `MetricsLogger`.

    `config` is the resolved config as plain data (`cfg.model_dump(mode="json")`); `resume_from_step` is the
    checkpoint's step when resuming, else None. `enabled=False` gives a logger with no sinks (data-parallel
    ranks other than 0).
    """
    if not enabled:
        return MetricsLogger([])
    run_dir = Path(run_dir)
    built: list[Sink] = []
    try:
        for name in check_sinks(names):
            built.append(SINKS[name](run_dir, dict(config or {}), resume_from_step))
    except BaseException:
        for sink in built:
            sink.close()
        raise
    return MetricsLogger(built)


class MetricsLogger:
    """Fans `log(step, metrics)` out to every sink. JSONL errors propagate (it is the record of the run); an
    optional sink that fails is reported once and dropped, so a tracking hiccup never ends a training run."""

    def __init__(self, sinks: Sequence[Sink]):
        self.sinks = list(sinks)

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        for sink in list(self.sinks):
            if isinstance(sink, JsonlSink):
                sink.log(step, metrics)
                continue
            try:
                sink.log(step, metrics)
            except Exception as err:
                message = (f"tracking: {type(sink).__name__} failed at step {step} ({type(err).__name__}: {err}); "
                           "it is switched off for the rest of the run")
                log.warning("%s", message)
                print(f"warning: {message}", file=sys.stderr)  # train.log alone is easy to miss
                self.sinks.remove(sink)
                _close_quietly(sink)

    def close(self) -> None:
        for sink in self.sinks:
            if isinstance(sink, JsonlSink):
                sink.close()
            else:
                _close_quietly(sink)
        self.sinks = []

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _close_quietly(sink: Sink) -> None:
    try:
        sink.close()
    except Exception as err:
        log.warning("tracking: closing %s failed: %s", type(sink).__name__, err)


# --------------------------------------------------------------------------------------------------------------
# Rollout samples for the report


class RolloutWriter:
    """Stores some of each step's samples in RUN_DIR/rollouts.jsonl, one JSON object per sample:

        step, group (index of the prompt within the step), sample (index within its group), prompt_id,
        prompt, response, reward, rewards {component: value}, reasons {component: reason}, correct,
        advantage (float, or one float per response token), finish_reason, length (response tokens),
        policy_version, answer (the reference answer, as text), difficulty

    It writes on steps divisible by `every` (0 switches it off), taking whole groups in order until
    `max_per_step` samples are stored, so advantages can be read against the rest of their group. Texts are
    cut at `max_chars`. On resume, lines after the checkpoint's step are dropped.
    """

    def __init__(self, run_dir: Path, every: int, max_per_step: int, *, resume_from_step: int | None = None,
                 max_chars: int = 20_000):
        if every < 0 or max_per_step < 0:
            raise ValueError(f"every and max_per_step must be >= 0; got {every}, {max_per_step}")
        self.path = Path(run_dir) / ROLLOUTS_FILE
        self.every, self.max_per_step, self.max_chars = every, max_per_step, max_chars
        if resume_from_step is not None:
            truncate_jsonl(self.path, resume_from_step)

    def write(self, step: int, groups: Sequence[Any]) -> int:
        """Store this step's samples if it is one to store. Returns how many were written."""
        if not self.every or not self.max_per_step or step % self.every:
            return 0
        lines = []
        for gi, group in enumerate(groups):
            for si, sample in enumerate(group.samples):
                if len(lines) >= self.max_per_step:
                    break
                lines.append(json.dumps(self.record(step, gi, si, group, sample), default=str,
                                        ensure_ascii=False))
            if len(lines) >= self.max_per_step:
                break
        with self.path.open("a", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))
        return len(lines)

    def record(self, step: int, gi: int, si: int, group: Any, sample: Any) -> dict[str, Any]:
        adv = sample.advantage
        if isinstance(adv, (list, tuple)):
            adv = [round(float(a), 5) for a in adv]
        elif adv is not None:
            adv = _jsonable(float(adv))
        answer = group.record.answer
        return {
            "step": step, "group": gi, "sample": si, "prompt_id": str(group.record.id),
            "prompt": group.prompt_text[: self.max_chars], "response": sample.text[: self.max_chars],
            "reward": _jsonable(float(sample.reward)),
            "rewards": {k: _jsonable(float(v)) for k, v in sample.rewards.items()},
            "reasons": dict(sample.meta.get("reasons", {})),
            "correct": sample.correct, "advantage": adv, "finish_reason": sample.finish_reason,
            "length": len(sample.response_ids), "policy_version": sample.policy_version,
            "answer": None if answer is None else str(answer), "difficulty": group.record.difficulty,
        }


def read_rollouts(run_dir: str | Path) -> list[dict[str, Any]]:
    """The stored samples of a run (empty when it has none); unreadable lines are skipped."""
    p = Path(run_dir)
    if p.is_dir():
        p = p / ROLLOUTS_FILE
    if not p.exists():
        return []
    out = []
    for line in p.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            if line.strip():
                out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut short by a crash
    return out
