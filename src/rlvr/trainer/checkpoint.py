"""Checkpoints: one format, an HF model directory plus `trainer_state.pt`, written atomically and verifiable.

    run_dir/checkpoints/step_000050/   config.json, model.safetensors, tokenizer files, trainer_state.pt,
                                       manifest.json (every other file's size and CRC-32, written last)
    run_dir/checkpoints/damaged/       checkpoints that failed verification on resume, moved aside

A checkpoint is written into a temporary sibling directory and renamed into place only when complete, so a
crash mid-write never leaves a half-written directory under a checkpoint name; the temporary directory it
leaves is removed at the next resume. Resume verifies the newest checkpoint against its manifest and, if a
file is missing, truncated or corrupted, moves it to `damaged/` and tries the previous one. Retention never
deletes the newest verified checkpoint.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
import struct
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlvr import faults

log = logging.getLogger("rlvr.checkpoint")

STATE_FILE = "trainer_state.pt"
MANIFEST_FILE = "manifest.json"
DAMAGED_DIR = "damaged"
_NAME = re.compile(r"step_(\d+)$")
# what an interrupted `save_hf_dir` leaves: its temp directory, or the old copy it was replacing
_PARTIAL = re.compile(r"^\.(step_\d+|final)\.(tmp|old)-")
_CHUNK = 8 << 20


class CheckpointError(RuntimeError):
    """A checkpoint cannot be used or moved; the message names the path and the fix."""


def save_hf_dir(model: Any, tokenizer: Any, target: Path, extra_files: dict[str, Any] | None = None,
                before_rename: Callable[[], None] | None = None, manifest: bool = False) -> Path:
    """Write `model` and `tokenizer` as a transformers directory at `target`, atomically (temp dir + rename).
    With `manifest`, `manifest.json` (sizes and checksums of the other files) is written last.
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
        if manifest:
            write_manifest(tmp)
        if before_rename is not None:
            before_rename()
        if target.exists():
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            os.replace(target, old)
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
        _fsync_entries(target.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def _fsync_dir(path: Path) -> None:
    for f in path.iterdir():
        if f.is_file():
            with f.open("rb") as fh:
                os.fsync(fh.fileno())
    _fsync_entries(path)


def _fsync_entries(path: Path) -> None:
    """Make the directory's entries (new names, renames) durable; a no-op where directories cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# -- manifests and verification --------------------------------------------------------------------------


def file_crc32(path: Path) -> str:
    """CRC-32 of a file's bytes as 8 hex digits: cheap (zlib, ~GB/s), enough to catch truncation and bit rot."""
    crc = 0
    with Path(path).open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            crc = zlib.crc32(chunk, crc)
    return f"{crc:08x}"


def write_manifest(directory: Path) -> Path:
    """Write `manifest.json`: the size and CRC-32 of every other file in `directory`. It goes in last and
    atomically (temp file, fsync, rename), so a manifest that exists describes files that were complete."""
    directory = Path(directory)
    files = {f.name: {"size": f.stat().st_size, "crc32": file_crc32(f)}
             for f in sorted(directory.iterdir()) if f.is_file() and f.name != MANIFEST_FILE}
    tmp = directory / f".{MANIFEST_FILE}.tmp"
    with tmp.open("w") as fh:
        json.dump({"format": 1, "checksum": "crc32", "files": files}, fh, indent=1)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, directory / MANIFEST_FILE)
    _fsync_entries(directory)
    return directory / MANIFEST_FILE


