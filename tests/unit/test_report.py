"""The HTML run report without a browser: content, safe embedding of model output, missing files.

tests/e2e/test_report_browser.py opens the same kind of page in headless Chromium.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path

import pytest

from rlvr.eval.report import json_for_script, nice_ticks, svg_line_plot, write_report

PAYLOAD = "<script>alert(1)</script> & </script><!-- \u2028 \"quotes\" 'single'"


def fake_run(run_dir: Path, *, steps: int = 4, with_kl: bool = False) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    with (run_dir / "metrics.jsonl").open("w") as f:
        for s in range(1, steps + 1):
            row = {"step": s, "reward_mean": 0.2 * s, "accuracy": 0.1 * s, "entropy": 3.0 - 0.1 * s,
                   "response_length_mean": 10.0 + s, "clip_frac": 0.01, "rollout_tokens_per_s": 100.0 + s,
                   "train_tokens_per_s": 50.0 + s}
            if with_kl:
                row["kl"] = 0.001 * s
            if s % 2 == 0:
                row["eval/pass@1"] = 0.1 * s
            f.write(json.dumps(row) + "\n")
        f.write("{broken line\n")

    def ev(tag, p1, p4):
        return {"tag": tag, "num_prompts": 4, "n": 4, "temperature": 1.0, "pass@k": {"1": p1, "4": p4},
                "maj@k": {"1": p1, "4": p1 + 0.1}, "accuracy": p1, "mean_length": 12.5, "truncated_frac": 0.0,
                "by_difficulty": {"2": {"num_prompts": 2, "pass@k": {"1": p1 + 0.05, "4": p4}},
                                  "3": {"num_prompts": 2, "pass@k": {"1": p1 - 0.05, "4": p4}}},
                "problems": [{"id": "a", "n": 4, "correct": 1, "example": PAYLOAD}]}

    (run_dir / "eval_before.json").write_text(json.dumps(ev("before", 0.25, 0.5)))
    (run_dir / "eval_after.json").write_text(json.dumps(ev("after", 0.625, 0.75)))
    (run_dir / "config.yaml").write_text("run:\n  name: tiny-run\n  seed: 0\ntask:\n  name: addition <b>bold</b>\n")
    rows = [{"step": s, "group": 0, "sample": i, "prompt_id": "q0", "prompt": "What is 2+2?",
             "response": PAYLOAD if (s, i) == (2, 1) else f"The answer is {4 if i == 0 else 5}",
             "reward": float(i == 0), "rewards": {"correctness": float(i == 0)}, "reasons": {},
             "correct": i == 0, "advantage": 0.5 if i == 0 else [-0.5, float("nan")], "finish_reason": "stop",
             "length": 6, "policy_version": s - 1, "answer": "4", "difficulty": 2}
            for s in (1, 2) for i in range(2)]
    (run_dir / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run_dir


def embedded_data(page: str) -> list:
    m = re.search(r'<script type="application/json" id="rollout-data">(.*?)</script>', page, re.S)
    assert m, "no embedded rollout data"
    return json.loads(m.group(1))


def test_full_report(tmp_path):
    run = fake_run(tmp_path / "run")
    out = write_report(run)
    assert out == run / "report.html"
    page = out.read_text()
    assert "<h1>tiny-run</h1>" in page
    for plot in ("reward_mean", "accuracy", "entropy", "response_length_mean", "clip_frac", "rollout_tokens_per_s",
                 "eval_passk", "passk_vs_k"):
        assert f'data-plot="{plot}"' in page
    assert 'data-plot="kl"' not in page  # absent metrics are skipped, not drawn empty
    assert "Before vs after training" in page and "+37.5 pts" in page  # pass@1 25% -> 62.5%
    assert "By difficulty" in page and "maj@4" in page
    assert "addition &lt;b&gt;bold&lt;/b&gt;" in page  # config text is escaped
    assert "skipped 1 unreadable lines" in page


def test_model_output_is_embedded_as_escaped_json_only(tmp_path):
    page = write_report(fake_run(tmp_path / "run")).read_text()
    assert "<script>alert(1)" not in page and "<!--" not in page and "\u2028" not in page
    assert page.count("</script>") == 2  # the data tag's and the code's own end tags, nothing injected
    data = embedded_data(page)
    assert [d["response"] for d in data].count(PAYLOAD) == 1  # reads back unchanged
    assert data[1]["advantage"] == [-0.5, None]  # NaN would break JSON.parse


def test_page_is_self_contained_and_script_is_pinned_by_csp(tmp_path):
    page = write_report(fake_run(tmp_path / "run")).read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page)
    assert "<link" not in page and "@import" not in page
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page).group(1)
    assert "default-src 'none'" in csp
    script = re.search(r"<script>(.*?)</script>", page, re.S).group(1)
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    assert f"'sha256-{digest}'" in csp


def test_run_dir_with_missing_files(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    page = write_report(empty, tmp_path / "out" / "r.html").read_text()
    assert "metrics.jsonl not found" in page and "no eval_*.json" in page and "rollouts.jsonl not found" in page
    assert "config.yaml not found" in page and embedded_data(page) == []
    only_metrics = tmp_path / "m"
    only_metrics.mkdir()
    (only_metrics / "metrics.jsonl").write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.5}\n')
    (only_metrics / "eval_bad.json").write_text("not json")
    page = write_report(only_metrics).read_text()
    assert 'data-plot="pg_loss"' in page and "eval_bad.json: not an evaluation result" in page
    with pytest.raises(FileNotFoundError, match="not a directory"):
        write_report(tmp_path / "nope")


def test_many_rollouts_are_thinned_by_whole_steps(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"step": s, "group": 0, "sample": i, "prompt": "p", "response": "r", "correct": True}
            for s in range(1, 101) for i in range(4)]
    (run / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    page = write_report(run, max_rollouts=40).read_text()
    steps = sorted({d["step"] for d in embedded_data(page)})
    assert len(steps) == 10 and steps[0] == 1 and steps[-1] == 100
    assert "90 steps left out" in page


def test_json_for_script_and_plot_helpers():
    text = json_for_script({"a": "</script><script>x</script>", "b": float("inf"), "c": "&<>"})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"a": "</script><script>x</script>", "b": None, "c": "&<>"}
    assert nice_ticks(0, 1) == [0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert nice_ticks(1, 5, integer=True) == [1, 2, 3, 4, 5]
    assert svg_line_plot("empty", [("x", [(1, None)])]) == ""
    svg = svg_line_plot("t <x>", [("a", [(1, 0.5), (2, None), (3, 0.7)]), ("b", [(1, 1.0), (3, 2.0)])])
    assert svg.startswith('<svg class="plot"') and "t &lt;x&gt;" in svg and svg.count("<polyline") == 1


def test_reward_components_chart_holds_only_rewards_and_telemetry_has_its_own(tmp_path):
    run_dir = fake_run(tmp_path / "run")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()[:-1]]
    for row in rows:
        row.update({"reward/correctness": 0.5, "reward/format": 0.2, "reward/correctness/verify_calls_per_s": 4000.0,
                    "reward/correctness/verifier_timeouts": 3, "reward/correctness/blocked_frac": 0.05,
                    "reward/correctness/anomaly_frac": 0.1})
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    page = write_report(run_dir).read_text()
    components = re.search(r'<svg[^>]*data-plot="reward_components".*?</svg>', page, re.S)
    assert components, "no reward components chart"
    assert "correctness" in components.group(0) and "format" in components.group(0)
    assert "verify_calls_per_s" not in components.group(0) and "verifier_timeouts" not in components.group(0)
    assert "4000" not in components.group(0) and "4k" not in components.group(0)
    telemetry = re.search(r'<svg[^>]*data-plot="hack_telemetry".*?</svg>', page, re.S)
    assert telemetry and "blocked_frac" in telemetry.group(0) and "anomaly_frac" in telemetry.group(0)
    assert re.search(r'<svg[^>]*data-plot="verifier_throughput"', page)


def test_a_coevolving_reward_model_gets_its_accuracy_chart(tmp_path):
    run_dir = fake_run(tmp_path / "run")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()[:-1]]
    for i, row in enumerate(rows):
        row.update({"reward/correctness": 0.5, "reward/learned_rm": 0.4})
        if i % 2 == 0:  # refreshed every other step (coevolve.every=2)
            row.update({"rm/accuracy": 0.6, "rm/margin": 0.1, "rm/pairwise_accuracy": 0.5})
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    page = write_report(run_dir).read_text()
    chart = re.search(r'<svg[^>]*data-plot="rm_accuracy".*?</svg>', page, re.S)
    assert chart and "accuracy" in chart.group(0) and "pairwise_accuracy" in chart.group(0)
    components = re.search(r'<svg[^>]*data-plot="reward_components".*?</svg>', page, re.S)
    assert components and "learned_rm" in components.group(0) and "correctness" in components.group(0)


def thumb_uri(color: tuple[int, int, int], size: tuple[int, int] = (48, 48)) -> str:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def visual_run(run_dir: Path) -> Path:
    """fake_run's files with image thumbnails on each group's first sample, as RolloutWriter stores them, plus
    stored "images" that are not image data URIs."""
    fake_run(run_dir)
    red, clip = thumb_uri((255, 0, 0)), [thumb_uri((0, 0, 50 * i)) for i in range(3)]
    rows = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    for r in rows:
        if r["sample"] == 0:
            r["images"] = [[red], clip] if r["step"] == 1 else [[red, 'data:image/png;base64,AA" onerror="x'],
                                                                ["javascript:alert(1)"], "data:text/html;base64,PGI+"]
    (run_dir / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run_dir


def test_visual_run_has_thumbnails_as_data_uri_images(tmp_path):
    page = write_report(visual_run(tmp_path / "run")).read_text()
    store = re.search(r'<div id="rollout-images" hidden>(.*?)</div>', page, re.S).group(1)
    imgs = re.findall(r'<img id="rimg-(\d+)" src="(data:image/png;base64,[A-Za-z0-9+/=]+)" alt="">', store)
    assert [int(i) for i, _ in imgs] == [0, 1, 2, 3]  # the red image once, though two groups show it
    assert store == "".join(f'<img id="rimg-{i}" src="{u}" alt="">' for i, u in imgs)  # nothing else in there
    data = embedded_data(page)
    assert [d["images"] for d in data if d["step"] == 1] == [[[0], [1, 2, 3]]] * 2  # every sample of the group
    assert [d["images"] for d in data if d["step"] == 2] == [[[0]]] * 2  # only the valid URI is kept
    assert "onerror" not in page and "javascript:" not in page and "text/html" not in page
    assert "left out 3 prompt image(s) that were not base64 image data URIs" in page
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page).group(1)
    assert "img-src data:;" in csp  # images only from data: URIs: the page stays self-contained


def test_text_run_has_no_images(tmp_path):
    page = write_report(fake_run(tmp_path / "run")).read_text()
    assert "rollout-images" not in page.split("<script")[0] and "<img" not in page
    assert all("images" not in d for d in embedded_data(page))


def test_before_after_shows_the_mean_graded_reward_only_for_a_graded_verifier(tmp_path):
    run = fake_run(tmp_path / "run")
    assert "mean verifier reward" not in write_report(run).read_text()  # no mean_reward in these results
    for tag, mean in (("before", 0.543), ("after", 0.583)):  # IoU-like: the mean is not the accuracy
        path = run / f"eval_{tag}.json"
        result = json.loads(path.read_text())
        path.write_text(json.dumps({**result, "mean_reward": mean}))
    page = write_report(run).read_text()
    assert "mean verifier reward" in page and "+0.040" in page
