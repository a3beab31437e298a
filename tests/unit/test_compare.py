"""maj@k against brute force, evaluate() recording answers and maj@k, and the base-vs-trained comparison."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.eval.compare import (
    CompareError,
    compare_models,
    comparison_markdown,
    find_crossover,
    powers_of_two,
    run_compare,
    write_comparison,
)
from rlvr.eval.evaluate import evaluate, short_answer, summarize
from rlvr.eval.passk import best_of_k, maj_at_k, pass_at_k
from rlvr.rollout.base import RolloutEngine, SamplingParams
from rlvr.tasks.base import VerifyResult
from rlvr.types import Sample, TaskRecord

# ---------------------------------------------------------------------------------------------------- maj@k


def brute_force_maj(answers, flags, k):
    """Average over every k-subset: the fraction of tied top classes that are correct; abstentions never win."""
    correct = {a.strip() for a, f in zip(answers, flags) if f and a and a.strip()}
    total, subsets = Fraction(0), 0
    for subset in itertools.combinations(range(len(answers)), k):
        subsets += 1
        votes = Counter(answers[i].strip() for i in subset if answers[i] and answers[i].strip())
        if votes:
            top = max(votes.values())
            winners = [a for a, v in votes.items() if v == top]
            total += Fraction(sum(a in correct for a in winners), len(winners))
    return float(total / subsets)


answer_lists = st.lists(st.sampled_from([None, "", "1", "2", " 2 ", "3", "4"]), min_size=1, max_size=9)


@settings(max_examples=120, deadline=None)
@given(answer_lists, st.data())
def test_maj_at_k_matches_brute_force(answers, data):
    right = data.draw(st.sampled_from(["2", "3"]))
    flags = [a is not None and a.strip() == right for a in answers]
    k = data.draw(st.integers(1, len(answers)))
    assert maj_at_k(answers, flags, k) == pytest.approx(brute_force_maj(answers, flags, k), abs=1e-12)


def test_maj_at_k_edges():
    answers = ["7", "7", "3", None]
    flags = [True, True, False, False]
    assert maj_at_k(answers, flags, 1) == pytest.approx(0.5)  # maj@1 = fraction of correct samples
    assert maj_at_k(answers, flags, 4) == 1.0  # plain majority over all n
    assert maj_at_k(["3", "3", "7"], [False, False, True], 3) == 0.0
    assert maj_at_k(["7", "3"], [True, False], 2) == pytest.approx(0.5)  # a 1-1 tie is a coin flip
    assert maj_at_k([None, None, "7"], [False, False, True], 3) == 1.0  # abstentions never win
    assert maj_at_k([None, None], [False, False], 1) == 0.0
    with pytest.raises(ValueError):
        maj_at_k(["1"], [True], 2)
    with pytest.raises(ValueError):
        maj_at_k(["1", "2"], [True], 1)


def test_maj_at_k_monte_carlo_agrees_with_exact():
    answers = ["a"] * 9 + ["b"] * 7 + [None] * 4 + [str(i) for i in range(20)]
    flags = [a == "a" for a in answers]
    for k in (3, 8):
        exact = maj_at_k(answers, flags, k, method="exact")
        assert maj_at_k(answers, flags, k, method="mc", draws=20_000, seed=1) == pytest.approx(exact, abs=0.015)
    assert maj_at_k(answers, flags, 5, method="mc", seed=3) == maj_at_k(answers, flags, 5, method="mc", seed=3)


def test_maj_at_k_large_n_is_exact_and_fast():
    answers = ["a"] * 60 + ["b"] * 50 + [None] * 20 + [str(i) for i in range(126)]
    flags = [a == "b" for a in answers]
    values = [maj_at_k(answers, flags, k) for k in powers_of_two(256)]
    assert values[0] == pytest.approx(50 / 256)
    assert values[-1] == 0.0  # with all 256, "a" wins
    assert all(0.0 <= v <= 1.0 for v in values)


# ---------------------------------------------------------------------------------------------------- rm@k


def brute_force_best_of(scores, flags, k):
    """Average over every k-subset: the share of correct samples among those tied at the subset's top score."""
    total, subsets = Fraction(0), 0
    for subset in itertools.combinations(range(len(scores)), k):
        subsets += 1
        top = max(scores[i] for i in subset)
        tied = [i for i in subset if scores[i] == top]
        total += Fraction(sum(flags[i] for i in tied), len(tied))
    return float(total / subsets)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([-1.5, 0.0, 0.25, 2.0, 7.0]), st.booleans()), min_size=1, max_size=9),
       st.data())
