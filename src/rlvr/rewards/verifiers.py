"""Answer extraction and equivalence checks shared by task verifiers.

Extraction never raises: it returns None when no answer is found. Equivalence checks return (equal, reason).
"""

from __future__ import annotations

import math
import re
from typing import Literal

ExtractMode = Literal["auto", "boxed", "answer_tag", "answer_line", "last_number", "none"]

_NUMBER = r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+"
_ANSWER_LINE = re.compile(r"(?:(?i:final\s+answer|answer)(?:\s+is)?\s*[:=]|\bA:)\s*([^\n]*)")
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_NUMBER_RE = re.compile(_NUMBER)


def extract_boxed(text: str) -> str | None:
    r"""Content of the last complete \boxed{...} (braces balanced), or None."""
    start = len(text)
    while (start := text.rfind("\\boxed", 0, start)) >= 0:
        i = start + len("\\boxed")
        while i < len(text) and text[i] == " ":
            i += 1
        if i < len(text) and text[i] == "{":
            depth = 0
            for j in range(i, len(text)):
                if text[j] == "{":
                    depth += 1
                elif text[j] == "}":
                    depth -= 1
                    if depth == 0:
                        return text[i + 1 : j].strip()
    return None


def extract_answer_tag(text: str) -> str | None:
    found = _ANSWER_TAG.findall(text)
    return found[-1].strip() if found else None


def extract_answer_line(text: str) -> str | None:
    """What follows the last 'Answer:' / 'Final answer:' / 'A:' on its line."""
    found = _ANSWER_LINE.findall(text)
    return found[-1].strip() if found else None


def extract_last_number(text: str) -> str | None:
    found = _NUMBER_RE.findall(text)
    return found[-1] if found else None


def extract_answer(text: str, mode: ExtractMode = "auto") -> str | None:
    """Extract the final answer. `auto` tries boxed, answer tag, answer line, then the last number."""
    if mode == "none":
        return text.strip()
    order = {
        "auto": (extract_boxed, extract_answer_tag, extract_answer_line, extract_last_number),
        "boxed": (extract_boxed,),
        "answer_tag": (extract_answer_tag,),
        "answer_line": (extract_answer_line,),
        "last_number": (extract_last_number,),
    }[mode]
    for fn in order:
        found = fn(text)
        if found:
            return found
    return None


def parse_number(text: str) -> float | None:
    """A plain number (commas allowed as thousands separators, trailing period ignored), else None."""
    s = text.strip().rstrip(".").replace(",", "").replace("$", "").strip()
    if not re.fullmatch(r"-?(\d+(\.\d*)?|\.\d+)(e-?\d+)?", s):
        return None
    try:
        return float(s)
    except ValueError:
        return None


def numbers_equal(pred: str, gold: str, rel_tol: float = 1e-6) -> tuple[bool, str]:
    p, g = parse_number(pred), parse_number(str(gold))
    if g is None:
        return False, f"reference answer {gold!r} is not a number"
    if p is None:
        return False, f"answer {pred!r} is not a number"
    if math.isclose(p, g, rel_tol=rel_tol, abs_tol=1e-9):
        return True, "correct"
    return False, f"wrong answer: got {pred}, expected {gold}"


def normalize_text(s: str) -> str:
    return " ".join(str(s).strip().lower().split()).rstrip(".")


def exact_equal(pred: str, gold: str) -> tuple[bool, str]:
    if normalize_text(pred) == normalize_text(gold):
        return True, "correct"
    return False, f"wrong answer: got {pred!r}, expected {gold!r}"


def math_equal(pred: str, gold: str) -> tuple[bool, str]:
    """Mathematical equivalence with math-verify (LaTeX, fractions, expressions); numbers fast-pathed."""
    p, g = parse_number(pred), parse_number(str(gold))
    if p is not None and g is not None:
        return numbers_equal(pred, str(gold))
    from math_verify import parse, verify

    def wrap(s: str) -> str:
        return s if "$" in s or "\\boxed" in s else f"${s}$"

    gold_parsed = parse(wrap(str(gold)))
    pred_parsed = parse(wrap(pred))
    if not gold_parsed:
        return exact_equal(pred, str(gold))
    if not pred_parsed:
        return False, f"answer {pred!r} could not be parsed"
    if verify(gold_parsed, pred_parsed):
        return True, "correct"
    return False, f"wrong answer: got {pred!r}, expected {gold!r}"
