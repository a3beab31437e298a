#!/usr/bin/env python
"""Build the built-in teacher (src/rlvr/models/builtin_teacher/): the built-in model after the demo's GRPO run.

    python scripts/build_teacher_model.py                  # trains recipes/grpo.yaml (seed 0), ~5-20 min on CPU
    python scripts/build_teacher_model.py --from-run DIR   # copy DIR/final of a finished `rlvr train
                                                           # recipes/grpo.yaml` run instead of training again

The teacher shares the built-in model's tokenizer and architecture and is much more accurate on held-out
addition (its pass@1 is written to build_info.json from the run's eval_after.json), so distillation recipes
(on_policy_distill, kdrl) have something to learn from on a laptop CPU without any download.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "rlvr" / "models" / "builtin_teacher"
FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--from-run", type=Path, default=None, help="a finished recipes/grpo.yaml run directory")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rlvr-teacher-") as tmp:
        run = args.from_run
        if run is None:
            run = Path(tmp) / "run"
            subprocess.run([sys.executable, "-m", "rlvr", "train", str(ROOT / "recipes" / "grpo.yaml"),
                            f"run.dir={run}", "logging.progress=false"], check=True, cwd=ROOT,
                           env={"PYTHONPATH": str(ROOT / "src"), **__import__("os").environ})
        final, after = run / "final", run / "eval_after.json"
        missing = [f for f in FILES if not (final / f).is_file()]
        if missing or not after.is_file():
            sys.exit(f"{run}: not a finished run (missing {missing or 'eval_after.json'})")
        OUT.mkdir(parents=True, exist_ok=True)
        for f in FILES:
            shutil.copy2(final / f, OUT / f)
        result = json.loads(after.read_text())
        info = {"source": "rlvr train recipes/grpo.yaml (seed 0) from the built-in model; final/ of that run",
                "heldout_eval": {"pass@k": result.get("pass@k"), "n": result.get("n"),
                                 "prompts": result.get("num_prompts"), "temperature": result.get("temperature")}}
        (OUT / "build_info.json").write_text(json.dumps(info, indent=2) + "\n")
        print(f"wrote {OUT} (held-out pass@k {result.get('pass@k')})")


if __name__ == "__main__":
    main()
