"""The `rlvr` command line: train, sft, rm, prm, eval, config."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from rlvr import __version__

if TYPE_CHECKING:
    from rlvr.lab.finding import Finding

app = typer.Typer(
    name="rlvr",
    help="Reinforcement-learning post-training of language models with verifiable rewards.\n\n"
    "Recipes are YAML files (see recipes/); any key can be overridden on the command line as key.sub=value.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
config_app = typer.Typer(help="Inspect configurations.", no_args_is_help=True)
app.add_typer(config_app, name="config")

def _user_errors() -> tuple[type[BaseException], ...]:
    """The exception types that are a user's problem (printed as one error line, no traceback).

    Only modules already imported are asked: an error class can be raised only once its module is loaded, and
    importing the trainer here would cost seconds (torch, transformers) before a config typo is printed."""
    from rlvr.config import ConfigError
    from rlvr.registry import RegistryError

    errors: list[type[BaseException]] = [ConfigError, RegistryError, FileNotFoundError]
    for module, name in (("rlvr.models", "ModelError"), ("rlvr.tasks", "TaskError"),
                         ("rlvr.trainer.loop", "TrainingError")):
        cls = getattr(sys.modules.get(module), name, None)
        if isinstance(cls, type):
            errors.append(cls)
    return tuple(errors)


def _console():  # noqa: ANN202  (rich's Console; imported here so a config error costs no torch import)
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True)


def _fail(err: BaseException) -> None:
    from rich.markup import escape

    # escape: a message may hold brackets (`pip install 'rlvr[vllm]'`, `rewards[0]`) that rich would eat as markup
    _console().print(f"[bold red]error:[/bold red] {escape(str(err))}", highlight=False)
    raise typer.Exit(code=2)


def _split_args(args: list[str] | None) -> tuple[str | None, list[str]]:
    """The one argument without '=' is the recipe path; the others are key.sub=value overrides."""
    recipe, overrides = None, []
    for a in args or []:
        if "=" in a and not Path(a).exists():
            overrides.append(a)
        elif recipe is None:
            recipe = a
        else:
            raise typer.BadParameter(f"got two recipe files ('{recipe}' and '{a}'); overrides need key=value")
    return recipe, overrides


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"rlvr {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[Optional[bool], typer.Option("--version", callback=_version_callback, is_eager=True,
                                                    help="Print the version and exit.")] = None,
) -> None:
    pass


ARGS_HELP = "A recipe YAML file, then any number of key.sub=value overrides (e.g. train.steps=50 optim.lr=3e-4)."
PluginOption = Annotated[Optional[list[str]], typer.Option(
    "--plugin", help="A Python file or module to import before the config is read, so the tasks, rewards, "
    "advantages and losses it registers can be named (repeatable; docs/extending.md).", show_default=False)]


@app.command()
def train(
    args: Annotated[Optional[list[str]], typer.Argument(help=ARGS_HELP, show_default=False)] = None,
    resume: Annotated[Optional[Path], typer.Option(
        "--resume", help="Continue the run in this directory from its newest complete checkpoint. Its saved "
        "config is used; overrides given here are applied on top.")] = None,
    stop_after: Annotated[Optional[int], typer.Option(
        "--stop-after", help="Stop (with a checkpoint) once this many steps are done; resume later.")] = None,
    plugin: PluginOption = None,
) -> None:
    """Train a policy with RL (GRPO by default) as a recipe describes.

    Writes a run directory with config.yaml, versions.json, metrics.jsonl, checkpoints/, final/ (a plain
    Hugging Face model directory) and eval_*.json.

    A recipe with a `stages:` list runs its stages in order, each a run in RUN/stages/<i>-<name>/ started
    from the previous stage's final/, with RUN/stages.json as the summary; overrides apply to every stage,
    stages.<i or name>.key=value to one. Rerunning the same command skips finished stages and resumes a
    cut-off one (docs/configuration.md, Stages).

    Example: rlvr train recipes/grpo.yaml train.steps=50 run.dir=runs/try1
    """
    from rlvr.config import ConfigError, load_config, read_yaml
    from rlvr.config.stages import has_stages, load_stages

    try:
        recipe, overrides = _split_args(args)
        staged = None
        if resume is not None:
            if recipe is not None:
                raise ConfigError(f"--resume takes the config saved in {resume}; drop '{recipe}' "
                                        "(overrides are still allowed)")
            if (resume / "stages.json").is_file():
                raise ConfigError(f"--resume: {resume} is a multi-stage run; continue it by rerunning the command "
                                  f"that started it (rlvr train RECIPE run.dir={resume} ...), or resume one stage "
                                  f"as a run: --resume {resume}/stages/<i>-<name>")
            cfg = load_config(resume / "config.yaml", [*overrides, f"run.dir={resume}"], plugins=plugin)
        else:
            if recipe is None:
                raise typer.BadParameter("give a recipe file (e.g. recipes/grpo.yaml) or --resume RUN_DIR")
            if has_stages(read_yaml(recipe)):
                staged = load_stages(recipe, overrides, plugins=plugin)  # every stage validated before any runs
            else:
                cfg = load_config(recipe, overrides, plugins=plugin)
        from rlvr.trainer.loop import TrainingInterrupted
        from rlvr.trainer.loop import train as run_train

        try:
            if staged is not None:
                from rlvr.trainer.stages import run_stages

                run_stages(staged, stop_after=stop_after)
            else:
                run_train(cfg, resume=resume is not None, stop_after=stop_after)
        except TrainingInterrupted as stop:
            from rich.markup import escape

            _console().print(f"[yellow]{escape(str(stop))}[/yellow]")
            raise typer.Exit(code=stop.exit_code) from None
    except _user_errors() as err:
        _fail(err)


@app.command()
def sft(args: Annotated[list[str], typer.Argument(help=ARGS_HELP, show_default=False)]) -> None:
    """Supervised fine-tuning on a JSONL/Parquet file of prompt/completion pairs.

    The loss covers completion tokens and the EOS token only. The final model is written to
    <run dir>/final as a Hugging Face model directory.

    Example: rlvr sft recipes/sft.yaml data.path=traces.jsonl model.path=builtin
    """
    from rlvr.config import SFTConfig, load_config
    from rlvr.trainer.sft import run_sft

    try:
        recipe, overrides = _split_args(args)
        run_sft(load_config(recipe, overrides, schema=SFTConfig))
    except _user_errors() as err:
        _fail(err)


@app.command()
def rm(args: Annotated[list[str], typer.Argument(help=ARGS_HELP, show_default=False)]) -> None:
    """Train a Bradley–Terry reward model on preference pairs, or on pairs mined from a run's rollouts.

    Data: JSONL/Parquet rows with chosen, rejected (and optional prompt, margin), or a run's rollouts.jsonl
    (correct vs incorrect answers to one prompt). Prints the held-out pair accuracy before and after, and
    writes <run dir>/final, which `rewards: [{name: reward_model, path: <run dir>/final}]` loads.

    Example: rlvr rm recipes/rm_bt.yaml data.path=runs/grpo-demo/rollouts.jsonl train.steps=200
    """
    from rlvr.config import RMConfig, load_config
    from rlvr.rm.trainer import run_rm

    try:
        recipe, overrides = _split_args(args)
        run_rm(load_config(recipe, overrides, schema=RMConfig))
    except _user_errors() as err:
        _fail(err)


@app.command()
def prm(args: Annotated[list[str], typer.Argument(help=ARGS_HELP, show_default=False)]) -> None:
    """Train a process reward model (ER-PRM): label step prefixes by rollouts of the initial policy, then a
    per-step head.

    Samples label.solutions solutions to label.prompts training prompts with model.path, rolls out
    label.rollouts completions from every step prefix, labels each step with the entropy-regularized value
    (label.eta), and trains a per-token scalar head on the same model. Prints held-out step accuracy and
    best-of-n selection; writes <run dir>/labels.jsonl and <run dir>/final, which
    `rewards: [{name: prm, path: <run dir>/final}]` loads.

    With loss.type=oreal (recipes/prm_oreal.yaml) it trains OREAL's token-level reward model instead, from the
    solutions' outcomes only (label.rollouts=0); its final/ is model.token_rm_path of the `oreal` advantage.

    Example: rlvr prm recipes/prm_er.yaml label.prompts=64 train.steps=200
    """
    from rlvr.config import PRMConfig, load_config
    from rlvr.rm.prm import run_prm

    try:
        recipe, overrides = _split_args(args)
        run_prm(load_config(recipe, overrides, schema=PRMConfig))
    except _user_errors() as err:
        _fail(err)


def _eval_overrides(n: int, ks: list[int], model: str, task: str | None, temperature: float | None,
                    size: int | None) -> list[str]:
    """The config overrides that eval-style command options stand for."""
    extra = [f"eval.n={n}", f"eval.ks={ks}", f"model.path={model}"]
    if task is not None:
        extra.append(f"task.name={task}")
    if temperature is not None:
        extra.append(f"eval.temperature={temperature}")
    if size is not None:
        extra.append(f"eval.size={size}")
    return extra


@app.command("eval")
def eval_cmd(
    model_dir: Annotated[str, typer.Argument(help="A Hugging Face model directory (e.g. RUN/final), or 'builtin'.")],
    overrides: Annotated[Optional[list[str]], typer.Argument(
        help="key.sub=value overrides, e.g. task.digits=[3,4] rollout.max_new_tokens=128.",
        show_default=False)] = None,
    task: Annotated[Optional[str], typer.Option("--task", "-t", help="Task name (e.g. addition, "
                                                "reasoning_gym, jsonl). Default: the recipe's, else addition.")] = None,
    n: Annotated[int, typer.Option("--n", help="Samples per held-out prompt.")] = 8,
    k: Annotated[str, typer.Option("--k", help="Comma-separated k values for pass@k (each <= n).")] = "1",
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Write the full result as JSON here.")] = None,
    config: Annotated[Optional[Path], typer.Option("--config", "-c", help="Take task, rollout and model "
                                                   "settings from this recipe.")] = None,
    temperature: Annotated[Optional[float], typer.Option(help="Sampling temperature (default: the recipe's "
                                                         "rollout.temperature, 1.0).")] = None,
    size: Annotated[Optional[int], typer.Option(help="Use only the first SIZE held-out prompts.")] = None,
    split: Annotated[str, typer.Option(help="Which prompts: heldout, or train (with --size; for --sft-out).")
                     ] = "heldout",
    sft_out: Annotated[Optional[Path], typer.Option("--sft-out", help="With a search section and --split train: "
                                                    "write each problem's searched answer here as SFT data "
                                                    "(rlvr sft recipes/search_sft.yaml data.path=FILE).")] = None,
    sft_mode: Annotated[str, typer.Option("--sft-mode", help="With --sft-out: best (the chosen answer) or "
                                          "traversal (the dead ends the search reached, each followed by "
                                          "--backtrack, then the answer; needs search.select=verifier).")
                        ] = "best",
    backtrack: Annotated[Optional[str], typer.Option("--backtrack", help="--sft-mode traversal: the marker "
                                                     "written after each dead end (default ' <back> '); "
                                                     "{prompt} in it is replaced by the prompt.")
                         ] = None,
    max_dead_ends: Annotated[Optional[int], typer.Option("--max-dead-ends", help="--sft-mode traversal: at "
                                                         "most this many dead ends per row, the last ones "
                                                         "before the answer (default 2).")] = None,
    traversal_loss: Annotated[Optional[str], typer.Option("--traversal-loss", help="--sft-mode traversal: all "
                                                          "(default: SFT on the whole traversal) or final (the "
                                                          "dead ends go into the prompt: loss only on the last "
                                                          "backtrack and the answer).")] = None,
    plugin: PluginOption = None,
) -> None:
    """Evaluate a model on a task's held-out split: unbiased pass@k, accuracy, mean length.

    With search.name=... the searched answer's pass@1 against the tokens spent (docs/search.md).

    Example: rlvr eval builtin --task addition --n 16 --k 1,4,16 --out before.json
    """
    from rlvr.config import load_config
    from rlvr.eval.run import run_eval

    try:
        ks = [int(x) for x in k.split(",") if x.strip()]
    except ValueError:
        _fail(ValueError(f"--k: expected comma-separated integers like 1,4,16; got '{k}'"))
    try:
        cfg = load_config(config, [*_eval_overrides(n, ks, model_dir, task, temperature, size), *(overrides or [])],
                          plugins=plugin)
        run_eval(cfg, model_dir, out, split=split, sft_out=sft_out, sft_mode=sft_mode, backtrack=backtrack,
                 max_dead_ends=max_dead_ends, traversal_loss=traversal_loss)
    except _user_errors() as err:
        _fail(err)


@app.command()
def sweep(
    recipes: Annotated[list[str], typer.Argument(help="Recipe files to compare, then optional key=value "
                                                 "overrides applied to every run.", show_default=False)],
    seeds: Annotated[int, typer.Option(help="Seeds per recipe (run.seed = 0..seeds-1).")] = 3,
    steps: Annotated[int, typer.Option(help="RL steps per run (the same budget for every recipe).")] = 40,
    task: Annotated[Optional[str], typer.Option(help="Use this task (with its defaults) in every run; "
                                                "default: each recipe's own.")] = None,
    out: Annotated[Path, typer.Option(help="Output directory: runs/, summary.md, summary.json, curves.png.")] = Path(
        "runs/sweep"),
    jobs: Annotated[int, typer.Option(help="Runs in parallel (each gets cores/jobs threads; cores: this "
                                            "process's CPU affinity, so `taskset -c 1` gives one).")] = 1,
    eval_every: Annotated[Optional[int], typer.Option(help="Held-out eval every N steps (for best pass@1); "
                                                      "default steps/4.")] = None,
) -> None:
    """Run each recipe under the same task, budget and seeds, and compare them.

    Writes a table of final and best held-out pass@1, pass@k, final entropy, tokens used and wall time (mean ±
    std over seeds) and a plot of reward and entropy curves. Re-running the same command skips finished runs.

    Example: rlvr sweep recipes/grpo.yaml recipes/dr_grpo.yaml --seeds 3 --steps 40 --out runs/sweep1
    """
    from rlvr.trainer.sweep import plan_sweep, run_sweep

    files = [r for r in recipes if "=" not in r or Path(r).exists()]
    overrides = [r for r in recipes if r not in files]
    try:
        runs = plan_sweep(files, seeds, steps, out, task, eval_every, overrides)
        summary = run_sweep(runs, out, jobs)
    except _user_errors() as err:
        _fail(err)
    if summary.get("failed"):
        _fail(RuntimeError(f"{len(summary['failed'])} runs failed: {', '.join(summary['failed'])}"))


@app.command()
def lab(
    args: Annotated[Optional[list[str]], typer.Argument(
        help="A finding's name (see --list) or YAML file, then key=value overrides of the finding (e.g. "
        "steps=40); or `compare MINE.yaml BASELINE` (a recipe file or a shipped recipe's name).",
        show_default=False)] = None,
    list_: Annotated[bool, typer.Option("--list", help="Name the shipped findings, their arms and cost.")] = False,
    seeds: Annotated[Optional[int], typer.Option(help="How many seeds (default: the finding's, 5).")] = None,
    first_seed: Annotated[Optional[int], typer.Option(help="The first seed; seeds run first..first+seeds-1.")
                          ] = None,
    seed_list: Annotated[Optional[str], typer.Option("--seed-list", help="Exactly these seeds, e.g. 3,17,99.")
                         ] = None,
    steps: Annotated[Optional[int], typer.Option(help="compare: RL steps per run (default 60).")] = None,
    rollout_tokens: Annotated[Optional[int], typer.Option(help="compare: the equal rollout-token budget per run "
                                                          "(default: none, steps decide).")] = None,
    out: Annotated[Optional[Path], typer.Option(help="Output directory (default runs/lab/NAME).")] = None,
    jobs: Annotated[Optional[int], typer.Option(help="Runs in parallel, each with cores/jobs threads (cores: "
                                                      "this process's CPU affinity, so `taskset -c 1` gives one). "
                                                      "Default: one run per core, one thread each.",
                                                      show_default=False)] = None,
    interval: Annotated[str, typer.Option(help="t (default) or bootstrap (over seeds).")] = "t",
    run_anyway: Annotated[bool, typer.Option("--run-anyway", help="Run the arms even when the finding's premise is "
                                             "not met (the verdict still says it was not).")] = False,
    task: Annotated[Optional[str], typer.Option(help="compare: the lab task to compare on (countdown, the "
                                                "default, or running_total); all: only that task's findings.")
                    ] = None,
) -> None:
    """Test a claim about an RL method on a lab task and its model: arms x seeds, 95% intervals, a verdict.

    Writes OUT/lab.md (each arm's mean [95% interval] per metric, the treatment - control effect and the
    verdict: reproduced, not reproduced or inconclusive), lab.json, lab.png and finding.yaml. A finding's premise
    is measured first; when it is not met the verdict is "premise not met" and the arms are not run (unless
    --run-anyway). Re-running the same command continues an interrupted finding. docs/lab.md explains findings; docs/findings.md has ours.

    `rlvr lab all` runs every shipped finding in turn (OUT/NAME each, default runs/lab) and writes OUT/suite.md.

    Examples: rlvr lab --list | rlvr lab dr_grpo_length --seeds 5 --first-seed 100 |
    rlvr lab compare my.yaml grpo --seeds 5 | rlvr lab all
    """
    from rlvr.lab.finding import LAB_TASKS, comparison_finding, list_findings, load_finding
    from rlvr.lab.run import findings_listing, run_finding, run_suite
    from rlvr.trainer.sweep import available_cores

    try:
        if list_:
            from rich.table import Table

            table = Table()
            table.add_column("finding", no_wrap=True, min_width=max(len(n) for n in list_findings()) + 5)
            for title in ("task", "arms", "budget", "minutes (2 idle cores, 2 runs at a time)",
                          "premise (measured first)", "power at min_effect"):
                table.add_column(title, overflow="fold")
            for row in findings_listing(list_findings()):
                table.add_row(*row)
            _console().print(table)
            return
        words = list(args or [])
        if not words:
            raise typer.BadParameter("name a finding (rlvr lab --list), or: rlvr lab compare MINE BASELINE")
        if interval not in ("t", "bootstrap"):
            raise typer.BadParameter(f"--interval: expected t or bootstrap; got '{interval}'")
        if jobs is not None and jobs < 1:
            raise typer.BadParameter(f"--jobs: expected a positive number of runs at a time; got {jobs}")
        jobs = jobs or available_cores()
        if task is not None and task not in LAB_TASKS:
            raise typer.BadParameter(f"--task: expected one of {', '.join(LAB_TASKS)}; got '{task}'")
        chosen = [int(s) for s in seed_list.split(",") if s.strip()] if seed_list else None
        compare = words[0] == "compare"
        named = words[3:] if compare else words[1:]
        overrides = [w for w in named if "=" in w]
        if len(overrides) != len(named) or (compare and len(words) < 3):
            raise typer.BadParameter("usage: rlvr lab FINDING [key=value ...] or rlvr lab compare MINE BASELINE "
                                     f"[key=value ...] (finding keys, e.g. eval.size=50 steps=40); got {words}")
        if words[0] == "all":
            if steps is not None or rollout_tokens is not None:
                raise typer.BadParameter("--steps/--rollout-tokens are for `compare`; each finding's budget is "
                                         "part of its definition (override every finding's as steps=N)")
            suite = [load_finding(name, overrides) for name in list_findings()]
            suite = [f for f in suite if task is None or f.task == task]
            for finding in suite:
                _choose_seeds(finding, seeds, first_seed, chosen)
            root = out or Path("runs/lab")
            done = run_suite(suite, root, jobs=jobs, method=interval, run_anyway=run_anyway)  # type: ignore[arg-type]
            bad = [r["finding"] for r in done["findings"] if r["verdict"] == "error" or r["failed_runs"]]
            if bad:
                _fail(RuntimeError(f"lab all: {', '.join(bad)} did not finish cleanly; see {root / 'suite.md'}"))
            return
        if compare:
            finding = comparison_finding(words[1], words[2], seeds=seeds or 5, first_seed=first_seed or 0,
                                         steps=steps or 60, rollout_tokens=rollout_tokens, overrides=overrides,
                                         task=task or "countdown")
        else:
            if task is not None:
                raise typer.BadParameter("--task is for `compare` and `all`; a finding names its task (task: in "
                                         "its YAML)")
            finding = load_finding(words[0], overrides)
            if steps is not None or rollout_tokens is not None:
                raise typer.BadParameter("--steps/--rollout-tokens are for `compare`; a finding's budget is part "
                                         "of its definition (override it as steps=N rollout_tokens=N)")
        _choose_seeds(finding, seeds, first_seed, chosen)
        result = run_finding(finding, out or Path("runs/lab") / finding.name, jobs=jobs,  # type: ignore[arg-type]
                             method=interval, run_anyway=run_anyway)  # type: ignore[arg-type]
    except (_user_errors()) as err:
        _fail(err)
    if result.get("failed_runs"):
        _fail(RuntimeError(f"{len(result['failed_runs'])} runs failed: {', '.join(result['failed_runs'])}"))


def _choose_seeds(finding: Finding, seeds: Optional[int], first_seed: Optional[int],
                  chosen: Optional[list[int]]) -> None:
    """--seeds, --first-seed and --seed-list over the finding's own seeds."""
    if seeds is not None:
        finding.seeds = seeds
    if first_seed is not None:
        finding.first_seed = first_seed
    if chosen is not None:
        finding.seed_values = chosen


