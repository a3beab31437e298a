"""The docs run: every `rlvr ...` command line in README.md and docs/*.md, and every recipe, is checked against
the real CLI parser and config loader (`rlvr config show` semantics: no compute; model paths that would need a
GPU or a download are replaced by the built-in model). A few cheap commands run for real with tiny budgets.

A command in the docs that no longer parses fails here, naming the file and line.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from rlvr.cli import _eval_overrides, _split_args, app
from rlvr.config import Config, PRMConfig, RMConfig, SFTConfig, load_config, read_yaml
from rlvr.config.stages import has_stages, load_stages

try:  # typer >= 0.29 carries its own copy of click
    import typer._click as click  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover
    import click

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs" / "how-to").glob("*.md"))]
RECIPES = sorted((ROOT / "recipes").glob("*.yaml"))
SUBCOMMANDS = {"train", "sft", "rm", "prm", "eval", "config", "sweep", "report", "compare", "lab"}
# how the docs spell a placeholder -> a stand-in that parses (recipes and models resolve to shipped ones)
PLACEHOLDERS = {"RECIPE...": "recipes/grpo.yaml", "RECIPE": "recipes/grpo.yaml", "recipes/NAME.yaml": "recipes/grpo.yaml",
                "MODEL_DIR": "builtin", "BASE": "builtin", "TRAINED": "builtin", "RUN_DIR": "runs/placeholder",
                "DIR": "runs/placeholder", "TASK": "addition", "T": "addition", "N": "2", "S": "2", "K": "2",
                "runs/<run>": "runs/placeholder", "runs/<run>/final": "builtin", "FINDING": "dr_grpo_length",
                "MINE.yaml": "recipes/dr_grpo.yaml"}


@dataclass
class DocCommand:
    where: str  # file:line
    text: str
    expected_errors: list[str] | None = None  # a block that shows `error:` output after the command


    def argv(self) -> list[str]:
        words = shlex.split(self.text, comments=True)
        # `.venv/bin/rlvr`, `torchrun --nproc_per_node 4 -m rlvr`, `$ rlvr`
        start = next(i for i, w in enumerate(words) if w.endswith("rlvr"))
        out: list[str] = []
        sft = words[start + 1:start + 2] == ["sft"]
        rm = words[start + 1:start + 2] == ["rm"]
        prm = words[start + 1:start + 2] == ["prm"]
        for w in words[start + 1:]:
            if sft and w == "RECIPE":
                w = "recipes/sft_builtin.yaml"
            if rm and w == "RECIPE":
                w = "recipes/rm_bt.yaml"
            if prm and w == "RECIPE":
                w = "recipes/prm_er.yaml"
            if w in ("...", "[key=value", "...]", "[overrides]"):
                continue
            key, eq, value = w.partition("=")
            if eq and value in PLACEHOLDERS:  # distributed.learner_workers=N
                w = f"{key}={PLACEHOLDERS[value]}"
            for expanded in _braces(w):
                out.append(PLACEHOLDERS.get(expanded, expanded))
        return out


def _braces(word: str) -> list[str]:
    """Shell brace expansion, one level (`recipes/{a,b}.yaml`)."""
    m = re.search(r"\{([\w,]+)\}", word)
    if not m or "=" in word:
        return [word]
    return [word[: m.start()] + alt + word[m.end():] for alt in m.group(1).split(",")]


def collect_commands() -> list[DocCommand]:
    found: list[DocCommand] = []
    call = re.compile(r"^(?:\$ )?(?:\.venv/bin/)?(?:torchrun\b[^#]*?-m )?rlvr (\w+)")
    for path in DOCS:
        text = path.read_text()
        name = path.relative_to(ROOT)
        in_block = False
        lines = text.splitlines()
        i = 0
        while i < len(lines):
            line = lines[i]
            if line.lstrip().startswith("```"):
                in_block = not in_block
                i += 1
                continue
            if in_block:
                start = i
                joined = line
                while joined.endswith("\\") and i + 1 < len(lines):
                    i += 1
                    nxt = lines[i]
                    # a break inside a word (`gspo,\` + `w_reinforce`) joins without a space, as bash does
                    joined = joined[:-1] + (nxt if not joined[-2:-1].isspace() and not nxt[:1].isspace()
                                            else " " + nxt.strip())
                m = call.match(joined.strip())
                if m and m.group(1) in SUBCOMMANDS:
                    expected = None
                    if i + 1 < len(lines) and lines[i + 1].startswith("error:"):  # shown failing on purpose
                        expected = [x.strip()[2:].split(":")[0] for x in lines[i + 2:] if x.startswith("  - ")]
                        expected = expected[: next((k for k, x in enumerate(lines[i + 2:])
                                                    if not x.startswith("  - ")), len(expected))]
                    found.append(DocCommand(f"{name}:{start + 1}", joined.strip(), expected))
                i += 1
                continue
            i += 1
        # inline code spans, which may wrap across lines
        prose = _outside_blocks(text)
        for m in re.finditer(r"`([^`]+)`", prose, flags=re.S):
            span = " ".join(m.group(1).split())
            cm = call.match(span)
            if cm and cm.group(1) in SUBCOMMANDS and cm.end() < len(span):  # `rlvr eval` alone names a command
                line_no = prose[: m.start()].count("\n") + 1
                found.append(DocCommand(f"{name}:{line_no}", span))
    return found


def _outside_blocks(text: str) -> str:
    """The text with fenced code blocks blanked out (their newlines kept, so line numbers stay right)."""
    return re.sub(r"```.*?```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)


COMMANDS = collect_commands()


def test_the_docs_have_commands_to_check() -> None:
    where = {c.where.split(":")[0] for c in COMMANDS}
    assert len(COMMANDS) >= 40 and "README.md" in where and "docs/quickstart.md" in where
    assert any("task.name=reasoning_gym" in c.text for c in COMMANDS)


def _builtin(overrides: list[str]) -> list[str]:
    """Model paths that need a download or a GPU become the built-in model (after the doc's own overrides)."""
    out = [o for o in overrides if not re.match(r"(model\.(path|reference_path|tokenizer_path)|"
                                                r"algorithm\.critic\.path)=", o)]
    return [*out, "model.path=builtin"]


def _load(recipe: str | Path | None, overrides: list[str], schema: type = Config,
          plugins: list[str] | None = None) -> None:
    """load_config, or for a multi-stage recipe every stage (`rlvr train` and `rlvr config show` read it so)."""
    if schema is Config and recipe is not None and has_stages(read_yaml(recipe)):
        load_stages(recipe, overrides, plugins=plugins)
    else:
        load_config(recipe, overrides, schema=schema, plugins=plugins)


def check(argv: list[str], tmp_path: Path) -> None:
    """Parse `argv` with the CLI's own parser, then load the config the command would use (no compute)."""
    group = typer.main.get_command(app)
    root = group.context_class(group, info_name="rlvr")
    name, cmd, rest = group.resolve_command(root, list(argv))
    if hasattr(cmd, "resolve_command"):  # `config show`
        name, cmd, rest = cmd.resolve_command(cmd.context_class(cmd, info_name=name, parent=root), rest)
    ctx = cmd.make_context(name, list(rest), parent=root)
    p = ctx.params
    if name == "train":
        recipe, overrides = _split_args(p["args"])
        if p["resume"] is not None:
            assert recipe is None, "--resume takes no recipe"
            return  # the run dir does not exist here; the overrides were parsed
        _load(recipe, _builtin(overrides), plugins=p["plugin"])
    elif name == "show":
        recipe, overrides = _split_args(p["args"])
        _load(recipe, _builtin(overrides), schema=SFTConfig if p["sft"] else RMConfig if p["rm"]
              else PRMConfig if p["prm"] else Config, plugins=p["plugin"])
    elif name in ("sft", "rm", "prm"):
        recipe, overrides = _split_args(p["args"])
        load_config(recipe, _builtin(overrides), schema={"sft": SFTConfig, "rm": RMConfig, "prm": PRMConfig}[name])
    elif name in ("eval", "compare"):
        model = p["model_dir"] if name == "eval" else p["base"]
        ks = [int(k) for k in p["k"].split(",")] if name == "eval" else [1, 2]
        extra = _eval_overrides(p["n"], ks, str(model), p["task"], p["temperature"], p["size"])
        config = p["config"]
        if config is not None and not Path(config).exists() and "placeholder" not in str(config):
            raise AssertionError(f"--config {config}: no such recipe")
        load_config(config, _builtin([*extra, *(p["overrides"] or [])]), plugins=p.get("plugin"))
    elif name == "sweep":
        files = [r for r in p["recipes"] if "=" not in r or Path(r).exists()]
        overrides = [r for r in p["recipes"] if r not in files]
        if p["task"]:
            overrides = [f"task={p['task']}", *overrides]
        for recipe in files:
            load_config(recipe, _builtin([*overrides, f"train.steps={p['steps']}"]))
    elif name == "lab":  # a finding (or a comparison) is planned: every arm's config validates, nothing runs
        from rlvr.lab.finding import comparison_finding, list_findings, load_finding
        from rlvr.lab.run import plan_finding, plan_prepare

        words = list(p["args"] or [])
        if p["list_"] or not words:
            return
        if words[0] == "all":  # every shipped finding, with the same overrides
            for each in list_findings():
                finding = load_finding(each, words[1:])
                plan_prepare(finding, tmp_path / each)
                plan_finding(finding, tmp_path / each)
            return
        if words[0] == "compare":
            mine = words[1] if Path(words[1]).exists() else "recipes/grpo.yaml"  # a user's file: a stand-in
            finding = comparison_finding(mine, words[2], seeds=p["seeds"] or 5, first_seed=p["first_seed"] or 0,
                                         steps=p["steps"] or 60, rollout_tokens=p["rollout_tokens"],
                                         overrides=words[3:])
        else:
            finding = load_finding(words[0], words[1:])
        plan_prepare(finding, tmp_path / "lab")
        plan_finding(finding, tmp_path / "lab")
    elif name == "report":
        pass  # parsed; it reads a run directory


@pytest.mark.parametrize("command", COMMANDS, ids=[c.where for c in COMMANDS])
def test_documented_command_parses_and_loads(command: DocCommand, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    if command.expected_errors is not None:
        with pytest.raises(ValueError) as err:
            check(command.argv(), tmp_path)
        assert command.expected_errors, command.where
        for key in command.expected_errors:  # the error the docs show still names these keys
            assert f"- {key}:" in str(err.value), f"{command.where}: the shown error for {key} changed:\n{err.value}"
        return
    try:
        check(command.argv(), tmp_path)
    except (click.ClickException, ValueError, AssertionError) as err:
        message = err.format_message() if isinstance(err, click.ClickException) else str(err)
        pytest.fail(f"{command.where}: `{command.text}` no longer works:\n{message}")


@pytest.mark.parametrize("recipe", RECIPES, ids=[r.name for r in RECIPES])
def test_every_recipe_loads(recipe: Path) -> None:
    import yaml

    schema = SFTConfig if "data" in (yaml.safe_load(recipe.read_text()) or {}) else Config  # `rlvr sft` recipes
    if recipe.name.startswith("rm_"):
        schema = RMConfig  # `rlvr rm` recipes
    if recipe.name.startswith("prm_"):
        schema = PRMConfig  # `rlvr prm` recipes
    if has_stages(read_yaml(recipe)):  # a multi-stage recipe: every stage validates
        assert all(stage.cfg.run.name for stage in load_stages(recipe, ["model.path=builtin"]).stages)
        return
    cfg = load_config(recipe, ["model.path=builtin"], schema=schema)
    assert cfg.run.name


def test_a_broken_command_is_caught(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="train.stepz"):
        check(["train", "recipes/grpo.yaml", "train.stepz=3"], tmp_path)
    with pytest.raises(click.ClickException):
        check(["eval", "builtin", "--nn", "3"], tmp_path)


# -- a few cheap ones for real, with tiny budgets ------------------------------------------------------

TINY = ["train.steps=1", "train.prompts_per_step=2", "train.mini_batches=1", "rollout.n=2",
        "rollout.max_new_tokens=8", "eval.before=false", "eval.after=false", "logging.rollouts_every=0"]


def _doc(fragment: str) -> DocCommand:
    return next(c for c in COMMANDS if fragment in c.text)


@pytest.mark.parametrize("fragment, extra", [
    ("task.name=reasoning_gym task.dataset=leg_counting", [*TINY, "task.train_size=8", "task.eval_size=4"]),
    ("rlvr eval builtin --n 8 --k 1,8 task.digits=[3,4]", ["--size", "2", "rollout.max_new_tokens=8"]),
    # the own-model tutorial's CPU check: the user's data, the example reward, the GPU recipe on builtin
    ("run.dir=runs/own-model-smoke", ["train.steps=1", "eval.before=false"]),
    # the test-an-idea tutorial's recipe, whose plugin registers the estimator it names
    ("rlvr train examples/recipes/mean_baseline.yaml", TINY),
    # the LoRA how-to's command (peft is a test extra)
    ("'model.lora={r: 16, alpha: 32}' run.dir=runs/lora1", TINY),
])
def test_cheap_documented_commands_run(fragment: str, extra: list[str], tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    argv = _doc(fragment).argv()
    if argv[0] == "train":
        argv = [*argv, *extra, f"run.dir={tmp_path / 'run'}"]
    else:
        argv = [*argv, *extra]
    res = CliRunner().invoke(app, argv)
    assert res.exit_code == 0, res.output
    assert "Traceback" not in res.output
