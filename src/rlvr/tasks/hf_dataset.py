"""Local Hugging Face datasets as a task: a `save_to_disk` directory, a directory of data files, or data files
(parquet, json/jsonl, arrow, csv), read with the `datasets` library. Nothing is downloaded.

The answer checking (`verifier`, `extract`) and the seeded held-out share are the `jsonl` task's, and so is
`image_column` (`rlvr.tasks.images.checked_dataset_images`), which also reads a `datasets.Image` feature.
`datasets` is an optional extra (`pip install 'rlvr[hf]'`), imported only when such a task is built.
"""

from __future__ import annotations

import contextlib
import copy
import glob
import json
import logging
import os
from collections.abc import Iterable, Iterator
from itertools import islice
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from rlvr.rewards.verifiers import ExtractMode
from rlvr.tasks.base import TASKS, TaskError, holdout_split
from rlvr.tasks.images import ImageError, checked_dataset_images, image_key
from rlvr.tasks.jsonl import AnswerCheck, ReferenceAnswerTask
from rlvr.types import TaskRecord

log = logging.getLogger(__name__)

# file suffix -> the `datasets` packaged builder that reads it
BUILDERS = {".parquet": "parquet", ".json": "json", ".jsonl": "json", ".arrow": "arrow", ".csv": "csv"}
DOWNLOAD_HINT = ("download it first, e.g. `hf download {id} --repo-type dataset --local-dir data/{name}` or "
                 "`python -c \"import datasets; datasets.load_dataset('{id}').save_to_disk('data/{name}')\"`, "
                 "then set task.path=data/{name}")


def _import_datasets() -> Any:
    try:
        import datasets
    except ImportError:
        raise TaskError("task.name=hf_dataset needs the `datasets` package: pip install 'rlvr[hf]'") from None
    return datasets


@contextlib.contextmanager
def _offline() -> Iterator[Any]:
    """`datasets` with the Hub switched off (env vars for a first import, its config flags if already imported);
    everything is restored afterwards."""
    keys = ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")
    saved_env = {k: os.environ.get(k) for k in keys}
    os.environ.update(dict.fromkeys(keys, "1"))
    datasets = _import_datasets()
    saved_flags = {k: getattr(datasets.config, k) for k in keys if hasattr(datasets.config, k)}
    for k in saved_flags:
        setattr(datasets.config, k, True)
    try:
        yield datasets
    finally:
        for k, v in saved_flags.items():
            setattr(datasets.config, k, v)
        for k, old in saved_env.items():
            if old is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = old


def local_source(path: str | list[str]) -> tuple[str, Path | list[str]]:
    """('disk', dir) for a `save_to_disk` directory, ('dir', dir) for a directory of data files, or
    ('files', [file, ...]) for data files and globs. A path that is not on this machine is refused."""
    paths = [path] if isinstance(path, str) else list(path)
    if not paths:
        raise TaskError("task.path: required: a save_to_disk directory, or data files (parquet, json, arrow, csv)")
    if len(paths) == 1 and Path(paths[0]).expanduser().is_dir():
        d = Path(paths[0]).expanduser()
        if (d / "dataset_dict.json").is_file() or (d / "state.json").is_file():
            return "disk", d
        return "dir", d
    files: list[str] = []
    for p in paths:
        p = os.path.expanduser(p)
        if any(c in p for c in "*?["):
            matched = sorted(glob.glob(p, recursive=True))
            if not matched:
                raise TaskError(f"task.path: no files match '{p}'")
            files.extend(matched)
        elif Path(p).is_file():
            files.append(p)
        elif Path(p).is_dir():
            raise TaskError(f"task.path: '{p}' is a directory; give one directory alone, or data files")
        else:
            raise TaskError(f"task.path: '{p}' does not exist on this machine. The hf_dataset task reads local "
                            f"data only (nothing is downloaded); if '{p}' is a Hub dataset id, "
                            + DOWNLOAD_HINT.format(id=p, name=p.rstrip("/").rsplit("/", 1)[-1]))
    suffixes = {Path(f).suffix for f in files}
    unknown = suffixes - set(BUILDERS)
    if unknown:
        raise TaskError(f"task.path: cannot read {', '.join(sorted(unknown))} files; expected "
                        f"{', '.join(BUILDERS)} (or a save_to_disk directory)")
    if len({BUILDERS[s] for s in suffixes}) > 1:
        raise TaskError(f"task.path: the files mix formats ({', '.join(sorted(suffixes))}); give files of one format")
    return "files", files


