"""Answer extraction, equivalence checks, and the weighted reward function with its failure handling."""

from __future__ import annotations

import pytest

from rlvr.rewards import REWARDS, CorrectnessReward, RewardFunction, RewardOutput
from rlvr.rewards.verifiers import (
    exact_equal,
    extract_answer,
    math_equal,
    normalize_text,
    numbers_equal,
    parse_number,
)
from rlvr.tasks import VerifyResult
from rlvr.types import Group, Sample, TaskRecord

# -- extraction -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    (r"so \boxed{\frac{1}{2}} done", r"\frac{1}{2}"),
    (r"\boxed{ {a}+{b} }", "{a}+{b}"),
    (r"\boxed{1} first, then \boxed{2}", "2"),
    ("<answer> 42 </answer>", "42"),
    ("<answer>1</answer> no, <ANSWER>2</ANSWER>", "2"),
    ("<answer>\nmulti\nline\n</answer>", "multi\nline"),
    ("work\nAnswer: 7\nthanks", "7"),
    ("1+7=8;8|2+9=11;18|A:5218", "5218"),
    ("Final answer: 3/4", "3/4"),
    ("final answer = 10", "10"),
    ("The answer is: 9", "9"),
    ("we get 3 and then 12.5 in the end", "12.5"),
    ("it is -7", "-7"),
    ("Answer:\n42", "42"),  # empty answer line falls through to the last number
    ("nothing to see", None),
    ("", None),
    (r"\boxed{unclosed", None),
])
def test_extract_answer_auto(text: str, expected: str | None) -> None:
    assert extract_answer(text) == expected


def test_extract_answer_priority_in_auto() -> None:
    text = r"<answer>2</answer> Answer: 3 \boxed{1} 4"
    assert extract_answer(text) == "1"  # boxed wins
    assert extract_answer("<answer>2</answer> Answer: 3 then 4") == "2"  # then the tag
    assert extract_answer("Answer: 3 then 4") == "3 then 4"  # then the answer line
    assert extract_answer("QA:5 then 6") == "6"  # 'A:' inside a word is no answer marker


def test_extract_answer_modes_restrict() -> None:
    text = r"\boxed{1} <answer>2</answer> Answer: 3 and 4"
    assert extract_answer(text, "boxed") == "1"
    assert extract_answer(text, "answer_tag") == "2"
    assert extract_answer(text, "answer_line") == "3 and 4"
    assert extract_answer(text, "last_number") == "4"
    assert extract_answer("  raw text \n", "none") == "raw text"

    assert extract_answer("Answer: 3", "boxed") is None
    assert extract_answer(r"\boxed{3}", "answer_tag") is None
    assert extract_answer("<answer>3</answer>", "answer_line") is None
    assert extract_answer("Answer: three", "last_number") is None


@pytest.mark.parametrize(("text", "value"), [
    ("1,234", 1234.0),
    ("3.", 3.0),
    ("-2", -2.0),
    ("  42 ", 42.0),
    ("0.25", 0.25),
    (".5", 0.5),
    ("$5", 5.0),
    ("1e3", 1000.0),
])
def test_parse_number_accepts(text: str, value: float) -> None:
    assert parse_number(text) == value


@pytest.mark.parametrize("text", ["abc", "", "1/2", "--2", "1.2.3", "12abc", "x=3"])
def test_parse_number_rejects(text: str) -> None:
    assert parse_number(text) is None


def test_numbers_equal() -> None:
    assert numbers_equal("1,000", "1000") == (True, "correct")
    assert numbers_equal("2.0", "2")[0] is True
    assert numbers_equal("1.0000000001", "1")[0] is True
    ok, reason = numbers_equal("2", "3")
    assert ok is False and "got 2" in reason and "expected 3" in reason
    ok, reason = numbers_equal("two", "2")
    assert ok is False and "'two'" in reason and "not a number" in reason
    ok, reason = numbers_equal("2", "n/a")
    assert ok is False and "reference" in reason


def test_exact_equal_normalizes() -> None:
    assert normalize_text("  New   York.  ") == "new york"
    assert exact_equal("  Paris. ", "paris") == (True, "correct")
    assert exact_equal("New\nYork", "new york")[0] is True
    ok, reason = exact_equal("Rome", "Paris")
    assert ok is False and "'Rome'" in reason and "'Paris'" in reason


