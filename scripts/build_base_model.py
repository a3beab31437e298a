#!/usr/bin/env python
"""Build the shipped model (src/rlvr/models/builtin/) from scratch, reproducibly, with rlvr's own `rlvr sft`.

    python scripts/build_base_model.py            # about 6 minutes on 2 CPU cores

1. A byte-level tokenizer (one token per character) and a randomly initialised small Qwen2 causal LM (seeded).
2. Synthetic SFT data: addition problems from the `addition` task's *training* split, solved with the
   column scratchpad by a careless teacher who drops a needed carry with probability CARRY_SLIP and gets a
   column sum off by one with probability DIGIT_SLIP. The model learns the procedure and the carelessness.
3. `rlvr sft recipes/sft_builtin.yaml` trains it.
4. `rlvr eval` measures held-out pass@1 and pass@16 at temperature 1.0. The build fails unless
   15% <= pass@1 <= 50% and pass@16 >= 2 x pass@1: imperfect on purpose, so that RL has room to show.

The slips are why the model is imperfect: its greedy answers are nearly always right, while sampling at
temperature 1 reproduces the teacher's slip rates. RL's job on it is to make it reliable.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from rlvr.models.byte_tokenizer import save_byte_tokenizer  # noqa: E402
from rlvr.tasks.addition import AdditionTask, worked_solution  # noqa: E402

CARRY_SLIP = 0.1
DIGIT_SLIP = 0.3
ARCH = dict(hidden_size=128, intermediate_size=384, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=512, rope_theta=10000.0, tie_word_embeddings=True)
MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
               "tokenizer_config.json", "special_tokens_map.json")


def make_data(path: Path, count: int, seed: int) -> float:
    task = AdditionTask()
    rng = random.Random(seed)
    right = 0
    with path.open("w") as f:
        for i in range(count):
            record = task.train[i]
            text, ok = worked_solution(record.meta["a"], record.meta["b"], rng=rng, carry_slip=CARRY_SLIP,
                                       digit_slip=DIGIT_SLIP)
            right += ok
            f.write(json.dumps({"prompt": task.plain_prompt(record), "completion": text}) + "\n")
    return right / count


def make_init_model(path: Path, seed: int, arch: dict | None = None) -> None:
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tok = save_byte_tokenizer(path)
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=len(tok), bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id, **(arch or ARCH))
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    model.save_pretrained(str(path), safe_serialization=True)


def rlvr(*args: str) -> None:
    cmd = [sys.executable, "-m", "rlvr", *args]
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "src/rlvr/models/builtin")
    ap.add_argument("--work", type=Path, default=ROOT / "runs/build_base_model")
    ap.add_argument("--examples", type=int, default=80_000)
    ap.add_argument("--steps", type=int, default=1200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-check", action="store_true", help="Skip the pass@k acceptance bounds.")
    args = ap.parse_args()

    started = time.time()
    if args.work.exists():
        shutil.rmtree(args.work)
    args.work.mkdir(parents=True)
    data = args.work / "sft_data.jsonl"
    teacher_acc = make_data(data, args.examples, args.seed)
    print(f"wrote {args.examples} examples to {data}; the careless teacher is right {100 * teacher_acc:.1f}% "
          "of the time", flush=True)
    init = args.work / "init"
    make_init_model(init, args.seed)

    sft_into(args.out, "recipes/sft_builtin.yaml", init, data, args.work, args.seed, args.steps)
    result = eval_at_t1(args.out, args.work, "addition", 16, "1,4,16", 96)
    p1, p16 = result["pass@k"]["1"], result["pass@k"]["16"]
    minutes = (time.time() - started) / 60
    card = {
        "architecture": "Qwen2ForCausalLM", **ARCH,
        "parameters": _count_params(args.out),
        "tokenizer": "byte-level, no merges (one token per ASCII character), tokenizers library",
        "task": "addition, 2-4 digit operands, column scratchpad",
        "sft": {"examples": args.examples, "steps": args.steps, "seed": args.seed, "carry_slip": CARRY_SLIP,
                "digit_slip": DIGIT_SLIP, "teacher_accuracy": round(teacher_acc, 4)},
        "heldout_eval": {"temperature": 1.0, "n": 16, "prompts": result["num_prompts"],
                         "pass@1": round(p1, 4), "pass@4": round(result["pass@k"]["4"], 4),
                         "pass@16": round(p16, 4)},
        "build_minutes": round(minutes, 1),
    }
    (args.out / "build_info.json").write_text(json.dumps(card, indent=2) + "\n")
    print(json.dumps(card, indent=2))
    if not args.no_check:
        if not 0.15 <= p1 <= 0.50:
            sys.exit(f"pass@1 = {p1:.3f} is outside [0.15, 0.50]")
        if p16 < 2 * p1:
            sys.exit(f"pass@16 = {p16:.3f} is less than twice pass@1 = {p1:.3f}")
    print(f"built {args.out} in {minutes:.1f} min")


def sft_into(out: Path, recipe: str, init: Path, data: Path, work: Path, seed: int, steps: int) -> None:
    """`rlvr sft RECIPE` from `init` on `data` in WORK/sft, then the final model's files copied into `out`."""
    rlvr("sft", recipe, f"model.path={init}", f"data.path={data}", f"run.dir={work / 'sft'}", f"run.seed={seed}",
         f"train.steps={steps}")
    out.mkdir(parents=True, exist_ok=True)
    for name in MODEL_FILES:
        src = work / "sft" / "final" / name
        if src.exists():
            shutil.copy2(src, out / name)


def eval_at_t1(model: Path, work: Path, task: str, n: int, ks: str, max_new_tokens: int) -> dict:
    """`rlvr eval` of `model` on `task`'s held-out split at temperature 1.0; the result (also WORK/eval.json)."""
    path = work / "eval.json"
    rlvr("eval", str(model), "--task", task, "--n", str(n), "--k", ks, "--out", str(path), "--temperature", "1.0",
         f"rollout.max_new_tokens={max_new_tokens}")
    return json.loads(path.read_text())


def _count_params(path: Path) -> int:
    from safetensors import safe_open

    total = 0
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        for key in f.keys():
            count = 1
            for dim in f.get_slice(key).get_shape():
                count *= dim
            total += count
    return total


if __name__ == "__main__":
    main()
