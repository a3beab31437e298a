"""Supervised fine-tuning on prompt/completion pairs: cross-entropy on completion tokens (and EOS) only.

Used to build the shipped model (scripts/build_base_model.py) and to warm-start policies before RL.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Any

import torch
from rich.markup import escape

from rlvr.config import SFTConfig
from rlvr.learner.optim import build_optimizer, build_scheduler
from rlvr.models import check_vocab, load_causal_lm, load_tokenizer, resolve_device, resolve_dtype
from rlvr.models.logprobs import token_logprobs
from rlvr.models.lora import apply_lora, exportable
from rlvr.runtime import (
    ProgressReporter,
    attach_log_file,
    console,
    format_metrics,
    prepare_run_dir,
    seed_everything,
)
from rlvr.tasks import TaskError, encode_prompt, uses_chat_template
from rlvr.tasks.jsonl import read_rows
from rlvr.tracking import JsonlSink
from rlvr.trainer.checkpoint import save_checkpoint, save_hf_dir

log = logging.getLogger("rlvr.sft")


ROLLOUTS_FILE = "rollouts.jsonl"


def data_format(cfg: SFTConfig) -> str:
    """'rollouts' for an RL run's directory or rollouts.jsonl (with format auto), else 'prompt_completion'."""
    if cfg.data.format != "auto":
        return cfg.data.format
    path = Path(cfg.data.path)
    return "rollouts" if path.is_dir() or path.name == ROLLOUTS_FILE else "prompt_completion"


def rollout_examples(path: Path, *, correct_only: bool = True, per_prompt: int | None = 1,
                     max_examples: int | None = None) -> tuple[list[tuple[str, str]], int]:
    """(prompt, response) pairs from an RL run's rollouts.jsonl (or its directory), and the rows left out.

    Re-distillation's data (Chen et al., arXiv:2505.17988): the RL-trained policy's own answers. Rows are taken
    newest first (the latest step is the most-trained policy), only verified-correct ones with `correct_only`
    (a label-free run stores correct=None: left out), at most `per_prompt` distinct responses per prompt, at
    most `max_examples` in all. The prompt is the rendered prompt the policy saw (chat template applied).
    """
    path = Path(path)
    if path.is_dir():
        path = path / ROLLOUTS_FILE
    if not path.exists():
        raise TaskError(f"data.path: '{path}' not found; a run stores its samples in rollouts.jsonl when "
                        "logging.rollouts_every > 0 (raise logging.rollouts_per_step to keep whole batches)")
    rows = [r for _, r in read_rows(path) if isinstance(r, dict)]
    if rows and not any("response" in r and "prompt" in r for r in rows):
        raise TaskError(f"data.path: '{path}' is not a run's rollouts (rows need 'prompt', 'response' and "
                        f"'correct'; the first has: {', '.join(sorted(rows[0]))}); for prompt/completion "
                        "rows set data.format=prompt_completion")
    order = sorted(range(len(rows)), key=lambda i: (-int(rows[i].get("step") or 0), i))  # newest first, stable
    taken: dict[str, set[str]] = {}
    out: list[tuple[str, str]] = []
    for i in order:
        r = rows[i]
        prompt, response = r.get("prompt"), r.get("response")
        if not isinstance(prompt, str) or not isinstance(response, str) or not response:
            continue
        if correct_only and r.get("correct") is not True:
            continue
        seen = taken.setdefault(prompt, set())
        if response in seen or (per_prompt is not None and len(seen) >= per_prompt):
            continue
        seen.add(response)
        out.append((prompt, response))
        if max_examples is not None and len(out) >= max_examples:
            break
    if not out:
        raise TaskError(f"data.path: no usable answer in '{path}' ({len(rows)} rows"
                        f"{', none marked correct' if correct_only else ''}); train the run longer, store more "
                        "samples (logging.rollouts_per_step), or set data.correct_only=false")
    return out, len(rows) - len(out)


def tokenize_examples(cfg: SFTConfig, tokenizer: Any) -> tuple[list[tuple[list[int], int]], int]:
    """(ids, prompt_length) per usable row, and the number of rows skipped (malformed or too long)."""
    if data_format(cfg) == "rollouts":
        return _tokenize_rollouts(cfg, tokenizer)
    rows = read_rows(Path(cfg.data.path))
    if cfg.data.max_examples is not None:
        rows = rows[: cfg.data.max_examples]
    cols = (cfg.data.prompt_column, cfg.data.completion_column)
    first = next((r for _, r in rows if isinstance(r, dict)), None)
    if first is None:
        raise TaskError(f"data.path: '{cfg.data.path}' has no rows")
    for key, col in zip(("prompt_column", "completion_column"), cols):
        if col not in first:
            raise TaskError(f"data.{key}: column '{col}' not in '{cfg.data.path}'; columns are: "
                            f"{', '.join(sorted(first))}")
    chat = uses_chat_template(tokenizer, cfg.model.chat_template)
    eos = int(tokenizer.eos_token_id)
    out, skipped = [], 0
    for _, row in rows:
        if not isinstance(row, dict) or not isinstance(row.get(cols[0]), str) or not isinstance(row.get(cols[1]), str):
            skipped += 1
            continue
        if chat:
            prompt_ids, _ = encode_prompt(tokenizer, messages=[{"role": "user", "content": row[cols[0]]}])
        else:
            prompt_ids, _ = encode_prompt(tokenizer, text=row[cols[0]])
        completion = tokenizer(row[cols[1]], add_special_tokens=False)["input_ids"] + [eos]
        ids = prompt_ids + completion
        if len(ids) > cfg.data.max_length:
            skipped += 1
            continue
        out.append((ids, len(prompt_ids)))
    if not out:
        raise TaskError(f"data.path: no usable examples in '{cfg.data.path}' ({skipped} skipped)")
    return out, skipped