@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (metrics.jsonl, eval_*.json, rollouts.jsonl, "
                                            "config.yaml; each optional).")],
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="HTML file to write (default "
                                                "RUN_DIR/report.html).")] = None,
) -> None:
    """Write one self-contained HTML report of a run: curves, evaluations, rollout browser, config.

    The file opens offline, with no server. Training writes one at the end of every run.

    Example: rlvr report runs/demo --out demo.html
    """
    from rlvr.eval.report import write_report

    try:
        typer.echo(f"Report: {write_report(run_dir, out)}")
    except _user_errors() as err:
        _fail(err)


@app.command()
def compare(
    base: Annotated[str, typer.Argument(help="Base model dir (or 'builtin'), or an eval JSON to reuse.")],
    trained: Annotated[str, typer.Argument(help="Trained model dir (e.g. RUN/final), or an eval JSON.")],
    overrides: Annotated[Optional[list[str]], typer.Argument(help="key.sub=value overrides, as for eval.",
                                                             show_default=False)] = None,
    task: Annotated[Optional[str], typer.Option("--task", "-t", help="Task name; default: the recipe's, "
                                                "else addition.")] = None,
    n: Annotated[int, typer.Option("--n", help="Samples per held-out prompt; pass@k for k = 1, 2, 4, ..., n.")] = 256,
    out: Annotated[Path, typer.Option("--out", "-o", help="Output dir: comparison.json, comparison.md, passk.png, "
                                      "eval_base.json, eval_trained.json.")] = Path("runs/compare"),
    config: Annotated[Optional[Path], typer.Option("--config", "-c", help="Take task, rollout and model settings "
                                                   "from this recipe.")] = None,
    temperature: Annotated[Optional[float], typer.Option(help="Sampling temperature (default: 1.0).")] = None,
    size: Annotated[Optional[int], typer.Option(help="Use only the first SIZE held-out prompts.")] = None,
) -> None:
    """Compare the reasoning boundary of a base and a trained model: pass@k for k = 1..n.

    Reproduces "Does Reinforcement Learning Really Incentivize Reasoning Capacity in LLMs Beyond the Base
    Model?" (Yue et al., arXiv:2504.13837): both pass@k curves on a log-k axis, the problems only one model
    solves, and the k where the curves cross.

    Example: rlvr compare builtin runs/demo/final --task addition --n 256 --out runs/demo/compare
    """
    from rlvr.config import load_config
    from rlvr.eval.compare import CompareError, powers_of_two, print_comparison, run_compare

    try:
        extra = _eval_overrides(n, powers_of_two(n), base, task, temperature, size)
        cfg = load_config(config, [*extra, *(overrides or [])])
        print_comparison(run_compare(cfg, base, trained, out), out)
    except (*_user_errors(), CompareError) as err:
        _fail(err)