def load_split(path: str | list[str], split: str, *, streaming: bool, cache_dir: str | None,
               key: str = "split") -> Any:
    """One split of a local dataset: a `datasets.Dataset`, or an `IterableDataset` when `streaming`. `key` is the
    config key that named the split (`split` or `heldout_split`), for the errors."""
    kind, where = local_source(path)
    with _offline() as datasets:
        if kind == "disk":
            assert isinstance(where, Path)
            for state in (where / "state.json", where / split / "state.json"):
                # datasets cannot load a saved split without rows (0 shards); report it as empty instead
                if state.is_file() and json.loads(state.read_text()).get("_data_files") == []:
                    raise TaskError(f"task.{key}: split '{split}' of '{where}' has no rows; "
                                    "give a dataset with rows (or another split)")
            loaded = datasets.load_from_disk(str(where))  # memory-mapped Arrow: nothing is read up front
        elif kind == "dir":
            loaded = datasets.load_dataset(str(where), streaming=streaming, cache_dir=cache_dir)
        else:
            assert isinstance(where, list)
            builder = BUILDERS[Path(where[0]).suffix]
            loaded = datasets.load_dataset(builder, data_files=where, streaming=streaming, cache_dir=cache_dir)
        if isinstance(loaded, (datasets.Dataset, datasets.IterableDataset)):  # saved without split names
            splits = {"train": loaded}
        else:
            splits = dict(loaded)
    if split not in splits:
        raise TaskError(f"task.{key}: split '{split}' not found in '{_show(path)}'; splits are: "
                        f"{', '.join(sorted(splits))}. Set task.{key} to one of them.")
    ds = splits[split]
    if streaming and hasattr(ds, "to_iterable_dataset"):
        ds = ds.to_iterable_dataset()  # a save_to_disk dataset, iterated instead of materialized
    return ds


def _show(path: str | list[str]) -> str:
    return path if isinstance(path, str) else ", ".join(path)


@TASKS.register("hf_dataset")
class HfDatasetTask(ReferenceAnswerTask):
    """Questions and reference answers from a local Hugging Face dataset.

    `path` is a `save_to_disk` directory, a directory of data files (split names from file names, as `datasets`
    infers them), or one or more data files / globs (one split, `train`). Without `heldout_split`, a seeded
    `eval_fraction` of `split` is held out; training rows whose question is held out are dropped. With
    `streaming`, rows are iterated rather than converted to an Arrow cache first, and reading stops after
    `max_rows`. A row whose question is not a non-empty string or whose answer is missing is malformed: skipped
    and counted (`on_bad_row: skip`), or the load stops naming the split and row (`error`).

    `image_column` makes it a visual task, as in the `jsonl` task: each cell is an image path (relative to the
    dataset directory or the data file's folder), a `data:image/...;base64,` URI, bytes, a `{bytes, path}` struct
    or a list of those; a `datasets.Image` feature (or a list of them) is read undecoded, as `{bytes, path}`, so
    only each image's header is read at load. A row whose image is missing or does not start like an image is
    a malformed row (counted in `bad_images` too). Held-out rows are told apart by question and images.
    """

    name = "hf_dataset"

    def __init__(
        self,
        *,
        path: str | list[str],
        split: str = "train",
        heldout_split: str | None = None,
        question_field: str = "question",
        answer_field: str = "answer",
        verifier: AnswerCheck = "math",
        extract: ExtractMode = "auto",
        eval_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.1,
        streaming: bool = False,
        max_rows: Annotated[int, Field(gt=0)] | None = None,
        cache_dir: str | None = None,
        image_column: str | None = None,
        on_bad_row: Literal["skip", "error"] = "skip",
        seed: Annotated[int, Field(ge=0)] = 0,
        prompt_template: str | None = None,
        chat_prompt_template: str | None = None,
        system_prompt: str | None = None,
    ):
        super().__init__(prompt_template=prompt_template, chat_prompt_template=chat_prompt_template,
                         system_prompt=system_prompt)
        self.path = path
        self.fields = {"question": question_field, "answer": answer_field}
        if image_column is not None:
            self.fields["image"] = image_column
        self.visual = image_column is not None  # its records carry images: a vision-language model renders them
        self.bad_images: list[tuple[str, str]] = []  # (row id, why) of rows left out for an unusable image
        self.on_bad_row = on_bad_row
        first = Path(path if isinstance(path, str) else path[0]).expanduser()
        self.image_dir = (first if first.is_dir() else first.parent).resolve()  # relative image paths start here
        self.verifier = verifier
        self.extract = extract
        self.streaming = streaming
        self.max_rows = max_rows
        self.cache_dir = cache_dir
        self.bad_rows = 0
        heldout = self._load(heldout_split, "heldout_split") if heldout_split else None
        key = (lambda r: (r.question, r.meta["images"])) if self.visual else (lambda r: r.question)
        self._train, self._heldout = holdout_split(self._load(split, "split"), heldout, eval_fraction=eval_fraction,
                                                   seed=seed, source=f"{_show(path)}:{split}", key=key)
        if self.bad_rows > len(self.bad_images):
            log.warning("task: skipped %d rows of '%s' whose %s is not a non-empty string or whose %s is missing",
                        self.bad_rows - len(self.bad_images), _show(path), question_field, answer_field)
        if self.bad_images:
            log.warning("task: skipped %d rows of '%s' for an unusable image, e.g. %s", len(self.bad_images),
                        _show(path), self.bad_images[0][1])

    def _load(self, split: str, key: str) -> list[TaskRecord]:
        try:
            return self._read(split, key)
        except TaskError:
            raise
        except Exception as err:  # a corrupt or half-written file: name it instead of a traceback from datasets
            if "corresponds to no data" in str(err):  # how datasets reports data files without rows
                raise self._empty(split, key) from None
            raise TaskError(f"task.path: split '{split}' of '{_show(self.path)}' could not be read by datasets "
                            f"({type(err).__name__}: {err}); check that it is a complete save_to_disk directory "
                            "or valid parquet/json/arrow/csv files") from err

    def _empty(self, split: str, key: str) -> TaskError:
        return TaskError(f"task.{key}: split '{split}' of '{_show(self.path)}' has no rows; "
                         "give a dataset with rows (or another split)")

    def _read(self, split: str, key: str) -> list[TaskRecord]:
        ds = load_split(self.path, split, streaming=self.streaming, cache_dir=self.cache_dir, key=key)
        if self.visual:
            ds = _undecoded_images(ds, self.fields["image"])
        if not self.streaming and self.max_rows is not None:
            ds = ds.select(range(min(self.max_rows, len(ds))))
        rows: Iterable[dict[str, Any]] = ds if self.streaming else _batched_rows(ds, list(self.fields.values()))
        if self.streaming and self.max_rows is not None:
            rows = islice(rows, self.max_rows)
        it = iter(rows)
        first = next(it, None)
        if first is None:
            raise self._empty(split, key)
        present = list(getattr(ds, "column_names", None) or first)  # a streamed json split may not know them
        for role, col in self.fields.items():
            if col not in present:
                name = "image_column" if role == "image" else f"{role}_field"
                raise TaskError(f"task.{name}: field '{col}' not found in split '{split}' of "
                                f"'{_show(self.path)}'; fields are: {', '.join(present)}. "
                                f"Set task.{name} to the right one.")
        first_path = self.path if isinstance(self.path, str) else self.path[0]
        source = Path(first_path).stem if not any(c in first_path for c in "*?[") else "hf_dataset"
        records = []
        where = f"split '{split}' of '{_show(self.path)}'"
        for i, row in enumerate(_chain(first, it)):
            question, answer = row.get(self.fields["question"]), row.get(self.fields["answer"])
            if not isinstance(question, str) or not question.strip() or answer is None or str(answer).strip() == "":
                if self.on_bad_row == "error":
                    raise TaskError(f"task.{key}: row {i} of {where} is malformed: its {self.fields['question']} "
                                    f"is not a non-empty string or its {self.fields['answer']} is missing. Fix it, "
                                    "or set task.on_bad_row=skip")
                self.bad_rows += 1
                continue
            meta: dict[str, Any] = {"split": split, "row": i}
            images = None
            if self.visual:
                try:
                    images = checked_dataset_images(row.get(self.fields["image"]), self.image_dir,
                                                    where=f"row {i} of {where}, column '{self.fields['image']}'")
                except ImageError as err:
                    if self.on_bad_row == "error":
                        raise TaskError(f"task.{key}: {err}. Fix it, or set task.on_bad_row=skip") from None
                    self.bad_rows += 1
                    self.bad_images.append((f"{source}-{split}-{i}", str(err)))
                    continue
                meta["images"] = image_key(images)
            records.append(TaskRecord(id=f"{source}-{split}-{i}", question=question, answer=str(answer),
                                      source=source, images=images, meta=meta))
        if not records:
            raise TaskError(f"task.{key}: no usable rows in split '{split}' of '{_show(self.path)}' (every "
                            f"row's {self.fields['question']} or {self.fields['answer']} was missing or empty)")
        return records


