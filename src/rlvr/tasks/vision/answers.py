"""Answer parsing and scoring of the visual tasks: integers, boxes with IoU, points, permutations.

Parsing never raises and never trusts the text: numbers must be finite and of bounded size, a box or point
must be the only one in the answer region, and an order must be a permutation.
"""

from __future__ import annotations

import math
import re

from rlvr.rewards.verifiers import extract_answer_line, extract_answer_tag, extract_boxed

MAX_ABS = 1e6  # coordinates beyond this are not coordinates of any image here
_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_BOX = re.compile(rf"[\[(]\s*({_NUM})\s*,\s*({_NUM})\s*,\s*({_NUM})\s*,\s*({_NUM})\s*[\])]")
_POINT = re.compile(rf"[\[(]\s*({_NUM})\s*,\s*({_NUM})\s*[\])]")
_INT = re.compile(r"[-+]?\d+")
_DIGITS = re.compile(r"\d+")  # orders: separators such as "3-1-4-2" are not signs


def answer_region(text: str) -> str:
    """The part of a response that holds the answer: <answer>..</answer>, \\boxed{..}, 'Answer: ..', else all."""
    for fn in (extract_answer_tag, extract_boxed, extract_answer_line):
        found = fn(text)
        if found:
            return found
    return text


def parse_int(text: str) -> tuple[int | None, str]:
    """The single integer answer, or (None, reason)."""
    region = answer_region(text).strip().rstrip(".")
    found = _INT.findall(region)
    if not found:
        return None, "no number found"
    value = found[-1]
    if len(value.lstrip("+-")) > 12:
        return None, f"number {value[:20]}... is too large"
    if region.count(".") and re.search(r"\d\.\d", region):
        return None, f"answer {region[:40]!r} is not an integer"
    return int(value), ""


def _floats(groups: tuple[str, ...]) -> list[float] | None:
    try:
        values = [float(g) for g in groups]
    except ValueError:
        return None
    if not all(math.isfinite(v) and abs(v) <= MAX_ABS for v in values):
        return None
    return values


def parse_box(text: str) -> tuple[tuple[float, float, float, float] | None, str]:
    """The single box [x1, y1, x2, y2] in the answer region, or (None, reason)."""
    found = _BOX.findall(answer_region(text))
    if not found:
        return None, "no box [x1, y1, x2, y2] found"
    if len(set(found)) > 1:
        return None, f"{len(set(found))} different boxes given; answer exactly one"
    values = _floats(found[0])
    if values is None:
        return None, f"box {list(found[0])} has a coordinate that is not a finite number of at most {MAX_ABS:g}"
    x1, y1, x2, y2 = values
    if not (x2 > x1 and y2 > y1):
        return None, f"box {values} is empty or inverted: need x2 > x1 and y2 > y1"
    return (x1, y1, x2, y2), ""


def parse_point(text: str) -> tuple[tuple[float, float] | None, str]:
    """The single point (x, y) in the answer region, or (None, reason)."""
    region = answer_region(text)
    if _BOX.search(region):
        return None, "a box was given where a point (x, y) was asked for"
    found = _POINT.findall(region)
    if not found:
        return None, "no point (x, y) found"
    if len(set(found)) > 1:
        return None, f"{len(set(found))} different points given; answer exactly one"
    values = _floats(found[0])
    if values is None:
        return None, f"point {list(found[0])} has a coordinate that is not a finite number of at most {MAX_ABS:g}"
    return (values[0], values[1]), ""


def parse_numbers(text: str, n: int) -> tuple[list[int] | None, str]:
    """Exactly n numbers, each in 1..n, from the answer region (repeats allowed), or (None, reason)."""
    region = answer_region(text)
    found = _DIGITS.findall(region)
    if not found:
        return None, "no order found"
    if len(found) != n:
        return None, f"expected {n} numbers, got {len(found)}"
    if any(len(x) > 3 for x in found):
        return None, "a number in the order is too large"
    numbers = [int(x) for x in found]
    if not all(1 <= x <= n for x in numbers):
        return None, f"{numbers} has a number outside 1..{n}"
    return numbers, ""


def parse_order(text: str, n: int) -> tuple[list[int] | None, str]:
    """A permutation of 1..n from the answer region (e.g. '3 1 4 2' or '[3, 1, 4, 2]'), or (None, reason)."""
    order, why = parse_numbers(text, n)
    if order is None:
        return None, why
    if sorted(order) != list(range(1, n + 1)):
        return None, f"{order} is not a permutation of 1..{n}"
    return order, ""


def iou(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> float:
    """Intersection over union of two boxes (x1, y1, x2, y2): |A ∩ B| / (|A| + |B| - |A ∩ B|), in [0, 1]."""
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    if not union > 0 or not math.isfinite(union):
        return 0.0
    return max(0.0, min(1.0, inter / union))
