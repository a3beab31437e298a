"""The HTML report in a real browser: headless Chromium loads it from file://, runs its script, and we read
back the DOM the script produced (`--dump-dom` after `--virtual-time-budget`).

Checked: the page loads without script errors, the plots are laid out (the training curves, pass@k and the
test-time search plot), the rollout filter and search (driven
through the URL hash) show the right rows, and model output that looks like HTML or script stays inert text.
For a visual run, the prompts' image thumbnails (data-URI PNGs) are in the cards and decode (naturalWidth > 0,
counted by the page's script). Screenshots are kept at tests/artifacts/report.png and report_images.png. Skipped when no Chromium/Chrome binary is found
(set RLVR_CHROMIUM to point at one).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from rlvr.eval.report import write_report

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
XSS = "<script>alert(1)</script> <img src=x onerror=\"document.title='pwned'\"> <b>&amp; 1 < 2 > 0</b>"
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")


def find_chromium() -> str | None:
    env = os.environ.get("RLVR_CHROMIUM")
    if env and shutil.which(env):
        return shutil.which(env)
    return next((shutil.which(c) for c in CANDIDATES if shutil.which(c)), None)


@pytest.fixture(scope="module")
def chromium() -> str:
    binary = find_chromium()
    if binary is None:
        pytest.skip("no chromium binary found (apt-get install chromium, or set RLVR_CHROMIUM)")
    return binary


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("run")
    with (run / "metrics.jsonl").open("w") as f:
        for s in range(1, 7):
            row = {"step": s, "reward_mean": 0.1 * s, "accuracy": 0.08 * s, "entropy": 2.5 - 0.2 * s,
                   "response_length_mean": 20.0 + s, "response_length_max": 30.0 + s, "kl": 0.002 * s,
                   "clip_frac": 0.01 * (s % 3), "rollout_tokens_per_s": 900.0 + 10 * s,
                   "train_tokens_per_s": 700.0 + 5 * s, "step_s": 1.2}
            if s % 3 == 0:
                row["eval/pass@1"], row["eval/pass@4"] = 0.1 * s, 0.15 * s
            f.write(json.dumps(row) + "\n")
    for tag, p1, p4 in (("before", 0.2, 0.45), ("after", 0.55, 0.7)):
        (run / f"eval_{tag}.json").write_text(json.dumps({
            "tag": tag, "num_prompts": 8, "n": 4, "temperature": 1.0, "pass@k": {"1": p1, "2": p1 + 0.1, "4": p4},
            "maj@k": {"1": p1, "4": p1 + 0.05}, "accuracy": p1, "mean_length": 21.5, "truncated_frac": 0.0,
            "by_difficulty": {"1": {"num_prompts": 4, "pass@k": {"1": p1 + 0.1, "2": p1 + 0.2, "4": p4}},
                              "2": {"num_prompts": 4, "pass@k": {"1": p1 - 0.1, "2": p1, "4": p4}}},
            "problems": []}))
    for name, budget, solved, tokens in (("sampling", 100, 0.5, 90.0), ("sampling", 200, 0.7, 150.0),
                                         ("mcts", 100, 0.4, 95.0), ("mcts", 200, 0.6, 170.0)):
        (run / f"search_{name}_{budget}.json").write_text(json.dumps({  # rlvr eval ... search.name=... --out
            "search": {"name": name, "max_tokens": budget, "select": "verifier"}, "num_prompts": 10,
            "solve_rate": solved, "tokens_per_problem": tokens, "tokens_per_solved": tokens / solved, "problems": []}))
    (run / "config.yaml").write_text("run:\n  name: browser-test\n  seed: 0\ntask:\n  name: addition\n")
    rows = []
    for step in (2, 4):
        for g in range(2):
            for i in range(3):
                correct = i == 0
                response = f"Sum {g}+{g} is {2 * g if correct else 2 * g + 1}. Carry the one."
                if (step, g, i) == (4, 1, 2):
                    response = XSS
                rows.append({"step": step, "group": g, "sample": i, "prompt_id": f"q{g}",
                             "prompt": f"What is {g}+{g}? <i>show work</i>", "response": response,
                             "reward": float(correct), "rewards": {"correctness": float(correct), "format": 0.5},
                             "reasons": {"correctness": "correct" if correct else "wrong answer"},
                             "correct": correct, "advantage": 0.8 if correct else [-0.4] * 5,
                             "finish_reason": "stop", "length": 12, "policy_version": step - 1,
                             "answer": str(2 * g), "difficulty": 1})
    (run / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return write_report(run)


def thumb_uri(color: tuple[int, int, int], size: tuple[int, int]) -> str:
    import base64
    import io

    from PIL import Image, ImageDraw

    image = Image.new("RGB", size, (245, 245, 245))
    ImageDraw.Draw(image).rectangle((4, 4, size[0] // 2, size[1] // 2), fill=color)
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


@pytest.fixture(scope="module")
def visual_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run on a visual task as RolloutWriter stores it: thumbnails on each group's first sample; group 1's
    prompt is a 3-frame clip. Step 2 also holds a stored "image" that is markup, which must not reach the page."""
    run = tmp_path_factory.mktemp("vrun")
    (run / "config.yaml").write_text("run:\n  name: visual-test\ntask:\n  name: vl_count\n")
    rows = []
    for step in (1, 2):
        for g in range(2):
            for i in range(2):
                row = {"step": step, "group": g, "sample": i, "prompt_id": f"v{g}", "prompt": "Q: <image>How many?A:",
                       "response": f" rc: {g + i}", "reward": float(i == 0), "rewards": {"correctness": float(i == 0)},
                       "reasons": {}, "correct": i == 0, "advantage": 0.5 - i, "finish_reason": "stop", "length": 6,
                       "policy_version": step - 1, "answer": str(g), "difficulty": g + 1}
                if i == 0:
                    row["images"] = ([[thumb_uri((200, 0, 0), (48, 48))]] if g == 0 else
                                     [[thumb_uri((0, 0, 40 * f + 100), (64, 40)) for f in range(3)]])
                    if step == 2 and g == 0:
                        row["images"].append(['"><img src=x onerror="document.title=1">'])
                rows.append(row)
    (run / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return write_report(run)


def browser_args(chromium: str, profile: Path) -> list[str]:
    return [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--no-first-run", "--disable-extensions", "--mute-audio",
            f"--user-data-dir={profile}", "--virtual-time-budget=2000"]


def run_browser(args: list[str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"chromium did not finish within 60 s: {' '.join(args)}")


class Dom(HTMLParser):
    """What the assertions need from the dumped DOM."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.body: dict[str, str] = {}
        self.count: dict[str, str] = {}
        self.title = ""  # the document's <title>, not the SVG tooltips
        self.articles: list[dict[str, str]] = []
        self.responses: list[str] = []
        self.tags_in_list: list[str] = []
        self.thumbs: list[dict[str, str]] = []  # <img> attributes inside the rollout list
        self.plots = 0
        self._stack: list[str] = []
        self._in_list = 0
        self._grab: str | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = {k: v or "" for k, v in attrs}
        if tag == "img" and self._in_list:
            self.thumbs.append(a)
        if tag == "body":
            self.body = a
        if a.get("id") == "rollout-count":
            self.count = a
        if tag == "svg" and "plot" in a.get("class", "").split():
            self.plots += 1
        if self._in_list:
            self.tags_in_list.append(tag)
            if tag == "article":
                self.articles.append(a)
        if a.get("id") == "rollout-list":
            self._in_list = 1
        elif self._in_list and tag not in ("img", "br", "input"):
            self._in_list += 1
        if (tag == "title" and not self.body) or (tag == "pre" and "response" in a.get("class", "")):
            self._grab = tag
            if tag == "pre":
                self.responses.append("")

    def handle_endtag(self, tag):
        if self._in_list:
            self._in_list -= 1
        if tag == self._grab:
            self._grab = None

    def handle_data(self, data):
        if self._grab == "title":
            self.title += data
        elif self._grab == "pre":
            self.responses[-1] += data


def dump(chromium: str, report: Path, tmp_path: Path, fragment: str = "") -> tuple[Dom, str]:
    url = report.resolve().as_uri() + fragment
    out = run_browser([*browser_args(chromium, tmp_path / "profile"), "--dump-dom", url])
    assert out.returncode == 0, out.stderr[-2000:]
    assert "<body" in out.stdout, f"empty DOM from chromium; stderr: {out.stderr[-2000:]}"
    return Dom(out.stdout), out.stdout


def test_page_loads_and_plots_render(chromium, report, tmp_path):
    dom, raw = dump(chromium, report, tmp_path)
    assert dom.body.get("data-ready") == "1", "the report's script did not finish"
    assert "data-js-error" not in dom.body, dom.body.get("data-js-error")
    assert dom.plots >= 8
    assert int(dom.body["data-plots-rendered"]) == dom.plots  # each SVG has a laid-out box and a line
    assert dom.count["data-matched"] == dom.count["data-total"] == "12" and len(dom.articles) == 12
    assert "Before vs after training" in raw and "browser-test" in dom.title
    assert 'data-plot="search_tokens"' in raw  # the test-time search plot, laid out like every other plot


def test_filter_and_search_from_the_url_hash(chromium, report, tmp_path):
    dom, _ = dump(chromium, report, tmp_path, "#filter=correct")
    assert dom.count["data-matched"] == "4" and len(dom.articles) == 4
    assert all("ok" in a["class"].split() for a in dom.articles)

    dom, _ = dump(chromium, report, tmp_path, "#filter=incorrect&step=2&q=CARRY%20the")
    assert dom.count["data-matched"] == "4"  # step 2: two prompts x two wrong answers; search ignores case
    assert {a["data-step"] for a in dom.articles} == {"2"} and all("bad" in a["class"] for a in dom.articles)

    dom, _ = dump(chromium, report, tmp_path, "#filter=correct&q=alert")
    assert dom.count["data-matched"] == "0" and dom.articles == []


def test_injected_markup_stays_text(chromium, report, tmp_path):
    dom, raw = dump(chromium, report, tmp_path, "#q=alert(1)")
    assert dom.count["data-matched"] == "1"
    assert dom.responses == [XSS]  # shown verbatim, as text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in raw  # serialised as escaped text, not as an element
    assert "script" not in dom.tags_in_list and "img" not in dom.tags_in_list and "i" not in dom.tags_in_list
    assert dom.title.strip() == "rlvr report: browser-test"  # the onerror handler never ran
    assert "data-js-error" not in dom.body


def test_screenshot(chromium, report, tmp_path):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "report.png"
    shot.unlink(missing_ok=True)
    out = run_browser([*browser_args(chromium, tmp_path / "profile"), "--hide-scrollbars", "--window-size=1280,2000",
                       f"--screenshot={shot}", report.resolve().as_uri() + "#q=alert(1)"])
    assert out.returncode == 0, out.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # a rendered page, not a blank one


def test_visual_run_shows_prompt_thumbnails(chromium, visual_report, tmp_path):
    dom, _ = dump(chromium, visual_report, tmp_path)
    assert dom.body.get("data-ready") == "1" and "data-js-error" not in dom.body, dom.body.get("data-js-error")
    assert len(dom.articles) == 8 and all("with-images" in a["class"].split() for a in dom.articles)
    # group 0: one image per sample; group 1: a clip of three frames per sample; 2 steps x 2 samples each
    assert len(dom.thumbs) == 2 * 2 * (1 + 3)
    assert all(t["src"].startswith("data:image/png;base64,") and t["class"] == "thumb" for t in dom.thumbs)
    assert dom.body["data-images-shown"] == dom.body["data-images-loaded"] == "16"  # all decoded: naturalWidth > 0
    assert "onerror" not in "".join(t["src"] for t in dom.thumbs) and dom.title.strip() == "rlvr report: visual-test"

    dom, _ = dump(chromium, visual_report, tmp_path, "#filter=incorrect&step=2")
    assert len(dom.articles) == 2 and dom.body["data-images-shown"] == dom.body["data-images-loaded"] == "4"


def test_visual_screenshot_shows_the_thumbnails(chromium, visual_report, tmp_path):
    from PIL import Image

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "report_images.png"
    shot.unlink(missing_ok=True)
    out = run_browser([*browser_args(chromium, tmp_path / "profile"), "--hide-scrollbars", "--window-size=900,1400",
                       f"--screenshot={shot}", visual_report.resolve().as_uri()])
    assert out.returncode == 0, out.stderr[-2000:]
    pixels = Image.open(shot).convert("RGB").getdata()
    assert sum(1 for p in pixels if p == (200, 0, 0)) > 500  # the red squares of group 0's image are drawn
