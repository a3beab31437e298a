"""`search`: BM25 retrieval over a local document corpus (the `rank-bm25` library; nothing leaves the machine).

The corpus is a JSONL file with a `text` field per line (optional `title` and `id`), or a directory of
`.txt`/`.md` files (the file name is the title). Install the library with `pip install rank-bm25`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from rlvr.rollout.tools.base import TOOLS, Tool, ToolError

_WORD = re.compile(r"\w+", re.UNICODE)


def bm25_tokens(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def load_corpus(path: str | Path) -> list[dict[str, str]]:
    """Documents as {id, title, text}. Raises ValueError naming `path` when it cannot be read."""
    p = Path(path).expanduser()
    where = "agent.tools.search.corpus"
    if not p.exists():
        raise ValueError(f"{where}: '{path}' does not exist; expected a JSONL file (a 'text' field per line) "
                         "or a directory of .txt/.md files")
    docs: list[dict[str, str]] = []
    if p.is_dir():
        for f in sorted(p.rglob("*")):
            if f.suffix in (".txt", ".md") and f.is_file():
                docs.append({"id": str(f.relative_to(p)), "title": f.stem, "text": f.read_text(errors="replace")})
    else:
        for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{where}: line {i} of '{path}' is not JSON: {err}") from None
            if not isinstance(row, dict) or not isinstance(row.get("text"), str):
                raise ValueError(f"{where}: line {i} of '{path}' has no string 'text' field")
            docs.append({"id": str(row.get("id", i)), "title": str(row.get("title", "")), "text": row["text"]})
    if not docs:
        raise ValueError(f"{where}: no documents in '{path}'")
    return docs


@TOOLS.register("search")
class SearchTool(Tool):
    """Top-k BM25 matches for a query, each as `[rank] title: text` cut to `max_chars`. Only documents sharing a
    word with the query count as matches. `variant` picks rank-bm25's scorer: `plus` (BM25+, the default: its
    idf stays positive in small corpora, where Okapi's is 0 for a word in half the documents), `okapi` or `l`."""

    name = "search"
    description = "Search the document collection. Returns the best-matching passages."
    parameters = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What to look for."},
            "k": {"type": "integer", "description": "How many passages to return (default 3)."},
        },
        "required": ["query"],
    }

    def __init__(self, *, corpus: str, k: Annotated[int, Field(ge=1)] = 3, max_k: Annotated[int, Field(ge=1)] = 10,
                 max_chars: Annotated[int, Field(ge=16)] = 300, timeout: Annotated[float, Field(gt=0)] = 5.0,
                 variant: Literal["plus", "okapi", "l"] = "plus"):
        try:
            import rank_bm25
        except ImportError:
            raise ImportError("agent.tools: the 'search' tool needs the rank-bm25 package; install it with "
                              "`pip install rank-bm25` (or the rlvr extra that includes it)") from None
        self.docs = load_corpus(corpus)
        self.k, self.max_k, self.max_chars, self.timeout = k, max_k, max_chars, timeout
        tokens = [bm25_tokens(d["title"] + " " + d["text"]) for d in self.docs]
        scorer = {"plus": rank_bm25.BM25Plus, "okapi": rank_bm25.BM25Okapi, "l": rank_bm25.BM25L}[variant]
        self.index = scorer(tokens)
        self.vocab = [set(t) for t in tokens]

    def call(self, args: dict[str, Any]) -> str:
        query = bm25_tokens(args["query"])
        if not query:
            raise ToolError("the query has no words")
        k = max(1, min(int(args.get("k", self.k)), self.max_k))
        scores = self.index.get_scores(query)
        words = set(query)
        matching = [i for i in range(len(self.docs)) if words & self.vocab[i]]
        hits = sorted(matching, key=lambda i: (-scores[i], i))[:k]
        if not hits:
            return "No results."
        lines = []
        for rank, i in enumerate(hits, 1):
            d = self.docs[i]
            text = " ".join(d["text"].split())
            if len(text) > self.max_chars:
                text = text[: self.max_chars - 3] + "..."
            lines.append(f"[{rank}] {d['title']}: {text}" if d["title"] else f"[{rank}] {text}")
        return "\n".join(lines)
