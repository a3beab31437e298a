"""Images of a task record: decode each item to an RGB PIL image, check prompt placeholders, skip broken rows.

A record's `images` lists items in prompt order. An item is a PIL image, a file path (str or PathLike) or
encoded bytes (PNG, JPEG, ...); a list item is the frames of one short clip, in order. Errors are
`ImageError`s that name the record and the problem; a dataset loader uses `split_decodable` to skip and count
broken rows instead of failing mid-run.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable
from typing import Any

from rlvr.types import TaskRecord

IMAGE_TOKEN = "<image>"


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
