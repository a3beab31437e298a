"""Every metric rlvr logs is declared in rlvr.metrics_catalog (the source of docs/reference/metrics.md)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from rlvr.metrics_catalog import EVAL_RESULTS, METRICS, describe, entries

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "rlvr"

# Keys a learner puts in its per-micro-batch stats and pops before they reach metrics.jsonl (Learner.update).
INTERNAL = {"logprob_gap_sum", "logprob_gap_tokens"}
# Files whose metric keys get a prefix before they are logged: the asynchronous pipeline's, under async/.
PREFIXES = {"trainer/async_loop.py": "async/"}
METRIC_DICTS = {"metrics", "stats"}
# Files whose `metrics`/`stats` dicts are not metrics.jsonl lines: a sweep's per-run summary (summary.json).
NOT_LOGGED = {"trainer/sweep.py"}


# -- (a) a real run ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """Two steps of `rlvr train` on the built-in model, with an evaluation every step and after training."""
    import rlvr

    run_dir = tmp_path_factory.mktemp("metrics_catalog") / "run"
    return rlvr.train(None, ["model.path=builtin", "train.steps=2", "train.prompts_per_step=2", "rollout.n=4",
                             "eval.every=1", "eval.after=true", "eval.n=2", "eval.ks=[1,2]", "eval.size=4",
                             "logging.progress=false", f"run.dir={run_dir}"])


def test_every_key_a_real_run_logs_is_declared(tiny_run):
    lines = [json.loads(line) for line in (tiny_run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    keys = {k for line in lines for k in line}
    assert len(lines) == 2 and {"step", "reward_mean", "pg_loss", "grad_norm", "step_s"} <= keys
    assert any(k.startswith("eval/pass@") for k in keys), "eval.every=1 should log eval/ keys at step 1"
    missing = sorted(k for k in keys if describe(k, "metrics") is None)
    assert not missing, f"logged but not declared in src/rlvr/metrics_catalog.py: {missing}"


def test_every_key_of_an_evaluation_result_is_declared(tiny_run):
    result = json.loads((tiny_run / "eval_after.json").read_text())
    assert {"pass@k", "accuracy", "mean_length", "truncated_frac"} <= set(result)
    missing = sorted(k for k in result if describe(k, "eval") is None)
    assert not missing, f"evaluation-result keys not declared in src/rlvr/metrics_catalog.py: {missing}"


# -- (b) the source ----------------------------------------------------------------------------------------


def _key_pattern(node: ast.expr) -> str | None:
    """A regex for a dict key in the source: a string literal exactly, an f-string with `.+` for each hole;
    None for anything else (a variable, a call)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return re.escape(node.value)
    if isinstance(node, ast.JoinedStr):
        return "".join(re.escape(v.value) if isinstance(v, ast.Constant) else ".+" for v in node.values)
    return None


