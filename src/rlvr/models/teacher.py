"""A teacher must share the student's tokenizer: per-token log-probs (KDRL, on-policy distillation) and
per-token distributions (GKD) are compared id by id, so the same id must mean the same text in both.

`check_same_tokenizer` compares the vocabularies (token -> id), the special tokens and the ids of a set of
probe strings, and raises a `ModelError` naming both paths and the first mismatch. (Cross-tokenizer
distillation, e.g. GOLD's token alignment, is a different method and is not supported.)
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlvr.models.loading import ModelError, load_tokenizer

PROBES: tuple[str, ...] = (
    "Hello, world!",
    "  two leading spaces and a tab\there",
    "12 + 7 * (3 - 5) = -2",
    "def f(x):\n    return x ** 2\n",
    "<answer>42</answer>",
    "naïve café, Größe, 数学, 😀",
    "The quick brown fox jumps over the lazy dog.",
)

_SPECIAL_ATTRS = ("eos_token", "pad_token", "bos_token", "unk_token")


def _special_tokens(tok: Any) -> dict[str, Any]:
    """name -> (token, id) for the named special tokens, plus the full list of special tokens."""
    out: dict[str, Any] = {}
    for attr in _SPECIAL_ATTRS:
        token = getattr(tok, attr, None)
        out[attr] = (str(token) if token is not None else None, getattr(tok, f"{attr}_id", None))
    out["all_special_tokens"] = sorted(str(t) for t in getattr(tok, "all_special_tokens", []))
    return out


def check_same_tokenizer(student: Any, teacher: Any, *, student_path: str | Path = "model.path",
                         teacher_path: str | Path = "teacher.path", probes: Sequence[str] = PROBES) -> None:
    """Raise `ModelError` unless `teacher` tokenizes exactly like `student` (vocabulary, special tokens,
    probe ids). The message names both paths and the first mismatch."""
    where = f"teacher tokenizer '{teacher_path}' does not match the student's '{student_path}'"
    s_vocab, t_vocab = student.get_vocab(), teacher.get_vocab()
    if len(s_vocab) != len(t_vocab):
        raise ModelError(f"{where}: vocabulary sizes differ (student {len(s_vocab)}, teacher {len(t_vocab)}). "
                         "Distillation compares token ids, so the teacher must use the student's tokenizer")
    s_by_id = {i: t for t, i in s_vocab.items()}
    t_by_id = {i: t for t, i in t_vocab.items()}
    for i in sorted(set(s_by_id) | set(t_by_id)):
        if s_by_id.get(i) != t_by_id.get(i):
            raise ModelError(f"{where}: first differing id is {i}: student {s_by_id.get(i)!r}, teacher "
                             f"{t_by_id.get(i)!r}. Distillation compares token ids, so the teacher must use "
                             "the student's tokenizer")
    s_special, t_special = _special_tokens(student), _special_tokens(teacher)
    for key in s_special:
        if s_special[key] != t_special[key]:
            raise ModelError(f"{where}: special token {key} differs: student {s_special[key]!r}, teacher "
                             f"{t_special[key]!r}")
    for text in probes:
        s_ids = student(text, add_special_tokens=True)["input_ids"]
        t_ids = teacher(text, add_special_tokens=True)["input_ids"]
        if s_ids != t_ids:
            at = next((k for k, (a, b) in enumerate(zip(s_ids, t_ids)) if a != b), min(len(s_ids), len(t_ids)))
            raise ModelError(f"{where}: probe {text!r} encodes differently from token {at}: student "
                             f"{s_ids[at:at + 5]}..., teacher {t_ids[at:at + 5]}... (normalizer or "
                             "pre-tokenizer differs)")


def check_teacher_tokenizer(student_path: str | Path, teacher_path: str | Path, *,
                            trust_remote_code: bool = False) -> None:
    """Load both tokenizers (local directories or 'builtin') and `check_same_tokenizer` them."""
    student = load_tokenizer(student_path, trust_remote_code=trust_remote_code, key="model.path")
    teacher = load_tokenizer(teacher_path, trust_remote_code=trust_remote_code, key="model.teacher_path")
    check_same_tokenizer(student, teacher, student_path=student_path, teacher_path=teacher_path)
