#!/usr/bin/env python
"""Count the held-out problems among the training problems every built-in model was built from.

    python scripts/heldout_overlap.py              # every built-in model at its build's full count
    python scripts/heldout_overlap.py --limit 2000 # the first 2,000 training problems of each source (the test)

For each built-in model, the task variants its build script (or its GRPO run) drew training problems from, with
how many, and the task variants it is evaluated on. A training problem overlaps when its key (what makes two
problems the same for the evaluated task: countdown's sorted numbers and target, a scene, a question) is in
that task's held-out split. Prints one row per (model, training source, evaluated task) and exits 1 on any
overlap.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from rlvr.tasks import build_task  # noqa: E402

VL_TASKS = ("vl_count", "vl_click", "vl_digits_sum", "vl_jigsaw", "vl_ground")
VL_EASY = {"vl_click": {"buttons": (1, 1)}, "vl_ground": {"distractors": 0}}


@dataclass
class Source:
    task: str
    params: dict = field(default_factory=dict)
    count: int = 0  # training problems the build takes, in split order (a GRPO run: the whole split)


def models() -> dict[str, tuple[list[Source], list[tuple[str, dict]]]]:
    """model -> (its training sources, the task variants it is evaluated on)."""
    # The VL build: 4,300 steps of 16 rows over the 8 task slots of build_info.json (vl_count, vl_click and
    # vl_ground twice each), vl_click and vl_ground from their easy variant 30% of the time.
    vl_sources = []
    per_slot = 4300 * 16 // 8
    slots = {"vl_count": 2, "vl_click": 2, "vl_digits_sum": 1, "vl_jigsaw": 1, "vl_ground": 2}
    for name, n in slots.items():
        vl_sources.append(Source(name, {"seed": 0}, per_slot * n))
        if name in VL_EASY:
            vl_sources.append(Source(name, {"seed": 0, **VL_EASY[name]}, int(per_slot * n * 0.3) + 1))
    return {
        "builtin": ([Source("addition", {}, 80_000)], [("addition", {})]),
        "builtin-teacher (GRPO on the training split)": ([Source("addition", {}, 100_000)], [("addition", {})]),
        "builtin-lab": ([Source("countdown", {"pair_only": False}, 120_000)],
                        [("countdown", {}), ("countdown", {"pair_only": False})]),
        "builtin-lab-teacher (GRPO on the training split)": ([Source("countdown", {}, 100_000)],
                                                             [("countdown", {}), ("countdown", {"pair_only": False})]),
        "builtin-vl": (vl_sources, [(name, {"seed": 0}) for name in VL_TASKS]),
        "tool model (scripts/build_tool_model.py)": ([Source("addition", {"digits": (5, 8), "eval_size": 200},
                                                             20_000)],
                                                     [("addition", {"digits": (5, 8)})]),
    }


def overlap_rows(limit: int | None = None) -> list[dict]:
    rows = []
    for model, (sources, evaluated) in models().items():
        for ev_name, ev_params in evaluated:
            ev = build_task(ev_name, ev_params)
            key = ev._train.key  # what makes two problems the same for this task
            held = {key(r) for r in ev.heldout}
            for src in sources:
                if src.task != ev_name:
                    continue
                task = build_task(src.task, {**src.params, "train_size": max(src.count, 1)})
                count = src.count if limit is None else min(src.count, limit)
                keys = [key(task.train[i]) for i in range(count)]
                hits = sum(k in held for k in keys)
                rows.append({"model": model, "trained_on": f"{src.task} {json.dumps(src.params)}",
                             "evaluated_on": f"{ev_name} {json.dumps(ev_params)}", "training_problems": count,
                             "held_out": len(held), "overlap": hits, "held_out_hit": len(held & set(keys))})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=None, help="at most this many training problems per source")
    args = ap.parse_args()
    rows = overlap_rows(args.limit)
    print("| model | trained on | evaluated on | training problems | held-out | overlapping examples | "
          "held-out problems among them |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['trained_on']} | {r['evaluated_on']} | {r['training_problems']:,} | "
              f"{r['held_out']} | {r['overlap']} | {r['held_out_hit']} |", flush=True)
    sys.exit(1 if any(r["overlap"] for r in rows) else 0)


if __name__ == "__main__":
    main()