@app.command()
def doctor() -> None:
    """Which devices, rollout engines and optional layers work on this machine, and why not."""
    from rich.markup import escape
    from rich.table import Table

    from rlvr.doctor import all_checks
    from rlvr.runtime import console

    table = Table(title="rlvr doctor", show_lines=False)
    for column in ("check", "", "detail"):
        table.add_column(column)
    for check in all_checks():
        table.add_row(check.name, "[green]yes[/green]" if check.ok else "[yellow]no[/yellow]", escape(check.detail))
    console.print(table)


@config_app.command("show")
def config_show(
    args: Annotated[list[str], typer.Argument(help=ARGS_HELP, show_default=False)],
    sft: Annotated[bool, typer.Option("--sft", help="Read it as an SFT config.")] = False,
    rm: Annotated[bool, typer.Option("--rm", help="Read it as a reward-model (rlvr rm) config.")] = False,
    prm: Annotated[bool, typer.Option("--prm", help="Read it as a process-reward-model (rlvr prm) config.")] = False,
    plugin: PluginOption = None,
) -> None:
    """Print the fully resolved config (every default filled in) as YAML; a multi-stage recipe: one document per
    stage. The names that plugins registered are listed first, as YAML comments."""
    from rlvr.config import Config, PRMConfig, RMConfig, SFTConfig, dump_config, load_config, read_yaml
    from rlvr.config.stages import has_stages, load_stages

    try:
        recipe, overrides = _split_args(args)
        schema = SFTConfig if sft else RMConfig if rm else PRMConfig if prm else Config
        if schema is Config and recipe is not None and has_stages(read_yaml(recipe)):
            staged = load_stages(recipe, overrides, plugins=plugin)
            _echo_plugin_names()
            for stage in staged.stages:  # one YAML document per stage
                typer.echo(f"--- # {stage.label}: {stage.cfg.run.dir}")
                typer.echo(dump_config(stage.cfg), nl=False)
            return
        cfg = load_config(recipe, overrides, schema=schema, plugins=plugin)
        _echo_plugin_names()
        typer.echo(dump_config(cfg), nl=False)
    except _user_errors() as err:
        _fail(err)


def _echo_plugin_names() -> None:
    """`# plugin my_plugin.py: advantage mean_baseline, task parity` per plugin (comments: the YAML stays valid)."""
    from rlvr.plugins import provided_names

    for plugin, names in provided_names().items():
        typer.echo(f"# plugin {plugin}: {', '.join(f'{kind} {name}' for kind, name in names)}")


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
