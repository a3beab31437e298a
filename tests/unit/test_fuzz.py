"""Random and adversarial strings against everything that parses untrusted text: no uncaught exception, no hang."""

from __future__ import annotations

import string

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlvr.config import ConfigError, apply_overrides, load_config, parse_override
from rlvr.rewards.verifiers import (
    exact_equal,
    extract_answer,
    extract_answer_line,
    extract_answer_tag,
    extract_boxed,
    extract_last_number,
    math_equal,
    numbers_equal,
    parse_number,
)
from rlvr.tasks import build_task

ADVERSARIAL = st.sampled_from([
    "\\boxed{", "\\boxed{{{{}", "}}}}\\boxed{1", "<answer>", "</answer><answer>", "Answer:", "A:" * 500,
    "\\frac{\\frac{\\frac{1}{2}}{3}", "$$$$", "\\sqrt{-1}", "1e99999", "-" * 1000, "9" * 5000, "\x00\x01\x02",
    "\\begin{matrix}1&2\\end{matrix}", "((((((((((", "\\left(\\right)", "∞", "𝟙𝟚𝟛", "\\boxed{\\boxed{\\boxed{7}}}",
])
TEXT = st.one_of(st.text(max_size=300), ADVERSARIAL,
                 st.lists(st.one_of(ADVERSARIAL, st.text(alphabet=string.printable, max_size=20)), max_size=8)
                 .map("".join))
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(TEXT)
def test_extractors_never_raise(text):
    for fn in (extract_boxed, extract_answer_tag, extract_answer_line, extract_last_number, parse_number):
        out = fn(text)
        assert out is None or isinstance(out, (str, float))
    for mode in ("auto", "boxed", "answer_tag", "answer_line", "last_number", "none"):
        out = extract_answer(text, mode)  # type: ignore[arg-type]
        assert out is None or isinstance(out, str)


@FAST
@given(TEXT, TEXT)
def test_plain_comparisons_never_raise(a, b):
    assert isinstance(numbers_equal(a, b)[0], bool)
    assert isinstance(exact_equal(a, b)[0], bool)


@pytest.mark.timeout(300)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TEXT, st.one_of(st.sampled_from(["1/2", "\\frac{3}{4}", "x^2+1", "7", "\\sqrt{2}", "(1, 2)"]), TEXT))
def test_math_equivalence_never_raises(pred, gold):
    ok, reason = math_equal(pred, gold)
    assert isinstance(ok, bool) and isinstance(reason, str)


TASK = build_task("addition", {"eval_size": 5})


@FAST
@given(TEXT)
def test_task_verifier_never_raises(text):
    v = TASK.verify(text, TASK.heldout[0])
    assert 0.0 <= v.reward <= 1.0


KEYS = st.sampled_from(["train.steps", "rollout.n", "task.digits", "optim.lr", "algorithm.advantage",
                        "model.path", "x", "train", "rewards.0.weight", "eval.ks", "task", "a.b.c.d"])
VALUES = st.one_of(st.text(max_size=30), st.integers(), st.floats(allow_nan=True), st.sampled_from(
    ["[1, 2]", "{a: 1}", "null", "-1", "1e400", "[[[", "{name: grpo}", "'", "!!python/object:os.system"]))


@FAST
@given(st.lists(st.one_of(st.text(max_size=40), st.builds(lambda k, v: f"{k}={v}", KEYS, VALUES)), max_size=6))
def test_config_overrides_give_a_config_or_a_config_error(overrides):
    try:
        load_config(None, overrides)
    except ConfigError:
        pass


@FAST
@given(st.text(max_size=400))
def test_recipe_files_give_a_config_or_a_config_error(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("fuzz") / "r.yaml"
    path.write_text(text)
    try:
        load_config(path, [])
    except ConfigError:
        pass


def test_yaml_tags_cannot_run_code(tmp_path):
    # safe_load refuses python tags; an override keeps such a value as a plain string, never runs it
    cfg = load_config(None, ["model.path=!!python/object/apply:os.system ['touch pwned']"])
    assert cfg.model.path.startswith("!!python")
    assert parse_override("a=!!python/name:os.system")[1] == "!!python/name:os.system"
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model: !!python/object/apply:os.system ['touch pwned']\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(recipe, [])
    assert apply_overrides({}, ["a.b=1"]) == {"a": {"b": 1}}
    assert yaml.safe_load("1") == 1


def test_tool_call_parser_never_raises():
    from rlvr.rollout.format import CALL_CLOSE, CALL_OPEN, MalformedCall, ToolCall, parse_tool_calls

    # random text, and random text wrapped in (possibly unbalanced) call tags so the JSON path is reached
    framed = st.tuples(TEXT, st.sampled_from(["", CALL_OPEN]), TEXT, st.sampled_from(["", CALL_CLOSE]), TEXT)

    @FAST
    @given(st.one_of(TEXT, framed.map("".join)))
    def check(text):
        calls = parse_tool_calls(text)
        assert all(isinstance(c, (ToolCall, MalformedCall)) for c in calls)
        assert len(calls) <= text.count(CALL_OPEN)

    check()
    # found by the fuzzer: integers past Python's digit limit and deep nesting raise ValueError / RecursionError
    for body in ("9" * 5000, "[" * 100_000, '{"name": "x", "arguments": "' + "9" * 5000 + '"}'):
        assert isinstance(parse_tool_calls(CALL_OPEN + body + CALL_CLOSE)[0], MalformedCall)
    good = parse_tool_calls(CALL_OPEN + '{"name": "calculator", "arguments": {"expression": "1+2"}}' + CALL_CLOSE)
    assert isinstance(good[0], ToolCall) and good[0].name == "calculator"
