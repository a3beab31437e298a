"""A teacher must share the student's tokenizer: the built-in tokenizer against itself, an exact copy, and
modified copies (swapped ids, a different EOS, a different normalizer)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rlvr.models import BUILTIN_DIR, ModelError, load_tokenizer
from rlvr.models.teacher import check_same_tokenizer, check_teacher_tokenizer

FILES = ("config.json", "tokenizer.json", "tokenizer_config.json")


def _copy(tmp_path: Path, name: str) -> Path:
    out = tmp_path / name
    out.mkdir()
    for f in FILES:
        shutil.copy(BUILTIN_DIR / f, out / f)
    return out


def _edit(path: Path, fn) -> None:
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data))


def test_the_builtin_tokenizer_and_an_exact_copy_match(tmp_path):
    check_teacher_tokenizer("builtin", "builtin")
    check_teacher_tokenizer("builtin", _copy(tmp_path, "teacher"))


def test_swapped_ids_name_both_paths_and_the_first_mismatch(tmp_path):
    teacher = _copy(tmp_path, "teacher")

    def swap(data):
        vocab = data["model"]["vocab"]
        vocab["a"], vocab["b"] = vocab["b"], vocab["a"]

    _edit(teacher / "tokenizer.json", swap)
    with pytest.raises(ModelError) as err:
        check_teacher_tokenizer("builtin", teacher)
    msg = str(err.value)
    assert "builtin" in msg and str(teacher) in msg
    assert "first differing id is 98: student 'a', teacher 'b'" in msg  # 'a' is byte 97, id 97 + 1


def test_a_different_eos_token_is_caught(tmp_path):
    teacher = _copy(tmp_path, "teacher")
    _edit(teacher / "tokenizer_config.json", lambda d: d.update(eos_token="!", pad_token="!"))
    with pytest.raises(ModelError, match=r"special token eos_token differs: student \('<\|endoftext\|>', 0\)"):
        check_teacher_tokenizer("builtin", teacher)


def test_a_different_normalizer_is_caught_by_the_probes(tmp_path):
    from tokenizers import normalizers

    student = load_tokenizer("builtin")
    teacher = load_tokenizer(_copy(tmp_path, "teacher"))
    check_same_tokenizer(student, teacher, student_path="builtin", teacher_path="copy")
    # same vocabulary and special tokens, but the teacher lower-cases text before tokenizing it
    teacher.backend_tokenizer.normalizer = normalizers.Lowercase()
    with pytest.raises(ModelError, match=r"'copy' does not match the student's 'builtin': probe 'Hello, world!' "
                                         r"encodes differently from token 0"):
        check_same_tokenizer(student, teacher, student_path="builtin", teacher_path="copy")