def verify_checkpoint(path: Path, checksums: bool = True) -> str | None:
    """None if the checkpoint at `path` is intact, else what is wrong with it, naming the file.

    With a manifest, every listed file must exist with the recorded size and (`checksums`) CRC-32. A checkpoint
    without one (written by an older rlvr) gets structural checks: trainer_state.pt loads, config.json parses,
    and each safetensors file is as long as its header says.
    """
    path = Path(path)
    manifest = path / MANIFEST_FILE
    if not manifest.is_file():
        return _verify_structure(path)
    try:
        files = json.loads(manifest.read_text())["files"]
        entries = [(str(name), int(e["size"]), str(e["crc32"])) for name, e in files.items()]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        return f"{MANIFEST_FILE} is unreadable ({type(err).__name__}: {err})"
    for name, size, _crc in entries:
        f = path / name
        if not f.is_file():
            return f"{name} is missing"
        actual = f.stat().st_size
        if actual != size:
            return f"{name} has {actual} bytes, the manifest says {size} (truncated or overwritten)"
    if not checksums:
        return None
    for name, _, crc in entries:  # sizes first: a truncated file is found without reading anything
        actual_crc = file_crc32(path / name)
        if actual_crc != crc:
            return f"{name} does not match its checksum (crc32 {actual_crc}, the manifest says {crc}): corrupted"
    return None


def _verify_structure(path: Path) -> str | None:
    state_file = path / STATE_FILE
    if not state_file.is_file():
        return f"{STATE_FILE} is missing"
    try:
        state = torch.load(state_file, map_location="cpu", weights_only=False)
    except Exception as err:
        first = str(err).strip().split(". ")[0].splitlines()[0][:160] if str(err).strip() else ""
        return f"{STATE_FILE} does not load ({type(err).__name__}: {first})"
    if isinstance(state, dict) and state.get("manifest"):
        return f"{MANIFEST_FILE} is missing (this checkpoint was written with one)"
    try:
        json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as err:
        return f"config.json is missing or unreadable ({type(err).__name__})"
    weights = sorted(path.glob("*.safetensors"))
    if not weights and not (path / "adapter_model.bin").is_file() and not (path / "pytorch_model.bin").is_file():
        return "no model weights (*.safetensors) in it"
    for f in weights:
        problem = _safetensors_problem(f)
        if problem:
            return f"{f.name} {problem}"
    log.warning("checkpoint %s has no %s (written by an older rlvr): checked its structure only", path,
                MANIFEST_FILE)
    return None


def _safetensors_problem(f: Path) -> str | None:
    """Whether a safetensors file is as long as its header says (catches truncation, not bit flips)."""
    try:
        size = f.stat().st_size
        with f.open("rb") as fh:
            (header_len,) = struct.unpack("<Q", fh.read(8))
            if header_len > size:
                return "has a broken header"
            header = json.loads(fh.read(header_len))
        end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
    except (OSError, ValueError, KeyError, TypeError, IndexError, struct.error) as err:
        return f"has a broken header ({type(err).__name__})"
    expected = 8 + header_len + end
    if size != expected:
        return f"has {size} bytes, its header says {expected} (truncated)"
    return None


def quarantine(path: Path) -> Path:
    """Move a damaged checkpoint to `checkpoints/damaged/` (never deleted: the user decides). Returns where."""
    path = Path(path)
    dest_root = path.parent / DAMAGED_DIR
    dest_root.mkdir(exist_ok=True)
    dest, n = dest_root / path.name, 1
    while dest.exists():
        dest, n = dest_root / f"{path.name}.{n}", n + 1
    try:
        os.replace(path, dest)
    except OSError as err:
        raise CheckpointError(f"checkpoint {path} is damaged and could not be moved aside ({err}); move or "
                              f"delete it by hand, then resume again") from err
    return dest


def remove_partial_writes(run_dir: Path) -> list[Path]:
    """Remove what interrupted writes left (hidden `.step_*.tmp-*` / `.final.tmp-*` directories and the old
    copies a replacing write had set aside), logging each. Call only when no write can be in progress."""
    removed = []
    for root in (Path(run_dir) / "checkpoints", Path(run_dir)):
        if not root.is_dir():
            continue
        for p in sorted(root.iterdir()):
            if _PARTIAL.match(p.name) and p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
                log.info("removed %s, left by an interrupted checkpoint write", p)
                removed.append(p)
    return removed


