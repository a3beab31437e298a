"""Every recipe names its paper and trains on the built-in task on CPU without NaN (three steps; one small step
for an image recipe)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from rlvr.config import load_config
from rlvr.tracking import read_metrics
from rlvr.trainer.loop import train

ROOT = Path(__file__).resolve().parents[2]
RECIPES = sorted(p for p in (ROOT / "recipes").glob("*.yaml")  # `rlvr sft` (a data section) / `rlvr rm`, `rlvr prm` out
                 if not p.name.startswith(("sft_", "rm_", "prm_")) and not re.search(r"^data:", p.read_text(), re.M))


def test_the_algorithm_library_recipes_exist():
    names = {p.stem for p in RECIPES}
    required = {"grpo", "dr_grpo", "dapo", "lite_ppo", "rloo", "reinforce_pp", "ppo_gae", "cpgd", "gspo",
                "w_reinforce", "nsr", "psr", "high_entropy_tokens", "clip_cov", "kl_cov", "ace", "ktae", "pacs",
                "prorl", "dcpo"}
    assert required <= names, sorted(required - names)


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_recipe_header_names_the_paper(recipe):
    header = []
    for line in recipe.read_text().splitlines():
        if not line.startswith("#"):
            break
        header.append(line)
    text = " ".join(header)
    assert re.search(r"arXiv:\d{4}\.\d{4,5}", text), f"{recipe.name}: no arXiv id in the header comment"
    assert "Knobs" in text or "knobs" in text, f"{recipe.name}: the header should say which knobs it sets"


def _staged(recipe: Path) -> bool:
    return re.search(r"^stages:", recipe.read_text(), re.M) is not None


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_recipe_trains_without_nan(recipe, tmp_path):
    if _staged(recipe):  # a multi-stage recipe (lmm_r1): every stage, each as small as a single recipe's run
        return _staged_recipe_trains_without_nan(recipe, tmp_path)
    shipped = load_config(recipe, [])
    vision = shipped.task.name.startswith("vl_")
    # an image recipe costs more per step (images, the hf engine): one small step checks that it loads and trains
    steps, size = (1, ["train.prompts_per_step=2", "rollout.n=2", "rollout.max_new_tokens=16"]) if vision else \
        (3, ["train.prompts_per_step=4", "rollout.n=4"])
    overrides = [f"run.dir={tmp_path / 'run'}", f"train.steps={steps}", *size, "eval.before=false",
                 "eval.after=false", "eval.every=0", "checkpoint.every=0", "logging.progress=false"]
    model_path = shipped.model.path
    if str(model_path).startswith("runs/") and not (ROOT / model_path).exists():
        # a model a script or an earlier stage builds (the tool model, LMM-R1's stage 1): use the base
        overrides.append("model.path=builtin-vl" if vision else "model.path=builtin")
    token_rm = shipped.model.token_rm_path  # oreal's token-level RM, trained by an earlier `rlvr prm`: a fresh head
    if token_rm is not None and token_rm.startswith("runs/") and not (ROOT / token_rm).exists():
        overrides.append("model.token_rm_path=builtin")
    for i, r in enumerate(shipped.rewards):  # a reward model an earlier stage trains (er_prm's PRM): a fresh head
        path = r.params.get("path")
        if isinstance(path, str) and path.startswith("runs/") and not (ROOT / path).exists():
            overrides.append(f"rewards.{i}.path=builtin")
    cfg = load_config(recipe, overrides)
    run = train(cfg)
    metrics = read_metrics(run)
    assert len(metrics) == steps
    for m in metrics:
        _check_step(m, recipe.name)
        assert m["skipped_optimizer_steps"] == 0


def _check_step(m: dict, label: str) -> None:
    """Finite losses and diagnostics. A step whose every row has advantage 0 runs no forward or backward: its
    loss is exactly 0 and it measures no entropy."""
    dead = m.get("zero_adv_rows_skipped_frac") == 1.0
    for key in ("reward_mean", "pg_loss", "grad_norm") if dead else ("reward_mean", "pg_loss", "entropy",
                                                                      "grad_norm"):
        assert math.isfinite(m[key]), (label, m["step"], key, m[key])
    if dead:
        assert m["pg_loss"] == 0.0 and "entropy" not in m, (label, m["step"])


def _staged_recipe_trains_without_nan(recipe: Path, tmp_path: Path) -> None:
    from rlvr.config.stages import load_stages
    from rlvr.trainer.stages import run_stages

    tiny = ["train.steps=1", "train.prompts_per_step=2", "rollout.n=2", "rollout.max_new_tokens=16",
            "eval.before=false", "eval.after=false", "eval.every=0", "checkpoint.every=0", "logging.progress=false"]
    staged = load_stages(recipe, [f"run.dir={tmp_path / 'run'}", *tiny])
    run_stages(staged)
    for stage in staged.stages:
        metrics = read_metrics(stage.cfg.run.dir)
        assert len(metrics) == 1, stage.label
        _check_step(metrics[0], f"{recipe.name} {stage.label}")


def test_the_recipes_table_in_the_docs_is_current():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "recipes_table.py"), "--check"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
