"""The ablation harness: several recipes x several seeds under one task and budget, then a comparison.

    rlvr sweep recipes/grpo.yaml recipes/rloo.yaml --seeds 3 --steps 40 --task addition --out runs/sweep1

Each (recipe, seed) is an ordinary `rlvr train` run in its own directory under OUT/runs/, started as a
subprocess (so runs can go in parallel when cores allow, and a crash costs one run). Finished runs are skipped
when the same command is run again, so an interrupted sweep continues where it stopped. The summary is
OUT/summary.json, OUT/summary.md (mean ± std over seeds) and OUT/curves.png (reward and entropy per step).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.markup import escape

from rlvr.config import Config, ConfigError, PRMConfig, RMConfig, load_config
from rlvr.runtime import console
from rlvr.tracking import read_metrics


@dataclass
class SweepRun:
    """One (arm, seed): `rlvr train RECIPE OVERRIDES`, or with `model` set, `rlvr eval MODEL --config RECIPE` of
    a model that is not trained (a lab finding's base arm), whose result lands in RUN_DIR/eval_after.json."""

    recipe: Path
    seed: int
    run_dir: Path
    overrides: list[str]
    arm: str | None = None  # the name in tables; default: the recipe's stem
    model: str | None = None  # set: evaluate this model instead of training
    verb: str = "train"  # the rlvr command of a run that is not an evaluation: train, or rm (a preparation)
    done_file: str | None = None  # set: the run is done when RUN_DIR/DONE_FILE exists (e.g. final/config.json)

    @property
    def name(self) -> str:
        return self.arm or self.recipe.stem

    @property
    def done(self) -> bool:
        if self.done_file is not None:
            return (self.run_dir / self.done_file).is_file()
        trained = self.model is not None or (self.run_dir / "final" / "config.json").is_file()
        return trained and (self.run_dir / "eval_after.json").is_file()

    def command(self) -> list[str]:
        if self.model is None:
            return [self.verb, str(self.recipe), *self.overrides]
        evals = [o for o in self.overrides if not o.startswith(("run.dir=", "train.", "eval.every=", "model.path="))]
        return ["eval", self.model, "--config", str(self.recipe), "--out", str(self.run_dir / "eval_after.json"),
                *evals]


def plan_sweep(recipes: Sequence[str | Path], seeds: int, steps: int, out: Path, task: str | None,
               eval_every: int | None, overrides: Sequence[str]) -> list[SweepRun]:
    """One run per (recipe, seed); every config is validated before anything starts."""
    common = [f"train.steps={steps}", "eval.after=true", "eval.before=false", "logging.progress=false",
              f"eval.every={eval_every if eval_every is not None else max(1, steps // 4)}"]
    if task is not None:
        common.append(f"task={{name: {task}}}")
    arms = [PlannedArm(Path(r).stem, Path(r)) for r in recipes]
    return plan_runs(arms, range(seeds), out, [*common, *overrides])


@dataclass
class PlannedArm:
    """One arm of a sweep: a recipe, the arm's own overrides, and with `model` set an evaluation of that model
    instead of a training run."""

    name: str
    recipe: Path
    overrides: list[str] = field(default_factory=list)
    model: str | None = None
    verb: str = "train"  # rlvr train, or rlvr rm / rlvr prm (a (process) reward model: a lab preparation)
    done_file: str | None = None  # see SweepRun.done_file


def _schema(verb: str) -> Any:
    return {"train": Config, "rm": RMConfig, "prm": PRMConfig}[verb]


def plan_runs(arms: Sequence[PlannedArm], seeds: Sequence[int], out: Path, common: Sequence[str]) -> list[SweepRun]:
    """One run per (arm, seed) in OUT/runs/ARM/seedS, with overrides `common`, then the arm's, then the seed and
    directory; `{seed}` in an override is replaced by the run's seed. Every config is validated before anything
    starts (all problems reported at once)."""
    runs, problems = [], []
    for arm in arms:
        for seed in seeds:
            run_dir = out / "runs" / arm.name / f"seed{seed}"
            extra = [o.replace("{seed}", str(seed)) for o in [*common, *arm.overrides]]
            extra += [f"run.seed={seed}", f"run.dir={run_dir}"]
            try:
                load_config(arm.recipe, extra, schema=_schema(arm.verb))
            except ConfigError as err:
                problems.append(f"{arm.name} ({arm.recipe}): {err}")
                break
            runs.append(SweepRun(arm.recipe, seed, run_dir, extra, arm=arm.name, model=arm.model, verb=arm.verb,
                                 done_file=arm.done_file))
    if problems:
        raise ConfigError(problems)
    return runs


def _execute(run: SweepRun, threads: int) -> tuple[SweepRun, int, float]:
    if run.done:
        return run, 0, 0.0
    if run.run_dir.exists():  # an earlier attempt died: start that run over
        import shutil

        shutil.rmtree(run.run_dir)
    run.run_dir.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    started = time.perf_counter()
    log_path = run.run_dir.parent / f"{run.run_dir.name}.log"
    if run.model is not None:
        run.run_dir.mkdir(parents=True)
    with log_path.open("w") as log:
        proc = subprocess.run([sys.executable, "-m", "rlvr", *run.command()], stdout=log, stderr=subprocess.STDOUT,
                              env=env)
    return run, proc.returncode, time.perf_counter() - started


def available_cores() -> int:
    """The cores this process may use: its CPU affinity (`taskset -c 1` gives one)."""
    return len(os.sched_getaffinity(0))


def run_sweep(runs: list[SweepRun], out: Path, jobs: int = 1, *, summarize: bool = True) -> dict[str, Any]:
    """Run what is not done yet, `jobs` at a time; with `summarize`, write OUT/summary.{json,md} and curves.png
    (runs that end in an evaluation). Returns the summary ({"failed": [...]} alone without `summarize`)."""
    out.mkdir(parents=True, exist_ok=True)
    threads = max(1, available_cores() // max(1, jobs))
    pending = [r for r in runs if not r.done]
    console.print(f"sweep: {len(runs)} runs ({len(runs) - len(pending)} already done), {jobs} at a time")
    failures = []
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for i, (run, code, seconds) in enumerate(pool.map(lambda r: _execute(r, threads), pending), start=1):
            status = "ok" if code == 0 else f"FAILED (exit {code}, see {run.run_dir}.log)"
            console.print(escape(f"  [{i}/{len(pending)}] {run.name} seed {run.seed}: {status} in {seconds:.0f} s"))
            if code != 0:
                failures.append(run)
    if not summarize:
        return {"failed": [f"{r.name} seed {r.seed}" for r in failures]}
    summary = summarize_sweep([r for r in runs if r.done])
    summary["failed"] = [f"{r.name} seed {r.seed}" for r in failures]
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "summary.md").write_text(summary_table(summary) + "\n")
    plot_curves(runs, out / "curves.png")
    console.print(summary_table(summary))
    return summary


def _run_stats(run_dir: Path) -> dict[str, float]:
    metrics = read_metrics(run_dir) if (run_dir / "metrics.jsonl").is_file() else []  # none: an eval-only arm
    after = json.loads((run_dir / "eval_after.json").read_text())
    last = metrics[-1] if metrics else {}
    passk = after.get("pass@k") or {}
    final = passk.get("1", after.get("solve_rate", math.nan))  # a search evaluation: its searched answer's pass@1
    evals = [m["eval/pass@1"] for m in metrics if "eval/pass@1" in m] + [final]
    stats = {
        "final_pass@1": final,
        "best_pass@1": max(evals),
        "final_entropy": last.get("entropy", float("nan")),
        "steps": float(len(metrics)),
        # every sampled token, including groups a sampler dropped (older runs: the trained responses only)
        "rollout_tokens": last.get("rollout_tokens_total",
                                          sum(m.get("response_tokens", 0.0) for m in metrics)),
        "train_tokens": sum(m.get("train_tokens", 0.0) for m in metrics),
        "wall_s": sum(m.get("step_s", 0.0) for m in metrics),
    }
    for k, v in passk.items():
        if k != "1":
            stats[f"final_pass@{k}"] = v
    return stats


def summarize_sweep(runs: list[SweepRun]) -> dict[str, Any]:
    by_recipe: dict[str, list[dict[str, float]]] = {}
    for run in runs:
        by_recipe.setdefault(run.name, []).append(_run_stats(run.run_dir))
    recipes = {}
    for name, rows in by_recipe.items():
        keys = list(rows[0])
        recipes[name] = {"seeds": len(rows), **{k: _mean_std([r[k] for r in rows]) for k in keys}}
    return {"recipes": recipes}


def _mean_std(values: list[float]) -> dict[str, float]:
    """Mean and std over the finite values (an evaluation-only arm has no entropy: nan, left out)."""
    finite = [v for v in values if math.isfinite(v)]
    return {"mean": statistics.fmean(finite) if finite else math.nan,
            "std": statistics.stdev(finite) if len(finite) > 1 else 0.0}


def summary_table(summary: dict[str, Any]) -> str:
    recipes = summary["recipes"]
    if not recipes:
        return "(no finished runs)"
    keys = list(dict.fromkeys(k for row in recipes.values() for k in row if k != "seeds"))  # every arm's, in order
    head = "| recipe | seeds | " + " | ".join(keys) + " |"
    lines = [head, "|" + "---|" * (len(keys) + 2)]
    for name, row in recipes.items():
        cells = []
        for k in keys:
            if k not in row:  # e.g. pass@16 of a plain evaluation beside a search evaluation's arm
                cells.append("n/a")
                continue
            m, s = row[k]["mean"], row[k]["std"]
            if "pass@" in k:
                cells.append(f"{100 * m:.1f} ± {100 * s:.1f}%")
            elif "tokens" in k:
                cells.append(f"{m:,.0f} ± {s:,.0f}")
            else:
                cells.append(f"{m:.3g} ± {s:.2g}")
        lines.append(f"| {name} | {row['seeds']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_curves(runs: list[SweepRun], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    names = sorted({r.name for r in runs})
    for name in names:
        curves = [read_metrics(r.run_dir) for r in runs if r.name == name and r.done and r.model is None]
        if not curves:
            continue
        length = min(len(c) for c in curves)
        for ax, key in zip(axes, ("reward_mean", "entropy")):
            data = np.array([[m.get(key, np.nan) for m in c[:length]] for c in curves], dtype=float)
            with warnings.catch_warnings():  # a step no seed logged `key` at: a gap in the curve, not a warning
                warnings.simplefilter("ignore", RuntimeWarning)
                mean, std = np.nanmean(data, axis=0), np.nanstd(data, axis=0)
            steps = np.arange(1, length + 1)
            ax.plot(steps, mean, label=name)
            ax.fill_between(steps, mean - std, mean + std, alpha=0.2)
    for ax, title in zip(axes, ("reward (mean over seeds)", "policy entropy")):
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    if axes[0].get_legend_handles_labels()[0]:  # evaluation-only arms draw no curve
        axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
