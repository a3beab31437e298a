"""`rlvr rm`: train a Bradley–Terry reward model, a sequence-classification head on any causal LM.

The model is `AutoModelForSequenceClassification` with one label, built from a causal-LM checkpoint (the
backbone's weights are kept, the scalar head starts at random with run.seed). A pair's two texts are rendered
and tokenized exactly as the `reward_model` scorer does (`render_exchange`, right padding, the reward read
where the model pools, its last non-pad token), so `<run>/final` plugs into
`rewards: [{name: reward_model, path: <run>/final}]` with no conversion.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch
from rich.markup import escape

from rlvr.config import RMConfig
from rlvr.models import ModelError, check_vocab, load_tokenizer, resolve_device, resolve_dtype
from rlvr.models.reward_head import load_reward_model, sequence_rewards
from rlvr.rewards.models import render_exchange
from rlvr.rm.data import (
    PreferencePair,
    RMDataError,
    data_format,
    mine_rollout_pairs,
    read_pairs,
    split_pairs,
)
from rlvr.rm.fit import fit_reward_model
from rlvr.rm.loss import bradley_terry_loss, pair_accuracy
from rlvr.runtime import (
    attach_log_file,
    console,
    prepare_run_dir,
    seed_everything,
)
from rlvr.trainer.checkpoint import save_hf_dir

log = logging.getLogger("rlvr.rm")

EncodedPair = tuple[list[int], list[int], float]


def load_pairs(cfg: RMConfig) -> tuple[list[PreferencePair], list[PreferencePair]]:
    """(train, held-out) preference pairs as `data` describes."""
    d = cfg.data

    def read(path: Path, key: str) -> list[PreferencePair]:
        if data_format(path, d.format) == "rollouts":
            return mine_rollout_pairs(path, max_pairs_per_prompt=d.max_pairs_per_prompt, seed=cfg.run.seed, key=key)
        return read_pairs(path, prompt_column=d.prompt_column, chosen_column=d.chosen_column,
                          rejected_column=d.rejected_column, margin_column=d.margin_column, key=key)

    pairs = read(d.path, "data.path")
    if d.eval_path is not None:
        return pairs, read(d.eval_path, "data.eval_path")
    train, heldout = split_pairs(pairs, d.eval_fraction, cfg.run.seed)
    if not train:
        raise RMDataError(f"data.eval_fraction: holding out {d.eval_fraction} of '{d.path}' leaves no training "
                          "pairs; lower it or give data.eval_path")
    return train, heldout


def pair_texts(pair: PreferencePair, tokenizer: Any) -> tuple[str, str]:
    """The two texts the model scores: through the scorer's rendering, unless the prompt is already rendered."""
    if pair.prompt is None:
        return pair.chosen, pair.rejected
    if pair.rendered:
        return pair.prompt + pair.chosen, pair.prompt + pair.rejected
    return render_exchange(tokenizer, pair.prompt, pair.chosen), render_exchange(tokenizer, pair.prompt,
                                                                                 pair.rejected)


def encode_pairs(pairs: list[PreferencePair], tokenizer: Any, max_length: int) -> tuple[list[EncodedPair], int]:
    """Token ids of each pair's two texts (as the scorer tokenizes them), and how many pairs were too long."""
    out, skipped = [], 0
    for pair in pairs:
        chosen, rejected = (list(tokenizer(t)["input_ids"]) for t in pair_texts(pair, tokenizer))
        if max(len(chosen), len(rejected)) > max_length or not chosen or not rejected:
            skipped += 1  # the scorer would truncate the answer away; train only on what it can see
            continue
        out.append((chosen, rejected, pair.margin))
    return out, skipped