def _undecoded_images(ds: Any, column: str) -> Any:
    """`ds` with a `datasets.Image` feature in `column` (alone or in lists) read undecoded, as {bytes, path}:
    loading then reads each image's header only, never its pixels. Other columns and features are untouched."""
    import datasets

    features = getattr(ds, "features", None)
    if not features or column not in features:
        return ds
    feature = copy.deepcopy(features[column])
    found = False

    def undecode(f: Any) -> None:
        nonlocal found
        if isinstance(f, datasets.Image):
            f.decode, found = False, True
        elif isinstance(f, (list, tuple)):
            for item in f:
                undecode(item)
        elif hasattr(f, "feature"):  # List / Sequence / LargeList of images
            undecode(f.feature)

    undecode(feature)
    return ds.cast_column(column, feature) if found else ds


def _chain(first: dict[str, Any], rest: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    yield first
    yield from rest


def _batched_rows(ds: Any, columns: list[str], batch_size: int = 1000) -> Iterator[dict[str, Any]]:
    """Rows of an in-memory `Dataset`, reading only `columns` (when present) a batch at a time."""
    keep = [c for c in columns if c in ds.column_names]
    if len(keep) < len(columns):  # let the caller report the missing field, with every field listed
        yield from ds
        return
    view = ds.select_columns(keep)
    for start in range(0, len(view), batch_size):
        batch = view[start:start + batch_size]
        yield from (dict(zip(keep, values)) for values in zip(*(batch[c] for c in keep)))
