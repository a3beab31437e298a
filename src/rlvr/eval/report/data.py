"""Reading a run directory for the report. Every file is optional and every line may be broken: what is
missing or unreadable becomes a note on the page, never an error."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any


def _read_jsonl(path: Path, notes: list[str]) -> list[dict[str, Any]]:
    if not path.exists():
        notes.append(f"{path.name} not found: no training curves")
        return []
    rows, bad = [], 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if isinstance(row, dict) and isinstance(row.get("step"), (int, float)):
                rows.append(row)
                continue
        except json.JSONDecodeError:
            pass
        bad += 1
    if bad:
        notes.append(f"{path.name}: skipped {bad} unreadable lines")
    return rows


def _eval_order(tag: str) -> tuple[int, str]:
    return (0, tag) if tag == "before" else (2, tag) if tag == "after" else (1, tag)


def _read_evals(run_dir: Path, notes: list[str]) -> dict[str, dict[str, Any]]:
    evals: dict[str, dict[str, Any]] = {}
    for path in run_dir.glob("eval_*.json"):
        try:
            result = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(result, dict) or "pass@k" not in result:
                raise ValueError("no pass@k in it")
        except (ValueError, OSError) as err:
            notes.append(f"{path.name}: not an evaluation result ({err})")
            continue
        evals[path.stem[len("eval_"):]] = result
    if not evals:
        notes.append("no eval_*.json: no held-out evaluation (set eval.before / eval.after / eval.every)")
    return dict(sorted(evals.items(), key=lambda kv: _eval_order(kv[0])))


def _read_searches(run_dir: Path, notes: list[str]) -> dict[str, dict[str, Any]]:
    """`search_*.json`: results of `rlvr eval ... search.name=... --out RUN/search_NAME.json` (docs/search.md)."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(run_dir.glob("search_*.json")):
        try:
            result = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(result, dict) or not isinstance(result.get("search"), dict) or not all(
                    isinstance(result.get(k), (int, float)) for k in ("solve_rate", "tokens_per_problem")):
                raise ValueError("no search, solve_rate or tokens_per_problem in it")
        except (ValueError, OSError) as err:
            notes.append(f"{path.name}: not a search evaluation result ({err})")
            continue
        out[path.stem[len("search_"):]] = result
    return out


def _read_text(path: Path, notes: list[str], quiet: bool = False) -> str | None:
    if not path.exists():
        if not quiet:
            notes.append(f"{path.name} not found")
        return None
    return path.read_text(encoding="utf-8", errors="replace")


def _run_name(config_text: str | None) -> str | None:
    if not config_text:
        return None
    try:
        import yaml

        name = (yaml.safe_load(config_text) or {}).get("run", {}).get("name")
        return str(name) if name else None
    except Exception:
        return None


def _thin_rollouts(rollouts: list[dict[str, Any]], limit: int) -> tuple[list[dict[str, Any]], int]:
    """At most `limit` samples, keeping whole steps evenly spaced over the run (first and last included)."""
    if len(rollouts) <= limit:
        return rollouts, 0
    steps = sorted({r.get("step") for r in rollouts}, key=lambda s: (s is None, s))
    per_step = max(1, len(rollouts) // max(len(steps), 1))
    keep_n = max(1, min(len(steps), limit // per_step))
    idx = {round(i * (len(steps) - 1) / max(keep_n - 1, 1)) for i in range(keep_n)}
    keep = {steps[i] for i in idx}
    kept = [r for r in rollouts if r.get("step") in keep][:limit]
    return kept, len(steps) - len(keep)


# What a stored thumbnail may be: a base64 data URI of a raster image, nothing that could carry markup or script.
_IMAGE_URI = re.compile(r"data:image/(?:png|jpeg|gif|webp);base64,[A-Za-z0-9+/]+={0,2}")
MAX_IMAGE_URI = 200_000  # characters; the writer's 64-pixel PNG thumbnails are a few hundred


def _safe_uri(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= MAX_IMAGE_URI and _IMAGE_URI.fullmatch(value) is not None


def _share_group_images(rollouts: list[dict[str, Any]], notes: list[str]) -> None:
    """The writer stores a prompt's thumbnails on its group's first sample; give every sample of that group
    (same step and group) the same `images` (lists of data URIs), dropping anything that is not an image URI."""
    by_group: dict[tuple[Any, Any], list[list[str]]] = {}
    bad = 0
    for r in rollouts:
        raw = r.pop("images", None)
        if raw is None:
            continue
        items = []
        for item in raw if isinstance(raw, list) else [raw]:
            frames = item if isinstance(item, list) else [item]
            ok = [u for u in frames if _safe_uri(u)]
            bad += len(frames) - len(ok)
            if ok:
                items.append(ok)
        if items:
            by_group[(r.get("step"), r.get("group"))] = items
    if bad:
        notes.append(f"rollouts.jsonl: left out {bad} prompt image(s) that were not base64 image data URIs")
    for r in rollouts:
        items = by_group.get((r.get("step"), r.get("group")))
        if items:
            r["images"] = items


def _index_images(rollouts: list[dict[str, Any]]) -> list[str]:
    """Replace each sample's image URIs by indices into one list of distinct URIs (returned), so an image shared
    by a group's samples is on the page once."""
    index: dict[str, int] = {}
    for r in rollouts:
        if "images" in r:
            r["images"] = [[index.setdefault(u, len(index)) for u in item] for item in r["images"]]
    return list(index)  # insertion order is index order
