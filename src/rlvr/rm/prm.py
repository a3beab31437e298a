"""`rlvr prm`: a process reward model from the initial policy's own samples (ER-PRM, arXiv:2412.11006).

Two phases in one command:
1. labelling (`prm_label.py`): sample solutions to training prompts with the initial policy (`model.path`), split
   them into steps with the task's `reasoning_steps` hook, roll out m completions from every step prefix, and
   label the step with the entropy-regularized value v_t; written to <run dir>/labels.jsonl (`label.path`
   reuses a file instead).
   With `loss.type: oreal` (and `label.rollouts: 0`) only the solutions and their outcomes are kept, and
   `rm/oreal.py` trains OREAL's token-level reward model on them instead (arXiv:2502.06781).
2. training: a per-token scalar head (`AutoModelForTokenClassification`, one label) on the same causal LM, read
   at each step's last token and fitted to v_t:

       bce: loss = -mean_t [ v_t log sigmoid(s_t) + (1 - v_t) log(1 - sigmoid(s_t)) ]   (soft-label cross-entropy)
       mse: loss =  mean_t ( sigmoid(s_t) - v_t )^2

   over every labelled step of the batch's solutions. Held-out prompts (a seeded `data.eval_fraction`) give
   step accuracy, MSE, and best-of-n selection accuracy. `final/` loads as the `prm` reward component.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from rich.markup import escape

from rlvr.config import PRMConfig
from rlvr.errors import ConfigError
from rlvr.models import ModelError, check_vocab, load_causal_lm, load_tokenizer, resolve_device, resolve_dtype
from rlvr.models.reward_head import load_step_reward_model, token_logits
from rlvr.rm.data import best_of_n, rows_within, split_by_prompt
from rlvr.rm.fit import fit_reward_model
from rlvr.rm.prm_label import entropy_regularized_value, label_solutions, read_labels, write_labels
from rlvr.rollout import SamplingParams, build_engine
from rlvr.runtime import (
    ProgressReporter,
    attach_log_file,
    console,
    prepare_run_dir,
    seed_everything,
)
from rlvr.tasks import PromptRenderer, build_task
from rlvr.trainer.checkpoint import save_hf_dir

log = logging.getLogger("rlvr.prm")


@dataclass
class StepExample:
    """One labelled solution: token ids (prompt + response), the positions of its steps' last tokens in them,
    and the steps' labels."""

    prompt_id: str
    ids: list[int]
    positions: list[int]
    targets: list[float]
    correct: bool


def prm_step_loss(scores: torch.Tensor, targets: torch.Tensor, kind: str = "bce") -> torch.Tensor:
    """Mean loss over steps of the PRM's step logits `scores` against labels `targets` in [0, 1] (see module)."""
    if kind == "bce":
        return F.binary_cross_entropy_with_logits(scores, targets)
    if kind == "mse":
        return ((torch.sigmoid(scores) - targets) ** 2).mean()
    raise ValueError(f"loss.type: expected bce or mse; got {kind!r}")


def examples_from_rows(rows: list[dict[str, Any]], max_length: int) -> tuple[list[StepExample], int]:
    """Labelled solutions as training examples; (examples, how many were longer than max_length)."""
    kept, skipped = rows_within(rows, max_length)
    return [StepExample(str(row["id"]), ids, [len(row["prompt_ids"]) + int(s["token"]) for s in row["steps"]],
                        [float(s["value"]) for s in row["steps"]], bool(row["correct"])) for row, ids in kept], skipped


@torch.no_grad()
def step_scores(model: Any, examples: list[StepExample], pad_id: int, device: torch.device,
                batch_size: int = 16) -> list[torch.Tensor]:
    """The PRM's logit at each example's step positions (eval mode)."""
    was_training = model.training
    model.eval()
    out: list[torch.Tensor] = []
    for start in range(0, len(examples), batch_size):
        batch = examples[start : start + batch_size]
        logits = token_logits(model, [e.ids for e in batch], pad_id, device)
        out.extend(row[torch.tensor(e.positions, dtype=torch.long)].cpu() for row, e in zip(logits, batch))
    model.train(was_training)
    return out


def aggregate_steps(probs: torch.Tensor, how: str) -> float:
    """One score for a solution from its steps' probabilities; a solution without steps scores -inf."""
    if probs.numel() == 0:
        return float("-inf")
    return float(probs.min() if how == "min" else probs[-1] if how == "last" else probs.mean())


