#!/usr/bin/env python
"""Plot chosen metrics of one or more runs side by side (a rolling mean over steps), as a PNG.

    python scripts/plot_runs.py runs/agent_demo runs/agent_demo_no_otc \
        --metrics accuracy agent/tool_success_rate agent/multi_call_frac --window 5 --out docs/figures/agent_demo.png

Each run is labelled by its directory name (or `--labels`). Reads RUN/metrics.jsonl.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def rolling(values: list[float], window: int) -> list[float]:
    out = []
    for i in range(len(values)):
        chunk = values[max(0, i - window + 1) : i + 1]
        out.append(sum(chunk) / len(chunk))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--metrics", nargs="+", required=True)
    ap.add_argument("--labels", nargs="*", default=None)
    ap.add_argument("--window", type=int, default=5, help="rolling-mean window in steps")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    if args.labels and len(args.labels) != len(args.runs):
        ap.error("--labels: give one label per run")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rlvr.tracking import read_metrics

    labels = args.labels or [r.name for r in args.runs]
    fig, axes = plt.subplots(1, len(args.metrics), figsize=(4.2 * len(args.metrics), 3.2), squeeze=False)
    for run, label in zip(args.runs, labels):
        metrics = read_metrics(run)
        for ax, key in zip(axes[0], args.metrics):
            points = [(m["step"], m[key]) for m in metrics if key in m]
            if not points:
                raise SystemExit(f"{run}: no metric '{key}'")
            steps, values = zip(*points)
            ax.plot(steps, rolling(list(values), args.window), label=label)
    for ax, key in zip(axes[0], args.metrics):
        ax.set_title(f"{key} (rolling mean of {args.window})", fontsize=9)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
