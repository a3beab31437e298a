r"""OREAL's token-level reward model, trained from outcome labels only (`rlvr prm` with `loss.type: oreal`).

Lyu et al., "Exploring the Limit of Outcome Reward for Learning Mathematical Reasoning" (OREAL),
arXiv:2502.06781, section 3: a per-token scalar w(s_t) whose mean over a response, through a sigmoid, predicts
whether the response is correct:

    p(y)  = sigmoid( (1/T) * sum_{t=1..T} w(s_t) )          T = the response's tokens; w read at token t
    loss  = -mean_y [ r_y * log p(y) + (1 - r_y) * log(1 - p(y)) ]      r_y in {0, 1}: the verifier's verdict

No step or token label is needed: the sequence's outcome is spread over its tokens by the fit, and the per-token
w(s_t) then weights the policy gradient (the `oreal` advantage estimator). The model is the same one-label
`AutoModelForTokenClassification` head as `rlvr prm`'s PRM, so `final/` loads as `model.token_rm_path`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from rich.markup import escape

from rlvr.config import PRMConfig
from rlvr.errors import ConfigError
from rlvr.models import check_vocab, resolve_dtype
from rlvr.models.reward_head import load_step_reward_model, token_logits
from rlvr.rm.data import best_of_n, rows_within, split_by_prompt
from rlvr.rm.fit import fit_reward_model
from rlvr.runtime import console, seed_everything
from rlvr.trainer.checkpoint import save_hf_dir


@dataclass
class OutcomeExample:
    """One sampled solution: token ids (prompt + response), where its response starts, and its outcome."""

    prompt_id: str
    ids: list[int]
    start: int
    correct: bool


def outcome_examples(rows: list[dict[str, Any]], max_length: int) -> tuple[list[OutcomeExample], int]:
    """Sampled solutions (labels.jsonl rows) with a non-empty response; (examples, how many were too long)."""
    kept, skipped = rows_within(rows, max_length)
    return [OutcomeExample(str(row["id"]), ids, len(row["prompt_ids"]), bool(row["correct"]))
            for row, ids in kept if row["response_ids"]], skipped


def sequence_logit(token_scores: torch.Tensor) -> torch.Tensor:
    """(1/T) * sum_t w(s_t) over a response's token scores [T]: the logit of p(correct)."""
    return token_scores.mean()


def oreal_outcome_loss(token_scores: list[torch.Tensor], correct: torch.Tensor) -> torch.Tensor:
    """Mean binary cross-entropy of p(y) = sigmoid(mean_t w_t) against the 0/1 outcome (see the module)."""
    logits = torch.stack([sequence_logit(s) for s in token_scores])
    return F.binary_cross_entropy_with_logits(logits, correct.to(logits.dtype))


def response_scores(model: Any, batch: list[OutcomeExample], pad_id: int, device: torch.device) -> list[torch.Tensor]:
    """w(s_t) at every response token of each example (the head reads the whole prompt + response)."""
    logits = token_logits(model, [e.ids for e in batch], pad_id, device)
    return [row[e.start:] for row, e in zip(logits, batch)]


@torch.no_grad()
def evaluate_token_rm(model: Any, examples: list[OutcomeExample], pad_id: int, device: torch.device,
                      batch_size: int = 16) -> dict[str, float]:
    """Held-out outcome prediction and best-of-n selection, and where the token weights land.

    accuracy    = mean [ (p(y) > 0.5) == correct ]          loss = the objective on these examples
    best_of_n   = over prompts with >= 2 solutions: is the one with the highest p(y) correct?
    random_of_n / oracle_of_n as in `rlvr prm`
    weight_pos  = mean over correct solutions' tokens of max(2 sigmoid(w_t) - 1, 0)   (OREAL's positive weight)
    weight_neg  = mean over wrong solutions' tokens of max(1 - 2 sigmoid(w_t), 0)      (its negative weight)
    """
    was_training = model.training
    model.eval()
    scores: list[torch.Tensor] = []
    for start in range(0, len(examples), batch_size):
        scores += [s.cpu() for s in response_scores(model, examples[start : start + batch_size], pad_id, device)]
    model.train(was_training)
    out: dict[str, float] = {"solutions": float(len(examples))}
    if not examples:
        return out
    correct = torch.tensor([e.correct for e in examples], dtype=torch.float32)
    p = torch.sigmoid(torch.stack([sequence_logit(s) for s in scores]))
    out["accuracy"] = float(((p > 0.5).float() == correct).float().mean())
    out["loss"] = float(oreal_outcome_loss(scores, correct))
    pos = [(2 * torch.sigmoid(s) - 1).clamp(min=0) for s, e in zip(scores, examples) if e.correct]
    neg = [(1 - 2 * torch.sigmoid(s)).clamp(min=0) for s, e in zip(scores, examples) if not e.correct]
    if pos:
        out["weight_pos"] = float(torch.cat(pos).mean())
    if neg:
        out["weight_neg"] = float(torch.cat(neg).mean())
    out.update(best_of_n([(e.prompt_id, pe, e.correct) for e, pe in zip(examples, p.tolist())]))
    return out