def _pair_rewards(model: Any, pairs: list[EncodedPair], pad_id: int,
                  device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    rewards = sequence_rewards(model, [c for c, _, _ in pairs] + [r for _, r, _ in pairs], pad_id, device)
    return rewards[: len(pairs)], rewards[len(pairs):]


@torch.no_grad()
def evaluate_pairs(model: Any, pairs: list[EncodedPair], pad_id: int, device: torch.device,
                   batch_size: int = 32) -> dict[str, float]:
    """Held-out pair accuracy (ties count 1/2) and the mean reward margin r_c - r_r."""
    was_training = model.training
    model.eval()
    chosen, rejected = [], []
    for start in range(0, len(pairs), batch_size):
        c, r = _pair_rewards(model, pairs[start : start + batch_size], pad_id, device)
        chosen.append(c.cpu())
        rejected.append(r.cpu())
    model.train(was_training)
    if not chosen:
        return {"accuracy": float("nan"), "margin": float("nan"), "pairs": 0}
    c, r = torch.cat(chosen), torch.cat(rejected)
    return {"accuracy": pair_accuracy(c, r), "margin": float((c - r).mean()), "pairs": len(pairs)}


def run_rm(cfg: RMConfig) -> Path:
    """Train as `cfg` says; writes metrics.jsonl, rm_eval.json (held-out accuracy before/after) and final/."""
    if cfg.model.lora is not None:
        raise ModelError("model.lora: rlvr rm trains all weights (LoRA on a reward head is not wired yet); "
                         "remove model.lora")
    # data and tokenizer first: a bad file stops the run before it leaves a run directory behind
    device = resolve_device(cfg.model.device)
    tokenizer = load_tokenizer(cfg.model.tokenizer_path or cfg.model.path, trust_remote_code=cfg.model.trust_remote_code)
    tokenizer.padding_side = "right"
    train_pairs, eval_pairs = load_pairs(cfg)
    train_set, skipped = encode_pairs(train_pairs, tokenizer, cfg.data.max_length)
    eval_set, eval_skipped = encode_pairs(eval_pairs, tokenizer, cfg.data.max_length)
    if not train_set:
        raise RMDataError(f"data.max_length: every training pair of '{cfg.data.path}' is longer than "
                          f"{cfg.data.max_length} tokens ({skipped} dropped); raise data.max_length")
    run_dir = prepare_run_dir(cfg, resume=False)
    handler = attach_log_file(run_dir)
    try:
        seed_everything(cfg.run.seed)
        model = load_reward_model(cfg.model.path, dtype=resolve_dtype(cfg.model.dtype, device), device=device,
                                  pad_token_id=int(tokenizer.pad_token_id),
                                  trust_remote_code=cfg.model.trust_remote_code)
        check_vocab(tokenizer, model)
        pad = int(tokenizer.pad_token_id)
        console.print(f"Reward model: {len(train_set)} training pairs ({skipped} too long), {len(eval_set)} "
                      f"held-out ({eval_skipped} too long), {cfg.train.steps} steps")
        micro = min(cfg.train.micro_batch_size, cfg.train.batch_size)

        def accumulate(picked: list[int]) -> tuple[float, dict[str, float]]:
            loss_value, chosen_all, rejected_all = 0.0, [], []
            for start in range(0, len(picked), micro):
                batch = [train_set[i] for i in picked[start : start + micro]]
                chosen, rejected = _pair_rewards(model, batch, pad, device)
                margin = (torch.tensor([m for _, _, m in batch], device=chosen.device)
                          if cfg.loss.use_margin else None)
                # each micro-batch's mean, weighted by its share of the batch: the batch mean overall
                loss = bradley_terry_loss(chosen, rejected, margin, cfg.loss.center_coef) * len(batch) / len(picked)
                loss.backward()
                loss_value += float(loss.detach())
                chosen_all.append(chosen.detach().cpu())
                rejected_all.append(rejected.detach().cpu())
            c, r = torch.cat(chosen_all), torch.cat(rejected_all)
            return loss_value, {"accuracy": pair_accuracy(c, r), "margin": float((c - r).mean()),
                                "reward_chosen": float(c.mean()), "reward_rejected": float(r.mean())}

        before, latest = fit_reward_model(
            model, tokenizer, cfg, run_dir, name="rm", examples=len(train_set), accumulate=accumulate,
            evaluate=lambda: evaluate_pairs(model, eval_set, pad, device, micro),
            shown=("loss", "accuracy", "margin", "eval/accuracy", "step_s"))
        result = {"heldout_pairs": len(eval_set), "train_pairs": len(train_set), "before": before, "after": latest}
        (run_dir / "rm_eval.json").write_text(json.dumps(result, indent=2) + "\n")
        final = save_hf_dir(model, tokenizer, run_dir / "final")
        console.print(f"Held-out pair accuracy: {before['accuracy']:.3f} before, {latest['accuracy']:.3f} after "
                      f"({len(eval_set)} pairs). Reward model: [bold]{escape(str(final))}[/bold]")
        return run_dir
    finally:
        logging.getLogger("rlvr").removeHandler(handler)
        handler.close()