def _is_metric_dict(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id in METRIC_DICTS


def source_keys(path: Path) -> list[tuple[int, str]]:
    """(line, key regex) of every key written into a dict named `metrics` or `stats` in one file:

        metrics = {"key": ...}        metrics: dict[str, float] = {...}
        metrics["key"] = ...          metrics[f"reward/{name}"] = ...
        metrics.update(key=...)       metrics.update({"key": ...})        (the same with `stats`)

    Limits: it reads the syntax, not the data flow. Keys built elsewhere and merged in (`**learned`,
    `metrics.update(reward_fn.last_metrics)`, a dict comprehension, a helper's return value such as
    sampling_metrics or agent_metrics), dicts under other names (`out`, `extra`) and keys a caller later
    prefixes (other than PREFIXES) or drops (INTERNAL) are not seen; test_every_key_a_real_run_logs_is_declared
    covers what a default run logs of those."""
    tree = ast.parse(path.read_text())
    found: list[tuple[int, str]] = []

    def dict_keys(d: ast.Dict) -> None:
        for k in d.keys:
            if k is not None and (pat := _key_pattern(k)) is not None:
                found.append((k.lineno, pat))

    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if _is_metric_dict(t) and isinstance(node.value, ast.Dict):
                    dict_keys(node.value)
                if isinstance(t, ast.Subscript) and _is_metric_dict(t.value):
                    if (pat := _key_pattern(t.slice)) is not None:
                        found.append((t.lineno, pat))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update" \
                and _is_metric_dict(node.func.value):
            for kw in node.keywords:
                if kw.arg is not None:
                    found.append((node.lineno, re.escape(kw.arg)))
            for arg in node.args:
                if isinstance(arg, ast.Dict):
                    dict_keys(arg)
    return found


def _declared(pattern: str) -> bool:
    """Whether a source key (a regex, `.+` for an f-string's holes) matches a declared key: an exact one that the
    regex matches, or a pattern whose example (each `{...}` as `x`) the regex matches or whose regex matches the
    source key's own example."""
    source = re.compile(pattern + r"\Z")
    example = pattern.replace(".+", "x").replace("\\", "")
    for e in METRICS:
        if e.regex is None:
            if source.match(e.key):
                return True
        elif source.match(re.sub(r"\{[^}]*\}", "x", e.key)) or e.regex.match(example):
            return True
    return False


def test_every_metric_key_in_the_learner_and_trainer_source_is_declared():
    files = sorted([*(SRC / "learner").glob("*.py"), *(SRC / "trainer").glob("*.py")])
    seen, missing = 0, []
    for path in files:
        rel = path.relative_to(SRC).as_posix()
        if rel in NOT_LOGGED:
            continue
        prefix = re.escape(PREFIXES.get(rel, ""))
        for line, pattern in source_keys(path):
            if pattern.replace("\\", "") in INTERNAL:
                continue
            seen += 1
            if not _declared(prefix + pattern):
                missing.append(f"{rel}:{line} {prefix + pattern}")
    assert seen > 40, f"the source scan found only {seen} keys: has the code's shape changed?"
    assert not missing, f"metric keys in the source without a declaration in src/rlvr/metrics_catalog.py: {missing}"


def test_the_source_scan_sees_the_forms_it_claims(tmp_path):
    path = tmp_path / "m.py"
    path.write_text('metrics = {"a": 1}\nstats: dict = {"b": 2}\nmetrics["c"] = 3\nmetrics[f"d/{x}"] = 4\n'
                    'stats.update(e=5)\nmetrics.update({"f": 6})\nout = {"ignored": 7}\n')
    assert [p for _, p in source_keys(path)] == ["a", "b", "c", "d/.+", "e", "f"]


# -- (c) describe ------------------------------------------------------------------------------------------


def test_describe_exact_keys():
    assert describe("reward_mean").area == "rollout"
    assert describe("grad_norm").unit == "norm"
    assert describe("step_s").unit == "seconds"
    assert describe("sampling/groups_kept").key == "sampling/groups_kept"
    assert describe("no_such_metric") is None
    assert describe("reward_mean", "eval") is None


def test_describe_patterns():
    assert describe("reward/correctness").key == "reward/{component}"
    assert describe("reward/correctness/verifier_timeouts").key == "reward/{component}/verifier_timeouts"
    assert describe("reward/python/my_fn").key == "reward/{component}/{stat}"
    assert describe("eval/pass@4").key == "eval/pass@{k}"
    assert describe("eval/maj@8").key == "eval/maj@{k}"
    assert describe("async/staleness_2").key == "async/staleness_{d}"
    assert describe("agent/truncated/max_turns").key == "agent/truncated/{reason}"
    assert describe("by_difficulty", "eval").key == "by_{field}"
    assert describe("reward/a/b/c") is None  # a placeholder is one path segment


def test_describe_prefers_the_table_asked_for():
    assert describe("accuracy").area == "rollout"  # metrics.jsonl first
    assert describe("accuracy", "eval").area == "eval_result"
    assert describe("pass@k", "eval").unit.startswith("{k:")
    with pytest.raises(ValueError):
        describe("accuracy", "nowhere")


def test_every_entry_is_complete_and_unique():
    for table in (METRICS, EVAL_RESULTS):
        keys = [e.key for e in table]
        assert len(keys) == len(set(keys)), "a key declared twice"
    for e in entries():
        assert e.description.strip() and e.unit.strip() and e.area, e.key
        assert "\n" not in e.description, e.key
