"""The hf_dataset task: local Hugging Face datasets (save_to_disk, parquet, json, arrow, csv, a directory of data
files), splits, streaming, answer checking, and the errors that name the key and the fix."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import datasets
import pytest

from rlvr.config import load_config
from rlvr.models import load_tokenizer
from rlvr.tasks import PromptRenderer, TaskError, build_task
from rlvr.tasks.hf_dataset import HfDatasetTask

N = 30


def _ds(n: int = N) -> datasets.Dataset:
    return datasets.Dataset.from_dict({"problem": [f"What is {i}+{i}?" for i in range(n)],
                                       "solution": [2 * i for i in range(n)],
                                       "level": ["easy"] * n})


def _task(tmp_path: Path, path, **params) -> HfDatasetTask:
    params = {"path": path, "question_field": "problem", "answer_field": "solution",
              "cache_dir": str(tmp_path / "cache"), **params}
    task = build_task("hf_dataset", params)
    assert isinstance(task, HfDatasetTask)
    return task


def _check_records(task: HfDatasetTask, n: int = N) -> None:
    rows = list(task.train) + list(task.heldout)
    assert len(rows) == n
    assert {r.question for r in rows} == {f"What is {i}+{i}?" for i in range(n)}
    for r in rows:
        i = int(r.question.split("+")[0].split()[-1])
        assert r.answer == str(2 * i)  # a number in the data becomes the reference text
    assert not {r.question for r in task.train} & {r.question for r in task.heldout}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """One tiny dataset written every way the task reads."""
    root = tmp_path_factory.mktemp("hf")
    ds = _ds()
    ds.save_to_disk(str(root / "disk"))
    datasets.DatasetDict({"train": ds, "test": _ds(40).select(range(30, 40))}).save_to_disk(str(root / "dict"))
    ds.to_parquet(str(root / "d.parquet"))
    ds.to_json(str(root / "d.jsonl"))
    ds.to_csv(str(root / "d.csv"), index=False)
    (root / "shards").mkdir()
    ds.select(range(15)).to_parquet(str(root / "shards" / "a.parquet"))
    ds.select(range(15, N)).to_parquet(str(root / "shards" / "b.parquet"))
    (root / "files" / "data").mkdir(parents=True)  # a Hub-style snapshot: split names from file names
    ds.to_parquet(str(root / "files" / "data" / "train-00000.parquet"))
    _ds(40).select(range(30, 40)).to_parquet(str(root / "files" / "data" / "test-00000.parquet"))
    return root


@pytest.mark.parametrize("path", ["disk", "d.parquet", "d.jsonl", "d.csv", "disk/data-00000-of-00001.arrow",
                                  "shards/*.parquet"])
def test_every_local_format_loads(data: Path, tmp_path: Path, path: str) -> None:
    task = _task(tmp_path, str(data / path))
    _check_records(task)
    assert len(task.heldout) == 3  # the jsonl task's seeded 10% share
    assert task.train[0].meta["split"] == "train"


def test_a_list_of_files(data: Path, tmp_path: Path) -> None:
    _check_records(_task(tmp_path, [str(data / "shards" / "a.parquet"), str(data / "shards" / "b.parquet")]))


def test_heldout_split_from_the_dataset(data: Path, tmp_path: Path) -> None:
    for path in ("dict", "files"):
        task = _task(tmp_path, str(data / path), heldout_split="test")
        assert len(task.train) == N and len(task.heldout) == 10
        assert task.heldout[0].question == "What is 30+30?" and task.heldout[0].meta["split"] == "test"


def test_seeded_heldout_share_is_deterministic(data: Path, tmp_path: Path) -> None:
    a, b = _task(tmp_path, str(data / "disk")), _task(tmp_path, str(data / "d.parquet"))
    assert [r.question for r in a.heldout] == [r.question for r in b.heldout]
    c = _task(tmp_path, str(data / "disk"), seed=1, eval_fraction=0.2)
    assert len(c.heldout) == 6 and [r.question for r in c.heldout] != [r.question for r in a.heldout][:6]


@pytest.mark.parametrize("path", ["d.jsonl", "d.parquet", "disk", "dict"])
def test_streaming_takes_the_first_max_rows(data: Path, tmp_path: Path, path: str) -> None:
    task = _task(tmp_path, str(data / path), streaming=True, max_rows=10, eval_fraction=0.2)
    rows = list(task.train) + list(task.heldout)
    assert sorted(r.meta["row"] for r in rows) == list(range(10))
    assert len(task.heldout) == 2
    full = _task(tmp_path, str(data / path), streaming=True)
    _check_records(full)


def test_max_rows_without_streaming(data: Path, tmp_path: Path) -> None:
    task = _task(tmp_path, str(data / "disk"), max_rows=5)
    assert len(task.train) + len(task.heldout) == 5


def test_answer_verification(data: Path, tmp_path: Path) -> None:
    task = _task(tmp_path, str(data / "disk"), verifier="numeric")
    record = next(r for r in task.train if r.answer == "14")
    assert task.verify("7+7 is \\boxed{14}", record).correct
    assert task.verify("Answer: 14.0", record).reward == 1.0
    wrong = task.verify("Answer: 15", record)
    assert wrong.reward == 0.0 and not wrong.correct
    none = task.verify("no idea", record)
    assert none.reward == 0.0 and none.reason == "no answer found"
    exact = _task(tmp_path, str(data / "disk"), verifier="exact", extract="answer_tag")
    assert exact.verify("<answer>14</answer>", record).correct
    assert not exact.verify("\\boxed{14}", record).correct
    assert exact.answers_match("14", "14") and exact.extract_answer("<answer> 3 </answer>") == "3"


def test_records_render_for_the_trainer(data: Path, tmp_path: Path) -> None:
    task = _task(tmp_path, str(data / "disk"), prompt_template="Q: {question}\nA:")
    renderer = PromptRenderer(task, load_tokenizer("builtin"))
    ids, text = renderer.render(task.train[0])
    assert text == f"Q: {task.train[0].question}\nA:" and len(ids) > 5 and all(isinstance(i, int) for i in ids)


def test_recipe_with_hf_dataset_validates(data: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    cfg = load_config(root / "recipes" / "grpo.yaml",
                      ["model.path=builtin", "task.name=hf_dataset", f"task.path={data / 'disk'}",
                       "task.question_field=problem", "task.answer_field=solution", "task.streaming=true",
                       "task.max_rows=20"], notes=[])
    assert cfg.task.name == "hf_dataset" and cfg.task.split == "train" and cfg.task.max_rows == 20
    with pytest.raises(ValueError, match="task.max_rows"):
        load_config(root / "recipes" / "grpo.yaml", ["model.path=builtin", "task.name=hf_dataset",
                                                     "task.path=x", "task.max_rows=0"], notes=[])


# -- bad input: errors that name the key and the fix; bad rows skipped and counted ---------------------


class _Records(logging.Handler):
    """Collects log records at the task's own logger (a run may have set `rlvr` not to propagate to caplog)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_bad_rows_are_skipped_and_counted_once(tmp_path: Path) -> None:
    rows = [{"problem": f"What is {i}+{i}?", "solution": 2 * i} for i in range(20)]
    rows[3]["problem"] = None
    rows[4]["problem"] = "   "
    rows[5]["solution"] = None
    del rows[6]["solution"]
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "messy"))
    records, logger = _Records(), logging.getLogger("rlvr.tasks.hf_dataset")
    # another test's import may have run logging.config.dictConfig, which disables loggers that already exist
    disabled, logger.disabled = logger.disabled, False
    logger.addHandler(records)
    try:
        task = _task(tmp_path, str(tmp_path / "messy"))
    finally:
        logger.removeHandler(records)
        logger.disabled = disabled
    assert task.bad_rows == 4 and len(task.train) + len(task.heldout) == 16
    warnings = [m for m in records.messages if "skipped" in m]
    assert len(warnings) == 1 and "skipped 4 rows" in warnings[0]


