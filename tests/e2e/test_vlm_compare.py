"""`rlvr compare` and `rlvr eval` on an image task: builtin-vl against a copy of itself saved as a model directory
(what a run's final/ is), on a few vl_count prompts with few tokens; and the mismatches that must stop with one
clear message before any evaluation runs."""

from __future__ import annotations

import json
import shutil

from typer.testing import CliRunner

from rlvr.cli import app
from rlvr.models.loading import BUILTIN_VL_DIR

runner = CliRunner()
FEW = ["--task", "vl_count", "--n", "4", "--size", "4", "rollout.max_new_tokens=24", "logging.progress=false"]


def test_compare_builtin_vl_on_vl_count(tmp_path):
    import torch

    trained = tmp_path / "final"
    shutil.copytree(BUILTIN_VL_DIR, trained)  # a model directory like RUN/final (model + processor files)
    out = tmp_path / "cmp"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        res = runner.invoke(app, ["compare", "builtin-vl", str(trained), *FEW, "--out", str(out)])
    finally:
        torch.set_num_threads(threads)
    assert res.exit_code == 0, res.output
    result = json.loads((out / "comparison.json").read_text())
    assert result["num_problems"] == 4 and result["ks"] == [1, 2, 4]
    base, same = (json.loads((out / f"eval_{s}.json").read_text()) for s in ("base", "trained"))
    assert [p["id"] for p in base["problems"]] == [f"vl_count-heldout-{i}" for i in range(4)]
    # the same weights, prompts, images and seed: the same samples, so identical curves
    assert result["pass@k"]["base"] == result["pass@k"]["trained"] and result["crossover_k"] is None
    assert [p["answers"] for p in base["problems"]] == [p["answers"] for p in same["problems"]]
    assert base["mean_length"] > 0 and "The two curves are identical" in res.output
    assert (out / "passk.png").read_bytes()[:4] == b"\x89PNG" and (out / "comparison.md").exists()


def test_compare_refuses_mismatched_models_before_evaluating(tmp_path):
    out = tmp_path / "cmp"
    res = runner.invoke(app, ["compare", "builtin-vl", "builtin", *FEW, "--out", str(out)])
    assert res.exit_code == 2
    assert "TRAINED: 'builtin' is a text-only model" in res.output and "builtin-vl" in res.output
    assert not (out / "eval_base.json").exists()  # found before the base model's evaluation ran

    # a vision-language model on a text task is evaluated through its language path (LMM-R1's text stage), not
    # refused: tests/unit/test_vl_text_stage.py evaluates builtin-vl on vl_count_text

    # vllm takes LLaVA-style image prompts now; its refusal of other VLM types: tests/unit/test_vllm_images.py
