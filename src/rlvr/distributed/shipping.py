"""What Ray workers need from the controller's disk, sent through Ray, and where each worker runs.

No shared filesystem is assumed: a rollout or reference worker on another node gets the model directory
(weights, config, tokenizer files) as bytes in Ray's object store, put there once by the controller, and writes
them to a private temporary directory on its own node to load from. Reward workers get the controller's task
object (with its data already read), not the task's file path. So a path on the controller's machine never has to
exist on a worker's node (`tests/e2e/test_ray_cluster.py` runs the second node in another working directory with
relative paths, so a leaked path fails).

`where_am_i` and `describe_node` record placement: each actor reports its node, and the controller logs it with
the node's custom resources (`train.log`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Any

log = logging.getLogger("rlvr.distributed")

# Files of a checkpoint directory a worker does not load: the optimizer/trainer state (twice the weights' size)
SKIP_FILES = frozenset({"trainer_state.pt"})
STANDARD_RESOURCES = ("CPU", "GPU", "memory", "object_store_memory", "node:", "accelerator_type:")


def read_model_dir(path: str | Path, key: str = "model.path") -> dict[str, bytes]:
    """The files of a model directory (or `builtin`, `builtin-vl`, ...) as {relative path: bytes}."""
    from rlvr.models.loading import resolve_model_path

    root = resolve_model_path(path, key)
    files: dict[str, bytes] = {}
    for f in sorted(root.rglob("*")):
        rel = f.relative_to(root)
        if f.is_file() and rel.name not in SKIP_FILES and "__pycache__" not in rel.parts:
            files[rel.as_posix()] = f.read_bytes()
    return files


def put_model_dir(ray: Any, path: str | Path, key: str = "model.path") -> Any:
    """The model directory in Ray's object store, once, for every worker on every node (an ObjectRef)."""
    files = read_model_dir(path, key)
    log.info("%s '%s' goes to the workers through the object store: %d files, %.1f MB", key, path, len(files),
             sum(map(len, files.values())) / 1e6)
    return ray.put(files)


def write_model_dir(files: dict[str, bytes]) -> str:
    """The shipped files written to a new private temporary directory on this node; returns its path."""
    root = Path(tempfile.mkdtemp(prefix="rlvr-model-"))
    for rel, data in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return str(root)


@contextlib.contextmanager
def local_model_dir(files: dict[str, bytes]):
    """`write_model_dir`, removed afterwards (the model is in memory by then)."""
    root = write_model_dir(files)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def where_am_i() -> dict[str, Any]:
    """This actor's node (Ray's node id), host and process: what the controller records."""
    import ray

    return {"node_id": ray.get_runtime_context().get_node_id(), "host": socket.gethostname(), "pid": os.getpid()}


def node_names(ray: Any, node_id: str) -> list[str]:
    """The custom resources a node was started with (`ray start --resources`), which name it."""
    for node in ray.nodes():
        if node.get("NodeID") == node_id:
            return sorted(r for r in node.get("Resources", {}) if not r.startswith(STANDARD_RESOURCES))
    return []


def describe_node(ray: Any, info: dict[str, Any]) -> str:
    """One line for the log: node id, its custom resources, host and pid."""
    names = node_names(ray, info["node_id"])
    return (f"node {info['node_id'][:12]} (resources: {', '.join(names) or 'none custom'}; host {info['host']}, "
            f"pid {info['pid']})")


def log_placement(ray: Any, what: str, actor: Any) -> None:
    """Log which node `actor` (with a `where` method) runs on; placement is recorded in train.log."""
    try:
        info = ray.get(actor.where.remote(), timeout=60)
    except Exception as err:  # recording must not stop a run
        log.warning("could not ask the %s where it runs: %s", what, err)
        return
    log.info("placement: %s on %s", what, describe_node(ray, info))


def log_controller_placement(ray: Any) -> None:
    """The controller's own node (the learner runs there unless distributed.learner_workers)."""
    info = {"node_id": ray.get_runtime_context().get_node_id(), "host": socket.gethostname(), "pid": os.getpid()}
    log.info("placement: controller on %s", describe_node(ray, info))
