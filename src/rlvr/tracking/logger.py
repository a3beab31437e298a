"""The sinks a run logs to: `check_sinks` validates `logging.sinks`, `build_sinks` makes them, and
`MetricsLogger` fans each step's metrics out to them (JSONL always first)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rlvr.tracking.jsonl import METRICS_FILE, JsonlSink
from rlvr.tracking.optional import MLflowSink, TensorBoardSink, WandbSink
from rlvr.tracking.sink import Sink, TrackingError, _need

log = logging.getLogger(__name__)


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
