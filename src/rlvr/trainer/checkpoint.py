"""Checkpoints: one format, an HF model directory plus `trainer_state.pt`, written atomically.

    run_dir/checkpoints/step_000050/   config.json, model.safetensors, tokenizer files, trainer_state.pt

A checkpoint is written into a temporary sibling directory and renamed into place only when complete, so a
crash mid-write never leaves a half-written directory under a checkpoint name. The newest complete
checkpoint is the one resume uses; retention never deletes it.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlvr import faults

STATE_FILE = "trainer_state.pt"
_NAME = re.compile(r"step_(\d+)$")


def save_hf_dir(model: Any, tokenizer: Any, target: Path, extra_files: dict[str, Any] | None = None,
                before_rename: Callable[[], None] | None = None) -> Path:
    """Write `model` and `tokenizer` as a transformers directory at `target`, atomically (temp dir + rename).
    `before_rename` runs when every file is written but not yet in place (fault-injection tests use it)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    tmp.chmod(0o755)  # mkdtemp makes it owner-only; a model directory should be readable like any other
    try:
        model.save_pretrained(str(tmp), safe_serialization=True)
        tokenizer.save_pretrained(str(tmp))
        for name, obj in (extra_files or {}).items():
            torch.save(obj, tmp / name)
        _fsync_dir(tmp)
        if before_rename is not None:
            before_rename()
        if target.exists():
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            os.replace(target, old)
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def _fsync_dir(path: Path) -> None:
    for f in path.iterdir():
        if f.is_file():
            with f.open("rb") as fh:
                os.fsync(fh.fileno())


def rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step_{step:06d}"


def list_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints, oldest first."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        m = _NAME.match(p.name)
        if m and p.is_dir() and (p / STATE_FILE).is_file() and (p / "config.json").is_file():
            found.append((int(m.group(1)), p))
    return sorted(found)


def latest_checkpoint(run_dir: Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1][1] if found else None


def save_checkpoint(run_dir: Path, step: int, model: Any, tokenizer: Any, state: dict[str, Any],
                    keep_last: int) -> Path:
    state = {**state, "step": step, "rng": rng_state()}
    path = save_hf_dir(model, tokenizer, checkpoint_dir(run_dir, step), {STATE_FILE: state},
                       before_rename=lambda: faults.kill_point("checkpoint", step))
    prune_checkpoints(run_dir, keep_last)
    return path


def prune_checkpoints(run_dir: Path, keep_last: int) -> None:
    found = list_checkpoints(run_dir)
    for _, path in found[: max(0, len(found) - max(1, keep_last))]:
        shutil.rmtree(path, ignore_errors=True)


def load_trainer_state(path: Path) -> dict[str, Any]:
    return torch.load(Path(path) / STATE_FILE, map_location="cpu", weights_only=False)
