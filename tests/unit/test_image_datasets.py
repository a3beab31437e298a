"""Image datasets from files: the `jsonl` task with `task.image_column`, from JSONL (paths relative to the data
file, data URIs) and Parquet (bytes, Hugging Face {bytes, path} structs)."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pytest
from PIL import Image

from rlvr.tasks import build_task
from rlvr.tasks.base import TaskError
from rlvr.tasks.images import record_images


def _png(color=(255, 0, 0), size=(8, 6)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _task(path: Path, **params):
    return build_task("jsonl", {"path": str(path), "image_column": "image", "verifier": "numeric",
                                "eval_fraction": 0.25, **params})


def test_jsonl_rows_with_relative_paths_and_data_uris_load_as_a_visual_task(tmp_path):
    (tmp_path / "data" / "img").mkdir(parents=True)
    colors = [(i * 40, 0, 0) for i in range(4)]
    for i, c in enumerate(colors[:3]):
        Image.new("RGB", (8, 6), c).save(tmp_path / "data" / "img" / f"{i}.png")
    uri = "data:image/png;base64," + base64.b64encode(_png(colors[3])).decode()
    rows = [{"prompt": "How many?", "answer": str(i), "image": f"img/{i}.png"} for i in range(3)]
    rows.append({"prompt": "How many?", "answer": "3", "image": uri})
    task = _task(_write_jsonl(tmp_path / "data" / "d.jsonl", rows))
    assert task.visual and task.bad_rows == 0
    records = sorted([*task.train, *task.heldout], key=lambda r: r.answer)
    # every row has the same question: held-out rows are told apart by their images, so none is dropped
    assert len(task.train) == 3 and len(task.heldout) == 1
    assert records[0].images == [str((tmp_path / "data" / "img" / "0.png").resolve())]  # relative to the file
    assert isinstance(records[3].images[0], bytes)
    for record, color in zip(records, colors):
        (image,) = record_images(record)
        assert image.mode == "RGB" and image.size == (8, 6) and image.getpixel((0, 0)) == color
    msgs = task.multimodal_messages(records[0])
    assert msgs[-1]["content"][0] == {"type": "image"}
    assert task.plain_prompt_with_images(records[0]) == "<image>How many?"


def test_parquet_bytes_structs_and_several_images_per_row(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    Image.new("RGB", (5, 5), (0, 0, 255)).save(tmp_path / "blue.png")
    image_struct = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    table = pa.table({
        "prompt": ["a", "b", "c", "d"], "answer": ["1", "2", "3", "4"],
        "image": pa.array([{"bytes": _png((0, 255, 0)), "path": None}, {"bytes": None, "path": "blue.png"},
                           {"bytes": _png(), "path": "ignored.png"}, {"bytes": _png(), "path": None}],
                          type=image_struct),
        "pair": pa.array([[_png(), _png((0, 255, 0))]] * 4, type=pa.list_(pa.binary())),
    })
    pq.write_table(table, tmp_path / "d.parquet")
    task = _task(tmp_path / "d.parquet")
    by_answer = {r.answer: r for r in [*task.train, *task.heldout]}
    assert record_images(by_answer["1"])[0].getpixel((0, 0)) == (0, 255, 0)
    assert record_images(by_answer["2"])[0].getpixel((0, 0)) == (0, 0, 255)  # the struct's path, beside the file
    pairs = _task(tmp_path / "d.parquet", image_column="pair")
    record = pairs.heldout[0]
    assert [im.getpixel((0, 0)) for im in record_images(record)] == [(255, 0, 0), (0, 255, 0)]
    assert "<image><image>" in pairs.plain_prompt_with_images(record)


def test_a_row_with_a_missing_or_undecodable_image_is_skipped_and_counted(tmp_path):
    Image.new("RGB", (4, 4)).save(tmp_path / "ok.png")
    (tmp_path / "junk.png").write_bytes(b"not an image at all")
    rows = [{"prompt": f"q{i}", "answer": "1", "image": "ok.png"} for i in range(4)]
    rows += [{"prompt": "q", "answer": "1", "image": "gone.png"},
             {"prompt": "q", "answer": "1", "image": "junk.png"},
             {"prompt": "q", "answer": "1", "image": "data:image/png;base64,@@@"},
             {"prompt": "q", "answer": "1", "image": 7},
             {"prompt": "q", "answer": "1"}]
    task = _task(_write_jsonl(tmp_path / "d.jsonl", rows))
    assert len(task.train) + len(task.heldout) == 4 and task.bad_rows == 5
    reasons = dict(task.bad_images)
    assert "does not exist" in reasons["d-5"] and "gone.png" in reasons["d-5"]
    assert "cannot be decoded" in reasons["d-6"]
    assert "not valid base64" in reasons["d-7"]
    assert "got int" in reasons["d-8"]
    assert "no image" in reasons["d-9"]


@pytest.mark.parametrize("image, match", [
    ("gone.png", r"task.path: row 2 of '.*d.jsonl', column 'image': image file '.*gone.png' does not exist\. "
                 r"Fix it, or set task.on_bad_row=skip"),
    ("data:image/png;base64,iVBORw0KGgo=", r"row 2 of .* column 'image': the image bytes cannot be decoded"),
])
def test_on_bad_row_error_names_the_file_row_and_column(tmp_path, image, match):
    Image.new("RGB", (4, 4)).save(tmp_path / "ok.png")
    rows = [{"prompt": "a", "answer": "1", "image": "ok.png"}, {"prompt": "b", "answer": "1", "image": image}]
    with pytest.raises(TaskError, match=match):
        _task(_write_jsonl(tmp_path / "d.jsonl", rows), on_bad_row="error")


def test_a_missing_image_column_names_the_key(tmp_path):
    path = _write_jsonl(tmp_path / "d.jsonl", [{"prompt": "a", "answer": "1", "picture": "x.png"}] * 2)
    with pytest.raises(TaskError, match="task.image_column: column 'image' not found .* picture"):
        _task(path)


def test_a_truncated_image_passes_the_header_check_and_is_skipped_when_rendered(tmp_path):
    from rlvr.models import load_tokenizer
    from rlvr.models.vision import load_processor
    from rlvr.tasks import PromptRenderer

    Image.new("RGB", (48, 48), (9, 9, 9)).save(tmp_path / "ok.png")
    (tmp_path / "cut.png").write_bytes(_png(size=(48, 48))[:60])  # a valid header, the pixels cut off
    rows = [{"prompt": "How many shapes are in the image?", "answer": "1", "image": n} for n in ("ok.png", "cut.png")]
    task = build_task("jsonl", {"path": str(_write_jsonl(tmp_path / "d.jsonl", rows)), "image_column": "image",
                                "eval_path": str(_write_jsonl(tmp_path / "e.jsonl", rows[:1]))})
    assert task.bad_rows == 0 and len(task.train) == 1  # the held-out twin of ok.png is not a training row
    renderer = PromptRenderer(task, load_tokenizer("builtin-vl"), "auto", load_processor("builtin-vl"))
    assert renderer.multimodal
    assert renderer.render_or_skip(task.train[0]) is None and len(renderer.skipped_images) == 1
    ids, text, mm = renderer.render_multimodal(task.heldout[0])
    assert text.count("<image>") == 1 and mm["pixel_values"].shape[0] == 1 and len(ids) > 36
