"""The JSONL metric sink (RUN_DIR/metrics.jsonl): always on, the record of the run that `read_metrics`,
sweeps and reports read. A step-keyed JSONL file is truncated to the checkpoint's step on resume."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.jsonl"


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