def evaluate_prm(model: Any, examples: list[StepExample], pad_id: int, device: torch.device, *,
                 threshold: float = 0.5, aggregate: str = "min", batch_size: int = 16) -> dict[str, float]:
    """Held-out step metrics and best-of-n selection.

    step_accuracy = mean over steps [ (sigmoid(s_t) > threshold) == (v_t > threshold) ]
    step_mse      = mean over steps ( sigmoid(s_t) - v_t )^2
    best_of_n     = mean over prompts with >= 2 solutions: is the solution with the highest aggregate score correct?
    random_of_n   = the same prompts' mean share of correct solutions (picking one at random)
    oracle_of_n   = share of those prompts with at least one correct solution
    """
    scores = step_scores(model, examples, pad_id, device, batch_size)
    probs = [torch.sigmoid(s) for s in scores]
    p = torch.cat(probs) if probs else torch.zeros(0)
    v = torch.tensor([t for e in examples for t in e.targets], dtype=torch.float32)
    out: dict[str, float] = {"steps": float(v.numel())}
    if v.numel():
        out["step_accuracy"] = float(((p > threshold) == (v > threshold)).float().mean())
        out["step_mse"] = float(((p - v) ** 2).mean())
    out.update(best_of_n([(e.prompt_id, aggregate_steps(pr, aggregate), e.correct) for e, pr in zip(examples, probs)]))
    return out


def relabel(rows: list[dict[str, Any]], eta: float) -> list[dict[str, Any]]:
    """The same rollouts aggregated with another eta: v_t recomputed from each step's stored rewards (no new
    sampling), so eta = 0 (soft), 2 and inf (hard) labels can be compared on one labelling pass."""
    for n, row in enumerate(rows, 1):
        for step in row["steps"]:
            if "rewards" not in step:
                raise ConfigError(f"label.eta: row {n} of label.path has no stored rollout rewards to re-aggregate "
                                  "with another eta; drop label.eta or label again")
            step["value"] = entropy_regularized_value(step["rewards"], eta)
        row["eta"] = eta
    return rows


