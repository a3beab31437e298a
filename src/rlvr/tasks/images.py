"""Images of a task record: decode each item to an RGB PIL image, check prompt placeholders, skip broken rows.

A record's `images` lists items in prompt order. An item is a PIL image, a file path (str or PathLike) or
encoded bytes (PNG, JPEG, ...); a list item is the frames of one short clip, in order. Errors are
`ImageError`s that name the record and the problem; a dataset loader uses `split_decodable` to skip and count
broken rows instead of failing mid-run.

Datasets from files (`task.image_column` of the `jsonl` and `hf_dataset` tasks) give an image cell as a path
relative to the data file, a `data:image/...;base64,` URI, raw bytes (a Parquet binary column), a
`{"bytes": ..., "path": ...}` struct (how Hugging Face `datasets` stores an Image feature), or a decoded PIL
image (a `datasets.Image` feature read with decoding on; stored as PNG bytes); a list of those is several
images, a nested list the frames of one clip. `dataset_images` resolves a cell to record items, `probe_image`
checks each one's header without decoding the pixels, and `checked_dataset_images` does both.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rlvr.types import TaskRecord

IMAGE_TOKEN = "<image>"
# The key of a prompt's `mm_inputs` that holds its decoded images (PIL), beside the processor's tensors: for an
# engine that runs its own processor (vLLM). The model forward reads only the tensors it knows.
RAW_IMAGES = "raw_images"


class ImageError(ValueError):
    """An image of a task record cannot be used (missing file, undecodable bytes, wrong type, bad prompt)."""


def load_image(item: Any, *, record_id: str = "?", index: int = 0) -> Any:
    """One image item as an RGB `PIL.Image.Image`, fully decoded now (so a truncated file fails here)."""
    from PIL import Image

    where = f"record {record_id!r}, image {index}"
    if isinstance(item, Image.Image):
        image = item
    elif isinstance(item, (bytes, bytearray, memoryview)):
        if not len(item):
            raise ImageError(f"{where}: the image bytes are empty")
        try:
            image = Image.open(io.BytesIO(bytes(item)))
            image.load()
        except Exception as e:  # PIL raises UnidentifiedImageError, OSError, SyntaxError, DecompressionBombError
            raise ImageError(f"{where}: the bytes cannot be decoded as an image "
                             f"({type(e).__name__}: {e})") from None
    elif isinstance(item, (str, os.PathLike)):
        path = os.fspath(item)
        if not os.path.isfile(path):
            raise ImageError(f"{where}: image file '{path}' does not exist")
        try:
            with Image.open(path) as opened:
                opened.load()
                image = opened.copy()
        except Exception as e:
            raise ImageError(f"{where}: image file '{path}' cannot be decoded ({type(e).__name__}: {e})") from None
    else:
        raise ImageError(f"{where}: expected a PIL image, a file path or bytes; got {type(item).__name__}")
    if image.width < 1 or image.height < 1:
        raise ImageError(f"{where}: the image is empty ({image.width}x{image.height})")
    return image if image.mode == "RGB" else image.convert("RGB")


def record_images(record: TaskRecord) -> list[Any]:
    """All images of a record as RGB PIL images, in prompt order; a clip's frames are flattened in order."""
    out: list[Any] = []
    for item in record.images or []:
        frames = item if isinstance(item, (list, tuple)) else [item]
        if isinstance(item, (list, tuple)) and not item:
            raise ImageError(f"record {record.id!r}, image {len(out)}: a clip with no frames")
        for frame in frames:
            out.append(load_image(frame, record_id=record.id, index=len(out)))
    return out


def count_images(record: TaskRecord) -> int:
    """How many image placeholders the record's prompt needs (one per image or clip frame), without decoding."""
    return sum(len(item) if isinstance(item, (list, tuple)) else 1 for item in record.images or [])


def check_placeholders(text: str, num_images: int, *, record_id: str = "?", token: str = IMAGE_TOKEN) -> None:
    """Raise unless the prompt has exactly one `token` per image."""
    found = text.count(token)
    if found != num_images:
        raise ImageError(f"record {record_id!r}: the prompt has {found} '{token}' placeholder(s) but the record "
                         f"has {num_images} image(s); each image needs exactly one placeholder")


def split_decodable(records: Iterable[TaskRecord]) -> tuple[list[TaskRecord], list[tuple[str, str]]]:
    """(records whose images all decode, [(record id, reason)] for the skipped ones)."""
    kept: list[TaskRecord] = []
    skipped: list[tuple[str, str]] = []
    for record in records:
        try:
            record_images(record)
        except ImageError as e:
            skipped.append((record.id, str(e)))
            continue
        kept.append(record)
    return kept, skipped


DATA_URI_PREFIX = "data:image/"


