"""Two runs gave the same training, apart from timing: compare their metrics.jsonl (and eval_*.json) line by line.

    python scripts/same_metrics.py RUN_A RUN_B [--ignore REGEX ...]

For a change that must not alter behaviour (a refactor, a new structure): train the same config at the same seed
on the tree before and after, then run this. Fields that measure wall-clock time or speed (names ending in `_s`,
`_per_s`, `seconds`, or starting with `time/` or `memory/`) are left out; every other field must be equal. Exit
status 0 when the runs match, 1 with the first differences printed when they do not.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

TIMING = [r"(^|/)(step|rollout|train|eval)_s$", r"_per_s$", r"(^|/)seconds$", r"^time/", r"^memory/"]


def _drop(obj, patterns: list[re.Pattern], prefix: str = ""):
    if isinstance(obj, dict):
        return {k: _drop(v, patterns, f"{prefix}{k}/") for k, v in obj.items()
                if not any(p.search(f"{prefix}{k}") for p in patterns)}
    if isinstance(obj, list):
        return [_drop(v, patterns, prefix) for v in obj]
    return obj


def _lines(path: Path, patterns: list[re.Pattern]) -> list:
    if path.suffix == ".jsonl":
        return [_drop(json.loads(line), patterns) for line in path.read_text().splitlines() if line.strip()]
    return [_drop(json.loads(path.read_text()), patterns)]


def compare(a: Path, b: Path, patterns: list[re.Pattern]) -> list[str]:
    problems: list[str] = []
    names = sorted({p.name for p in a.glob("eval_*.json")} | {p.name for p in b.glob("eval_*.json")})
    for name in ["metrics.jsonl", *names]:
        pa, pb = a / name, b / name
        if not pa.is_file() or not pb.is_file():
            problems.append(f"{name}: only in {a if pa.is_file() else b}")
            continue
        la, lb = _lines(pa, patterns), _lines(pb, patterns)
        if len(la) != len(lb):
            problems.append(f"{name}: {len(la)} lines in A, {len(lb)} in B")
        for i, (x, y) in enumerate(zip(la, lb), 1):
            if x != y:
                keys = sorted(k for k in set(x) | set(y) if x.get(k) != y.get(k)) if isinstance(x, dict) else []
                problems.append(f"{name} line {i}: differs in {', '.join(keys[:8]) or 'content'}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_a", type=Path)
    parser.add_argument("run_b", type=Path)
    parser.add_argument("--ignore", action="append", default=[], help="another field-name regex to leave out")
    args = parser.parse_args(argv)
    for run in (args.run_a, args.run_b):
        if not (run / "metrics.jsonl").is_file():
            parser.error(f"{run} has no metrics.jsonl: pass a run directory (runs/...)")
    patterns = [re.compile(p) for p in TIMING + args.ignore]
    problems = compare(args.run_a, args.run_b, patterns)
    for line in problems[:20]:
        print(line)
    steps = sum(1 for line in (args.run_a / "metrics.jsonl").read_text().splitlines() if line.strip())
    print("different" if problems else f"identical apart from timing ({steps} metric lines, eval files included)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