@pytest.mark.parametrize(("pred", "gold", "equal"), [
    ("1/2", "0.5", True),
    ("0.5", "1/2", True),
    (r"\frac{1}{2}", "0.5", True),
    (r"\frac{2}{4}", r"\frac{1}{2}", True),
    ("2x+1", "1+2x", True),
    ("3", "4", False),
    (r"\sqrt{2}", "1.41", False),
    ("x", "y", False),
])
def test_math_equal(pred: str, gold: str, equal: bool) -> None:
    ok, reason = math_equal(pred, gold)
    assert ok is equal
    assert (reason == "correct") is equal


# -- the reward function --------------------------------------------------------------------------------


def make_group(texts: list[str], answer: str = "4") -> Group:
    record = TaskRecord(id="g0", question="2+2", answer=answer)
    samples = [Sample(prompt_ids=[1, 2], response_ids=[3, 4, 5], text=t) for t in texts]
    return Group(record=record, prompt_ids=[1, 2], samples=samples)


class FakeTask:
    """Correct when the response equals the answer; the verifier crashes on 'boom'."""

    def verify(self, response: str, record: TaskRecord) -> VerifyResult:
        if response == "boom":
            raise ZeroDivisionError("verifier fell over")
        ok = response == record.answer
        return VerifyResult(float(ok), ok, "correct" if ok else "wrong")


class LengthBonus:
    """A shaping component: 0.1 per character, no opinion on correctness."""

    def __call__(self, group: Group, task) -> list[RewardOutput]:
        return [RewardOutput(0.1 * len(s.text), "length") for s in group.samples]


class ShortChanged:
    """Returns one output too few."""

    def __call__(self, group: Group, task) -> list[RewardOutput]:
        return [RewardOutput(1.0, "ok")] * (len(group.samples) - 1)


class Raises:
    def __call__(self, group: Group, task) -> list[RewardOutput]:
        raise RuntimeError("component crashed")


class FailsQuietly:
    """Marks a sample failed with a reason that has no 'kind: detail' shape."""

    def __call__(self, group: Group, task) -> list[RewardOutput]:
        return [RewardOutput(0.0, "timeout", None, failed=True) for _ in group.samples]


def test_correctness_reward_turns_verifier_error_into_zero() -> None:
    group = make_group(["4", "boom", "5"])
    fn = RewardFunction([("correctness", 1.0, CorrectnessReward())])
    fn([group], FakeTask())
    good, bad, wrong = group.samples
    assert (good.reward, good.correct, good.rewards) == (1.0, True, {"correctness": 1.0})
    assert (bad.reward, bad.correct, bad.rewards) == (0.0, False, {"correctness": 0.0})
    assert "verifier error" in bad.meta["reasons"]["correctness"]
    assert "ZeroDivisionError" in bad.meta["reasons"]["correctness"]
    assert "verifier fell over" in bad.meta["reasons"]["correctness"]
    assert (wrong.reward, wrong.correct) == (0.0, False)
    assert wrong.meta["reasons"]["correctness"] == "wrong"
    assert good.meta["reasons"]["correctness"] == "correct"
    assert fn.failures == {"correctness: ZeroDivisionError": 1}

    # the counter accumulates across calls
    fn([make_group(["boom", "boom"])], FakeTask())
    assert fn.failures["correctness: ZeroDivisionError"] == 3


def test_weighted_sum_of_components() -> None:
    groups = [make_group(["4", "44", "x"]), make_group(["4"])]
    fn = RewardFunction([("correctness", 2.0, CorrectnessReward()), ("length", 0.5, LengthBonus())])
    fn(groups, FakeTask())
    expected = {"4": (1.0, 0.1), "44": (0.0, 0.2), "x": (0.0, 0.1)}
    for group in groups:
        for s in group.samples:
            corr, length = expected[s.text]
            assert s.rewards == pytest.approx({"correctness": corr, "length": length})
            assert s.reward == pytest.approx(2.0 * corr + 0.5 * length)
            assert s.meta["reasons"] == {"correctness": "correct" if corr else "wrong", "length": "length"}
    # a component with no opinion (correct=None) leaves the verifier's verdict alone
    assert [s.correct for s in groups[0].samples] == [True, False, False]
    assert groups[0].rewards == pytest.approx([2.05, 0.1, 0.05])
    assert not fn.failures


