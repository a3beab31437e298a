"""What a metric sink is (`log(step, metrics)`, `close()`), the error a bad `logging.sinks` raises, and the
lazy import an optional sink's package goes through."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from rlvr.errors import ConfigError


class TrackingError(ConfigError):
    """A sink was named that does not exist or whose package is not installed."""


class Sink(Protocol):
    def log(self, step: int, metrics: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


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
