"""Any dataset with a prompt column and an answer column, from JSONL or Parquet; with `image_column`, a
vision-language dataset whose rows also carry images."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from rlvr.rewards.verifiers import ExtractMode, exact_equal, extract_answer, math_equal, numbers_equal
from rlvr.tasks.base import TASKS, Task, TaskError, VerifyResult, holdout_split
from rlvr.tasks.images import ImageError, checked_dataset_images, image_key
from rlvr.types import TaskRecord

log = logging.getLogger(__name__)


MAX_ROW_BYTES = 16 * 2**20  # a longer JSONL line is reported as a bad row instead of being parsed


class BadRow:
    """A JSONL line that could not be read as JSON (undecodable bytes, invalid or truncated JSON, too long)."""

    def __init__(self, reason: str):
        self.reason = reason

    def __repr__(self) -> str:
        return f"BadRow({self.reason!r})"


def read_rows(path: Path, max_row_bytes: int = MAX_ROW_BYTES) -> list[tuple[int, Any]]:
    """(line number, row) pairs of a .jsonl or .parquet file. A JSONL line that cannot be read gives a
    `BadRow` naming why: bytes that are not UTF-8 (with their offset), invalid JSON (e.g. a truncated last
    line), or a line longer than `max_row_bytes` (not held in memory whole). Callers skip or report it.

    Blank lines are skipped but still counted, so a reported row number is the line in the file.
    """
    if not path.is_file():
        raise TaskError(f"task.path: data file '{path}' not found")
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise TaskError("task.path: reading Parquet needs pyarrow: pip install 'rlvr[parquet]'") from None
        return list(enumerate(pq.read_table(path).to_pylist(), start=1))
    rows: list[tuple[int, Any]] = []
    with path.open("rb") as f:
        line_no = 0
        while True:
            raw = f.readline(max_row_bytes + 1)
            if not raw:
                break
            line_no += 1
            if len(raw) > max_row_bytes and not raw.endswith(b"\n"):
                size = len(raw)
                while raw and not raw.endswith(b"\n"):  # skip the rest of the line in bounded chunks
                    raw = f.readline(2**20)
                    size += len(raw)
                rows.append((line_no, BadRow(f"line is {size} bytes, longer than the {max_row_bytes}-byte limit")))
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                rows.append((line_no, BadRow(f"not UTF-8 text (byte 0x{raw[err.start]:02x} at column "
                                             f"{err.start + 1})")))
                continue
            if not line.strip():
                continue
            try:
                rows.append((line_no, json.loads(line)))
            except json.JSONDecodeError as err:
                cut = "" if raw.endswith(b"\n") else "; the file's last line may be truncated"
                rows.append((line_no, BadRow(f"not a JSON object (invalid JSON: {err.msg} at column {err.colno}"
                                             f"{cut})")))
    return rows


AnswerCheck = Literal["exact", "numeric", "math"]


class ReferenceAnswerTask(Task):
    """A task whose records carry a reference answer: the response's answer is extracted (`extract`) and compared
    with it (`verifier`: exact text, numbers, or math-verify). Subclasses set `self.verifier` and `self.extract`;
    `jsonl` and `hf_dataset` share it."""

    verifier: AnswerCheck = "math"
    extract: ExtractMode = "auto"

    def _check(self, a: str, b: str) -> tuple[bool, str]:
        return {"exact": exact_equal, "numeric": numbers_equal, "math": math_equal}[self.verifier](a, b)

    def extract_answer(self, response: str) -> str | None:
        return extract_answer(response, self.extract)

    def answers_match(self, a: str, b: str) -> bool:
        return self._check(a, b)[0]

    def verify(self, response: str, record: TaskRecord) -> VerifyResult:
        found = extract_answer(response, self.extract)
        if found is None:
            return VerifyResult(0.0, False, "no answer found")
        ok, reason = self._check(found, record.answer)
        return VerifyResult(float(ok), ok, reason, found)


@TASKS.register("jsonl")
class JsonlTask(ReferenceAnswerTask):
    """Prompts and reference answers from a file; the answer is extracted and compared by `verifier`.

    Without `eval_path`, a seeded `eval_fraction` of the rows is held out. Rows whose prompt appears in the
    held-out split are dropped from training. Malformed rows (bad JSON, missing or empty prompt or answer)
    are skipped and counted (`on_bad_row: skip`) or stop the run with the row number (`error`).

    `image_column` makes it a visual task (a vision-language model renders its prompts): each row's cell is an
    image path relative to the data file, a `data:image/...;base64,` URI, bytes, a `{bytes, path}` struct, or a
    list of those (`rlvr.tasks.images.dataset_images`). A row whose image is missing or does not start like an
    image is a malformed row (skipped and counted in `bad_images`, or an error naming the file, row and column);
    only headers are read at load time, so an image truncated further on is skipped and counted when its
    prompt is rendered (`images_skipped_total`). Held-out rows are told apart by question and images.
    """

    name = "jsonl"

    def __init__(
        self,
        *,
        path: str,
        eval_path: str | None = None,
        eval_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.1,
        prompt_column: str = "prompt",
        answer_column: str = "answer",
        difficulty_column: str | None = None,
        source_column: str | None = None,
        image_column: str | None = None,
        verifier: AnswerCheck = "math",
        extract: ExtractMode = "auto",
        on_bad_row: Literal["skip", "error"] = "skip",
        seed: Annotated[int, Field(ge=0)] = 0,
        prompt_template: str | None = None,
        chat_prompt_template: str | None = None,
        system_prompt: str | None = None,
    ):
        super().__init__(prompt_template=prompt_template, chat_prompt_template=chat_prompt_template,
                         system_prompt=system_prompt)
        self.columns = {"prompt": prompt_column, "answer": answer_column, "difficulty": difficulty_column,
                        "source": source_column, "image": image_column}
        self.visual = image_column is not None  # its records carry images: a vision-language model renders them
        self.bad_images: list[tuple[str, str]] = []  # (row id, why) of rows left out for an unusable image
        self.verifier = verifier
        self.extract = extract
        self.on_bad_row = on_bad_row
        self.bad_rows = 0
        heldout = self._load(Path(eval_path), "eval_path") if eval_path else None
        key = (lambda r: (r.question, r.meta["images"])) if self.visual else (lambda r: r.question)
        self._train, self._heldout = holdout_split(self._load(Path(path), "path"), heldout,
                                                   eval_fraction=eval_fraction, seed=seed, source=str(path),
                                                   key=key)
        if self.bad_rows:
            log.warning("task: skipped %d malformed rows (task.on_bad_row=skip; set it to error to see each)",
                        self.bad_rows)
        if self.bad_images:
            log.warning("task: %d of them for an unusable image, e.g. %s", len(self.bad_images), self.bad_images[0][1])

    def _load(self, path: Path, key: str) -> list[TaskRecord]:
        rows = read_rows(path)
        good = [r for _, r in rows if isinstance(r, dict)]
        if not good:
            raise TaskError(f"task.{key}: '{path}' has no rows")
        present = set().union(*(r.keys() for r in good[:100]))
        for role in ("prompt", "answer", "image") if self.visual else ("prompt", "answer"):
            col = self.columns[role]
            if col not in present:
                raise TaskError(
                    f"task.{role}_column: column '{col}' not found in '{path}'; columns are: "
                    f"{', '.join(sorted(present))}. Set task.{role}_column to the right one."
                )
        records = []
        for line_no, row in rows:
            problem = self._row_problem(row)
            if problem:
                if self.on_bad_row == "error":
                    raise TaskError(f"task.{key}: row {line_no} of '{path}' is malformed: {problem}. "
                                    "Fix it, or set task.on_bad_row=skip")
                self.bad_rows += 1
                continue
            assert isinstance(row, dict)
            images = None
            if self.visual:
                try:
                    images = self._row_images(row, path, line_no)
                except ImageError as err:
                    if self.on_bad_row == "error":
                        raise TaskError(f"task.{key}: {err}. Fix it, or set task.on_bad_row=skip") from None
                    self.bad_rows += 1
                    self.bad_images.append((f"{path.stem}-{line_no}", str(err)))
                    continue
            diff = row.get(self.columns["difficulty"]) if self.columns["difficulty"] else None
            records.append(TaskRecord(
                id=f"{path.stem}-{line_no}",
                question=str(row[self.columns["prompt"]]),
                answer=str(row[self.columns["answer"]]),
                difficulty=diff if isinstance(diff, (int, float)) else None,
                source=str(row.get(self.columns["source"], path.stem)) if self.columns["source"] else path.stem,
                images=images,
                meta={"row": line_no, "images": image_key(images)} if images is not None else {"row": line_no},
            ))
        return records

    def _row_images(self, row: dict[str, Any], path: Path, line_no: int) -> list[Any]:
        """The row's images as record items (absolute paths or bytes), each header checked."""
        column = self.columns["image"]
        return checked_dataset_images(row.get(column), path.resolve().parent,
                                      where=f"row {line_no} of '{path}', column '{column}'")

    def _row_problem(self, row: Any) -> str | None:
        if isinstance(row, BadRow):
            return row.reason
        if not isinstance(row, dict):
            return "not a JSON object"
        for role in ("prompt", "answer"):
            value = row.get(self.columns[role])
            if value is None or (isinstance(value, str) and not value.strip()):
                return f"empty or missing '{self.columns[role]}'"
        return None
