"""Preference pairs for reward-model training: read from JSONL/Parquet, or mined from a run's rollouts.jsonl.

A pairs file holds one object per line with `chosen` and `rejected` texts, an optional `prompt` (without
one, `chosen`/`rejected` are whole texts) and an optional `margin` (the format of TRL's RewardTrainer and
OpenRLHF's RM training; column names are configurable). Mining takes, for each prompt of a run's stored
rollouts, answers the verifier marked correct as `chosen` and incorrect ones as `rejected`.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.tasks.base import TaskError

ROLLOUTS_FILE = "rollouts.jsonl"


class RMDataError(TaskError):
    """Preference data cannot be used. The message names the file or key and the fix."""


@dataclass(frozen=True)
class PreferencePair:
    prompt: str | None
    chosen: str
    rejected: str
    margin: float = 0.0
    # True when `prompt` is already the text the policy saw (mined rollouts): no chat template on top
    rendered: bool = False


def data_format(path: Path, fmt: str = "auto") -> str:
    """'rollouts' for a run directory or a file named rollouts.jsonl (with format auto), else 'pairs'."""
    if fmt != "auto":
        return fmt
    return "rollouts" if path.is_dir() or path.name == ROLLOUTS_FILE else "pairs"


def _rows(path: Path, key: str) -> list[tuple[int, Any]]:
    from rlvr.tasks.jsonl import BadRow, read_rows

    if not path.exists():
        raise RMDataError(f"{key}: file '{path}' not found; give a JSONL/Parquet file of preference pairs or a "
                          "run's rollouts.jsonl")
    rows = [(n, r) for n, r in read_rows(path) if not isinstance(r, BadRow)]
    if not rows:
        raise RMDataError(f"{key}: '{path}' has no readable rows; expected one JSON object per line")
    return rows


def read_pairs(path: Path, *, prompt_column: str = "prompt", chosen_column: str = "chosen",
               rejected_column: str = "rejected", margin_column: str = "margin",
               key: str = "data.path") -> list[PreferencePair]:
    """The preference pairs of a JSONL/Parquet file. Rows without string chosen/rejected are skipped; a file
    where the first row lacks either column is an error that lists the columns it has."""
    rows = _rows(Path(path), key)
    first = next((r for _, r in rows if isinstance(r, dict)), None)
    if first is None:
        raise RMDataError(f"{key}: '{path}' has no JSON objects; expected rows like "
                          '{"prompt": ..., "chosen": ..., "rejected": ...}')
    for col, opt in ((chosen_column, "chosen_column"), (rejected_column, "rejected_column")):
        if col not in first:
            hint = (" (it looks like a run's rollouts: set data.format=rollouts)" if "correct" in first
                    and "response" in first else "")
            raise RMDataError(f"data.{opt}: column '{col}' not in '{path}'{hint}; its columns are: "
                              f"{', '.join(sorted(first)) or '(none)'}. Set data.{opt} to the right one")
    pairs = []
    for _, row in rows:
        if not isinstance(row, dict):
            continue
        chosen, rejected, prompt = row.get(chosen_column), row.get(rejected_column), row.get(prompt_column)
        if not isinstance(chosen, str) or not isinstance(rejected, str):
            continue
        margin = row.get(margin_column)
        pairs.append(PreferencePair(prompt if isinstance(prompt, str) else None, chosen, rejected,
                                    float(margin) if isinstance(margin, (int, float)) else 0.0))
    if not pairs:
        raise RMDataError(f"{key}: '{path}' has no row with text '{chosen_column}' and '{rejected_column}'")
    return pairs


def mine_rollout_pairs(path: Path, *, max_pairs_per_prompt: int = 8, seed: int = 0,
                       key: str = "data.path") -> list[PreferencePair]:
    """(correct, incorrect) answer pairs per prompt from a run's rollouts.jsonl (or its run directory).

    Samples are grouped by prompt text across steps (a verdict does not depend on the policy that wrote the
    answer); identical responses count once. Each prompt gives every (correct, incorrect) combination, of
    which a seeded draw keeps at most `max_pairs_per_prompt`, so prompts with big groups do not dominate.
    """
    path = Path(path)
    if path.is_dir():
        path = path / ROLLOUTS_FILE
    rows = [r for _, r in _rows(path, key) if isinstance(r, dict)]
    if rows and not any("response" in r and "correct" in r for r in rows):
        raise RMDataError(f"{key}: '{path}' is not a run's rollouts (rows need 'prompt', 'response' and "
                          f"'correct'; the first has: {', '.join(sorted(rows[0]))}). For chosen/rejected pairs "
                          "set data.format=pairs")
    good: dict[str, dict[str, None]] = defaultdict(dict)
    bad: dict[str, dict[str, None]] = defaultdict(dict)
    for r in rows:
        prompt, response, correct = r.get("prompt"), r.get("response"), r.get("correct")
        if not isinstance(prompt, str) or not isinstance(response, str) or not isinstance(correct, bool):
            continue  # label-free runs store correct=None: no verdict to mine
        (good if correct else bad)[prompt][response] = None
    prompts = sorted(set(good) | set(bad))
    rng = random.Random(seed)
    pairs: list[PreferencePair] = []
    for prompt in prompts:
        combos = [(c, w) for c in good.get(prompt, {}) for w in bad.get(prompt, {})]
        rng.shuffle(combos)
        pairs.extend(PreferencePair(prompt, c, w, rendered=True) for c, w in combos[:max_pairs_per_prompt])
    if not pairs:
        all_good = sum(1 for p in prompts if p in good and p not in bad)
        all_bad = sum(1 for p in prompts if p in bad and p not in good)
        raise RMDataError(
            f"{key}: no prompt in '{path}' has both a correct and an incorrect answer ({len(prompts)} prompts "
            f"with a verdict: {all_good} only correct, {all_bad} only incorrect). Mine a run whose accuracy is "
            "between 0 and 1 that stored whole groups (logging.rollouts_every=1 logging.rollouts_per_step=128)")
    return pairs


def split_pairs(pairs: list[PreferencePair], eval_fraction: float, seed: int) -> tuple[list[PreferencePair],
                                                                                         list[PreferencePair]]:
    """(train, held-out) by prompt: a seeded `eval_fraction` of the distinct prompts (pairs without a prompt
    count one each) is held out with all its pairs, so held-out accuracy is on prompts never trained on."""
    keys = sorted({p.prompt if p.prompt is not None else f"\0{i}" for i, p in enumerate(pairs)})
    if eval_fraction <= 0 or len(keys) < 2:
        return pairs, []
    random.Random(seed).shuffle(keys)
    held = set(keys[: max(1, round(len(keys) * eval_fraction))])
    train, heldout = [], []
    for i, p in enumerate(pairs):
        (heldout if (p.prompt if p.prompt is not None else f"\0{i}") in held else train).append(p)
    return train, heldout


class ShuffledBatches:
    """Batches of example indices drawn from seeded permutations of `population` examples, a new permutation
    appended whenever fewer than a batch remain (so a batch can span two epochs, and one larger than the data
    repeats examples)."""

    def __init__(self, population: int, batch_size: int, seed: int):
        import torch

        self.population, self.batch_size = population, batch_size
        self.generator = torch.Generator().manual_seed(seed)
        self.order: list[int] = []

    def next(self) -> list[int]:
        import torch

        while len(self.order) < self.batch_size:
            self.order += torch.randperm(self.population, generator=self.generator).tolist()
        picked, self.order = self.order[: self.batch_size], self.order[self.batch_size :]
        return picked


def split_by_prompt(examples: list[Any], fraction: float, seed: int) -> tuple[list[Any], list[Any]]:
    """(train, held-out) of examples with a `prompt_id`: a seeded `fraction` of the distinct prompts is held out
    with all its solutions (`rlvr prm`'s PRM and token RM)."""
    ids = sorted({e.prompt_id for e in examples})
    random.Random(seed).shuffle(ids)
    k = round(fraction * len(ids))
    if fraction > 0 and len(ids) >= 2:
        k = min(max(k, 1), len(ids) - 1)
    held = set(ids[:k])
    return [e for e in examples if e.prompt_id not in held], [e for e in examples if e.prompt_id in held]


def rows_within(rows: list[dict[str, Any]], max_length: int) -> tuple[list[tuple[dict[str, Any], list[int]]], int]:
    """Labelled solution rows (labels.jsonl: `prompt_ids`, `response_ids`) whose prompt + response fits in
    `max_length` tokens, each with those ids joined; and how many rows were longer."""
    kept, skipped = [], 0
    for row in rows:
        ids = list(row["prompt_ids"]) + list(row["response_ids"])
        if len(ids) > max_length:
            skipped += 1
        else:
            kept.append((row, ids))
    return kept, skipped


def best_of_n(scored: list[tuple[str, float, bool]]) -> dict[str, float]:
    """Best-of-n by a reward model's scores over (prompt id, score, correct) triples, on the prompts with at
    least two solutions: the share where the top-scored solution is correct (`best_of_n`), against a random
    pick (`random_of_n`) and an oracle (`oracle_of_n`); {} when no prompt has two."""
    by_prompt: dict[str, list[tuple[float, bool]]] = {}
    for prompt_id, score, correct in scored:
        by_prompt.setdefault(prompt_id, []).append((score, correct))
    groups = [g for g in by_prompt.values() if len(g) >= 2]
    if not groups:
        return {}
    return {"best_of_n": sum(max(g, key=lambda x: x[0])[1] for g in groups) / len(groups),
            "random_of_n": sum(sum(c for _, c in g) / len(g) for g in groups) / len(groups),
            "oracle_of_n": sum(any(c for _, c in g) for g in groups) / len(groups),
            "prompts": float(len(groups))}
