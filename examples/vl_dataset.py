"""Write a tiny image dataset for the `jsonl` (or `hf_dataset`) task's `image_column`: vl_count scenes as PNG files.

    python examples/vl_dataset.py --out /tmp/vl_data --rows 64
    rlvr eval builtin-vl --task jsonl task.path=/tmp/vl_data/shapes.jsonl task.image_column=image task.verifier=numeric task.extract=last_number --n 4 --k 1,4

`shapes.jsonl` has one row per image, the image given as a path relative to the data file:

    {"prompt": "How many shapes are in the image?", "answer": "3", "image": "images/0000.png"}

`--parquet` also writes `shapes.parquet` with the same rows and the PNG bytes in the image column (needs pyarrow).
`--hf` also writes `shapes_hf/`, a Hugging Face `save_to_disk` dataset whose `image` column is a `datasets.Image`
feature (needs datasets), for the `hf_dataset` task:

    rlvr eval builtin-vl --task hf_dataset task.path=/tmp/vl_data/shapes_hf task.question_field=prompt task.image_column=image task.verifier=numeric task.extract=last_number --n 4 --k 1,4
"""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

from rlvr.tasks import build_task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--parquet", action="store_true")
    parser.add_argument("--hf", action="store_true")
    args = parser.parse_args()
    task = build_task("vl_count", {"train_size": args.rows, "eval_size": 1, "seed": args.seed})
    (args.out / "images").mkdir(parents=True, exist_ok=True)
    rows, blobs = [], []
    for i, record in enumerate(task.train[: args.rows]):
        name = f"images/{i:04d}.png"
        record.images[0].save(args.out / name)
        buf = io.BytesIO()
        record.images[0].save(buf, format="PNG")
        blobs.append(buf.getvalue())
        rows.append({"prompt": record.question, "answer": str(record.answer), "image": name})
    with (args.out / "shapes.jsonl").open("w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    if args.parquet:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.table({"prompt": [r["prompt"] for r in rows], "answer": [r["answer"] for r in rows],
                          "image": pa.array(blobs, type=pa.binary())})
        pq.write_table(table, args.out / "shapes.parquet")
    if args.hf:
        import datasets

        features = datasets.Features({"prompt": datasets.Value("string"), "answer": datasets.Value("string"),
                                      "image": datasets.Image()})
        ds = datasets.Dataset.from_dict({"prompt": [r["prompt"] for r in rows], "answer": [r["answer"] for r in rows],
                                         "image": [record.images[0] for record in task.train[: args.rows]]},
                                        features=features)
        ds.save_to_disk(str(args.out / "shapes_hf"))
    extra = [name for name, on in (("shapes.parquet", args.parquet), ("shapes_hf/", args.hf)) if on]
    print(f"wrote {len(rows)} rows to {args.out / 'shapes.jsonl'}" + "".join(f" and {e}" for e in extra))


if __name__ == "__main__":
    main()