def label_phase(cfg: PRMConfig, run_dir: Path, task: Any, tokenizer: Any, device: torch.device) -> Path:
    """Sample and label as `cfg.label` says; returns the labels file."""
    if cfg.label.rollouts and not callable(getattr(task, "reasoning_steps", None)):
        raise ConfigError(f"task.name: rlvr prm labels reasoning steps through the task's reasoning_steps hook, "
                          f"which task '{cfg.task.name}' does not have; use task addition (see "
                          "docs/reward-models.md#process-rewards)")
    model = load_causal_lm(str(cfg.model.path), dtype=resolve_dtype(cfg.model.dtype, device), device=device,
                           trust_remote_code=cfg.model.trust_remote_code, trainable=False)
    check_vocab(tokenizer, model)
    renderer = PromptRenderer(task, tokenizer, cfg.model.chat_template)
    engine = build_engine(cfg.rollout.engine, cfg.rollout.engine_options, cfg.rollout.batch_size, model, tokenizer)
    records = [task.train[i] for i in range(min(cfg.label.prompts, len(task.train)))]
    params = SamplingParams(temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p, top_k=cfg.rollout.top_k,
                            max_new_tokens=cfg.rollout.max_new_tokens, stop=list(cfg.rollout.stop))
    started = time.perf_counter()
    with ProgressReporter("label", 100, cfg.logging.progress) as progress:
        rows = label_solutions(engine, renderer, task, records, tokenizer, solutions=cfg.label.solutions,
                               rollouts=cfg.label.rollouts, eta=cfg.label.eta, params=params, seed=cfg.run.seed,
                               on_progress=lambda done, total: progress.update(100 * done // max(total, 1)))
    engine.shutdown()
    path = write_labels(rows, run_dir / "labels.jsonl")
    steps = [s for r in rows for s in r["steps"]]
    values = [s["value"] for s in steps]
    correct = sum(r["correct"] for r in rows)
    elapsed = time.perf_counter() - started
    if not cfg.label.rollouts:  # outcomes only (loss.type oreal)
        console.print(f"Sampled {len(rows)} solutions ({len(records)} prompts, {correct} correct), no step "
                      f"rollouts ({elapsed:.1f} s). Solutions: [bold]{escape(str(path))}[/bold]")
        return path
    console.print(f"Labelled {len(steps)} step prefixes of {len(rows)} solutions ({len(records)} prompts, "
                  f"{correct} correct) with {cfg.label.rollouts} rollouts each, eta "
                  f"{cfg.label.eta}: mean label {sum(values) / max(len(values), 1):.3f} "
                  f"({elapsed:.1f} s). Labels: [bold]{escape(str(path))}[/bold]")
    return path


def run_prm(cfg: PRMConfig) -> Path:
    """Label (unless `label.path`), then train the PRM; writes labels.jsonl, metrics.jsonl, prm_eval.json, final/."""
    if cfg.model.lora is not None:
        raise ModelError("model.lora: rlvr prm trains all weights (LoRA on a PRM head is not wired yet); remove "
                         "model.lora")
    device = resolve_device(cfg.model.device)
    tokenizer = load_tokenizer(cfg.model.tokenizer_path or cfg.model.path, trust_remote_code=cfg.model.trust_remote_code)
    task = build_task(cfg.task.name, cfg.task.params)
    rows = read_labels(cfg.label.path) if cfg.label.path is not None else None
    if rows is not None and rows[0].get("eta", cfg.label.eta) != cfg.label.eta:
        console.print(f"Re-aggregating the stored rollouts of {cfg.label.path} (eta {rows[0]['eta']}) with "
                      f"label.eta {cfg.label.eta}")
        rows = relabel(rows, cfg.label.eta)
    run_dir = prepare_run_dir(cfg, resume=False)
    handler = attach_log_file(run_dir)
    try:
        seed_everything(cfg.run.seed)
        if rows is None:
            rows = read_labels(label_phase(cfg, run_dir, task, tokenizer, device))
        if cfg.label.only:
            return run_dir
        if cfg.loss.type == "oreal":  # OREAL's token-level RM: outcomes only, no step labels
            from rlvr.rm.oreal import train_token_rm

            return train_token_rm(cfg, rows, run_dir, tokenizer, device)
        examples, skipped = examples_from_rows(rows, cfg.data.max_length)
        train_all, heldout = split_by_prompt(examples, cfg.data.eval_fraction, cfg.run.seed)
        train_set = [e for e in train_all if e.positions]
        if not train_set:
            raise ConfigError(f"label: no labelled step in the training split ({len(rows)} solutions, {skipped} "
                              "longer than data.max_length); label more prompts (label.prompts) or raise "
                              "data.max_length")
        seed_everything(cfg.run.seed)
        pad = int(tokenizer.pad_token_id)
        model = load_step_reward_model(str(cfg.model.path), dtype=resolve_dtype(cfg.model.dtype, device),
                                       device=device, pad_token_id=pad, trust_remote_code=cfg.model.trust_remote_code)
        check_vocab(tokenizer, model)
        n_steps = sum(len(e.positions) for e in train_set)
        console.print(f"PRM: {len(train_set)} training solutions ({n_steps} steps), {len(heldout)} held-out "
                      f"({sum(len(e.positions) for e in heldout)} steps; {skipped} too long), {cfg.train.steps} steps")
        micro = min(cfg.train.micro_batch_size, cfg.train.batch_size)
        ev = dict(threshold=cfg.data.threshold, aggregate=cfg.eval.aggregate, batch_size=micro)

        def accumulate(picked: list[int]) -> tuple[float, dict[str, float]]:
            total = sum(len(train_set[i].positions) for i in picked)
            loss_value = 0.0
            for start in range(0, len(picked), micro):
                batch = [train_set[i] for i in picked[start : start + micro]]
                logits = token_logits(model, [e.ids for e in batch], pad, device)
                scores = torch.cat([row[torch.tensor(e.positions, device=row.device)]
                                    for row, e in zip(logits, batch)])
                targets = torch.tensor([t for e in batch for t in e.targets], device=scores.device)
                # each micro-batch's step mean, weighted by its share of the batch's steps: the batch mean
                loss = prm_step_loss(scores, targets, cfg.loss.type) * len(targets) / total
                loss.backward()
                loss_value += float(loss.detach())
            return loss_value, {}

        before, latest = fit_reward_model(
            model, tokenizer, cfg, run_dir, name="prm", examples=len(train_set), accumulate=accumulate,
            evaluate=lambda: evaluate_prm(model, heldout, pad, device, **ev),
            shown=("loss", "eval/step_accuracy", "eval/best_of_n", "step_s"))
        train_targets = [t for e in train_set for t in e.targets]
        mean_label = sum(train_targets) / len(train_targets)
        held_targets = [t for e in heldout for t in e.targets]
        baseline = {"mean_label_mse": (sum((t - mean_label) ** 2 for t in held_targets) / len(held_targets))
                    if held_targets else float("nan"),
                    "majority_accuracy": (max(sum(t > cfg.data.threshold for t in held_targets),
                                              sum(t <= cfg.data.threshold for t in held_targets)) / len(held_targets))
                    if held_targets else float("nan")}
        result = {"train_solutions": len(train_set), "train_steps": n_steps, "heldout_solutions": len(heldout),
                  "eta": rows[0].get("eta"), "rollouts": rows[0].get("rollouts"), "aggregate": cfg.eval.aggregate,
                  "baseline": baseline, "before": before, "after": latest}
        (run_dir / "prm_eval.json").write_text(json.dumps(result, indent=2) + "\n")
        final = save_hf_dir(model, tokenizer, run_dir / "final")
        acc = latest.get("step_accuracy", float("nan"))
        console.print(f"Held-out step accuracy {before.get('step_accuracy', float('nan')):.3f} before, {acc:.3f} "
                      f"after (majority class {baseline['majority_accuracy']:.3f}); step MSE "
                      f"{latest.get('step_mse', float('nan')):.4f} (mean label {baseline['mean_label_mse']:.4f}); "
                      f"best-of-n {latest.get('best_of_n', float('nan')):.3f} vs random "
                      f"{latest.get('random_of_n', float('nan')):.3f} (oracle {latest.get('oracle_of_n', float('nan')):.3f}"
                      f", {int(latest.get('prompts', 0))} prompts). PRM: [bold]{escape(str(final))}[/bold]")
        return run_dir
    finally:
        logging.getLogger("rlvr").removeHandler(handler)
        handler.close()
