#!/usr/bin/env python
"""VLM rollout: rlvr's hf engine (vision tower once per prompt) vs plain HF `generate` with the pixel values
repeated for every sample (issue 15; `make bench` runs it as section `vlm`, bench/run.py):

    PYTHONPATH=src python bench/vlm_rollout.py --prompts 16 --n 8 --rounds 3 > bench/results/<date>-vlm-rollout.json

builtin-vl on vl_count held-out prompts, temperature 1, a fixed number of new tokens (EOS suppressed through
`min_new_tokens` on both sides would change the engine, so both sides simply sample up to `--max-new` tokens and
response tokens are counted). Reported per side: wall seconds, response tokens/s, vision-tower forwards and the
images they encoded. A and B alternate, one thread; the 1-minute load average is recorded (the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-new", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)

    from rlvr.models import load_tokenizer
    from rlvr.models.vision import load_processor, load_vlm_for_training, vision_tower
    from rlvr.rollout import SamplingParams, build_engine, rollout_groups
    from rlvr.tasks import PromptRenderer, build_task
    from rlvr.tasks.images import record_images

    model = load_vlm_for_training("builtin-vl", trainable=False)
    processor, tok = load_processor("builtin-vl"), load_tokenizer("builtin-vl")
    task = build_task("vl_count", {"eval_size": args.prompts, "train_size": 1})
    records = list(task.heldout)
    encoded: list[int] = []
    vision_tower(model).register_forward_hook(lambda m, a, o: encoded.append(int(a[0].shape[0])))
    params = SamplingParams(n=args.n, temperature=1.0, max_new_tokens=args.max_new)

    def rlvr_engine() -> int:
        engine = build_engine("hf", {}, 256, model, tok)
        groups = rollout_groups(engine, PromptRenderer(task, tok, "auto", processor), records, params)
        return sum(len(s.response_ids) for g in groups for s in g.samples)

    def hf_generate() -> int:
        texts = [processor.apply_chat_template(task.multimodal_messages(r), add_generation_prompt=True)
                 for r in records for _ in range(args.n)]
        images = [record_images(r) for r in records for _ in range(args.n)]
        processor.tokenizer.padding_side = "left"
        enc = processor(text=texts, images=images, return_tensors="pt", padding=True)
        with torch.no_grad():
            out = model.generate(**enc, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                                 max_new_tokens=args.max_new, pad_token_id=tok.pad_token_id,
                                 output_hidden_states=False)
        new = out[:, enc["input_ids"].shape[1]:]
        return int((new != tok.pad_token_id).sum()) + int((new == tok.eos_token_id).any(dim=1).sum())

    sides = {"rlvr_hf_engine": rlvr_engine, "hf_generate_repeated_pixels": hf_generate}
    rows: dict[str, list[dict[str, float]]] = {k: [] for k in sides}
    for r in range(args.rounds):
        for name, fn in (sides.items() if r % 2 == 0 else reversed(list(sides.items()))):
            encoded.clear()
            torch.manual_seed(r)
            load = os.getloadavg()[0]
            start = time.perf_counter()
            tokens = fn()
            seconds = time.perf_counter() - start
            rows[name].append({"seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds,
                               "tower_forwards": len(encoded), "images_encoded": sum(encoded), "load1": load})
    summary = {k: {"median_tokens_per_s": statistics.median(x["tokens_per_s"] for x in v),
                   "median_seconds": statistics.median(x["seconds"] for x in v),
                   "tower_forwards": v[0]["tower_forwards"], "images_encoded": v[0]["images_encoded"]}
               for k, v in rows.items()}
    print(json.dumps({"prompts": args.prompts, "n": args.n, "max_new": args.max_new, "summary": summary,
                      "rounds": rows}, indent=2))


if __name__ == "__main__":
    main()
