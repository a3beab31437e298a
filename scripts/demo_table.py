#!/usr/bin/env python3
"""Print README's before/after table of `make demo` from one or more run directories.

    python scripts/demo_table.py runs/demo-20261125-0614 [runs/demo-... ...] [--machine "2-core AMD EPYC"]

Each run directory must hold eval_before.json and eval_after.json (written by `rlvr train` with eval.before and
eval.after on, as in recipes/grpo.yaml); metrics.jsonl adds the wall time and versions.json the torch threads.
With one run the table gives its figures; with several, each cell is the range (min-max) over the runs, since
these figures vary with the machine and its load. A line under the table names the machine(s) and dates.
Only the standard library is used, so it runs without the venv.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path


def load_run(run_dir: Path) -> dict:
    try:
        before = json.loads((run_dir / "eval_before.json").read_text())
        after = json.loads((run_dir / "eval_after.json").read_text())
    except FileNotFoundError as err:
        sys.exit(f"error: {run_dir}: {Path(err.filename).name} is missing; the run needs eval.before=true and "
                 "eval.after=true and must have finished")
    except ValueError as err:
        sys.exit(f"error: {run_dir}: an eval file is not valid JSON ({err})")
    steps, wall = 0, before.get("seconds", 0.0) + after.get("seconds", 0.0)
    metrics = run_dir / "metrics.jsonl"
    if metrics.is_file():
        rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
        steps = len(rows)
        wall += sum(float(r.get("step_s") or 0.0) for r in rows)
    versions = {}
    if (run_dir / "versions.json").is_file():
        versions = json.loads((run_dir / "versions.json").read_text())
    when = dt.datetime.fromtimestamp((run_dir / "eval_after.json").stat().st_mtime, dt.timezone.utc)
    return {"dir": run_dir, "before": before, "after": after, "steps": steps, "wall_s": wall,
            "threads": versions.get("torch_threads"), "date": when.strftime("%Y-%m-%d")}


def _span(values: list[float], fmt: str) -> str:
    lo, hi = min(values), max(values)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}-{fmt.format(hi)}"


def table(runs: list[dict]) -> str:
    first = runs[0]["before"]
    ks = sorted({int(k) for r in runs for k in r["before"]["pass@k"]})
    head = (f"| held-out {first.get('task', 'addition')}, {first['num_prompts']} prompts, {first['n']} samples "
            f"each, T={first['temperature']} | before | after | change |")
    lines = [head, "|---|---|---|---|"]
    rows = [("pass@k", k) for k in ks] + [("maj@k", k) for k in ks if k > 1]
    for kind, k in rows:
        b = [100 * r["before"][kind][str(k)] for r in runs if str(k) in r["before"].get(kind, {})]
        a = [100 * r["after"][kind][str(k)] for r in runs if str(k) in r["after"].get(kind, {})]
        if len(b) != len(runs) or len(a) != len(runs):
            continue
        change = [x - y for x, y in zip(a, b)]
        label = kind.replace("k", str(k))
        lines.append(f"| {label} | {_span(b, '{:.1f}')}% | {_span(a, '{:.1f}')}% | "
                     f"{_span(change, '{:+.1f}')} pts |")
    return "\n".join(lines)


def provenance(runs: list[dict], machine: str | None) -> str:
    dates = sorted({r["date"] for r in runs})
    walls = [r["wall_s"] for r in runs]
    steps = sorted({r["steps"] for r in runs})
    where = machine or f"a {runs[0]['threads'] or '?'}-thread CPU"
    what = f"{len(runs)} run{'s' if len(runs) > 1 else ''}"
    return (f"Measured on {where}, {', '.join(dates)} ({what}; {'/'.join(map(str, steps))} GRPO steps; "
            f"{_span(walls, '{:.0f}')} s wall time for evaluation, training and evaluation).")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, help="run directories of `make demo` (or rlvr train)")
    ap.add_argument("--machine", help="how to name the machine, e.g. '2-core AMD EPYC (shared)'")
    args = ap.parse_args(argv)
    runs = [load_run(r) for r in args.runs]
    print(table(runs))
    print()
    print(provenance(runs, args.machine))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