def test_a_question_that_is_not_text_is_skipped(tmp_path: Path) -> None:
    datasets.Dataset.from_dict({"problem": [1, 2, 3], "solution": [1, 2, 3]}).save_to_disk(str(tmp_path / "ints"))
    with pytest.raises(TaskError, match="no usable rows.*problem"):
        _task(tmp_path, str(tmp_path / "ints"))


def test_missing_field_lists_the_fields(data: Path, tmp_path: Path) -> None:
    with pytest.raises(TaskError) as err:
        _task(tmp_path, str(data / "disk"), question_field="question")
    assert "task.question_field" in str(err.value) and "'question' not found" in str(err.value)
    assert "fields are: problem, solution, level" in str(err.value)
    with pytest.raises(TaskError, match="task.answer_field: field 'answer' not found.*problem, solution, level"):
        _task(tmp_path, str(data / "d.jsonl"), answer_field="answer", streaming=True)


def test_unknown_split_lists_the_splits(data: Path, tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="task.split: split 'validation' not found.*splits are: test, train"):
        _task(tmp_path, str(data / "dict"), split="validation")
    with pytest.raises(TaskError, match="task.heldout_split: split 'dev' not found.*splits are: train"):
        _task(tmp_path, str(data / "d.parquet"), heldout_split="dev")


