"""Held-out evaluation during training: before, every `eval.every` steps, and after; the before/after table."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch

from rlvr.config import Config
from rlvr.eval import evaluate, write_results
from rlvr.eval.evaluate import graded
from rlvr.rollout import SamplingParams
from rlvr.runtime import ProgressReporter, console, format_metrics, step_seed

log = logging.getLogger("rlvr.train")


def run_eval(cfg: Config, engine: Any, renderer: Any, task: Any, run_dir: Path, tag: str,
             generate: Any = None) -> dict[str, Any]:
    """Held-out pass@k / maj@k of the current policy, with its own seed (the training RNG is left as it was);
    written to `eval_<tag>.json` and printed."""
    records = list(task.heldout)[: cfg.eval.size] if cfg.eval.size else list(task.heldout)
    params = SamplingParams(n=cfg.eval.n, temperature=cfg.eval.temperature or cfg.rollout.temperature,
                            top_p=cfg.rollout.top_p, top_k=cfg.rollout.top_k,
                            max_new_tokens=cfg.rollout.max_new_tokens, stop=list(cfg.rollout.stop))
    rng_state = torch.get_rng_state()
    torch.manual_seed(step_seed(cfg.run.seed, 10**9))  # evals use their own seed; training RNG untouched
    from rlvr.eval.run import select_scorer

    scorer = select_scorer(cfg, task)  # eval.select_model: rm@k beside maj@k
    with ProgressReporter(f"eval ({tag})", len(records), cfg.logging.progress) as progress:
        result = evaluate(engine, renderer, task, records, params, cfg.eval.ks, generate=generate, scorer=scorer,
                          on_progress=lambda done, total: progress.update(done))
    torch.set_rng_state(rng_state)
    result["tag"] = tag
    write_results(result, run_dir / f"eval_{tag}.json")
    console.print(f"eval ({tag}): " + format_metrics(eval_summary(result), tuple(eval_summary(result))))
    return result


def saved_eval(run_dir: Path, tag: str) -> dict[str, Any] | None:
    """An evaluation a previous invocation of this run wrote (eval_<tag>.json), e.g. `before` after --resume."""
    path = Path(run_dir) / f"eval_{tag}.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        log.warning("could not read %s (%s); the before/after table is not printed", path, err)
        return None


def eval_summary(result: dict[str, Any]) -> dict[str, float]:
    out = {f"pass@{k}": v for k, v in result["pass@k"].items()}
    out.update({f"maj@{k}": v for k, v in result.get("maj@k", {}).items() if k != "1"})
    out.update({f"rm@{k}": v for k, v in result.get("rm@k", {}).items() if k != "1"})
    if graded(result):
        out["mean_reward"] = result["mean_reward"]
    out["mean_length"] = result["mean_length"]
    return out


def print_before_after(before: dict[str, Any], after: dict[str, Any], ks: list[int]) -> None:
    from rich.table import Table

    table = Table(title="Held-out evaluation: before vs after training")
    table.add_column("metric")
    table.add_column("before", justify="right")
    table.add_column("after", justify="right")
    table.add_column("change", justify="right")
    rows = [("pass@k", k) for k in ks] + [("maj@k", k) for k in ks if k > 1]
    for kind, k in rows:
        b, a = before.get(kind, {}).get(str(k)), after.get(kind, {}).get(str(k))
        if b is None or a is None:
            continue
        label = kind.replace("k", str(k))
        table.add_row(label, f"{100 * b:.1f}%", f"{100 * a:.1f}%", f"{100 * (a - b):+.1f} pts")
    if graded(before) and graded(after):
        table.add_row("mean verifier reward", f"{before['mean_reward']:.3f}", f"{after['mean_reward']:.3f}",
                      f"{after['mean_reward'] - before['mean_reward']:+.3f}")
    table.add_row("mean length (tokens)", f"{before['mean_length']:.1f}", f"{after['mean_length']:.1f}",
                  f"{after['mean_length'] - before['mean_length']:+.1f}")
    console.print(table)
