"""`rlvr compare BASE TRAINED`: does RL widen what a model can solve, or only sharpen it?

Yue et al., "Does Reinforcement Learning Really Incentivize Reasoning Capacity in LLMs Beyond the Base
Model?" (arXiv:2504.13837) compare pass@k of a base and an RL-trained model over k = 1 ... 256: RL usually
wins at small k, while the base model often catches up and overtakes at large k, meaning it still solves
problems the trained model no longer does. This module computes that comparison from two evaluation
results (the JSON `evaluate()` writes, with per-problem `n` and `correct`):

- pass@k curves of both models at k = 1, 2, 4, ..., n (unbiased estimator; `rlvr.eval.passk`);
- coverage at the largest k, where pass@k > 0 exactly when a problem was solved at least once (correct > 0):
  the problems solved only by base, only by trained, by both and by neither, with their ids;
- the crossover k: the model that leads at the first k where the curves differ (normally k = 1) is caught
  up with, or passed, by the other at this k; None when that never happens up to n.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlvr.eval.passk import mean_pass_at_k

EPS = 1e-12  # curves closer than this count as equal


class CompareError(ValueError):
    """The two results cannot be compared (different problems, no per-problem records, unreadable file)."""


def powers_of_two(n: int) -> list[int]:
    """1, 2, 4, ... up to n (n itself is not added unless it is a power of two)."""
    if n < 1:
        raise ValueError(f"need n >= 1; got {n}")
    return [2**i for i in range(int(math.log2(n)) + 1) if 2**i <= n]


def _problems(result: dict[str, Any], which: str) -> dict[str, tuple[int, int]]:
    problems = result.get("problems")
    if not problems:
        raise CompareError(f"compare: the {which} result has no per-problem records ('problems' with n and "
                         "correct); evaluate with `rlvr eval ... --out FILE` to get them")
    out: dict[str, tuple[int, int]] = {}
    for p in problems:
        pid = str(p["id"])
        if pid in out:
            raise CompareError(f"compare: problem id '{pid}' appears twice in the {which} result")
        out[pid] = (int(p["n"]), int(p["correct"]))
    return out


def compare_models(base: dict[str, Any], trained: dict[str, Any], *, base_name: str | None = None,
                   trained_name: str | None = None) -> dict[str, Any]:
    """Compare two evaluation results on the same problems. Returns plain data (JSON-serialisable):

    `ks`, `n`, `num_problems`, `pass@k` {"base": {k: v}, "trained": {k: v}}, `diff` {k: trained - base},
    `coverage` {"k", "base_only", "trained_only", "both", "neither": {"count", "ids"}}, `leader` ("base",
    "trained" or None where the curves never differ), `crossover_k` (int or None), `names`.
    """
    b, t = _problems(base, "base"), _problems(trained, "trained")
    if set(b) != set(t):
        only_b, only_t = sorted(set(b) - set(t)), sorted(set(t) - set(b))
        raise CompareError(f"compare: the two results cover different problems ({len(only_b)} only in base, e.g. "
                         f"{only_b[:3]}; {len(only_t)} only in trained, e.g. {only_t[:3]}); evaluate both models "
                         "with the same task, eval.size and seed")
    ids = sorted(b)
    n = min(min(nc[0] for nc in b.values()), min(nc[0] for nc in t.values()))
    ks = powers_of_two(n)
    curves = {name: {str(k): mean_pass_at_k([side[i] for i in ids], k) for k in ks}
              for name, side in (("base", b), ("trained", t))}
    diff = {str(k): curves["trained"][str(k)] - curves["base"][str(k)] for k in ks}
    leader, crossover = find_crossover(ks, [curves["base"][str(k)] for k in ks],
                                       [curves["trained"][str(k)] for k in ks])

    solved_b = {i for i in ids if b[i][1] > 0}
    solved_t = {i for i in ids if t[i][1] > 0}
    sets = {"base_only": solved_b - solved_t, "trained_only": solved_t - solved_b, "both": solved_b & solved_t,
            "neither": set(ids) - solved_b - solved_t}
    return {
        "names": {"base": base_name or str(base.get("model", "base")),
                  "trained": trained_name or str(trained.get("model", "trained"))},
        "num_problems": len(ids),
        "n": n,
        "ks": ks,
        "pass@k": curves,
        "diff": diff,
        "coverage": {"k": ks[-1], **{name: {"count": len(s), "ids": sorted(s)} for name, s in sets.items()}},
        "leader": leader,
        "crossover_k": crossover,
    }


def find_crossover(ks: Sequence[int], base: Sequence[float], trained: Sequence[float]) -> tuple[str | None, int | None]:
    """(leader, crossover k). The leader is the model ahead at the first k where the curves differ; the
    crossover is the first later k at which the other model's pass@k is >= the leader's."""
    leader = None
    for k, vb, vt in zip(ks, base, trained):
        if leader is None:
            if abs(vt - vb) > EPS:
                leader = "trained" if vt > vb else "base"
            continue
        if (leader == "trained" and vb >= vt - EPS) or (leader == "base" and vt >= vb - EPS):
            return leader, int(k)
    return leader, None


def plot_comparison(result: dict[str, Any], path: str | Path) -> Path:
    """Both pass@k curves on a log2 k axis, the crossover marked, as a PNG (matplotlib, Agg, no pyplot state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    ks = result["ks"]
    fig = Figure(figsize=(6.4, 4.2), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for side, color, marker in (("base", "#1f6fb4", "o"), ("trained", "#d62728", "s")):
        ax.plot(ks, [100 * result["pass@k"][side][str(k)] for k in ks], marker=marker, color=color,
                label=f"{side}: {result['names'][side]}")
    if result.get("crossover_k"):
        ax.axvline(result["crossover_k"], color="#555", linestyle="--", linewidth=1,
                   label=f"crossover k={result['crossover_k']}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks)
    ax.set_xticklabels([str(k) for k in ks])
    ax.set_xlabel("k (samples per problem)")
    ax.set_ylabel("pass@k (%)")
    ax.set_title(f"pass@k on {result['num_problems']} problems (n={result['n']})")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, format="png")
    return path


def crossover_sentence(result: dict[str, Any]) -> str:
    if result["crossover_k"] is not None:
        other = "base" if result["leader"] == "trained" else "trained"
        return (f"Crossover: {result['leader']} leads at small k; {other} catches up at "
                f"k={result['crossover_k']}.")
    if result["leader"] is not None:
        return f"No crossover: {result['leader']} leads (or ties) at every k up to {result['ks'][-1]}."
    return "The two curves are identical."


def comparison_markdown(result: dict[str, Any]) -> str:
    names = result["names"]
    lines = [f"# pass@k: base vs trained ({result['num_problems']} problems, n={result['n']})", "",
             f"- base: `{names['base']}`", f"- trained: `{names['trained']}`", "",
             "| k | base pass@k | trained pass@k | trained - base |", "|---:|---:|---:|---:|"]
    for k in result["ks"]:
        vb, vt = result["pass@k"]["base"][str(k)], result["pass@k"]["trained"][str(k)]
        lines.append(f"| {k} | {100 * vb:.1f}% | {100 * vt:.1f}% | {100 * (vt - vb):+.1f} pts |")
    cov = result["coverage"]
    lines += ["", f"Coverage at k={cov['k']} (problems solved at least once):", "",
              "| solved by | problems |", "|---|---:|"]
    for key, label in (("both", "both"), ("base_only", "base only"), ("trained_only", "trained only"),
                       ("neither", "neither")):
        lines.append(f"| {label} | {cov[key]['count']} |")
    lines += ["", crossover_sentence(result)]
    for key, label in (("base_only", "Solved only by base"), ("trained_only", "Solved only by trained")):
        ids = cov[key]["ids"]
        if ids:
            shown = ", ".join(f"`{i}`" for i in ids[:50]) + (f" ... ({len(ids) - 50} more)" if len(ids) > 50 else "")
            lines += ["", f"{label}: {shown}"]
    return "\n".join(lines) + "\n"


def write_comparison(result: dict[str, Any], out_dir: str | Path) -> dict[str, Path]:
    """Write comparison.json, comparison.md and passk.png to `out_dir`; returns their paths by name."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "comparison.json", "markdown": out_dir / "comparison.md",
             "plot": out_dir / "passk.png"}
    paths["json"].write_text(json.dumps(result, indent=2) + "\n")
    paths["markdown"].write_text(comparison_markdown(result))
    plot_comparison(result, paths["plot"])
    return paths


def load_result(path: str | Path) -> dict[str, Any]:
    """An evaluation result written by `rlvr eval --out` or a training run's eval_*.json."""
    p = Path(path)
    if not p.is_file():
        raise CompareError(f"compare: no evaluation result at '{p}' (expected the JSON of `rlvr eval --out`)")
    try:
        return json.loads(p.read_text())
    except json.JSONDecodeError as err:
        raise CompareError(f"compare: '{p}' is not JSON ({err})") from None


def print_comparison(result: dict[str, Any], out_dir: str | Path | None = None) -> None:
    """The pass@k table, coverage and crossover on the console."""
    from rich.table import Table

    from rlvr.runtime import console

    table = Table(title=f"pass@k on {result['num_problems']} held-out problems, n={result['n']}")
    for col in ("k", f"base ({result['names']['base']})", f"trained ({result['names']['trained']})", "change"):
        table.add_column(col, justify="right")
    for k in result["ks"]:
        vb, vt = result["pass@k"]["base"][str(k)], result["pass@k"]["trained"][str(k)]
        table.add_row(str(k), f"{100 * vb:.1f}%", f"{100 * vt:.1f}%", f"{100 * (vt - vb):+.1f} pts")
    console.print(table)
    cov = result["coverage"]
    console.print(f"solved at k={cov['k']}: both {cov['both']['count']}, base only {cov['base_only']['count']}, "
                  f"trained only {cov['trained_only']['count']}, neither {cov['neither']['count']}")
    console.print(crossover_sentence(result))
    if out_dir is not None:
        from rich.markup import escape

        console.print(escape(f"Wrote {Path(out_dir) / 'comparison.md'}, comparison.json, passk.png"))


def run_compare(cfg: Any, base: str, trained: str, out_dir: str | Path) -> dict[str, Any]:
    """What `rlvr compare` does: get an evaluation of each model, compare, write the outputs.

    BASE and TRAINED are model directories (or 'builtin'), evaluated with `cfg` (its eval.n and eval.ks should
    be n and `powers_of_two(n)`; both models get the same prompts and seed) into OUT/eval_base.json and
    OUT/eval_trained.json; an existing .json file is read as a finished evaluation instead. Both models are
    checked against the task first (`check_eval_model`: e.g. an image task needs two vision-language models),
    so a wrong TRAINED fails before BASE's evaluation runs; errors name BASE or TRAINED.
    """
    out_dir = Path(out_dir)
    sources = {"base": str(base), "trained": str(trained)}
    models = {side: src for side, src in sources.items() if not src.endswith(".json")}
    if models:  # check both models against the task before the first (long) evaluation starts
        from rlvr.eval.run import check_eval_model, run_eval
        from rlvr.tasks import build_task

        task = build_task(cfg.task.name, cfg.task.params)
        for side, src in models.items():
            check_eval_model(cfg, task, src, key=side.upper())
    results = {}
    for side, source in sources.items():
        if side not in models:
            results[side] = load_result(source)
        else:
            results[side] = run_eval(cfg, source, out_dir / f"eval_{side}.json", key=side.upper())
    result = compare_models(results["base"], results["trained"], base_name=str(base), trained_name=str(trained))
    write_comparison(result, out_dir)
    return result