def resume_checkpoint(run_dir: Path, say: Callable[[str], None] | None = None) -> Path | None:
    """The checkpoint to resume `run_dir` from: the newest one that verifies, or None.

    First removes partial writes. A damaged checkpoint (including a `step_*` directory missing its trainer
    state) is moved to `checkpoints/damaged/` with a message naming the file, and the previous one is tried.
    `say` receives each message (default: the log only).
    """
    def tell(message: str) -> None:
        log.warning(message)
        if say is not None:
            say(message)

    for p in remove_partial_writes(run_dir):
        if say is not None:
            say(f"Removed {p.name}, a partial checkpoint write left by an interrupted run")
    damaged = False
    for step, path in reversed(_step_dirs(run_dir)):
        problem = verify_checkpoint(path)
        if problem is None:
            if damaged:
                tell(f"Resuming from step {step} ({path}), the newest intact checkpoint")
            return path
        moved = quarantine(path)
        damaged = True
        tell(f"checkpoint {path.name} is damaged: {problem}. Moved it to {moved}; trying the previous one")
    if damaged:
        tell(f"no intact checkpoint left in {Path(run_dir) / 'checkpoints'}")
    return None


def _step_dirs(run_dir: Path) -> list[tuple[int, Path]]:
    """Every `step_*` directory, complete or not, oldest first."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    return sorted((int(m.group(1)), p) for p in root.iterdir() if (m := _NAME.match(p.name)) and p.is_dir())


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
    """Complete checkpoints (their files are present; not verified), oldest first."""
    return [(step, p) for step, p in _step_dirs(run_dir)
            if (p / STATE_FILE).is_file() and (p / "config.json").is_file()]


def latest_checkpoint(run_dir: Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1][1] if found else None


def save_checkpoint(run_dir: Path, step: int, model: Any, tokenizer: Any, state: dict[str, Any],
                    keep_last: int) -> Path:
    """Write the checkpoint of `step` (with its manifest), verify it in place, then apply `keep_last`.
    A checkpoint that does not verify is moved to `damaged/` and raises OSError; nothing older is pruned.
    In place, files and sizes are checked: the checksums were just computed from these bytes (resume reads
    them all again)."""
    state = {**state, "step": step, "rng": rng_state(), "manifest": True}
    path = save_hf_dir(model, tokenizer, checkpoint_dir(run_dir, step), {STATE_FILE: state},
                       before_rename=lambda: faults.kill_point("checkpoint", step), manifest=True)
    problem = verify_checkpoint(path, checksums=False)
    if problem is not None:
        moved = quarantine(path)
        raise OSError(f"the checkpoint did not verify after writing: {problem} (moved to {moved})")
    prune_checkpoints(run_dir, keep_last, verified=path)
    return path


def prune_checkpoints(run_dir: Path, keep_last: int, verified: Path | None = None) -> None:
    """Delete all but the newest `keep_last` checkpoints, never the newest verified one (`verified` if the
    caller has just verified it, else found by verifying from the newest down)."""
    found = list_checkpoints(run_dir)
    old = found[: max(0, len(found) - max(1, keep_last))]
    if not old:
        return
    if verified is None:
        verified = next((p for _, p in reversed(found) if verify_checkpoint(p) is None), None)
    for _, path in old:
        if verified is not None and path == Path(verified):
            continue
        shutil.rmtree(path, ignore_errors=True)


def load_trainer_state(path: Path) -> dict[str, Any]:
    try:
        return torch.load(Path(path) / STATE_FILE, map_location="cpu", weights_only=False)
    except Exception as err:
        raise CheckpointError(f"{Path(path) / STATE_FILE} does not load ({type(err).__name__}: {err}); move "
                              f"{path} aside and resume from the previous checkpoint") from None
