"""Tasks: the addition task and its scratchpad, the reasoning-gym adapter, JSONL/Parquet data, prompt rendering."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from rlvr.config import ConfigError
from rlvr.registry import RegistryError
from rlvr.tasks import TASKS, PromptRenderer, TaskError, build_task
from rlvr.tasks.addition import AdditionTask, worked_solution
from rlvr.tasks.jsonl import JsonlTask
from rlvr.types import TaskRecord

# -- the scratchpad -------------------------------------------------------------------------------------


def _final(text: str) -> int:
    assert text.count("|A:") == 1
    return int(text.rsplit("|A:", 1)[1])


def _steps(text: str) -> list[str]:
    return text.split("|")[:-1]


def _carried_steps(text: str) -> int:
    """Steps whose left side has three terms (x+y+1): the columns that received a carry."""
    return sum(step.split("=")[0].count("+") == 2 for step in _steps(text))


def test_worked_solution_exact_string() -> None:
    # by hand: 1+7=8 -> 8; 2+9=11 -> 1 carry 1 -> 18; 8+3+1=12 -> 2 carry 1 -> 218; 4+0+1=5 -> 5218
    text, ok = worked_solution(4821, 397)
    assert text == "1+7=8;8|2+9=11;18|8+3+1=12;218|4+0+1=5;5218|A:5218"
    assert ok is True


def test_worked_solution_small_cases() -> None:
    assert worked_solution(5, 5) == ("5+5=10;10|A:10", True)
    assert worked_solution(0, 0) == ("0+0=0;0|A:0", True)
    assert worked_solution(99, 1) == ("9+1=10;0|9+0+1=10;100|A:100", True)
    # the shorter operand may come first
    assert worked_solution(3, 498) == ("3+8=11;1|0+9+1=10;01|0+4+1=5;501|A:501", True)


def test_worked_solution_is_correct_and_carries_exactly_when_needed() -> None:
    rng = random.Random(1234)
    for _ in range(2000):
        a = rng.randint(0, 10 ** rng.randint(1, 6) - 1)
        b = rng.randint(0, 10 ** rng.randint(1, 6) - 1)
        text, ok = worked_solution(a, b)
        assert ok is True
        assert _final(text) == a + b
        steps = _steps(text)
        assert len(steps) == max(len(str(a)), len(str(b)))
        prev_sum = 0
        for step in steps:
            lhs, rest = step.split("=")
            col_sum = int(rest.split(";")[0])
            terms = [int(t) for t in lhs.split("+")]
            assert sum(terms) == col_sum
            has_carry = len(terms) == 3
            assert has_carry == (prev_sum >= 10), (a, b, text)
            if has_carry:
                assert terms[2] == 1
            prev_sum = col_sum
        # the running result of the last step is the answer
        assert int(steps[-1].split(";")[1]) == a + b


def _needs_inner_carry(a: int, b: int) -> bool:
    """Some column other than the last has a digit sum >= 10 (so a carry moves into a later column)."""
    xs, ys = str(a)[::-1], str(b)[::-1]
    cols = max(len(xs), len(ys))
    return any(
        (int(xs[i]) if i < len(xs) else 0) + (int(ys[i]) if i < len(ys) else 0) >= 10 for i in range(cols - 1)
    )


def test_worked_solution_with_rng_but_no_slips_is_never_wrong() -> None:
    rng = random.Random(0)
    pairs = random.Random(1)
    for _ in range(500):
        a, b = pairs.randint(0, 99999), pairs.randint(0, 99999)
        text, ok = worked_solution(a, b, rng=rng, carry_slip=0.0, digit_slip=0.0)
        assert ok and _final(text) == a + b


def test_carry_slip_one_breaks_exactly_the_problems_with_a_carry() -> None:
    rng = random.Random(0)
    pairs = random.Random(2)
    needing = 0
    for _ in range(2000):
        a, b = pairs.randint(0, 99999), pairs.randint(0, 9999)
        text, ok = worked_solution(a, b, rng=rng, carry_slip=1.0)
        assert ok == (_final(text) == a + b)
        assert _carried_steps(text) == 0  # every carry was dropped
        assert ok == (not _needs_inner_carry(a, b)), (a, b, text)
        needing += _needs_inner_carry(a, b)
    assert 200 < needing < 1900  # the sample covers both kinds


def test_carry_slip_rate_matches_probability() -> None:
    """Problems with exactly one carry are wrong exactly when that carry is dropped."""
    rng = random.Random(0)
    pairs = random.Random(3)
    wrong = total = 0
    while total < 2000:
        a, b = pairs.randint(100, 9999), pairs.randint(100, 9999)
        clean, _ = worked_solution(a, b)
        if _carried_steps(clean) != 1:
            continue
        total += 1
        text, ok = worked_solution(a, b, rng=rng, carry_slip=0.3)
        assert ok == (_final(text) == a + b)
        wrong += not ok
    assert 0.25 < wrong / total < 0.35


def test_digit_slip_rate_matches_probability() -> None:
    """With digits 1..8 no column sum can be clamped, so each of the 3 columns errs with probability q."""
    rng = random.Random(0)
    pairs = random.Random(4)
    q, n = 0.1, 2000
    wrong = 0
    for _ in range(n):
        a = int("".join(str(pairs.randint(1, 8)) for _ in range(3)))
        b = int("".join(str(pairs.randint(1, 8)) for _ in range(3)))
        text, ok = worked_solution(a, b, rng=rng, digit_slip=q)
        assert ok == (_final(text) == a + b)
        wrong += not ok
    expected = 1 - (1 - q) ** 3  # 0.271
    assert abs(wrong / n - expected) < 0.05


def test_slips_without_rng_are_ignored() -> None:
    assert worked_solution(4821, 397, carry_slip=1.0, digit_slip=1.0)[1] is True


# -- the addition task ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def addition() -> AdditionTask:
    return AdditionTask()


def test_addition_heldout_is_200_distinct(addition: AdditionTask) -> None:
    held = addition.heldout
    assert len(held) == 200
    assert len({r.question for r in held}) == 200
    for r in held:
        a, b = (int(x) for x in r.question.split("+"))
        assert r.answer == str(a + b)
        assert r.meta == {"a": a, "b": b}


def test_addition_train_never_overlaps_heldout(addition: AdditionTask) -> None:
    held = {r.question for r in addition.heldout}
    train = addition.train
    assert len(train) == 100_000
    questions = [r.question for r in train[:20000]]
    assert len(questions) == 20000
    assert not held.intersection(questions)


def test_addition_splits_are_deterministic(addition: AdditionTask) -> None:
    other = AdditionTask()
    assert [r.question for r in other.heldout] == [r.question for r in addition.heldout]
    assert [r.question for r in other.train[:300]] == [r.question for r in addition.train[:300]]
    # random access gives the same record as a slice
    assert addition.train[123] == addition.train[120:125][3]
    assert addition.train[-1] == addition.train[len(addition.train) - 1]
    with pytest.raises(IndexError):
        addition.train[len(addition.train)]


def test_addition_seed_changes_the_split(addition: AdditionTask) -> None:
    other = AdditionTask(seed=1)
    a = {r.question for r in addition.heldout}
    b = {r.question for r in other.heldout}
    assert a != b
    assert len(a & b) < 100
    assert [r.question for r in other.train[:50]] != [r.question for r in addition.train[:50]]


def test_addition_difficulty_and_digit_range() -> None:
    task = AdditionTask(digits=(3, 5), eval_size=50)
    records = list(task.heldout) + task.train[:500]
    seen = set()
    for r in records:
        a, b = r.meta["a"], r.meta["b"]
        assert r.difficulty == max(len(str(a)), len(str(b)))
        assert 3 <= r.difficulty <= 5
        seen.add(r.difficulty)
    assert seen == {3, 4, 5}


def test_addition_verify(addition: AdditionTask) -> None:
    rec = TaskRecord(id="x", question="4821+397", answer="5218", meta={"a": 4821, "b": 397})
    text, _ = addition.worked_solution(rec)
    v = addition.verify(text, rec)
    assert (v.reward, v.correct, v.extracted) == (1.0, True, "5218")
    assert addition.verify("8|...|A:5218", rec).reward == 1.0
    assert addition.verify("Answer: 5218", rec).correct is True
    assert addition.verify("Answer: 5,218.", rec).correct is True
    assert addition.verify("so \\boxed{5218}", rec).correct is True

    wrong = addition.verify("1+7=8;8|A:5219", rec)
    assert (wrong.reward, wrong.correct) == (0.0, False)
    assert "wrong answer" in wrong.reason and "5219" in wrong.reason and "5218" in wrong.reason

    none = addition.verify("I do not know", rec)
    assert (none.reward, none.correct) == (0.0, False)
    assert none.reason == "no answer found"

    nan = addition.verify("Answer: lots", rec)
    assert nan.reward == 0.0 and "not a number" in nan.reason


@pytest.mark.parametrize("params", [
    {"digits": (0, 3)},
    {"digits": (4, 2)},
    {"digits": (1, 19)},
    {"prompt_template": "Add these"},
    {"chat_prompt_template": "no placeholder"},
    {"digits": (1, 1), "eval_size": 200},  # too few 1-digit problems for a disjoint split
])
def test_addition_bad_params(params: dict) -> None:
    with pytest.raises((TaskError, ConfigError)) as info:
        AdditionTask(**params)
    key = next(iter(params)) if "eval_size" not in params else "eval_size"
    assert f"task.{key}" in str(info.value)


def test_addition_prompts(addition: AdditionTask) -> None:
    rec = addition.heldout[0]
    assert addition.plain_prompt(rec) == f"{rec.question}="
    msgs = addition.chat_messages(rec)
    assert msgs[-1]["role"] == "user" and rec.question in msgs[-1]["content"]
    assert all(m["role"] != "system" for m in msgs)
    custom = AdditionTask(prompt_template="Q: {question}\nA:", system_prompt="Be exact.", eval_size=10)
    assert custom.plain_prompt(rec) == f"Q: {rec.question}\nA:"
    assert custom.chat_messages(rec)[0] == {"role": "system", "content": "Be exact."}


def test_build_task_via_registry() -> None:
    task = build_task("addition", {"digits": [2, 2], "eval_size": 10})
    assert isinstance(task, AdditionTask)
    assert task.digits == (2, 2)
    assert all(r.difficulty == 2 for r in task.heldout)
    with pytest.raises(RegistryError, match="task.digits"):
        build_task("addition", {"digits": "two"})


# -- reasoning-gym --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def legs():
    from rlvr.tasks.reasoning_gym import ReasoningGymTask

    return ReasoningGymTask(dataset="leg_counting", eval_size=20, train_size=200)


def test_reasoning_gym_records(legs) -> None:
    assert len(legs.heldout) == 20 and len(legs.train) == 200
    for r in list(legs.heldout) + legs.train[:20]:
        assert isinstance(r.question, str) and r.question
        assert isinstance(r.answer, str) and r.answer
        assert r.source == "leg_counting"
    assert legs.system_prompt and "<answer>" in legs.system_prompt


def test_reasoning_gym_verify(legs) -> None:
    rec = legs.heldout[0]
    v = legs.verify(f"thinking...\n<answer>{rec.answer}</answer>", rec)
    assert (v.reward, v.correct, v.reason) == (1.0, True, "correct")

    untagged = legs.verify(str(rec.answer), rec)
    assert (untagged.reward, untagged.correct) == (0.0, False)
    assert "answer" in untagged.reason and "tag" in untagged.reason

    wrong_answer = str(int(rec.answer) + 1)
    wrong = legs.verify(f"<answer>{wrong_answer}</answer>", rec)
    assert wrong.correct is False and wrong.reward < 1.0
    assert wrong_answer in wrong.reason and rec.answer in wrong.reason


def test_reasoning_gym_splits_disjoint_and_deterministic(legs) -> None:
    from rlvr.tasks.reasoning_gym import ReasoningGymTask

    held = {r.question for r in legs.heldout}
    assert not held.intersection(r.question for r in legs.train)
    again = ReasoningGymTask(dataset="leg_counting", eval_size=20, train_size=200)
    assert [r.question for r in again.heldout] == [r.question for r in legs.heldout]
    assert [r.question for r in again.train[:20]] == [r.question for r in legs.train[:20]]


def test_reasoning_gym_unknown_dataset_suggests() -> None:
    with pytest.raises(RegistryError) as info:
        TASKS.resolve("reasoning_gym", {"dataset": "leg_countin"}, "task")
    msg = str(info.value)
    assert "task.dataset" in msg
    assert "Did you mean 'leg_counting'" in msg


def test_reasoning_gym_bad_dataset_config() -> None:
    from rlvr.tasks.reasoning_gym import ReasoningGymTask

    with pytest.raises(TaskError, match="task.config"):
        ReasoningGymTask(dataset="leg_counting", config={"no_such_option": 3}, eval_size=2, train_size=2)


# -- JSONL / Parquet ------------------------------------------------------------------------------------


def _write_jsonl(path: Path, rows: list) -> Path:
    lines = [r if isinstance(r, str) else json.dumps(r) for r in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def _rows(n: int, prompt: str = "prompt", answer: str = "answer") -> list[dict]:
    return [{prompt: f"What is {i} + 1?", answer: str(i + 1), "level": i % 3} for i in range(n)]


def test_jsonl_default_columns_and_split(tmp_path: Path) -> None:
    p = _write_jsonl(tmp_path / "data.jsonl", _rows(40))
    task = JsonlTask(path=str(p), eval_fraction=0.25)
    assert len(task.heldout) == 10 and len(task.train) == 30
    assert task.bad_rows == 0
    train_q = {r.question for r in task.train}
    held_q = {r.question for r in task.heldout}
    assert not train_q & held_q
    assert len(train_q | held_q) == 40
    rec = task.train[0]
    assert rec.answer == str(int(rec.question.split()[2]) + 1)
    assert rec.source == "data"
    assert rec.id == f"data-{rec.meta['row']}"

    again = JsonlTask(path=str(p), eval_fraction=0.25)
    assert [r.question for r in again.heldout] == [r.question for r in task.heldout]
    other_seed = JsonlTask(path=str(p), eval_fraction=0.25, seed=1)
    assert {r.question for r in other_seed.heldout} != held_q


def test_jsonl_configurable_columns(tmp_path: Path) -> None:
    p = _write_jsonl(tmp_path / "qa.jsonl", _rows(10, "q", "a"))
    task = JsonlTask(path=str(p), prompt_column="q", answer_column="a", difficulty_column="level",
                     eval_fraction=0.2)
    assert len(task.train) + len(task.heldout) == 10
    for r in list(task.train) + list(task.heldout):
        assert r.question.startswith("What is")
        assert r.difficulty == (int(r.answer) - 1) % 3


def test_jsonl_missing_column_lists_actual_columns(tmp_path: Path) -> None:
    p = _write_jsonl(tmp_path / "qa.jsonl", _rows(10, "q", "a"))
    with pytest.raises(TaskError) as info:
        JsonlTask(path=str(p), prompt_column="q")
    msg = str(info.value)
    assert "task.answer_column" in msg
    assert "'answer'" in msg
    assert "a, level, q" in msg

    with pytest.raises(TaskError, match="task.prompt_column"):
        JsonlTask(path=str(p), answer_column="a")


def test_jsonl_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(TaskError) as info:
        JsonlTask(path=str(missing))
    assert "task.path" in str(info.value) and str(missing) in str(info.value)


def test_jsonl_bad_rows_skipped_and_counted(tmp_path: Path) -> None:
    rows: list = _rows(20)
    rows.insert(3, "{not json")  # row 4
    rows.insert(7, {"prompt": "no answer here"})  # row 8
    rows.insert(9, {"prompt": "   ", "answer": "1"})  # row 10
    rows.insert(12, {"prompt": "null answer", "answer": None})  # row 13
    rows.insert(14, "[1, 2]")  # row 15: JSON, but not an object
    p = _write_jsonl(tmp_path / "messy.jsonl", rows)
    task = JsonlTask(path=str(p), eval_fraction=0.1)
    assert task.bad_rows == 5
    good = {r.question for r in list(task.train) + list(task.heldout)}
    assert good == {f"What is {i} + 1?" for i in range(20)}


def test_jsonl_bad_rows_error_names_row(tmp_path: Path) -> None:
    rows: list = _rows(10)
    rows.insert(5, {"prompt": "missing answer"})  # row 6
    p = _write_jsonl(tmp_path / "messy.jsonl", rows)
    with pytest.raises(TaskError) as info:
        JsonlTask(path=str(p), on_bad_row="error")
    msg = str(info.value)
    assert "row 6" in msg
    assert str(p) in msg
    assert "'answer'" in msg
    assert "on_bad_row=skip" in msg

    bad_json = _write_jsonl(tmp_path / "badjson.jsonl", [*_rows(3), "{oops"])
    with pytest.raises(TaskError, match="row 4 .*not a JSON object"):
        JsonlTask(path=str(bad_json), on_bad_row="error")


def test_jsonl_eval_path(tmp_path: Path) -> None:
    train = _write_jsonl(tmp_path / "train.jsonl", _rows(12))
    held_rows = [{"prompt": "What is 0 + 1?", "answer": "1"}, {"prompt": "Held only", "answer": "7"}]
    held = _write_jsonl(tmp_path / "held.jsonl", held_rows)
    task = JsonlTask(path=str(train), eval_path=str(held))
    assert [r.question for r in task.heldout] == ["What is 0 + 1?", "Held only"]
    assert [r.source for r in task.heldout] == ["held", "held"]
    # the training row that repeats a held-out prompt is dropped; the rest are all kept
    assert len(task.train) == 11
    assert "What is 0 + 1?" not in {r.question for r in task.train}


def test_jsonl_nothing_left_for_training(tmp_path: Path) -> None:
    rows = [{"prompt": "same", "answer": "1"}] * 3
    p = _write_jsonl(tmp_path / "dup.jsonl", rows)
    with pytest.raises(TaskError, match="no training rows"):
        JsonlTask(path=str(p))


def test_jsonl_verifier_modes(tmp_path: Path) -> None:
    rows = [{"prompt": f"p{i}", "answer": a} for i, a in enumerate(["Paris", "1000", "1/2"] * 4)]
    p = _write_jsonl(tmp_path / "mix.jsonl", rows)
    rec_text = TaskRecord(id="t", question="q", answer="Paris")
    rec_num = TaskRecord(id="n", question="q", answer="1000")
    rec_frac = TaskRecord(id="f", question="q", answer="1/2")

    exact = JsonlTask(path=str(p), verifier="exact")
    assert exact.verify("Answer: paris.", rec_text).correct is True
    assert exact.verify("Answer: London", rec_text).correct is False
    assert exact.verify("Answer: 1,000", rec_num).correct is False  # exact text, no number parsing

    numeric = JsonlTask(path=str(p), verifier="numeric")
    assert numeric.verify("Answer: 1,000", rec_num).correct is True
    assert numeric.verify("\\boxed{1000.0}", rec_num).reward == 1.0
    assert numeric.verify("Answer: 999", rec_num).correct is False
    assert numeric.verify("Answer: 0.5", rec_frac).correct is False  # '1/2' is not a plain number

    math = JsonlTask(path=str(p), verifier="math")
    assert math.verify("\\boxed{\\frac{1}{2}}", rec_frac).correct is True
    assert math.verify("Answer: 0.5", rec_frac).correct is True
    assert math.verify("Answer: 0.6", rec_frac).correct is False

    none = math.verify("no idea", rec_frac)
    assert (none.reward, none.correct, none.reason) == (0.0, False, "no answer found")

    tag_only = JsonlTask(path=str(p), verifier="numeric", extract="answer_tag")
    assert tag_only.verify("Answer: 1000", rec_num).correct is False
    assert tag_only.verify("<answer>1000</answer>", rec_num).correct is True


def test_parquet_file(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = _rows(20)
    p = tmp_path / "data.parquet"
    pq.write_table(pa.Table.from_pylist(rows), p)
    task = JsonlTask(path=str(p), difficulty_column="level")
    assert len(task.train) + len(task.heldout) == 20
    assert {r.question for r in task.train} | {r.question for r in task.heldout} == {r["prompt"] for r in rows}


# -- prompt rendering -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chat_tokenizer(tiny_chat_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_chat_model_dir))


@pytest.fixture(scope="module")
def plain_tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model_dir))


@pytest.fixture(scope="module")
def small_task() -> AdditionTask:
    return AdditionTask(eval_size=5)


def test_renderer_uses_chat_template(chat_tokenizer, small_task: AdditionTask) -> None:
    rec = small_task.heldout[0]
    renderer = PromptRenderer(small_task, chat_tokenizer)
    assert renderer.uses_chat is True
    ids, text = renderer.render(rec)
    assert "<|user|>" in text
    assert text.endswith("<|assistant|>")
    assert rec.question in text
    assert ids and all(isinstance(i, int) for i in ids)

    on = PromptRenderer(small_task, chat_tokenizer, "on").render(rec)
    assert on == (ids, text)


def test_renderer_off_or_without_template_uses_plain_prompt(chat_tokenizer, plain_tokenizer,
                                                            small_task: AdditionTask) -> None:
    rec = small_task.heldout[0]
    expected = small_task.plain_prompt(rec)
    for renderer in (PromptRenderer(small_task, chat_tokenizer, "off"), PromptRenderer(small_task, plain_tokenizer)):
        assert renderer.uses_chat is False
        ids, text = renderer.render(rec)
        assert text == expected
        assert plain_tokenizer.decode(ids) == expected


def test_renderer_on_without_template_raises(plain_tokenizer, small_task: AdditionTask) -> None:
    with pytest.raises(TaskError, match="model.chat_template"):
        PromptRenderer(small_task, plain_tokenizer, "on")


def test_renderer_chat_ids_match_rendered_text(tiny_chat_model_dir, small_task: AdditionTask) -> None:
    """Token-in, token-out: the prompt ids must encode the rendered text, spaces included.

    Loaded the way rlvr loads tokenizers (AutoTokenizer via load_tokenizer), the character tokenizer of a
    Qwen2-config checkpoint must still keep every character of the chat prompt.
    """
    from rlvr.models.loading import load_tokenizer

    tok = load_tokenizer(tiny_chat_model_dir)
    rec = small_task.heldout[0]
    ids, text = PromptRenderer(small_task, tok).render(rec)
    assert " " in text
    assert tok.decode(ids) == text


def _write_bytes(path: Path, lines: list[bytes], final_newline: bool = True) -> Path:
    path.write_bytes(b"\n".join(lines) + (b"\n" if final_newline else b""))
    return path


def _good_lines(n: int) -> list[bytes]:
    return [json.dumps(r).encode() for r in _rows(n)]


def test_jsonl_undecodable_byte_is_a_bad_row_not_a_traceback(tmp_path: Path) -> None:
    lines = _good_lines(10)
    lines.insert(4, b'{"prompt": "caf\xe9?", "answer": "1"}')  # row 5: Latin-1 byte, not UTF-8
    p = _write_bytes(tmp_path / "latin.jsonl", lines)
    task = JsonlTask(path=str(p), eval_fraction=0.2)
    assert task.bad_rows == 1
    assert len(task.train) + len(task.heldout) == 10
    with pytest.raises(TaskError) as info:
        JsonlTask(path=str(p), on_bad_row="error")
    msg = str(info.value)
    assert f"row 5 of '{p}'" in msg and "not UTF-8" in msg and "0xe9" in msg and "column 16" in msg  # {"prompt": "caf is 15 bytes


def test_jsonl_truncated_last_line(tmp_path: Path) -> None:
    lines = [*_good_lines(6), b'{"prompt": "What is 9 + 1?", "ans']
    p = _write_bytes(tmp_path / "cut.jsonl", lines, final_newline=False)
    task = JsonlTask(path=str(p), eval_fraction=0.2)
    assert task.bad_rows == 1 and len(task.train) + len(task.heldout) == 6
    with pytest.raises(TaskError, match=r"row 7 .*invalid JSON.*last line may be truncated"):
        JsonlTask(path=str(p), on_bad_row="error")


def test_jsonl_huge_row_is_bounded_and_reported(tmp_path: Path) -> None:
    from rlvr.tasks.jsonl import BadRow, read_rows

    huge = json.dumps({"prompt": "x" * 5000, "answer": "1"}).encode()
    p = _write_bytes(tmp_path / "huge.jsonl", [*_good_lines(2), huge, *_good_lines(1)])
    rows = read_rows(p, max_row_bytes=1000)
    assert [n for n, _ in rows] == [1, 2, 3, 4]  # line numbers stay right after the long line
    assert isinstance(rows[2][1], BadRow)
    assert rows[2][1].reason == f"line is {len(huge) + 1} bytes, longer than the 1000-byte limit"
    assert rows[3][1] == _rows(1)[0]
    assert isinstance(read_rows(p)[2][1], dict)  # under the default limit it is an ordinary row


def test_reasoning_gym_plain_prompt_carries_the_answer_format() -> None:
    from rlvr.models import load_tokenizer
    from rlvr.tasks import PromptRenderer, build_task

    task = build_task("reasoning_gym", {"dataset": "gcd", "train_size": 4, "eval_size": 2})
    rec = task.heldout[0]
    PromptRenderer(task, load_tokenizer("builtin"))  # no chat template: plain prompts
    assert task.plain_prompts and task.prefilled
    text = task.plain_prompt(rec)
    assert text.startswith(rec.question) and "<answer></answer>" in text and text.endswith("\n<answer>")
    assert task.verify(f"{rec.answer}</answer> and more", rec).correct  # the prompt opened the tag
    assert task.verify(f" {rec.answer}", rec).correct  # never closed: the whole response is the answer
    assert task.verify(f"<answer>{rec.answer}</answer>", rec).correct  # a full pair still works
    empty = task.verify("</answer>", rec)
    assert not empty.correct and empty.reason == "empty answer"
    assert task.extract_answer(f"{rec.answer}</answer>") == rec.answer


def test_reasoning_gym_chat_path_still_needs_the_tags(tiny_chat_model_dir: Path) -> None:
    from rlvr.models import load_tokenizer
    from rlvr.tasks import PromptRenderer, build_task

    task = build_task("reasoning_gym", {"dataset": "gcd", "train_size": 4, "eval_size": 2})
    rec = task.heldout[0]
    PromptRenderer(task, load_tokenizer(str(tiny_chat_model_dir)))
    assert not task.plain_prompts and not task.prefilled
    assert task.verify(rec.answer, rec).reason == "no <answer> tag"
    assert task.verify(f"<answer>{rec.answer}</answer>", rec).correct
    assert "<answer>" in task.chat_messages(rec)[0]["content"]  # reasoning-gym's system prompt