def train_token_rm(cfg: PRMConfig, rows: list[dict[str, Any]], run_dir: Path, tokenizer: Any,
                   device: torch.device) -> Path:
    """Fit the token-level reward model to the rows' outcomes; writes metrics.jsonl, token_rm_eval.json, final/."""
    examples, skipped = outcome_examples(rows, cfg.data.max_length)
    train_set, heldout = split_by_prompt(examples, cfg.data.eval_fraction, cfg.run.seed)
    if not train_set or len({e.correct for e in train_set}) < 2:
        n_ok = sum(e.correct for e in train_set)
        raise ConfigError(f"label: the token-level reward model needs correct and incorrect solutions to train on; "
                          f"the training split has {n_ok} correct of {len(train_set)} ({skipped} longer than "
                          "data.max_length). Label more prompts (label.prompts), sample more per prompt "
                          "(label.solutions) or pick task digits the model sometimes gets right")
    seed_everything(cfg.run.seed)
    pad = int(tokenizer.pad_token_id)
    model = load_step_reward_model(str(cfg.model.path), dtype=resolve_dtype(cfg.model.dtype, device),
                                   device=device, pad_token_id=pad, trust_remote_code=cfg.model.trust_remote_code)
    check_vocab(tokenizer, model)
    console.print(f"Token RM (OREAL): {len(train_set)} training solutions ({sum(e.correct for e in train_set)} "
                  f"correct), {len(heldout)} held-out ({skipped} too long), {cfg.train.steps} steps")
    micro = min(cfg.train.micro_batch_size, cfg.train.batch_size)

    def accumulate(picked: list[int]) -> tuple[float, dict[str, float]]:
        loss_value = 0.0
        for start in range(0, len(picked), micro):
            batch = [train_set[i] for i in picked[start : start + micro]]
            scores = response_scores(model, batch, pad, device)
            correct = torch.tensor([e.correct for e in batch], dtype=torch.float32, device=scores[0].device)
            loss = oreal_outcome_loss(scores, correct) * len(batch) / len(picked)  # the batch mean
            loss.backward()
            loss_value += float(loss.detach())
        return loss_value, {}

    before, latest = fit_reward_model(
        model, tokenizer, cfg, run_dir, name="token-rm", examples=len(train_set), accumulate=accumulate,
        evaluate=lambda: evaluate_token_rm(model, heldout, pad, device, micro),
        shown=("loss", "eval/accuracy", "eval/best_of_n", "step_s"))
    share = sum(e.correct for e in heldout) / max(len(heldout), 1)
    baseline = {"majority_accuracy": max(share, 1 - share) if heldout else float("nan")}
    result = {"objective": "oreal", "train_solutions": len(train_set), "heldout_solutions": len(heldout),
              "baseline": baseline, "before": before, "after": latest}
    (run_dir / "token_rm_eval.json").write_text(json.dumps(result, indent=2) + "\n")
    final = save_hf_dir(model, tokenizer, run_dir / "final")
    nan = float("nan")
    console.print(f"Held-out outcome accuracy {before.get('accuracy', nan):.3f} before, "
                  f"{latest.get('accuracy', nan):.3f} after (majority class {baseline['majority_accuracy']:.3f}); "
                  f"loss {before.get('loss', nan):.4f} -> {latest.get('loss', nan):.4f}; best-of-n "
                  f"{latest.get('best_of_n', nan):.3f} vs random {latest.get('random_of_n', nan):.3f} (oracle "
                  f"{latest.get('oracle_of_n', nan):.3f}). Token RM: [bold]{escape(str(final))}[/bold]")
    return run_dir
