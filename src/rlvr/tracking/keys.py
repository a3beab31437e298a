"""What the optional sinks store: the finite scalars of a step's metrics, under keys that no file-based
store can clash on (`MetricKeys`), sanitised for MLflow (`mlflow_key`)."""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any


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


_MLFLOW_BAD = re.compile(r"[^\w./\- ]")


def mlflow_key(name: str) -> str:
    """MLflow keys allow letters, digits, `_ - . / ` and space, and must be normalised paths:
    `eval/pass@1` becomes `eval/pass_at_1`."""
    import posixpath

    key = posixpath.normpath(_MLFLOW_BAD.sub("_", name.replace("@", "_at_"))).lstrip("/")
    return "_" + key if key.startswith(".") else key
