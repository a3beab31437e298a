"""Metric sinks. JSONL (metrics.jsonl in the run directory) is always on; the console line is the other."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any


class JsonlSink:
    """Appends one JSON object per step. On resume, lines past the checkpoint's step are dropped first."""

    def __init__(self, path: Path, resume_from_step: int | None = None):
        self.path = path
        if resume_from_step is not None and path.exists():
            kept = [line for line in path.read_text().splitlines()
                    if line.strip() and _step_of(line) is not None and _step_of(line) <= resume_from_step]
            tmp = path.with_suffix(".jsonl.tmp")
            tmp.write_text("".join(line + "\n" for line in kept))
            os.replace(tmp, path)
        self._f = path.open("a", encoding="utf-8")

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        record = {"step": step, **{k: _jsonable(v) for k, v in metrics.items()}}
        self._f.write(json.dumps(record) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


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
        p = p / "metrics.jsonl"
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
