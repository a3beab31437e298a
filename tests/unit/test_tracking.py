"""Metric sinks (JSONL always; TensorBoard, W&B offline, MLflow local when installed) and the rollout writer."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr.tracking import (
    SINKS,
    JsonlSink,
    MetricsLogger,
    RolloutWriter,
    TrackingError,
    build_sinks,
    check_sinks,
    mlflow_key,
    read_metrics,
    read_rollouts,
)
from rlvr.types import Group, Sample, TaskRecord

CONFIG = {"run": {"name": "unit", "seed": 0}, "optim": {"lr": 1e-3}, "eval": {"ks": [1, 4]}}


def test_jsonl_is_always_on_and_first(tmp_path):
    assert check_sinks([]) == ["jsonl"]
    assert check_sinks(["jsonl", "jsonl"]) == ["jsonl"]
    with build_sinks([], tmp_path, CONFIG) as logger:
        assert isinstance(logger, MetricsLogger) and [type(s) for s in logger.sinks] == [JsonlSink]
        logger.log(1, {"reward_mean": 0.5, "nan": float("nan"), "inf": float("inf"), "tag": "x"})
        logger.log(2, {"reward_mean": 0.75})
    rows = read_metrics(tmp_path)
    assert rows[0] == {"step": 1, "reward_mean": 0.5, "nan": None, "inf": 1e308, "tag": "x"}
    assert [r["step"] for r in rows] == [1, 2]


def test_jsonl_resume_drops_later_steps(tmp_path):
    logger = build_sinks(["jsonl"], tmp_path, CONFIG)
    for step in (1, 2, 3, 4):
        logger.log(step, {"x": step})
    logger.close()
    logger = build_sinks(["jsonl"], tmp_path, CONFIG, resume_from_step=2)
    logger.log(3, {"x": 30})
    logger.close()
    assert [(r["step"], r["x"]) for r in read_metrics(tmp_path)] == [(1, 1), (2, 2), (3, 30)]


def test_unknown_sink_names_the_key_and_choices(tmp_path):
    with pytest.raises(TrackingError, match=r"logging.sinks: unknown sink 'tensorbord'.*Did you mean 'tensorboard'"):
        build_sinks(["tensorbord"], tmp_path, CONFIG)
    assert not (tmp_path / "metrics.jsonl").exists()  # checked before anything is opened


@pytest.mark.parametrize("sink,blocked", [
    ("tensorboard", ["torch.utils.tensorboard", "tensorboardX"]),
    ("wandb", ["wandb"]),
    ("mlflow", ["mlflow"]),
])
def test_missing_package_message(tmp_path, monkeypatch, sink, blocked):
    for module in blocked:
        monkeypatch.setitem(sys.modules, module, None)  # makes `import module` fail as if not installed
    with pytest.raises(TrackingError) as err:
        build_sinks(["jsonl", sink], tmp_path, CONFIG)
    assert f"tracking: the '{sink}' sink needs `pip install {sink}`" in str(err.value)


def test_a_failing_optional_sink_is_dropped_not_fatal(tmp_path, monkeypatch, caplog):
    calls = []

    class Flaky:
        def __init__(self, run_dir, config, resume):
            self.closed = False

        def log(self, step, metrics):
            calls.append(step)
            raise OSError("disk full")

        def close(self):
            self.closed = True

    monkeypatch.setitem(SINKS, "flaky", Flaky)
    logger = build_sinks(["flaky"], tmp_path, CONFIG)
    flaky = logger.sinks[1]
    logger.log(1, {"x": 1.0})
    logger.log(2, {"x": 2.0})
    logger.close()
    assert calls == [1] and flaky.closed
    assert "switched off" in caplog.text
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2]


def test_importing_rlvr_needs_no_tracking_package():
    code = ("import sys\n"
            "for m in ('tensorboard', 'tensorboardX', 'torch.utils.tensorboard', 'wandb', 'mlflow'):\n"
            "    sys.modules[m] = None\n"
            "import rlvr, rlvr.tracking, rlvr.eval.report, rlvr.eval.compare\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_mlflow_keys_are_sanitised():
    assert mlflow_key("eval/pass@1") == "eval/pass_at_1"
    assert mlflow_key("reward_failures/correctness: ValueError") == "reward_failures/correctness_ ValueError"


# ---------------------------------------------------------------------------------------------- optional sinks


def test_tensorboard_sink(tmp_path):
    pytest.importorskip("tensorboard")
    with build_sinks(["tensorboard"], tmp_path, CONFIG) as logger:
        logger.log(1, {"reward_mean": 0.5, "eval/pass@1": 0.25, "text": "skipped", "nan": float("nan")})
        logger.log(2, {"reward_mean": 0.6})
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    with build_sinks(["tensorboard"], tmp_path, CONFIG, resume_from_step=1) as logger:
        logger.log(2, {"reward_mean": 0.7})


def test_wandb_sink_offline(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_MODE", "online")  # the sink must stay offline regardless
    with build_sinks(["wandb"], tmp_path, CONFIG) as logger:
        logger.log(1, {"reward_mean": 0.5, "eval/pass@1": 0.25})
    run_id = (tmp_path / "wandb" / "rlvr_run_id").read_text().strip()
    assert list((tmp_path / "wandb").glob(f"offline-run-*-{run_id}"))


def test_mlflow_sink_local_store(tmp_path):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    with build_sinks(["mlflow"], tmp_path, CONFIG) as logger:
        logger.log(1, {"reward_mean": 0.5, "eval/pass@1": 0.25})
        logger.log(2, {"reward_mean": 0.75})
        run_id = logger.sinks[1].run_id
    client = MlflowClient(tracking_uri=(tmp_path / "mlruns").resolve().as_uri())
    history = client.get_metric_history(run_id, "reward_mean")
    assert [(m.step, m.value) for m in history] == [(1, 0.5), (2, 0.75)]
    assert client.get_metric_history(run_id, "eval/pass_at_1")[0].value == 0.25
    assert client.get_run(run_id).data.params["optim.lr"] == "0.001"
    with build_sinks(["mlflow"], tmp_path, CONFIG, resume_from_step=2) as logger:
        assert logger.sinks[1].run_id == run_id  # a resumed training continues the same MLflow run


# ---------------------------------------------------------------------------------------------- rollouts


def make_groups(step: int, num_groups: int = 3, n: int = 2) -> list[Group]:
    groups = []
    for g in range(num_groups):
        samples = []
        for i in range(n):
            s = Sample(prompt_ids=[1, 2], response_ids=[5] * (3 + i), text=f"step {step} answer <b>{g}</b>&{i}",
                       finish_reason="length" if i else "stop", policy_version=step - 1)
            s.rewards = {"correctness": float(i == 0), "format": 0.5}
            s.reward = s.rewards["correctness"] + 0.5
            s.correct = i == 0
            s.advantage = 0.7 if i == 0 else [-0.1, -0.2, -0.3, -0.4]
            s.meta["reasons"] = {"correctness": "correct" if i == 0 else "wrong answer"}
            samples.append(s)
        groups.append(Group(record=TaskRecord(id=f"q{g}", question="?", answer=2 * g, difficulty=g),
                            prompt_ids=[1, 2], samples=samples, prompt_text=f"prompt {g} <script>"))
    return groups


def test_rollout_writer_format_rate_and_cap(tmp_path):
    writer = RolloutWriter(tmp_path, every=2, max_per_step=3)
    assert writer.write(1, make_groups(1)) == 0  # not a multiple of `every`
    assert writer.write(2, make_groups(2)) == 3
    assert writer.write(4, make_groups(4)) == 3
    rows = read_rollouts(tmp_path)
    assert [(r["step"], r["group"], r["sample"]) for r in rows] == [
        (2, 0, 0), (2, 0, 1), (2, 1, 0), (4, 0, 0), (4, 0, 1), (4, 1, 0)]  # whole groups first, in order
    first, second = rows[0], rows[1]
    assert first == {
        "step": 2, "group": 0, "sample": 0, "prompt_id": "q0", "prompt": "prompt 0 <script>",
        "response": "step 2 answer <b>0</b>&0", "reward": 1.5, "rewards": {"correctness": 1.0, "format": 0.5},
        "reasons": {"correctness": "correct"}, "correct": True, "advantage": 0.7, "finish_reason": "stop",
        "length": 3, "policy_version": 1, "answer": "0", "difficulty": 0,
    }
    assert second["advantage"] == [-0.1, -0.2, -0.3, -0.4] and second["finish_reason"] == "length"
    assert second["correct"] is False and second["length"] == 4


def test_rollout_writer_off_and_resume(tmp_path):
    off = RolloutWriter(tmp_path, every=0, max_per_step=8)
    assert off.write(1, make_groups(1)) == 0 and not (tmp_path / "rollouts.jsonl").exists()
    writer = RolloutWriter(tmp_path, every=1, max_per_step=2)
    for step in (1, 2, 3):
        writer.write(step, make_groups(step))
    with (tmp_path / "rollouts.jsonl").open("a") as f:
        f.write('{"step": 3, "broken')  # a line cut short by a crash
    resumed = RolloutWriter(tmp_path, every=1, max_per_step=2, resume_from_step=2)
    resumed.write(3, make_groups(3))
    assert [r["step"] for r in read_rollouts(tmp_path)] == [1, 1, 2, 2, 3, 3]
    assert read_rollouts(tmp_path / "missing") == []
    with pytest.raises(ValueError):
        RolloutWriter(tmp_path, every=-1, max_per_step=1)


def test_rollout_texts_are_cut(tmp_path):
    groups = make_groups(1, num_groups=1, n=1)
    groups[0].samples[0].text = "x" * 100
    RolloutWriter(tmp_path, every=1, max_per_step=1, max_chars=10).write(1, groups)
    assert json.loads((Path(tmp_path) / "rollouts.jsonl").read_text())["response"] == "x" * 10


def png_bytes(size: tuple[int, int], color: tuple[int, int, int]) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def decode_uri(uri: str):
    from PIL import Image

    prefix = "data:image/png;base64,"
    assert uri.startswith(prefix)
    return Image.open(io.BytesIO(base64.b64decode(uri[len(prefix):], validate=True)))


def test_rollout_writer_stores_small_thumbnails_for_visual_prompts(tmp_path):
    from PIL import Image

    groups = make_groups(1, num_groups=3, n=2)
    big = Image.new("RGB", (300, 120), (200, 30, 30))
    clip = [png_bytes((48, 48), (0, 0, 255 - 40 * i)) for i in range(3)]
    groups[0].record.images = [big, clip]  # an image and a 3-frame clip
    groups[1].record.images = [b"not an image", png_bytes((20, 40), (0, 128, 0))]  # one broken, one fine
    # groups[2] is a text prompt
    writer = RolloutWriter(tmp_path, every=1, max_per_step=6)
    assert writer.write(1, groups) == 6
    rows = read_rollouts(tmp_path)
    first = rows[0]
    assert [len(item) for item in first["images"]] == [1, 3]  # [image], [frame, frame, frame]
    sizes = [decode_uri(u).size for item in first["images"] for u in item]
    assert sizes == [(64, 26), (48, 48), (48, 48), (48, 48)]  # longer side <= 64, aspect kept, never enlarged
    assert len(json.dumps(first["images"])) < 4_000  # a few hundred bytes per thumbnail
    assert "images" not in rows[1]  # once per group: on its first sample
    assert [decode_uri(u).size for item in rows[2]["images"] for u in item] == [(20, 40)]  # broken one left out
    assert all("images" not in r for r in rows[4:])  # text prompt: no key at all (format unchanged)
    (tmp_path / "text").mkdir()
    RolloutWriter(tmp_path / "text", every=1, max_per_step=8).write(1, make_groups(1))
    assert all("images" not in r for r in read_rollouts(tmp_path / "text"))


def test_thumbnails_are_capped_per_prompt(tmp_path):
    from rlvr.tracking.rollouts import MAX_THUMBNAILS, record_thumbnails

    frame = png_bytes((8, 8), (1, 2, 3))
    record = TaskRecord(id="v", question="?", answer=1, images=[[frame] * 10, [frame] * 10, frame])
    thumbs = record_thumbnails(record)
    assert [len(t) for t in thumbs] == [10, MAX_THUMBNAILS - 10]
    assert record_thumbnails(TaskRecord(id="t", question="?", answer=1)) == []
