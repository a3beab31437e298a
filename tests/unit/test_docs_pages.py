"""The user docs stay readable and connected: the README and every hand-written page within its length, the
whole within its budget, and every relative link (file and #anchor) pointing at something that exists.

The generated references (docs/reference/) are exempt from the lengths: they grow with the code.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
GENERATED = DOCS / "reference"
README_MAX, PAGE_MAX, TOTAL_MAX = 100, 400, 4000


def user_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(p for p in DOCS.rglob("*.md") if GENERATED not in p.parents)]


def all_pages() -> list[Path]:
    return [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md", *sorted(DOCS.rglob("*.md"))]


def lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_the_readme_is_short():
    assert lines(ROOT / "README.md") <= README_MAX


@pytest.mark.parametrize("page", user_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_hand_written_page_is_over_the_limit(page: Path):
    assert lines(page) <= PAGE_MAX, f"{page.relative_to(ROOT)}: {lines(page)} lines (at most {PAGE_MAX})"


def test_the_user_docs_fit_their_budget():
    total = sum(lines(p) for p in user_pages())
    assert total <= TOTAL_MAX, f"README.md and docs/ (without docs/reference/) hold {total} lines (at most {TOTAL_MAX})"


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: links and code marks dropped, lower case, punctuation removed,
    spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    in_block = False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            in_block = not in_block
            continue
        m = re.match(r"#{1,6} (.+)", line)
        if m and not in_block:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def test_slug_by_hand():
    assert slug("Threads from the free cores (`run.threads`)") == "threads-from-the-free-cores-runthreads"
    assert slug("The lab's second model (`builtin-lab-total`)") == "the-labs-second-model-builtin-lab-total"
    assert slug("`jsonl`: your own data, JSONL or Parquet") == "jsonl-your-own-data-jsonl-or-parquet"


LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


@pytest.mark.parametrize("page", all_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    broken = []
    for m in LINK.finditer(text):
        target = m.group(1) or m.group(2)
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if not dest.exists():
            broken.append(f"{target} (no file {file_part})")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target} (no heading #{anchor} in {dest.relative_to(ROOT)})")
    assert not broken, f"{page.relative_to(ROOT)}: broken links: {broken}"
