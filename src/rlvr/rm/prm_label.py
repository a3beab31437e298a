"""ER-PRM's step labels: Monte Carlo rollouts of the initial policy from every step prefix of its own solutions,
aggregated with entropy regularization.

For a solution y = (s_1, ..., s_T) to prompt x, sampled from the initial policy pi_0, step t's label is

    v_t = (1/eta) * log( (1/m) * sum_{j=1..m} exp(eta * r_j) )      r_j = verifier(x, s_1..s_t + c_j),  c_j ~ pi_0

the entropy-regularized (KL-to-pi_0) value of the prefix s_1..s_t, estimated from m completions c_j. eta -> 0
gives the mean of r_j (the soft Monte Carlo label of Math-Shepherd), eta -> inf the max (the hard label: can
any completion reach the answer?). Source: Zhang et al., "Entropy-Regularized Process Reward Model",
arXiv:2412.11006, section 3 (the process reward from initial-policy sampling).

Token in, token out: a prefix is the solution's own sampled token ids up to the step's last token (steps come
from the task's `reasoning_steps` hook as character spans, mapped onto tokens as the reward function does), and
the completions continue from exactly those ids.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from rlvr.errors import ConfigError
from rlvr.rewards.process import step_token_ends
from rlvr.rollout import SamplingParams
from rlvr.runtime import step_seed
from rlvr.types import TaskRecord


def entropy_regularized_value(rewards: Sequence[float], eta: float) -> float:
    r"""v = (1/eta) * log( (1/m) * sum_j exp(eta * r_j) ): ER-PRM's step label from m rollout rewards.

    eta = 0 is the limit, the mean of r_j; eta = inf the max. Computed as (logsumexp(eta r) - log m) / eta, so
    a large eta does not overflow. It lies between the mean and the max of r_j and grows with eta.
    """
    if not isinstance(eta, (int, float)) or math.isnan(eta) or eta < 0:
        raise ConfigError(f"label.eta: expected a number >= 0 (0: mean, .inf: max); got {eta!r}")
    r = [float(x) for x in rewards]
    if not r:
        raise ConfigError("label.rollouts: the entropy-regularized value needs m >= 1 rollout rewards; got 0")
    if eta == 0:
        return sum(r) / len(r)
    if math.isinf(eta):
        return max(r)
    t = torch.tensor(r, dtype=torch.float64) * eta
    v = float((torch.logsumexp(t, 0) - math.log(len(r))) / eta)
    return min(max(v, sum(r) / len(r)), max(r))  # in [mean, max] exactly, not off by a rounding error


def label_solutions(engine: Any, renderer: Any, task: Any, records: Sequence[TaskRecord], tokenizer: Any, *,
                    solutions: int, rollouts: int, eta: float, params: SamplingParams, seed: int,
                    on_progress: Any = None) -> list[dict[str, Any]]:
    """Sample `solutions` responses per record from the engine's policy, then label every step prefix of each
    with the entropy-regularized value of `rollouts` completions. One row per solution (see docs for fields).

    Sampling is seeded by `seed` (one torch seed per phase), so the same engine, records and seed give the same
    rows."""
    entropy_regularized_value([0.0], eta)  # a bad eta fails before any sampling
    rendered = [renderer.render(r) for r in records]
    torch.manual_seed(step_seed(seed, 0))
    sampled = engine.generate([ids for ids, _ in rendered], SamplingParams(
        n=solutions, temperature=params.temperature, top_p=params.top_p, top_k=params.top_k,
        max_new_tokens=params.max_new_tokens, stop=list(params.stop)))
    rows: list[dict[str, Any]] = []
    prefixes: list[list[int]] = []  # prompt ids + the solution's ids up to a step's last token
    where: list[tuple[int, int]] = []  # (row, step) of each prefix
    for record, (prompt_ids, prompt_text), group in zip(records, rendered, sampled):
        for k, sample in enumerate(group):
            verdict = task.verify(sample.text, record)
            # no step rollouts (an outcome-only token RM): the steps are not needed, nor the task's step hook
            steps = step_token_ends(task, sample.text, sample.response_ids, record, tokenizer) if rollouts else []
            row = {"id": record.id, "solution": k, "question": record.question, "answer": record.answer,
                   "prompt": prompt_text, "prompt_ids": list(prompt_ids), "response_ids": list(sample.response_ids),
                   "response": sample.text, "correct": bool(verdict.correct), "reward": float(verdict.reward),
                   "eta": eta, "rollouts": rollouts,
                   "steps": [{"token": tok, "char_end": end} for tok, _, end in steps]}
            for s, (tok, _, _) in enumerate(steps):
                prefixes.append(list(prompt_ids) + list(sample.response_ids[: tok + 1]))
                where.append((len(rows), s))
            rows.append(row)
    if rollouts == 0:
        return rows
    by_id = {r.id: r for r in records}
    torch.manual_seed(step_seed(seed, 1))
    done = 0
    chunk = max(1, 256 // rollouts)  # prefixes per generate call: a progress tick, not a memory knob
    for start in range(0, len(prefixes), chunk):
        batch = prefixes[start : start + chunk]
        completions = engine.generate(batch, SamplingParams(
            n=rollouts, temperature=params.temperature, top_p=params.top_p, top_k=params.top_k,
            max_new_tokens=params.max_new_tokens, stop=list(params.stop)))
        for (r, s), prefix, group in zip(where[start : start + chunk], batch, completions):
            row = rows[r]
            prefix_response = prefix[len(row["prompt_ids"]):]
            rec = by_id[row["id"]]
            rewards = []
            for c in group:
                text = tokenizer.decode(prefix_response + list(c.response_ids), skip_special_tokens=True)
                rewards.append(float(task.verify(text, rec).reward))
            row["steps"][s].update(rewards=rewards, value=entropy_regularized_value(rewards, eta))
        done += len(batch)
        if on_progress is not None:
            on_progress(done, len(prefixes))
    return rows


def write_labels(rows: list[dict[str, Any]], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return path


def read_labels(path: Path, key: str = "label.path") -> list[dict[str, Any]]:
    """Rows written by `write_labels`; a missing file or a row without labelled steps names the key."""
    if not path.exists():
        raise FileNotFoundError(f"{key}: file '{path}' not found (labels are written by `rlvr prm` to "
                                "<run dir>/labels.jsonl)")
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        missing = [k for k in ("id", "prompt_ids", "response_ids", "steps", "correct") if k not in row]
        if missing or any("value" not in s or "token" not in s for s in row["steps"]):
            raise ConfigError(f"{key}: line {n} of '{path}' is not a labelled solution (missing "
                              f"{', '.join(missing) or 'steps[].value/token'}); give a labels.jsonl written by "
                              "`rlvr prm`")
        rows.append(row)
    if not rows:
        raise ConfigError(f"{key}: '{path}' has no rows")
    return rows