@pytest.mark.parametrize("streaming", [False, True])
def test_an_empty_dataset(tmp_path: Path, streaming: bool) -> None:
    datasets.Dataset.from_dict({"problem": [], "solution": []}).to_parquet(str(tmp_path / "empty.parquet"))
    with pytest.raises(TaskError, match="task.split: split 'train' of .* has no rows"):
        _task(tmp_path, str(tmp_path / "empty.parquet"), streaming=streaming)
    datasets.Dataset.from_dict({"problem": [], "solution": []}).save_to_disk(str(tmp_path / "empty"))
    with pytest.raises(TaskError, match="task.split: split 'train' of .* has no rows"):
        _task(tmp_path, str(tmp_path / "empty"), streaming=streaming)


def test_an_unreadable_dataset_names_the_path(tmp_path: Path) -> None:
    (tmp_path / "cut.parquet").write_bytes(b"PAR1 not really parquet")
    with pytest.raises(TaskError, match="task.path: split 'train' of .*cut.parquet' could not be read by datasets"):
        _task(tmp_path, str(tmp_path / "cut.parquet"))
    (tmp_path / "bad.jsonl").write_text('{"problem": "1+1?", "solution": 2}\n{oops\n')
    with pytest.raises(TaskError, match="could not be read by datasets"):
        _task(tmp_path, str(tmp_path / "bad.jsonl"), streaming=True)


def test_missing_path_and_hub_ids_are_refused(tmp_path: Path) -> None:
    with pytest.raises(TaskError) as err:
        _task(tmp_path, "openai/gsm8k")
    msg = str(err.value)
    assert "task.path" in msg and "local data only" in msg and "hf download openai/gsm8k --repo-type dataset" in msg
    assert "task.path=data/gsm8k" in msg
    with pytest.raises(TaskError, match="no files match"):
        _task(tmp_path, str(tmp_path / "*.parquet"))
    with pytest.raises(ValueError, match="task.path: required"):
        build_task("hf_dataset", {})
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(TaskError, match="cannot read .txt files"):
        _task(tmp_path, str(tmp_path / "notes.txt"))


def test_loading_is_offline(data: Path, tmp_path: Path, monkeypatch) -> None:
    seen = {}
    real = datasets.load_from_disk

    def spy(path, *a, **kw):
        seen.update(env=os.environ.get("HF_HUB_OFFLINE"), flag=datasets.config.HF_DATASETS_OFFLINE)
        return real(path, *a, **kw)

    monkeypatch.setattr(datasets, "load_from_disk", spy)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    before = datasets.config.HF_DATASETS_OFFLINE
    _task(tmp_path, str(data / "disk"))
    assert seen == {"env": "1", "flag": True}
    assert "HF_HUB_OFFLINE" not in os.environ and datasets.config.HF_DATASETS_OFFLINE == before


def test_without_datasets_the_error_names_the_extra(data: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` now raises ImportError
    with pytest.raises(TaskError, match=r"pip install 'rlvr\[hf\]'"):
        _task(tmp_path, str(data / "disk"))


def test_importing_rlvr_does_not_import_datasets() -> None:
    import subprocess

    code = "import sys, rlvr.tasks, rlvr.config; assert 'datasets' not in sys.modules, 'datasets was imported'"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