def test_scoring_twice_does_not_accumulate() -> None:
    group = make_group(["4", "x"])
    fn = RewardFunction([("correctness", 1.0, CorrectnessReward()), ("length", 1.0, LengthBonus())])
    fn([group], FakeTask())
    first = [s.reward for s in group.samples]
    fn([group], FakeTask())
    assert [s.reward for s in group.samples] == first


def test_component_with_wrong_output_count_gives_zeros_with_reason() -> None:
    group = make_group(["4", "4", "x"])
    fn = RewardFunction([("correctness", 1.0, CorrectnessReward()), ("short", 1.0, ShortChanged())])
    fn([group], FakeTask())  # must not raise
    for s in group.samples:
        assert s.rewards["short"] == 0.0
        reason = s.meta["reasons"]["short"]
        assert "reward error" in reason and "2 rewards for 3 samples" in reason
        assert s.reward == pytest.approx(s.rewards["correctness"])
    assert fn.failures == {"short: ValueError": 3}


def test_component_that_raises_gives_zeros_with_reason() -> None:
    group = make_group(["4", "x"])
    fn = RewardFunction([("crash", 1.0, Raises()), ("length", 1.0, LengthBonus())])
    fn([group], FakeTask())
    for s in group.samples:
        assert s.rewards["crash"] == 0.0
        assert "RuntimeError" in s.meta["reasons"]["crash"] and "component crashed" in s.meta["reasons"]["crash"]
        assert s.reward == pytest.approx(0.1 * len(s.text))
    assert fn.failures == {"crash: RuntimeError": 2}


def test_failing_shaping_component_keeps_the_verifier_verdict() -> None:
    """`Sample.correct` is the verifier's verdict; a crash in another component must not overwrite it."""
    group = make_group(["4", "x"])
    fn = RewardFunction([("correctness", 1.0, CorrectnessReward()), ("crash", 0.1, Raises())])
    fn([group], FakeTask())
    assert [s.rewards["correctness"] for s in group.samples] == [1.0, 0.0]
    assert [s.correct for s in group.samples] == [True, False]


def test_failed_output_with_plain_reason_does_not_crash() -> None:
    """A component may mark a sample failed with any reason text; the failure counter must cope."""
    group = make_group(["4", "x"])
    fn = RewardFunction([("correctness", 1.0, CorrectnessReward()), ("sandbox", 1.0, FailsQuietly())])
    fn([group], FakeTask())
    assert [s.reward for s in group.samples] == [1.0, 0.0]
    assert [s.meta["reasons"]["sandbox"] for s in group.samples] == ["timeout", "timeout"]
    assert sum(fn.failures.values()) == 2





class NonFinite:
    """NaN for 'nan', +inf for 'inf', None for 'none', else 0.5."""

    def __call__(self, group: Group, task) -> list[RewardOutput]:
        table = {"nan": float("nan"), "inf": float("inf"), "none": None}
        return [RewardOutput(table.get(s.text, 0.5), "shaped") for s in group.samples]


def test_a_non_finite_component_scores_only_its_sample_zero_and_excludes_it(caplog) -> None:
    import logging

    group = make_group(["4", "nan", "x", "inf", "none"])
    fn = RewardFunction([("correctness", 1.0, CorrectnessReward(workers=0)), ("shape", 2.0, NonFinite())])
    with caplog.at_level(logging.WARNING, logger="rlvr.rewards.base"):
        fn([group], FakeTask())
    good, nan, wrong, inf, none = group.samples
    assert (good.reward, good.excluded) == (pytest.approx(1.0 + 2 * 0.5), False)
    assert (wrong.reward, wrong.excluded) == (pytest.approx(2 * 0.5), False)
    for bad, shown in ((nan, "nan"), (inf, "inf"), (none, "None")):
        assert bad.reward == 0.0 and bad.excluded
        assert bad.rewards == {"correctness": 0.0, "shape": 0.0}  # the metrics never see NaN
        assert bad.meta["non_finite_reward"] == ["shape"]
        assert bad.meta["reasons"]["shape"] == f"non-finite reward {shown} (shaped)"
        assert bad.meta["reasons"]["correctness"] == "wrong"
    assert fn.failures == {"shape: non-finite": 3}
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 3
    assert "reward 'shape' returned nan for sample 1 of prompt g0 (response 'nan')" in logged[0]
    assert "left out of its group's statistics" in logged[0]