def test_best_of_k_matches_brute_force(pairs, data):
    scores, flags = [s for s, _ in pairs], [f for _, f in pairs]
    k = data.draw(st.integers(1, len(pairs)))
    assert best_of_k(scores, flags, k) == pytest.approx(brute_force_best_of(scores, flags, k), abs=1e-12)


def test_best_of_k_by_hand():
    # scores 3 > 2 > 1, the top one wrong: k=2 picks a right one only from the subset {2, 1} (1 of 3)
    assert best_of_k([3.0, 2.0, 1.0], [False, True, True], 2) == pytest.approx(1 / 3)
    assert best_of_k([3.0, 2.0, 1.0], [False, True, True], 1) == pytest.approx(2 / 3)  # rm@1 = accuracy
    assert best_of_k([3.0, 2.0, 1.0], [False, True, True], 3) == 0.0  # rm@n = the argmax's correctness
    assert best_of_k([1.0, 1.0, 0.0], [True, False, True], 3) == pytest.approx(0.5)  # a tied top: a coin flip
    assert best_of_k([float("nan"), 0.0], [True, False], 2) == 0.0  # a non-finite score ranks last
    assert best_of_k([5.0], [True], 1) == 1.0
    with pytest.raises(ValueError, match="1 <= k <= n"):
        best_of_k([1.0], [True], 2)
    with pytest.raises(ValueError, match="flags"):
        best_of_k([1.0, 2.0], [True], 1)


# ------------------------------------------------------------------------------------------- evaluate()


class CannedEngine(RolloutEngine):
    """Returns fixed responses per prompt (keyed by the prompt's first token id)."""

    def __init__(self, responses: dict[int, list[str]]):
        self.responses = responses

    def generate(self, prompts, params):
        return [[Sample(prompt_ids=list(p), response_ids=[1] * len(text), text=text)
                 for text in self.responses[p[0]][: params.n]] for p in prompts]


class Renderer:
    def render(self, record):
        return [int(record.id)], record.question


class ExactTask:
    def verify(self, response, record):
        found = response.split("=")[-1].strip() if "=" in response else None
        if found == "boom":
            raise RuntimeError("verifier bug")
        return VerifyResult(float(found == record.answer), found == record.answer, "", found)


def test_evaluate_records_answers_and_maj_at_k():
    records = [TaskRecord("0", "1+1", "2", difficulty=1), TaskRecord("1", "2+2", "4", difficulty=2)]
    engine = CannedEngine({0: ["x=2", "x=3", "x=3", "x=2", "x=3", "nothing"],
                           1: ["y=4", "y=4", "y=5", "y=boom", "y=4", "y=1"]})
    result = evaluate(engine, Renderer(), ExactTask(), records, SamplingParams(n=6), ks=[1, 3, 6])
    p0, p1 = result["problems"]
    assert p0["answers"] == ["2", "3", "3", "2", "3", None]
    assert p0["sample_correct"] == [True, False, False, True, False, False]
    assert p1["answers"][3] is None and p1["correct"] == 3  # the verifier error costs one sample
    for p in (p0, p1):
        for k in (1, 3, 6):
            assert p["maj@k"][str(k)] == pytest.approx(brute_force_maj(p["answers"], p["sample_correct"], k))
    assert p0["maj@k"]["6"] == 0.0 and p1["maj@k"]["6"] == 1.0
    assert result["maj@k"]["6"] == pytest.approx(0.5)
    assert result["maj@k"]["1"] == pytest.approx(result["pass@k"]["1"])
    assert result["by_difficulty"]["2"]["maj@k"]["6"] == 1.0
    json.dumps(result)  # stays serialisable


