"""Image columns in the hf_dataset task (`task.image_column`, `task.on_bad_row`): a `datasets.Image` feature saved
with save_to_disk or to Parquet (one image or a list per row, read undecoded), path and bytes cells, broken
images skipped and counted or reported with the split, row and column, and an image dataset that passes the
training preflight with builtin-vl (one held-out prompt rendered by its processor)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image

from rlvr.config import ConfigError, load_config
from rlvr.tasks import TaskError, build_task
from rlvr.tasks.images import checked_dataset_images, record_images

datasets = pytest.importorskip("datasets")

COLORS = [(i * 40, 10, 200 - i * 40) for i in range(5)]


def _png(color=(255, 0, 0), size=(8, 6)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def _features(image) -> datasets.Features:
    return datasets.Features({"q": datasets.Value("string"), "a": datasets.Value("string"), "image": image})


def _task(path, tmp_path: Path, **params):
    return build_task("hf_dataset", {"path": str(path), "question_field": "q", "answer_field": "a",
                                     "image_column": "image", "verifier": "numeric", "eval_fraction": 0.2,
                                     "cache_dir": str(tmp_path / "cache"), **params})


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    """A save_to_disk dataset with a datasets.Image feature: 5 rows, one question, 5 differently coloured images."""
    images = [Image.new("RGB", (8, 6), c) for c in COLORS]
    ds = datasets.Dataset.from_dict({"q": ["How many shapes are in the image?"] * 5, "a": [str(i) for i in range(5)],
                                     "image": images}, features=_features(datasets.Image()))
    ds.save_to_disk(str(tmp_path / "img"))
    return tmp_path / "img"


def test_an_image_feature_from_save_to_disk_loads_as_a_visual_task(saved: Path, tmp_path: Path) -> None:
    task = _task(saved, tmp_path)
    assert task.visual and task.bad_rows == 0
    # every row asks the same question: held-out rows are told apart by their images, so none is dropped
    assert len(task.train) == 4 and len(task.heldout) == 1
    for record in [*task.train, *task.heldout]:
        assert isinstance(record.images[0], bytes)  # read undecoded ({bytes, path}), decoded when rendered
        (image,) = record_images(record)
        assert image.size == (8, 6) and image.getpixel((0, 0)) == COLORS[int(record.answer)]
    assert task.plain_prompt_with_images(task.heldout[0]) == "<image>How many shapes are in the image?"
    assert task.verify("Answer: 3", task.train[0]).correct == (task.train[0].answer == "3")


def test_lists_of_images_paths_and_streaming_from_parquet(tmp_path: Path) -> None:
    Image.new("RGB", (4, 4), (0, 0, 255)).save(tmp_path / "blue.png")
    pair = [Image.new("RGB", (8, 6), COLORS[0]), Image.new("RGB", (8, 6), COLORS[1])]
    ds = datasets.Dataset.from_dict({"q": [f"q{i}" for i in range(4)], "a": ["1"] * 4, "image": [pair] * 4,
                                     "file": ["blue.png"] * 4},
                                    features=datasets.Features({**_features(datasets.List(datasets.Image())),
                                                                "file": datasets.Value("string")}))
    ds.to_parquet(str(tmp_path / "d.parquet"))
    for streaming in (False, True):
        task = _task(tmp_path / "d.parquet", tmp_path, streaming=streaming)
        assert len(task.train) + len(task.heldout) == 4
        record = task.train[0]
        assert [im.getpixel((0, 0)) for im in record_images(record)] == COLORS[:2]
        assert "<image><image>" in task.plain_prompt_with_images(record)
    by_path = _task(tmp_path / "d.parquet", tmp_path, image_column="file")  # relative to the file's folder
    assert by_path.train[0].images == [str((tmp_path / "blue.png").resolve())]


def test_a_decoded_pil_cell_is_kept_as_png_bytes(tmp_path: Path) -> None:
    (item,) = checked_dataset_images(Image.new("RGB", (3, 2), (1, 2, 3)), tmp_path, where="row 0")
    assert isinstance(item, bytes) and Image.open(io.BytesIO(item)).getpixel((0, 0)) == (1, 2, 3)


def _broken(tmp_path: Path) -> Path:
    cells = [{"bytes": _png(c), "path": None} for c in COLORS[:3]]
    cells += [{"bytes": b"not an image", "path": None}, None]  # (save_to_disk embeds path-only images' bytes)
    ds = datasets.Dataset.from_dict({"q": [f"q{i}" for i in range(5)], "a": ["1"] * 5, "image": cells},
                                    features=_features(datasets.Image()))
    ds.save_to_disk(str(tmp_path / "broken"))
    return tmp_path / "broken"


def test_broken_images_are_skipped_and_counted(tmp_path: Path) -> None:
    task = _task(_broken(tmp_path), tmp_path)
    assert len(task.train) + len(task.heldout) == 3 and task.bad_rows == 2
    reasons = dict(task.bad_images)
    assert "cannot be decoded" in reasons["broken-train-3"] and "no image" in reasons["broken-train-4"]
    # path cells are relative to the save_to_disk directory; a missing file is a bad row too
    Image.new("RGB", (4, 4)).save(tmp_path / "ok.png")
    ds = datasets.Dataset.from_dict({"q": ["a", "b", "c"], "a": ["1"] * 3, "image": ["../ok.png"] * 2 + ["gone.png"]})
    ds.save_to_disk(str(tmp_path / "paths"))
    task = _task(tmp_path / "paths", tmp_path, eval_fraction=0.5)
    assert task.bad_rows == 1 and [*task.train, *task.heldout][0].images == [str((tmp_path / "ok.png").resolve())]
    assert "does not exist" in task.bad_images[0][1] and "gone.png" in task.bad_images[0][1]


def test_on_bad_row_error_names_the_split_row_and_column(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match=r"task.split: row 3 of split 'train' of '.*broken', column 'image': the "
                                        r"image bytes cannot be decoded .* Fix it, or set task.on_bad_row=skip"):
        _task(_broken(tmp_path), tmp_path, on_bad_row="error")
    datasets.Dataset.from_dict({"q": ["a", ""], "a": ["1", "2"]}).save_to_disk(str(tmp_path / "text"))
    with pytest.raises(TaskError, match=r"task.split: row 1 of split 'train' .* is malformed: its q is not"):
        _task(tmp_path / "text", tmp_path, image_column=None, on_bad_row="error")


def test_a_missing_image_column_names_the_key(saved: Path, tmp_path: Path) -> None:
    with pytest.raises(TaskError, match=r"task.image_column: field 'picture' not found .* q, a, image"):
        _task(saved, tmp_path, image_column="picture")


def test_an_image_dataset_passes_the_training_preflight_with_builtin_vl(saved: Path, tmp_path: Path) -> None:
    from rlvr.trainer.preflight import preflight

    base = ["task.name=hf_dataset", f"task.path={saved}", "task.question_field=q", "task.answer_field=a",
            "task.image_column=image", "task.eval_fraction=0.2", "rollout.engine=hf"]
    task, _, _ = preflight(load_config(None, [*base, "model.path=builtin-vl"]), multi_rank=False)
    assert task.visual and len(task.heldout) == 1
    with pytest.raises(ConfigError, match="model.path: 'builtin' is a text-only model"):
        preflight(load_config(None, [*base, "model.path=builtin"]), multi_rank=False)
