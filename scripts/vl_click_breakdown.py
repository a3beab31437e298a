#!/usr/bin/env python
"""Where a VLM's clicks land on `vl_click`'s held-out screens: on the named button, on another one, or on none.

    python scripts/vl_click_breakdown.py builtin-vl                  # the shipped model
    python scripts/vl_click_breakdown.py runs/gui_r1/final --prompts 200 --n 4

pass@1 alone does not say whether a model reads *which* button is asked for: a model that clicks a random button
scores about 1/(number of buttons) on the named one and the rest on others. This samples `--n` answers per screen
(temperature 1, plain HF `generate`) and prints the shares by number of buttons, and for the misses that hit no
button, how often the nearest button is the named one and the median L1 distance (pixels) to it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from rlvr.tasks.vision.answers import parse_point  # noqa: E402


def outside(box, x: float, y: float) -> float:
    """L1 distance from (x, y) to the box (0 inside)."""
    return max(box[0] - x, 0, x - box[2]) + max(box[1] - y, 0, y - box[3])


def classify(record, x: float, y: float) -> tuple[str, tuple[bool, float] | None]:
    """("named" | "other" | "none", for "none": (is the nearest button the named one, distance to it))."""
    for color, box in record.meta["buttons"].items():
        if outside(box, x, y) == 0:
            return ("named" if color == record.meta["target"] else "other"), None
    color, box = min(record.meta["buttons"].items(), key=lambda cb: outside(cb[1], x, y))
    return "none", (color == record.meta["target"], outside(box, x, y))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="builtin-vl or a VLM directory (e.g. a run's final/)")
    ap.add_argument("--prompts", type=int, default=200)
    ap.add_argument("--n", type=int, default=4, help="samples per screen")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import torch

    from rlvr.models.vision import load_processor, load_vlm_for_training
    from rlvr.tasks import build_task
    from rlvr.tasks.images import record_images

    model = load_vlm_for_training(args.model, trainable=False).eval()
    processor = load_processor(args.model)
    processor.tokenizer.padding_side = "left"
    task = build_task("vl_click", {"seed": 0, "eval_size": args.prompts})
    records = list(task.heldout)
    counts: dict[int, dict[str, int]] = {}
    misses = []
    torch.manual_seed(args.seed)
    for start in range(0, len(records), 25):
        chunk = records[start : start + 25]
        prompts = [processor.apply_chat_template(task.multimodal_messages(r), add_generation_prompt=True) for r in chunk]
        enc = processor(text=prompts, images=[record_images(r) for r in chunk], return_tensors="pt", padding=True)
        with torch.no_grad():
            out = model.generate(**enc, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=16,
                                 num_return_sequences=args.n)
        texts = processor.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        for i, record in enumerate(chunk):
            row = counts.setdefault(len(record.meta["buttons"]), {"named": 0, "other": 0, "none": 0})
            for text in texts[i * args.n : (i + 1) * args.n]:
                point, _ = parse_point(text)
                if point is None:
                    row["none"] += 1
                    continue
                kind, miss = classify(record, *point)
                row[kind] += 1
                if miss is not None:
                    misses.append(miss)
    total = {k: sum(r[k] for r in counts.values()) for k in ("named", "other", "none")}
    n = sum(total.values())
    result = {
        "model": args.model, "screens": len(records), "samples_per_screen": args.n,
        "share": {k: round(v / n, 3) for k, v in total.items()},
        "by_buttons": {b: {k: round(v / sum(r.values()), 3) for k, v in r.items()} for b, r in sorted(counts.items())},
        "misses_nearest_named": round(sum(m[0] for m in misses) / len(misses), 3) if misses else None,
        "misses_median_px": statistics.median(m[1] for m in misses) if misses else None,
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