def test_a_sample_rescored_finite_is_no_longer_excluded() -> None:
    group = make_group(["nan"])
    fn = RewardFunction([("shape", 1.0, NonFinite())])
    fn([group], FakeTask())
    assert group.samples[0].excluded
    group.samples[0].text = "ok"
    fn([group], FakeTask())
    assert not group.samples[0].excluded and group.samples[0].reward == 0.5


def test_an_overflowing_weighted_sum_excludes_the_sample() -> None:
    group = make_group(["4", "x"])
    fn = RewardFunction([("correctness", 1e308, CorrectnessReward(workers=0)),
                         ("again", 1e308, CorrectnessReward(workers=0))])
    fn([group], FakeTask())
    assert group.samples[0].meta["non_finite_reward"] == ["sum"] and group.samples[0].reward == 0.0
    assert not group.samples[1].excluded


def test_non_finite_metrics_count_the_step_samples() -> None:
    from rlvr.rewards import non_finite_metrics

    groups = [make_group(["nan", "4", "4"]), make_group(["inf"])]
    RewardFunction([("shape", 1.0, NonFinite())])(groups, FakeTask())
    assert non_finite_metrics(groups) == {"reward_non_finite": 2.0, "reward_non_finite_frac": 0.5}


def test_from_config_uses_registered_components() -> None:
    name = f"test_rewards_bonus_{id(object())}"

    @REWARDS.register(name)
    class Bonus:
        def __init__(self, *, amount: float = 1.0):
            self.amount = amount

        def __call__(self, group: Group, task) -> list[RewardOutput]:
            return [RewardOutput(self.amount, "bonus") for _ in group.samples]

    from rlvr.config import RewardSpec

    specs = [RewardSpec(name="correctness", weight=1.0), RewardSpec(name=name, weight=0.5, amount=0.4)]
    fn = RewardFunction.from_config(specs)
    assert [(n, w) for n, w, _ in fn.components] == [("correctness", 1.0), (name, 0.5)]
    assert isinstance(fn.components[1][2], Bonus) and fn.components[1][2].amount == 0.4
    group = make_group(["4", "x"])
    fn([group], FakeTask())
    assert [s.reward for s in group.samples] == pytest.approx([1.2, 0.2])
    assert all(s.rewards[name] == pytest.approx(0.4) for s in group.samples)

    from rlvr.registry import RegistryError

    with pytest.raises(RegistryError, match="amout"):
        RewardFunction.from_config([RewardSpec(name=name, amout=2)])


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="the sandbox targets Linux")
def test_reward_hacking_telemetry_counts_blocked_and_anomalous_code_samples() -> None:
    from rlvr.tasks import build_task
    from rlvr.tasks.code import synthetic_problem

    task = build_task("code", {"train_size": 4, "eval_size": 2})
    record = synthetic_problem(0, "telemetry")
    good = f"```python\n{record.meta['solution']}```"
    fake = "```python\nclass Any:\n    def __eq__(self, other):\n        return True\ndef f(*a):\n    return Any()\n```"
    probe = "```python\nimport socket\nsocket.socket()\n```"
    texts = [good, fake, probe, "```python\ndef f(*a):\n    return 0\n```"]
    group = Group(record, [1], [Sample(prompt_ids=[1], response_ids=[2], text=t) for t in texts])
    component = CorrectnessReward(workers=2)
    fn = RewardFunction([("correctness", 1.0, component)])
    try:
        fn([group], task)
    finally:
        component.close()
    assert [s.reward for s in group.samples] == [1.0, 0.0, 0.0, 0.0]
    assert [s.meta.get("verifier_flag") for s in group.samples] == [None, "anomaly", "blocked", None]
    m = fn.last_metrics
    assert m["reward/correctness/anomaly_frac"] == 0.25 and m["reward/correctness/blocked_frac"] == 0.25
    assert m["reward/correctness/hack_suspect_frac"] == 0.5
    fn([make_group(["4"])], FakeTask())  # a step without code samples logs no telemetry
    assert "reward/correctness/anomaly_frac" not in fn.last_metrics
