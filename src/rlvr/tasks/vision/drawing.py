"""Drawing primitives of the synthetic visual tasks: named colours, shapes, a 3x5 digit font, placement.

Everything is drawn with PIL from a `random.Random`, so the same seed gives the same pixels on any machine
(no system fonts: digits use the built-in bitmap below).
"""

from __future__ import annotations

import random
from typing import Any

COLORS: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30),
    "green": (30, 170, 50),
    "blue": (40, 70, 220),
    "yellow": (230, 200, 20),
    "purple": (140, 40, 180),
    "orange": (240, 130, 20),
}
SHAPES = ("square", "circle", "triangle")

# 3 columns x 5 rows per digit, '1' = ink.
DIGIT_FONT = {
    "0": ("111", "101", "101", "101", "111"), "1": ("010", "110", "010", "010", "111"),
    "2": ("111", "001", "111", "100", "111"), "3": ("111", "001", "111", "001", "111"),
    "4": ("101", "101", "111", "001", "001"), "5": ("111", "100", "111", "001", "111"),
    "6": ("111", "100", "111", "101", "111"), "7": ("111", "001", "001", "001", "001"),
    "8": ("111", "101", "111", "101", "111"), "9": ("111", "101", "111", "001", "111"),
}

Box = tuple[int, int, int, int]  # x1, y1, x2, y2 in pixels; x2 and y2 exclusive (the edges of the shape)


def canvas(size: int, rng: random.Random, light: bool = True) -> tuple[Any, Any]:
    """A new RGB image with a random pale background and its drawing context."""
    from PIL import Image, ImageDraw

    base = tuple(rng.randint(225, 255) for _ in range(3)) if light else tuple(rng.randint(0, 40) for _ in range(3))
    image = Image.new("RGB", (size, size), base)
    return image, ImageDraw.Draw(image)


def draw_shape(draw: Any, shape: str, box: Box, color: tuple[int, int, int]) -> None:
    x1, y1, x2, y2 = box
    if shape == "square":
        draw.rectangle((x1, y1, x2 - 1, y2 - 1), fill=color)
    elif shape == "circle":
        draw.ellipse((x1, y1, x2 - 1, y2 - 1), fill=color)
    elif shape == "triangle":
        draw.polygon([((x1 + x2 - 1) / 2, y1), (x1, y2 - 1), (x2 - 1, y2 - 1)], fill=color)
    else:
        raise ValueError(f"unknown shape {shape!r}")


def draw_digit(draw: Any, digit: str, x: int, y: int, scale: int, color: tuple[int, int, int]) -> Box:
    """Draw one digit with its top-left corner at (x, y); return its box (3*scale wide, 5*scale tall)."""
    for row, bits in enumerate(DIGIT_FONT[digit]):
        for col, bit in enumerate(bits):
            if bit == "1":
                draw.rectangle((x + col * scale, y + row * scale, x + (col + 1) * scale - 1,
                                y + (row + 1) * scale - 1), fill=color)
    return (x, y, x + 3 * scale, y + 5 * scale)


def overlaps(a: Box, b: Box, gap: int = 1) -> bool:
    return not (a[2] + gap <= b[0] or b[2] + gap <= a[0] or a[3] + gap <= b[1] or b[3] + gap <= a[1])


def place_boxes(rng: random.Random, size: int, sides: list[tuple[int, int]], margin: int = 1,
                avoid: list[Box] | None = None) -> list[Box]:
    """Non-overlapping boxes of the given (width, height) inside a size x size image (rejection sampling)."""
    for _ in range(200):
        placed: list[Box] = []
        for w, h in sides:
            for _ in range(100):
                x = rng.randint(margin, size - margin - w)
                y = rng.randint(margin, size - margin - h)
                box = (x, y, x + w, y + h)
                if not any(overlaps(box, other) for other in placed + (avoid or [])):
                    placed.append(box)
                    break
            else:
                break
        if len(placed) == len(sides):
            return placed
    raise ValueError(f"cannot place {len(sides)} shapes in a {size}x{size} image; use fewer or a larger image")


def tiles(image: Any) -> list[Any]:
    """The 2x2 tiles of an image in reading order (top-left, top-right, bottom-left, bottom-right)."""
    w, h = image.size
    return [image.crop((x, y, x + w // 2, y + h // 2)) for y in (0, h // 2) for x in (0, w // 2)]


def assemble(parts: list[Any]) -> Any:
    """The inverse of `tiles`: four equal tiles pasted in reading order."""
    from PIL import Image

    w, h = parts[0].size
    out = Image.new("RGB", (2 * w, 2 * h))
    for i, part in enumerate(parts):
        out.paste(part, ((i % 2) * w, (i // 2) * h))
    return out
