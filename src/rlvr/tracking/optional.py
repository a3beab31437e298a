"""The optional metric sinks: TensorBoard, Weights & Biases (offline) and MLflow (local file store).

Each imports its package only when built, so none is needed to import rlvr, and none touches the network.
On resume each drops (or hides) what was logged after the checkpoint's step."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlvr.tracking.keys import MetricKeys, _scalars, mlflow_key
from rlvr.tracking.sink import _need


def _flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in config.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


class TensorBoardSink:
    """Scalars to RUN_DIR/tensorboard (torch.utils.tensorboard, else tensorboardX). View: tensorboard --logdir RUN_DIR.

    On resume, `purge_step` makes TensorBoard hide the events logged after the checkpoint.
    """

    name = "tensorboard"

    def __init__(self, run_dir: Path, config: Mapping[str, Any] | None = None, resume_from_step: int | None = None):
        module = _need("tensorboard", self.name, ["torch.utils.tensorboard", "tensorboardX"])
        self.log_dir = run_dir / "tensorboard"
        purge = resume_from_step + 1 if resume_from_step is not None else None
        self._writer = module.SummaryWriter(str(self.log_dir), purge_step=purge)
        self._keys = MetricKeys()
        if config and resume_from_step is None:
            self._writer.add_text("config", "```\n" + json.dumps(config, indent=2, default=str) + "\n```", 0)

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        scalars = _scalars(metrics)
        keys = self._keys.map(scalars)
        for k, v in scalars.items():
            self._writer.add_scalar(keys[k], v, step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class WandbSink:
    """Weights & Biases in offline mode (`mode="offline"`, as WANDB_MODE=offline; it wins over the environment):
    files under RUN_DIR/wandb, nothing sent. Upload later with
    `wandb sync RUN_DIR/wandb/offline-run-*`. The run id is kept in RUN_DIR/wandb/rlvr_run_id and reused by a
    resumed training, so its offline pieces sync into one W&B run."""

    name = "wandb"

    def __init__(self, run_dir: Path, config: Mapping[str, Any] | None = None, resume_from_step: int | None = None):
        wandb = _need("wandb", self.name)
        wandb_dir = run_dir / "wandb"
        wandb_dir.mkdir(parents=True, exist_ok=True)
        id_file = wandb_dir / "rlvr_run_id"
        run_id = id_file.read_text().strip() if id_file.exists() else uuid.uuid4().hex[:8]
        id_file.write_text(run_id + "\n")
        project = str(((config or {}).get("run") or {}).get("name") or "rlvr")
        # No `resume=`: offline W&B ignores it with a warning; reusing the id is what joins the pieces on sync.
        self._run = wandb.init(project=project, name=run_dir.name, id=run_id, dir=str(run_dir), mode="offline",
                               config=dict(config or {}))
        self._keys = MetricKeys()

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        scalars = _scalars(metrics)
        keys = self._keys.map(scalars)
        self._run.log({keys[k]: v for k, v in scalars.items()}, step=step)

    def close(self) -> None:
        self._run.finish()


class MLflowSink:
    """MLflow with a local file store at RUN_DIR/mlruns (`mlflow ui --backend-store-uri RUN_DIR/mlruns`).

    The config goes in as flattened params; the run id is kept in RUN_DIR/mlruns/rlvr_run_id so a resumed
    training continues the same MLflow run.
    """

    name = "mlflow"

    def __init__(self, run_dir: Path, config: Mapping[str, Any] | None = None, resume_from_step: int | None = None):
        # MLflow >= 3.13 refuses the file store unless this is set (it recommends SQLite); the run dir keeps it.
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        _need("mlflow", self.name)
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        store = (run_dir / "mlruns").resolve()
        store.mkdir(parents=True, exist_ok=True)
        self._client = MlflowClient(tracking_uri=store.as_uri())
        self._keys = MetricKeys(mlflow_key)
        experiment_name = str(((config or {}).get("run") or {}).get("name") or "rlvr")
        experiment = self._client.get_experiment_by_name(experiment_name)
        experiment_id = experiment.experiment_id if experiment else self._client.create_experiment(experiment_name)
        id_file = store / "rlvr_run_id"
        self.run_id = id_file.read_text().strip() if id_file.exists() else ""
        if not self.run_id:
            self.run_id = self._client.create_run(experiment_id, run_name=run_dir.name).info.run_id
            id_file.write_text(self.run_id + "\n")
            params = [Param(mlflow_key(k)[:250], json.dumps(v, default=str)[:250] if not isinstance(v, str)
                            else v[:250]) for k, v in _flatten(config or {}).items()]
            for i in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
                self._client.log_batch(self.run_id, params=params[i : i + 100])

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        scalars = _scalars(metrics)
        keys = self._keys.map(scalars)
        batch = [Metric(keys[k], v, now, step) for k, v in scalars.items()]
        for i in range(0, len(batch), 1000):
            self._client.log_batch(self.run_id, metrics=batch[i : i + 1000])

    def close(self) -> None:
        self._client.set_terminated(self.run_id)
