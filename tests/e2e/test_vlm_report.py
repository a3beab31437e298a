"""A real (one-step, tiny) vlm_grpo run stores its prompts' thumbnails in rollouts.jsonl and its report.html
shows them as data-URI images; tests/e2e/test_report_browser.py checks such a page in Chromium."""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path

from rlvr.config import load_config
from rlvr.tracking import read_rollouts
from rlvr.trainer.loop import train

ROOT = Path(__file__).resolve().parents[2]


def test_vlm_run_stores_thumbnails_and_its_report_shows_them(tmp_path):
    import torch
    from PIL import Image

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run = train(load_config(ROOT / "recipes" / "vlm_grpo.yaml", [
            f"run.dir={tmp_path / 'run'}", "train.steps=1", "train.prompts_per_step=2", "rollout.n=2",
            "rollout.max_new_tokens=12", "eval.before=false", "eval.after=false", "checkpoint.every=0",
            "logging.rollouts_every=1", "logging.progress=false"]))
    finally:
        torch.set_num_threads(threads)
    rows = read_rollouts(run)
    assert [(r["group"], r["sample"]) for r in rows] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    firsts = [r for r in rows if r["sample"] == 0]
    assert all("images" not in r for r in rows if r["sample"] != 0)  # once per group
    for r in firsts:
        (uri,), = r["images"]  # vl_count: one image per prompt
        image = Image.open(io.BytesIO(base64.b64decode(uri.removeprefix("data:image/png;base64,"))))
        assert image.size == (48, 48) and len(uri) < 2_000  # the task's 48x48 image, not enlarged
    page = (run / "report.html").read_text()
    stored = re.findall(r'<img id="rimg-\d+" src="(data:image/png;base64,[^"]+)"', page)
    assert sorted(stored) == sorted(r["images"][0][0] for r in firsts)
