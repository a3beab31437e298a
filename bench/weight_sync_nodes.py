"""Weight sync to a Ray rollout worker on the controller's node against one on another node (another raylet and
object store), per MB of weights: `python bench/weight_sync_nodes.py [--model qwen25m] [--reps 5]`.

Starts the two-node cluster of the tests (tests/e2e/ray_cluster.py: two `ray start` nodes on this machine, 1 CPU
each), connects as the controller (a driver on the head node), and times `RayEngine.sync_weights` (the state dict
into the object store, the worker fetching and loading it; or, with `--weight-sync broadcast`, the gloo group)
with one rollout worker pinned by `distributed.rollout_worker_resources` to the head node and one to the second
(two engines, synced alternately).
Both nodes are on one machine, so "across raylets" is a copy between two object stores over loopback, not a
network: what it adds over the same-node path is Ray's object transfer itself.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen25m", help="bench model: builtin, tiny, qwen25m, qwen0.5b")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--weight-sync", default="object_store", choices=["object_store", "broadcast"])
    args = ap.parse_args(argv)

    import ray
    import torch

    from bench.common import model_dir
    from ray_cluster import HEAD, SECOND, two_node_cluster
    from rlvr.config import load_config
    from rlvr.distributed.ray_engine import RayEngine
    from rlvr.models import load_causal_lm

    path = model_dir(args.model)
    model = load_causal_lm(str(path), dtype=torch.float32, device=torch.device("cpu"), trainable=False)
    mb = sum(t.numel() * t.element_size() for t in model.state_dict().values()) / 1e6
    out: dict[str, object] = {"model": args.model, "state_dict_mb": round(mb, 1), "weight_sync": args.weight_sync}
    with tempfile.TemporaryDirectory(prefix="rlvr-ws-") as elsewhere, two_node_cluster(Path(elsewhere)) as cluster:
        ray.init(address=cluster.address, log_to_driver=False)
        try:
            engines = {}
            for node in (HEAD, SECOND):
                cfg = load_config(None, [f"model.path={path}", "distributed.backend=ray",
                                         f"distributed.address={cluster.address}", "distributed.rollout_workers=1",
                                         "distributed.cpus_per_rollout_worker=0.5",
                                         f"distributed.rollout_worker_resources={{{node}: 0.1}}",
                                         f"distributed.weight_sync={args.weight_sync}"])
                engines[node] = RayEngine(cfg, str(path))
            try:
                for engine in engines.values():
                    engine.sync_weights(model, 0)  # the worker is up and has loaded once
                seconds: dict[str, list[float]] = {HEAD: [], SECOND: []}
                for v in range(1, args.reps + 1):  # alternated, so a change in the machine's load hits both
                    for node, engine in engines.items():
                        with torch.no_grad():  # new values each time, as after an update
                            next(model.parameters()).add_(1e-6)
                        t0 = time.perf_counter()
                        engine.sync_weights(model, v)
                        seconds[node].append(time.perf_counter() - t0)
            finally:
                for engine in engines.values():
                    engine.shutdown()
            for node in (HEAD, SECOND):
                med = statistics.median(seconds[node])
                out[node] = {"seconds": [round(s, 3) for s in seconds[node]], "median_s": round(med, 3),
                             "ms_per_mb": round(1000 * med / mb, 2)}
        finally:
            ray.shutdown()
    out["across_over_within"] = round(out[SECOND]["median_s"] / out[HEAD]["median_s"], 2)  # type: ignore[index]
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
