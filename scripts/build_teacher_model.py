#!/usr/bin/env python
"""Build the built-in teacher: the built-in model after a GRPO run of recipes/grpo.yaml (seed 0).

    python scripts/build_teacher_model.py                  # builtin-teacher: the built-in model after the
                                                           # demo's GRPO run on addition, ~5-20 min on CPU
    python scripts/build_teacher_model.py --from-run DIR   # copy DIR/final of a finished run of the same
                                                           # command instead of training again

The lab model's teacher (builtin-lab-teacher) is built by `scripts/build_lab_model.py --teacher` instead.

A teacher shares its student's tokenizer and architecture and is more accurate on the held-out split (its
pass@k is written to build_info.json from the run's eval_after.json), so distillation recipes
(on_policy_distill, kdrl) have something to learn from on a laptop CPU without any download. It is stronger,
not larger: the same size as its student, trained longer.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "src" / "rlvr" / "models"
FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
# name -> (output directory, overrides of recipes/grpo.yaml, what build_info.json says it is)
TEACHERS = {
    "builtin-teacher": (MODELS / "builtin_teacher", [],
                        "rlvr train recipes/grpo.yaml (seed 0) from the built-in model; final/ of that run"),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--from-run", type=Path, default=None, help="a finished run of the same command")
    args = ap.parse_args()
    name = "builtin-teacher"
    out, overrides, source = TEACHERS[name]
    with tempfile.TemporaryDirectory(prefix="rlvr-teacher-") as tmp:
        run = args.from_run
        if run is None:
            run = Path(tmp) / "run"
            subprocess.run([sys.executable, "-m", "rlvr", "train", str(ROOT / "recipes" / "grpo.yaml"), *overrides,
                            f"run.dir={run}", "logging.progress=false"], check=True, cwd=ROOT,
                           env={"PYTHONPATH": str(ROOT / "src"), **os.environ})
        final, after = run / "final", run / "eval_after.json"
        missing = [f for f in FILES if not (final / f).is_file()]
        if missing or not after.is_file():
            sys.exit(f"{run}: not a finished run (missing {missing or 'eval_after.json'})")
        out.mkdir(parents=True, exist_ok=True)
        for f in FILES:
            shutil.copy2(final / f, out / f)
        result = json.loads(after.read_text())
        info = {"source": source,
                "heldout_eval": {"pass@k": result.get("pass@k"), "n": result.get("n"),
                                 "prompts": result.get("num_prompts"), "temperature": result.get("temperature")}}
        (out / "build_info.json").write_text(json.dumps(info, indent=2) + "\n")
        print(f"wrote {out} ({name}; held-out pass@k {result.get('pass@k')})")


if __name__ == "__main__":
    main()
