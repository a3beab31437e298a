"""Metric sinks and rollout samples, all written inside the run directory.

- `JsonlSink` (metrics.jsonl) is always on; it is what `read_metrics`, sweeps and reports read (`jsonl.py`).
- `TensorBoardSink`, `WandbSink` (offline) and `MLflowSink` (local file store) are optional: each imports its
  package only when built, so none of them is needed to import rlvr, and none touches the network
  (`optional.py`; the keys they store are made by `keys.py`).
- `MetricsLogger` fans `log(step, metrics)` out to the sinks `build_sinks` made from `logging.sinks`
  (`logger.py`; the `Sink` protocol and `TrackingError` are in `sink.py`).
- `RolloutWriter` keeps a few prompts and responses per step in rollouts.jsonl for the HTML report, with
  small PNG thumbnails of an image task's prompt images (`rollouts.py`).

On resume every sink drops (or overwrites) what was logged after the checkpoint's step, so a resumed run's
logs read as if it had never stopped.
"""

from rlvr.tracking.jsonl import METRICS_FILE, JsonlSink, read_metrics, truncate_jsonl
from rlvr.tracking.keys import MetricKeys, mlflow_key
from rlvr.tracking.logger import SINKS, MetricsLogger, SinkFactory, build_sinks, check_sinks
from rlvr.tracking.optional import MLflowSink, TensorBoardSink, WandbSink
from rlvr.tracking.rollouts import (
    ROLLOUTS_FILE,
    THUMBNAIL_SIDE,
    RolloutWriter,
    read_rollouts,
    thumbnail_data_uri,
)
from rlvr.tracking.sink import Sink, TrackingError

__all__ = [
    "METRICS_FILE",
    "ROLLOUTS_FILE",
    "SINKS",
    "THUMBNAIL_SIDE",
    "JsonlSink",
    "MLflowSink",
    "MetricKeys",
    "MetricsLogger",
    "RolloutWriter",
    "Sink",
    "SinkFactory",
    "TensorBoardSink",
    "TrackingError",
    "WandbSink",
    "build_sinks",
    "check_sinks",
    "mlflow_key",
    "read_metrics",
    "read_rollouts",
    "thumbnail_data_uri",
    "truncate_jsonl",
]