def _decode_base64(text: str, where: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as e:
        raise ImageError(f"{where}: not valid base64 ({e})") from None


def _dataset_item(cell: Any, base_dir: Path, where: str) -> str | bytes:
    """One image cell as a record item: an absolute path, or the image's bytes."""
    from PIL import Image

    if isinstance(cell, Image.Image):  # an already decoded image (a datasets.Image feature with decode=True)
        if cell.width < 1 or cell.height < 1:
            raise ImageError(f"{where}: the image is empty ({cell.width}x{cell.height})")
        buf = io.BytesIO()
        (cell if cell.mode in ("RGB", "RGBA", "L", "P", "I;16") else cell.convert("RGB")).save(buf, format="PNG")
        return buf.getvalue()
    if isinstance(cell, dict):  # a Hugging Face Image feature: {"bytes": ..., "path": ...}
        if cell.get("bytes") is not None:
            return _dataset_item(cell["bytes"], base_dir, where)
        if cell.get("path"):
            return _dataset_item(str(cell["path"]), base_dir, where)
        raise ImageError(f"{where}: an image struct with neither 'bytes' nor 'path'")
    if isinstance(cell, (bytes, bytearray, memoryview)):
        if not len(cell):
            raise ImageError(f"{where}: the image bytes are empty")
        return bytes(cell)
    if isinstance(cell, str):
        text = cell.strip()
        if not text:
            raise ImageError(f"{where}: an empty image path")
        if text.startswith(DATA_URI_PREFIX):
            header, sep, payload = text.partition(",")
            if not sep or not header.endswith(";base64"):
                raise ImageError(f"{where}: a data URI must look like 'data:image/png;base64,<data>'")
            return _decode_base64(payload, where)
        path = Path(text).expanduser()
        return str(path if path.is_absolute() else (base_dir / path).resolve())
    raise ImageError(f"{where}: expected an image path, a data:image/...;base64 URI, bytes, a {{bytes, path}} "
                     f"struct or a PIL image; got {type(cell).__name__}")


def dataset_images(cell: Any, base_dir: Path, *, where: str) -> list[Any]:
    """The record `images` of one dataset cell: one item, a list of items (several images), or a nested list
    (a clip's frames). Paths are resolved against `base_dir` (the data file's folder)."""
    if cell is None:
        raise ImageError(f"{where}: no image (the cell is empty)")
    if not isinstance(cell, (list, tuple)):
        return [_dataset_item(cell, base_dir, where)]
    if not cell:
        raise ImageError(f"{where}: an empty list of images")
    out: list[Any] = []
    for i, item in enumerate(cell):
        at = f"{where}, image {i}"
        if isinstance(item, (list, tuple)):
            if not item:
                raise ImageError(f"{at}: a clip with no frames")
            out.append([_dataset_item(frame, base_dir, f"{at}, frame {j}") for j, frame in enumerate(item)])
        else:
            out.append(_dataset_item(item, base_dir, at))
    return out


def probe_image(item: str | bytes, *, where: str) -> None:
    """Raise `ImageError` unless `item` (a path or bytes) exists and starts like an image PIL can read. Only the
    header is read: a file that is truncated further on passes here and is skipped when it is rendered."""
    from PIL import Image

    if isinstance(item, str) and not os.path.isfile(item):
        raise ImageError(f"{where}: image file '{item}' does not exist")
    try:
        with Image.open(item if isinstance(item, str) else io.BytesIO(item)) as image:
            width, height = image.size
    except Exception as e:  # UnidentifiedImageError, OSError, DecompressionBombError, ...
        what = f"image file '{item}'" if isinstance(item, str) else "the image bytes"
        raise ImageError(f"{where}: {what} cannot be decoded ({type(e).__name__}: {e})") from None
    if width < 1 or height < 1:
        raise ImageError(f"{where}: the image is empty ({width}x{height})")


def checked_dataset_images(cell: Any, base_dir: Path, *, where: str) -> list[Any]:
    """`dataset_images` of one cell with every item's header checked (`probe_image`): the record `images` of a
    dataset row, or an `ImageError` naming `where` (and the image's index when the row has several)."""
    images = dataset_images(cell, base_dir, where=where)
    flat = [f for item in images for f in (item if isinstance(item, list) else [item])]
    for i, item in enumerate(flat):
        probe_image(item, where=where if len(flat) == 1 else f"{where}, image {i}")
    return images


def image_key(items: list[Any]) -> tuple[str, ...]:
    """What identifies a record's images (paths as they are, bytes by their SHA-1): held-out splits compare it."""
    flat = [f for item in items for f in (item if isinstance(item, (list, tuple)) else [item])]
    return tuple(f if isinstance(f, str) else hashlib.sha1(bytes(f)).hexdigest() for f in flat)
