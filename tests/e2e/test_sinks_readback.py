"""Every metric of a short real run is read back from every sink (no sink stops after step 1)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rlvr.config import load_config
from rlvr.tracking import MetricKeys, mlflow_key, read_metrics

ROOT = Path(__file__).resolve().parents[2]
STEPS = 3


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    for package in ("tensorboard", "mlflow", "wandb"):
        pytest.importorskip(package)
    from rlvr.trainer.loop import train

    os.environ["WANDB_SILENT"] = "true"
    out = tmp_path_factory.mktemp("sinks") / "run"
    cfg = load_config(ROOT / "recipes/grpo.yaml", [
        f"run.dir={out}", f"train.steps={STEPS}", "train.prompts_per_step=2", "train.mini_batches=1",
        "rollout.n=2", "rollout.max_new_tokens=8", "eval.before=false", "eval.after=false", "checkpoint.every=0",
        "logging.sinks=[jsonl, tensorboard, mlflow, wandb]"])
    train(cfg)
    return out


def _expected(run_dir: Path) -> dict[int, dict[str, float]]:
    """What each optional sink must hold: the finite numbers of metrics.jsonl, per step."""
    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    nested = [k for k in rows[0] if k.count("/") >= 2]
    assert any(k.startswith("reward/correctness/") for k in nested)  # the case that broke MLflow
    return {r["step"]: {k: float(v) for k, v in r.items() if k != "step" and isinstance(v, (int, float))
                        and not isinstance(v, bool) and abs(float(v)) < float("inf")} for r in rows}


def test_mlflow_holds_every_metric_of_every_step(run_dir: Path) -> None:
    from mlflow.tracking import MlflowClient

    expected = _expected(run_dir)
    store = run_dir / "mlruns"
    client = MlflowClient(tracking_uri=store.resolve().as_uri())
    run_id = (store / "rlvr_run_id").read_text().strip()
    keys = MetricKeys(mlflow_key)
    for step, metrics in expected.items():
        for name, key in keys.map(metrics).items():
            history = {m.step: m.value for m in client.get_metric_history(run_id, key)}
            assert history.get(step) == pytest.approx(metrics[name]), (name, key, step)


def test_tensorboard_holds_every_metric_of_every_step(run_dir: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    expected = _expected(run_dir)
    acc = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    keys = MetricKeys()
    for step, metrics in expected.items():
        for name, key in keys.map(metrics).items():
            values = {e.step: e.value for e in acc.Scalars(key)}
            assert values.get(step) == pytest.approx(metrics[name], rel=1e-6, abs=1e-6), (name, key, step)


def _wandb_records(path: Path) -> list[bytes]:
    """The records of an offline .wandb file: a 7-byte header (`:W&B`, magic, version), then a LevelDB-style
    log of 32 KiB blocks whose records carry a 7-byte header (crc32, little-endian length, type: 1 full,
    2 first, 3 middle, 4 last). wandb 0.31 no longer ships a Python reader for it."""
    data, block = path.read_bytes(), 32768
    assert data[:4] == b":W&B"
    records, pos, pending = [], 7, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:
            continue
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            records.append(pending)
            pending = b""
    return records


def test_wandb_offline_holds_every_metric_of_every_step(run_dir: Path) -> None:
    from wandb.proto import wandb_internal_pb2

    expected = _expected(run_dir)
    [store_file] = (run_dir / "wandb").glob("offline-run-*/run-*.wandb")
    logged: dict[int, dict[str, float]] = {}
    for data in _wandb_records(store_file):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        if record.WhichOneof("record_type") != "history":
            continue
        row = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
        logged[int(row["_step"])] = row
    keys = MetricKeys()
    for step, metrics in expected.items():
        for name, key in keys.map(metrics).items():
            assert logged[step].get(key) == pytest.approx(metrics[name], rel=1e-6, abs=1e-6), (name, key, step)


def test_metric_keys_never_make_a_key_a_path_prefix_of_another() -> None:
    keys = MetricKeys(mlflow_key)
    got = keys.map(["reward/correctness", "reward/correctness/verify_calls_per_s", "kl", "kl/x", "eval/pass@1"])
    assert got == {"reward/correctness": "reward/correctness",
                   "reward/correctness/verify_calls_per_s": "reward/correctness.verify_calls_per_s",
                   "kl": "kl/value", "kl/x": "kl/x", "eval/pass@1": "eval/pass_at_1"}
    assert keys.map(["entropy"]) == {"entropy": "entropy"}
    assert keys.map(["entropy/clipped"]) == {"entropy/clipped": "entropy_/clipped"}  # `entropy` is a file already
    assert keys.map(["kl"]) == {"kl": "kl/value"}  # remembered
    every = list(keys.map(["reward/correctness", "kl", "kl/x", "entropy", "entropy/clipped"]).values())
    assert not any(b.startswith(a + "/") for a in every for b in every)