def _tokenize_rollouts(cfg: SFTConfig, tokenizer: Any) -> tuple[list[tuple[list[int], int]], int]:
    """`rollout_examples` tokenized as the RL run saw them: the stored prompt is already rendered, so it is
    encoded as the trainer's renderer encodes it (no special tokens added after a chat template)."""
    pairs, left_out = rollout_examples(Path(cfg.data.path), correct_only=cfg.data.correct_only,
                                       per_prompt=cfg.data.per_prompt, max_examples=cfg.data.max_examples)
    chat = uses_chat_template(tokenizer, cfg.model.chat_template)
    eos = int(tokenizer.eos_token_id)
    out, skipped = [], left_out
    for prompt, response in pairs:
        prompt_ids = list(tokenizer(prompt, add_special_tokens=not chat)["input_ids"])
        ids = prompt_ids + list(tokenizer(response, add_special_tokens=False)["input_ids"]) + [eos]
        if len(ids) > cfg.data.max_length:
            skipped += 1
            continue
        out.append((ids, len(prompt_ids)))
    if not out:
        raise TaskError(f"data.path: every answer in '{cfg.data.path}' is longer than data.max_length="
                        f"{cfg.data.max_length} tokens")
    return out, skipped


def _collate(examples: list[tuple[list[int], int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    width = max(len(ids) for ids, _ in examples)
    input_ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    attention = torch.zeros_like(input_ids)
    mask = torch.zeros((len(examples), width), dtype=torch.float32)
    for row, (ids, prompt_len) in enumerate(examples):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        attention[row, : len(ids)] = 1
        mask[row, prompt_len : len(ids)] = 1.0
    return input_ids, attention, mask


def run_sft(cfg: SFTConfig) -> Path:
    run_dir = prepare_run_dir(cfg, resume=False)
    handler = attach_log_file(run_dir)
    try:
        seed_everything(cfg.run.seed)
        device = resolve_device(cfg.model.device)
        tokenizer = load_tokenizer(cfg.model.tokenizer_path or cfg.model.path,
                                   trust_remote_code=cfg.model.trust_remote_code)
        examples, skipped = tokenize_examples(cfg, tokenizer)
        model = load_causal_lm(cfg.model.path, dtype=resolve_dtype(cfg.model.dtype, device), device=device,
                               trust_remote_code=cfg.model.trust_remote_code,
                               gradient_checkpointing=cfg.model.gradient_checkpointing)
        check_vocab(tokenizer, model)
        if cfg.model.lora is not None:
            model = apply_lora(model, cfg.model.lora)
        console.print(f"SFT on {len(examples)} examples ({skipped} skipped) for {cfg.train.steps} steps")
        optimizer = build_optimizer(model, cfg.optim)
        scheduler = build_scheduler(optimizer, cfg.optim, cfg.train.steps)
        order_gen = torch.Generator().manual_seed(cfg.run.seed)
        order: list[int] = []
        sink = JsonlSink(run_dir / "metrics.jsonl")
        model.train()
        with ProgressReporter("sft", cfg.train.steps, cfg.logging.progress) as progress:
            for step in range(1, cfg.train.steps + 1):
                started = time.perf_counter()
                if len(order) < cfg.train.batch_size:
                    order += torch.randperm(len(examples), generator=order_gen).tolist()
                picked, order = order[: cfg.train.batch_size], order[cfg.train.batch_size :]
                input_ids, attention, mask = _collate([examples[i] for i in picked], tokenizer.pad_token_id)
                total = float(mask[:, 1:].sum())
                optimizer.zero_grad(set_to_none=True)
                loss_value = 0.0
                for rows in torch.split(torch.arange(len(picked)), cfg.train.micro_batch_size):
                    ids, att, m = input_ids[rows].to(device), attention[rows].to(device), mask[rows].to(device)
                    logp, _ = token_logprobs(model, ids, att, m)
                    loss = -(logp * m).sum() / total
                    loss.backward()
                    loss_value += float(loss.detach())
                max_norm = cfg.optim.grad_clip if cfg.optim.grad_clip is not None else float("inf")
                grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm))
                if math.isfinite(loss_value) and math.isfinite(grad_norm):
                    optimizer.step()
                    scheduler.step()
                metrics = {"loss": loss_value, "grad_norm": grad_norm, "lr": scheduler.get_last_lr()[0],
                           "tokens": total, "step_s": time.perf_counter() - started}
                sink.log(step, metrics)
                line = format_metrics(metrics, ("loss", "grad_norm", "lr", "step_s"))
                progress.update(step, line, print_line=step % cfg.logging.console_every == 0)
                if cfg.checkpoint.every and step % cfg.checkpoint.every == 0 and step < cfg.train.steps:
                    save_checkpoint(run_dir, step, exportable(model), tokenizer, {"optimizer": optimizer.state_dict()},
                                    cfg.checkpoint.keep_last)
        sink.close()
        final = save_hf_dir(exportable(model), tokenizer, run_dir / "final")
        console.print(f"SFT done. Final model: [bold]{escape(str(final))}[/bold]")
        return run_dir
    finally:
        logging.getLogger("rlvr").removeHandler(handler)
        handler.close()
