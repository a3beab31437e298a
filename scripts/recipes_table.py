#!/usr/bin/env python
"""Regenerate the recipes table in docs/reference/recipes.md from the recipes' header comments.

    python scripts/recipes_table.py          # rewrite the table between the markers in docs/reference/recipes.md
    python scripts/recipes_table.py --check  # exit 1 if the table is out of date (the tests run this)

Each recipe opens with a comment: `# NAME — Authors, "Title", arXiv:XXXX.XXXXX.` then `# Knobs: ...`. The
table lists the method, the paper with its arXiv link, and the first clause of the knobs.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "reference" / "recipes.md"
BEGIN, END = "<!-- recipes-table:begin -->", "<!-- recipes-table:end -->"
KNOBS_CHARS = 170


def header(path: Path) -> str:
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    return " ".join(lines)


def row(path: Path) -> str:
    text = header(path)
    method = re.split(r" — | - ", text, maxsplit=1)[0].strip() if (" — " in text or " - " in text) else path.stem
    title = re.search(r"[\"“]([^\"”]+)[\"”]", text)
    arxiv = re.search(r"arXiv:(\d{4}\.\d{4,5})", text)
    knobs = text.split("Knobs:", 1)[1].strip() if "Knobs:" in text else ""
    if len(knobs) > KNOBS_CHARS:
        cut = knobs[:KNOBS_CHARS]
        knobs = cut[: max(cut.rfind(" "), 1)].rstrip(",;(") + " …"
    paper = f"*{title.group(1)}*" if title else "(none)"
    if arxiv:
        paper += f", [arXiv:{arxiv.group(1)}](https://arxiv.org/abs/{arxiv.group(1)})"
    knobs = knobs.replace("|", "\\|")
    return f"| [`{path.stem}`](../../recipes/{path.name}) | {method} | {paper} | {knobs} |"


def table() -> str:
    rows = [row(p) for p in sorted((ROOT / "recipes").glob("*.yaml"))]
    return "\n".join(["| recipe | method | paper | knobs (from the recipe's header) |", "|---|---|---|---|", *rows])


def render(doc: str) -> str:
    if BEGIN not in doc or END not in doc:
        raise SystemExit(f"{DOC}: markers {BEGIN} / {END} not found")
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table()}\n{END}{tail}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="fail if docs/reference/recipes.md is out of date")
    args = ap.parse_args()
    doc = DOC.read_text()
    new = render(doc)
    if args.check:
        if new != doc:
            print("docs/reference/recipes.md is out of date: run python scripts/recipes_table.py", file=sys.stderr)
            sys.exit(1)
        return
    DOC.write_text(new)
    print(f"wrote {DOC}")


if __name__ == "__main__":
    main()
