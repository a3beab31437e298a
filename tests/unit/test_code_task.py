"""Code rewards and the code task: extraction, unit tests in the sandbox, generated and file-based problems."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from rlvr.registry import RegistryError
from rlvr.rewards.code import extract_code, run_unit_tests, split_tests
from rlvr.tasks import TASKS, TaskError, build_task
from rlvr.tasks.code import FAMILIES, CodeTask, synthetic_problem

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox targets Linux")

GOOD = "Sure.\n```python\ndef f(x):\n    return 3 * x + 2\n```\nThat's it."
TESTS = ["assert f(0) == 2", "assert f(1) == 5", "assert f(-2) == -4"]

# -- extraction --------------------------------------------------------------------------------------------


def test_extract_code_prefers_the_last_python_block() -> None:
    text = "```python\nold = 1\n```\nbetter:\n```python\nnew = 2\n```\n```text\nnot code\n```"
    assert extract_code(text) == "new = 2\n"
    assert extract_code("```\nx = 1\n```\n```js\ny = 2\n```") == "y = 2\n"  # any block, the last
    assert extract_code("Here it comes\n```python\ndef f():\n    return 1") == "def f():\n    return 1\n"
    assert extract_code("def f():\n    return 1\n") == "def f():\n    return 1\n"
    assert extract_code("  \n") == ""


def test_split_tests() -> None:
    assert split_tests("assert f(1) == 2\nassert f(2) == 3") == ["assert f(1) == 2", "assert f(2) == 3"]
    setup = "def check(g):\n    assert g(1) == 2\ncheck(f)"
    assert split_tests(setup) == [setup]  # not all asserts: one test
    assert split_tests(["assert a", "  ", "assert b"]) == ["assert a", "assert b"]


# -- run_unit_tests ----------------------------------------------------------------------------------------


def test_all_tests_pass() -> None:
    r = run_unit_tests(GOOD, TESTS, timeout=5, memory_mb=256)
    assert (r.reward, r.passed, r.total, r.reason) == (1.0, 3, 3, "passed 3/3 tests")


def test_all_mode_stops_at_the_first_failure_fraction_runs_every_test() -> None:
    program = "def f(x):\n    return 3 * x + 2 if x > 0 else 0"
    r = run_unit_tests(program, TESTS, timeout=5, memory_mb=256, mode="all")
    assert (r.reward, r.passed, len(r.tests)) == (0.0, 0, 1)
    assert r.reason == "passed 0/3 tests; test 1 `assert f(0) == 2` failed: AssertionError"
    r = run_unit_tests(program, TESTS, timeout=5, memory_mb=256, mode="fraction")
    assert (r.passed, len(r.tests)) == (1, 3) and r.reward == pytest.approx(1 / 3)


def test_partial_pass_all_versus_fraction() -> None:
    program = "```python\ndef f(x):\n    return 3 * x + 2 if x >= 0 else 0\n```"
    r = run_unit_tests(program, TESTS, timeout=5, memory_mb=256, mode="all")
    assert (r.reward, r.passed, r.total) == (0.0, 2, 3)
    assert r.reason == "passed 2/3 tests; test 3 `assert f(-2) == -4` failed: AssertionError"
    r = run_unit_tests(program, TESTS, timeout=5, memory_mb=256, mode="fraction")
    assert r.reward == pytest.approx(2 / 3)


def test_program_that_fails_to_load_gets_zero() -> None:
    r = run_unit_tests("```python\ndef f(x) return x\n```", TESTS, timeout=5, memory_mb=256, mode="fraction")
    assert r.reward == 0.0 and r.reason.startswith("program failed to run: SyntaxError")
    r = run_unit_tests("def f(x):\n    return g(x)", TESTS, timeout=5, memory_mb=256)
    assert r.reward == 0.0 and "NameError: name 'g' is not defined" in r.reason


def test_timeout_crash_and_block_get_zero_with_reason() -> None:
    hang = "def f(x):\n    while True:\n        pass"
    r = run_unit_tests(hang, TESTS, timeout=1, memory_mb=256, mode="fraction")
    assert r.reward == 0.0 and r.reason == "timeout after 1s (0/3 tests passed before)"
    early_exit = "import os\ndef f(x):\n    os._exit(0)"
    r = run_unit_tests(early_exit, TESTS, timeout=5, memory_mb=256, mode="fraction")
    assert r.reward == 0.0 and r.flag == "anomaly"
    assert r.reason.startswith("anomaly: the program's process exited in the middle of the test")
    sneaky = "import socket\ntry:\n    socket.socket()\nexcept OSError:\n    pass\ndef f(x):\n    return 3 * x + 2"
    r = run_unit_tests(sneaky, TESTS, timeout=5, memory_mb=256, mode="fraction")
    assert r.reward == 0.0 and r.passed == 0 and r.flag == "blocked" and r.reason.startswith("blocked: socket")


def test_program_cannot_forge_the_summary() -> None:
    forged = ("import sys\nfor i in range(3):\n    print('0' * 32 + f' T {i}')\nprint('0' * 32 + ' D')\n"
              "sys.stdout.flush()\nimport os\nos._exit(0)")
    r = run_unit_tests(forged, TESTS, timeout=5, memory_mb=256, mode="fraction")
    assert r.reward == 0.0 and r.passed == 0  # more of these in test_red_team.py


def test_test_failure_kinds_and_empty_inputs() -> None:
    r = run_unit_tests("def f(x):\n    raise KeyError('k')", ["assert f(1) == 1"], timeout=5, memory_mb=256)
    assert r.reason.endswith("failed: KeyError: 'k'")
    assert run_unit_tests(GOOD, [], timeout=5).reason.startswith("no tests")
    assert run_unit_tests("   ", TESTS, timeout=5).reason == "no code in the response"
    with pytest.raises(ValueError, match="mode"):
        run_unit_tests(GOOD, TESTS, mode="most")  # type: ignore[arg-type]


# -- the generated task ------------------------------------------------------------------------------------


def test_generated_problems_are_deterministic_and_splits_disjoint() -> None:
    a = build_task("code", {"train_size": 200, "eval_size": 30, "seed": 7})
    b = build_task("code", {"train_size": 200, "eval_size": 30, "seed": 7})
    c = build_task("code", {"train_size": 200, "eval_size": 30, "seed": 8})
    assert [r.question for r in a.heldout] == [r.question for r in b.heldout]
    assert [r.answer for r in a.train[:20]] == [r.answer for r in b.train[:20]]
    assert [r.question for r in a.heldout] != [r.question for r in c.heldout]
    held = {r.question for r in a.heldout}
    assert len(held) == 30 and not held & {r.question for r in a.train}
    assert {r.meta["family"] for r in a.train} == set(FAMILIES)
    for r in a.heldout:
        assert 3 <= len(r.answer) <= 5 and all(t.startswith("assert f(") for t in r.answer)


def test_reference_solutions_pass_and_wrong_ones_fail() -> None:
    task = build_task("code", {"train_size": 10, "eval_size": 2, "seed": 0, "reward_mode": "fraction"})
    family_seen = {}
    for i in range(200):  # one problem of each family
        r = synthetic_problem(0, f"probe-{i}")
        family_seen.setdefault(r.meta["family"], r)
    assert set(family_seen) == set(FAMILIES)
    for record in family_seen.values():
        v = task.verify(f"```python\n{record.meta['solution']}```", record)
        assert (v.reward, v.correct) == (1.0, True), (record.question, v.reason)
        n = len(record.answer)
        assert v.extracted == record.meta["solution"] and v.meta == {"passed": n, "total": n, "verifier_flag": None}
    wrong = task.verify("```python\ndef f(*a):\n    return 0\n```", family_seen["linear"])
    assert wrong.correct is False and wrong.reward < 1.0


def test_prompt_asks_for_a_python_block_and_params_validate() -> None:
    task = build_task("code", {"train_size": 5, "eval_size": 2})
    record = task.heldout[0]
    assert "```python" in task.plain_prompt(record) and record.question in task.plain_prompt(record)
    assert "```python" in task.chat_messages(record)[-1]["content"]
    assert "code" in TASKS.names() and isinstance(task, CodeTask)
    with pytest.raises(RegistryError, match="reward_mode"):
        build_task("code", {"reward_mode": "most"})
    with pytest.raises(RegistryError, match="tmeout"):
        build_task("code", {"tmeout": 3})
    with pytest.raises(TaskError, match="eval_path"):
        build_task("code", {"eval_path": "x.jsonl"})


def test_answer_hooks_for_label_free_rewards() -> None:
    task = build_task("code", {"train_size": 5, "eval_size": 2})
    assert task.extract_answer(GOOD) == "def f(x):\n    return 3 * x + 2\n"
    assert task.answers_match("def f(x):\n  return 1", "def f(x):\n    return 1")


# -- file-based problems -----------------------------------------------------------------------------------


def _write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def test_jsonl_rows_custom_columns_and_disjoint_split(tmp_path: Path) -> None:
    rows = [{"q": f"Write f(x) returning x+{i}.", "checks": [f"assert f(1) == {1 + i}"]} for i in range(20)]
    rows.append({"q": "Write f(x) returning x+0.", "checks": ["assert f(2) == 2"]})  # duplicate prompt
    path = _write_jsonl(tmp_path / "train.jsonl", rows)
    task = build_task("code", {"path": str(path), "prompt_column": "q", "tests_column": "checks",
                               "eval_fraction": 0.25, "seed": 1})
    held = {r.question for r in task.heldout}
    assert len(task.heldout) == 5 and not held & {r.question for r in task.train}
    record = task.train[0]
    assert task.verify(f"```python\ndef f(x):\n    return x + {record.question.split('+')[1][:-1]}\n```",
                       record).correct


def test_jsonl_test_formats_setup_and_bad_rows(tmp_path: Path) -> None:
    rows = [
        {"prompt": "p1", "tests": json.dumps(["assert f() == 1"])},  # a JSON-encoded list
        {"prompt": "p2", "tests": "assert f() == 1\nassert f() != 2"},  # one string of asserts
        {"prompt": "p3", "tests": ["assert g() == 1"], "setup": "g = f"},
        {"prompt": "p4", "tests": []},  # bad: no tests
        {"prompt": "", "tests": ["assert True"]},  # bad: no prompt
        "{not json",  # bad: not JSON
    ]
    path = _write_jsonl(tmp_path / "rows.jsonl", rows)
    evals = _write_jsonl(tmp_path / "eval.jsonl", [{"prompt": "p9", "tests": ["assert f() == 1"], "setup": ""}])
    task = build_task("code", {"path": str(path), "eval_path": str(evals), "setup_column": "setup"})
    assert task.bad_rows == 3 and [r.question for r in task.train] == ["p1", "p2", "p3"]
    assert [len(r.answer) for r in task.train] == [1, 2, 1]
    assert task.train[2].answer == ["g = f\nassert g() == 1"]
    for record in task.train:
        assert task.verify("def f():\n    return 1", record).correct, record
    with pytest.raises(TaskError, match="row 4 .* malformed: empty 'tests'.*on_bad_row=skip"):
        build_task("code", {"path": str(path), "eval_path": str(evals), "on_bad_row": "error"})
    with pytest.raises(TaskError, match="task.tests_column: column 'asserts' not found.*prompt, setup, tests"):
        build_task("code", {"path": str(path), "tests_column": "asserts"})
    with pytest.raises(TaskError, match="not found"):
        build_task("code", {"path": str(tmp_path / "missing.jsonl")})


def test_jsonl_function_call_stdio_and_apps_style_tests(tmp_path: Path) -> None:
    rows = [
        {"prompt": "add", "tests": [{"call": "add", "args": [1, 2], "expected": 3}, "assert add(0, 0) == 0"]},
        {"prompt": "echo sum", "tests": [{"input": "1 2\n", "output": "3\n"}]},
        {"prompt": "apps stdio", "tests": json.dumps({"inputs": ["4 5\n"], "outputs": ["9\n"]})},
        {"prompt": "apps call", "tests": {"inputs": [[2, 3]], "outputs": [[5]], "fn_name": "add"}},
        {"prompt": "bad", "tests": [{"nonsense": 1}]},
    ]
    path = _write_jsonl(tmp_path / "mixed.jsonl", rows)
    task = build_task("code", {"path": str(path), "eval_fraction": 0.2, "seed": 0})
    records = {r.question: r for r in [*task.train, *task.heldout]}
    assert task.bad_rows == 1 and set(records) == {"add", "echo sum", "apps stdio", "apps call"}
    assert records["apps call"].answer == [{"call": "add", "args": [2, 3], "expected": 5}]
    assert records["apps stdio"].answer == [{"input": "4 5\n", "output": "9\n"}]
    add = "def add(a, b):\n    return a + b\n"
    script = "a, b = map(int, input().split())\nprint(a + b)\n"
    for name, program in (("add", add), ("apps call", add), ("echo sum", script), ("apps stdio", script)):
        v = task.verify(f"```python\n{program}```", records[name])
        assert v.correct and v.meta["verifier_flag"] is None, (name, v.reason)


def test_parquet_rows(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    table = pa.table({"prompt": [f"p{i}" for i in range(10)], "tests": [["assert f() == 1"]] * 10})
    pq.write_table(table, tmp_path / "rows.parquet")
    task = build_task("code", {"path": str(tmp_path / "rows.parquet"), "eval_fraction": 0.2})
    assert len(task.heldout) == 2 and len(task.train) == 8
    assert task.train[0].answer == ["assert f() == 1"]