def test_evaluate_with_a_scorer_reports_rm_at_k_beside_maj_at_k():
    records = [TaskRecord("0", "1+1", "2", difficulty=1), TaskRecord("1", "2+2", "4", difficulty=2)]
    engine = CannedEngine({0: ["x=2", "x=3", "x=3", "x=2"], 1: ["y=4", "y=5", "y=5", "y=5"]})
    seen = []

    def scorer(record, responses):  # the answers 2 and 4 (right) score 10, others their position
        seen.append((record.id, list(responses)))
        return [10.0 if r.endswith(("=2", "=4")) else float(i) for i, r in enumerate(responses)]

    result = evaluate(engine, Renderer(), ExactTask(), records, SamplingParams(n=4), ks=[1, 4], scorer=scorer)
    assert [r for r, _ in seen] == ["0", "1"] and seen[0][1] == ["x=2", "x=3", "x=3", "x=2"]
    p0, p1 = result["problems"]
    assert p0["rm_scores"] == [10.0, 1.0, 2.0, 10.0] and p1["rm_scores"] == [10.0, 1.0, 2.0, 3.0]
    assert p0["rm@k"]["4"] == 1.0 and p1["rm@k"]["4"] == 1.0  # the scorer picks the right answer in both
    assert p1["maj@k"]["4"] == 0.0  # where the vote picks the commonest, wrong one
    assert result["rm@k"] == {"1": pytest.approx(result["pass@k"]["1"]), "4": 1.0}
    assert result["by_difficulty"]["2"]["rm@k"]["4"] == 1.0
    from rlvr.trainer.evaluation import eval_summary

    assert eval_summary(result)["rm@4"] == 1.0
    plain = evaluate(engine, Renderer(), ExactTask(), records, SamplingParams(n=4), ks=[1, 4])
    assert "rm@k" not in plain and "rm_scores" not in plain["problems"][0]


class GradedTask:
    """A graded verifier, like vl_ground's IoU: the reward is the number after '=' / 10, correct at >= 0.5."""

    def verify(self, response, record):
        score = int(response.split("=")[-1]) / 10
        return VerifyResult(score, score >= 0.5, "", str(score))


def test_evaluate_reports_the_mean_graded_reward_beside_the_accuracy():
    records = [TaskRecord("0", "q", "a"), TaskRecord("1", "q", "a")]
    engine = CannedEngine({0: ["x=9", "x=4", "x=0"], 1: ["y=5", "y=2", "y=7"]})
    result = evaluate(engine, Renderer(), GradedTask(), records, SamplingParams(n=3), ks=[1])
    assert [p["reward_sum"] for p in result["problems"]] == [pytest.approx(1.3), pytest.approx(1.4)]
    assert result["mean_reward"] == pytest.approx((0.9 + 0.4 + 0.0 + 0.5 + 0.2 + 0.7) / 6)
    assert result["accuracy"] == pytest.approx(3 / 6)  # 0.9, 0.5, 0.7 pass the 0.5 threshold
    from rlvr.trainer.evaluation import eval_summary

    assert eval_summary(result)["mean_reward"] == pytest.approx(0.45)
    # a binary verifier's mean reward is its accuracy: not repeated in the summary line
    binary = evaluate(CannedEngine({0: ["x=a", "x=b"]}), Renderer(), ExactTask(), [TaskRecord("0", "q", "a")],
                      SamplingParams(n=2), ks=[1])
    assert binary["mean_reward"] == binary["accuracy"] == 0.5 and "mean_reward" not in eval_summary(binary)
    # results written before the field existed have no per-problem reward: no mean either
    assert "mean_reward" not in summarize([{"id": "a", "n": 2, "correct": 1, "truncated": 0}], [1], [3])


def test_summarize_without_answers_has_no_maj_and_recomputes_from_answers():
    old = [{"id": "a", "n": 2, "correct": 1, "truncated": 0}]
    assert "maj@k" not in summarize(old, [1], [3])
    new = [{"id": "a", "n": 3, "correct": 2, "truncated": 0, "answers": ["1", "1", "2"],
            "sample_correct": [True, True, False]}]
    assert summarize(new, [1, 3], [3])["maj@k"] == {"1": pytest.approx(2 / 3), "3": 1.0}


def test_long_answers_are_shortened_but_stay_distinct():
    a, b = "x" * 500 + "1", "x" * 500 + "2"
    assert len(short_answer(a)) <= 200 and short_answer(a) != short_answer(b)
    assert short_answer("42") == "42" and short_answer(None) is None


# ------------------------------------------------------------------------------------------- compare


def make_result(counts: dict[str, int], n: int, model: str) -> dict:
    return {"model": model, "n": n, "problems": [{"id": pid, "n": n, "correct": c} for pid, c in counts.items()]}


def test_powers_of_two():
    assert powers_of_two(1) == [1]
    assert powers_of_two(256) == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert powers_of_two(10) == [1, 2, 4, 8]


