"""What a new user sees from a short real run: the before/after table after --resume too, the LoRA line, and
the markup-safe error for a message with brackets."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from rlvr.cli import app

ROOT = Path(__file__).resolve().parents[2]
GRPO = str(ROOT / "recipes/grpo.yaml")
TINY = ["train.prompts_per_step=2", "train.mini_batches=1", "rollout.n=2", "rollout.max_new_tokens=8",
        "eval.size=4", "eval.n=2", "eval.ks=[1,2]", "checkpoint.every=1", "logging.rollouts_every=0"]
runner = CliRunner()


def test_resumed_run_prints_the_before_after_table(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    first = runner.invoke(app, ["train", GRPO, f"run.dir={run_dir}", "train.steps=2", "--stop-after", "1", *TINY])
    assert first.exit_code == 0, first.output
    assert (run_dir / "eval_before.json").is_file()
    second = runner.invoke(app, ["train", "--resume", str(run_dir)])
    assert second.exit_code == 0, second.output
    assert "Held-out evaluation: before vs after training" in second.output
    assert "pass@2" in second.output and "eval (before)" not in second.output  # read back, not re-evaluated


def test_lora_run_says_adapters_are_on(tmp_path: Path) -> None:
    res = runner.invoke(app, ["train", GRPO, f"run.dir={tmp_path / 'run'}", "train.steps=1", "eval.before=false",
                              "eval.after=false", "model.lora.r=2", *TINY])
    assert res.exit_code == 0, res.output
    line = next(x for x in res.output.splitlines() if x.startswith("LoRA adapters on"))
    assert "r=2" in line and "trainable params" in line and "%)" in line


def test_config_error_with_a_list_index_keeps_its_brackets() -> None:
    res = runner.invoke(app, ["config", "show", GRPO, "rewards=[{name: correctness, gate: nope}]"])
    assert res.exit_code == 2
    assert "rewards[0].gate" in res.output


def test_fail_prints_brackets_verbatim(capsys) -> None:
    import pytest
    import typer

    from rlvr.cli import _fail
    from rlvr.config import ConfigError

    with pytest.raises(typer.Exit):
        _fail(ConfigError("needs vLLM: pip install 'rlvr[vllm]'; see [bold]docs[/bold]"))
    err = capsys.readouterr().err
    assert "pip install 'rlvr[vllm]'" in err and "[bold]docs[/bold]" in err


def test_a_run_that_cannot_learn_says_so(tmp_path: Path) -> None:
    # the failure issue 21 found: reasoning-gym's format lived only in the system prompt, which a model without a
    # chat template never sees; every sample scored 0 and nothing warned. A plain prompt without the format
    # reproduces it.
    res = runner.invoke(app, ["train", GRPO, f"run.dir={tmp_path / 'run'}", "train.steps=3", "eval.before=false",
                              "eval.after=false", *TINY, "task.name=reasoning_gym", "task.dataset=gcd",
                              "task.train_size=8", "task.eval_size=2", "task.prompt_template='{question}'"])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "warning: 100% of groups had the same reward for every sample for 3 steps in a row" in text
    assert "no chat template" in text and "'no <answer> tag'" in text