def test_crossover_when_base_covers_more():
    # Trained is sharp on two problems; base solves all four rarely. RL leads at k=1, base wins at large k.
    base = make_result({"p1": 2, "p2": 2, "p3": 2, "p4": 2}, 16, "base-model")
    trained = make_result({"p1": 15, "p2": 15, "p3": 0, "p4": 0}, 16, "rl-model")
    r = compare_models(base, trained)
    assert r["ks"] == [1, 2, 4, 8, 16] and r["n"] == 16
    for side, src in (("base", base), ("trained", trained)):
        for k in r["ks"]:
            want = sum(pass_at_k(16, p["correct"], k) for p in src["problems"]) / 4
            assert r["pass@k"][side][str(k)] == pytest.approx(want)
    assert r["leader"] == "trained"
    first_base_ahead = next(k for k in r["ks"] if r["pass@k"]["base"][str(k)] >= r["pass@k"]["trained"][str(k)])
    assert r["crossover_k"] == first_base_ahead == 8  # base: 24%, 45%, 77% at k=2, 4, 8; trained 50%
    cov = r["coverage"]
    assert cov["k"] == 16
    assert cov["base_only"] == {"count": 2, "ids": ["p3", "p4"]}
    assert cov["both"]["ids"] == ["p1", "p2"] and cov["trained_only"]["count"] == 0 and cov["neither"]["count"] == 0
    assert "Crossover" in comparison_markdown(r) and "`p3`" in comparison_markdown(r)


def test_no_crossover_when_trained_dominates():
    base = make_result({"a": 1, "b": 0, "c": 0}, 8, "base")
    trained = make_result({"a": 6, "b": 3, "c": 0}, 8, "rl")
    r = compare_models(base, trained)
    assert r["leader"] == "trained" and r["crossover_k"] is None
    assert r["coverage"]["trained_only"]["ids"] == ["b"] and r["coverage"]["neither"]["ids"] == ["c"]
    assert "No crossover" in comparison_markdown(r)


def test_crossover_the_other_way_and_ties():
    assert find_crossover([1, 2, 4], [0.5, 0.6, 0.7], [0.4, 0.6, 0.9]) == ("base", 2)
    assert find_crossover([1, 2, 4], [0.5, 0.5, 0.6], [0.5, 0.7, 0.6]) == ("trained", 4)  # tie at k=1
    assert find_crossover([1, 2], [0.5, 0.5], [0.5, 0.5]) == (None, None)


def test_mismatched_problems_are_refused_with_ids():
    with pytest.raises(CompareError, match="different problems.*'x'"):
        compare_models(make_result({"x": 1}, 4, "b"), make_result({"y": 1}, 4, "t"))
    with pytest.raises(CompareError, match="per-problem"):
        compare_models({"pass@k": {}}, make_result({"y": 1}, 4, "t"))


def test_write_comparison_and_run_compare_from_json(tmp_path):
    base = make_result({"p1": 2, "p2": 2, "p3": 2, "p4": 2}, 16, "base-model")
    trained = make_result({"p1": 15, "p2": 15, "p3": 0, "p4": 0}, 16, "rl-model")
    paths = write_comparison(compare_models(base, trained), tmp_path / "out")
    assert json.loads(paths["json"].read_text())["crossover_k"] == 8
    assert paths["markdown"].read_text().startswith("# pass@k")
    assert paths["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (tmp_path / "b.json").write_text(json.dumps(base))
    (tmp_path / "t.json").write_text(json.dumps(trained))
    r = run_compare(None, str(tmp_path / "b.json"), str(tmp_path / "t.json"), tmp_path / "cmp")
    assert r["names"]["trained"].endswith("t.json") and (tmp_path / "cmp" / "passk.png").exists()


def test_print_comparison_and_bad_files(tmp_path):
    from rlvr.eval.compare import load_result, print_comparison
    from rlvr.runtime import console

    r = compare_models(make_result({"a": 1, "b": 3}, 4, "base"), make_result({"a": 4, "b": 0}, 4, "rl"))
    with console.capture() as captured:
        print_comparison(r, tmp_path)
    out = captured.get()
    assert "pass@k on 2 held-out problems" in out and "base only 1" in out and "No crossover: base leads" in out
    with pytest.raises(CompareError, match="no evaluation result"):
        load_result(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(CompareError, match="not JSON"):
        load_result(tmp_path / "bad.json")


def test_select_model_must_be_a_reward_model(tmp_path):
    from rlvr.config import ConfigError, load_config
    from rlvr.eval.run import select_scorer

    assert select_scorer(load_config(None, []), None) is None
    # a causal LM would load with a random scoring head: refused, naming the key and the fix
    with pytest.raises(ConfigError, match=r"eval.select_model: .* is not a reward model .*rlvr rm"):
        select_scorer(load_config(None, ["eval.select_model=builtin-lab"]), None)
    with pytest.raises(Exception, match="eval.select_model"):
        select_scorer(load_config(None, [f"eval.select_model={tmp_path / 'missing'}"]), None)
