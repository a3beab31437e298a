"""`rlvr eval`: load a model directory, evaluate it on a task's held-out split, print and save the result."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import torch

from rlvr.config import Config, ConfigError
from rlvr.eval.evaluate import evaluate, graded, write_results
from rlvr.models import (check_vocab, load_causal_lm, load_tokenizer, resolve_device, resolve_dtype,
                         resolve_model_path)
from rlvr.models.vision import is_vision_checkpoint, load_processor, load_vlm_for_training
from rlvr.rollout import ENGINES, SamplingParams, build_engine
from rlvr.runtime import ProgressReporter, console, seed_everything, step_seed
from rlvr.tasks import PromptRenderer, build_task


def check_eval_model(cfg: Config, task: Any, model_path: str, key: str = "MODEL_DIR") -> None:
    """Raise a ConfigError naming `key` unless `model_path` and the engine can be evaluated on `task`: an image
    task needs a vision-language checkpoint and an engine that takes images. A vision-language checkpoint on a
    text task is evaluated through its language path (prompts without images). Cheap: reads config.json only."""
    visual = getattr(task, "visual", False)
    vision_model = is_vision_checkpoint(model_path, trust_remote_code=cfg.model.trust_remote_code, key=key)
    if visual and not vision_model:
        raise ConfigError(f"{key}: '{model_path}' is a text-only model (no vision_config), but task "
                          f"'{cfg.task.name}' has images; evaluate a vision-language checkpoint such as builtin-vl")
    engine = ENGINES.get(cfg.rollout.engine)
    if visual and not getattr(engine, "multimodal", False):
        raise ConfigError(f"rollout.engine: the {cfg.rollout.engine} engine does not take images yet; task "
                          f"'{cfg.task.name}' has images, so set rollout.engine=hf")
    check_images = getattr(engine, "check_images", None)
    if visual and callable(check_images):  # vllm: LLaVA-style checkpoints only
        check_images(model_path)


def run_eval(cfg: Config, model_path: str, out: Path | None, *, key: str = "MODEL_DIR", split: str = "heldout",
             sft_out: Path | None = None, sft_mode: str = "best", backtrack: str | None = None,
             max_dead_ends: int | None = None, traversal_loss: str | None = None) -> dict[str, Any]:
    """Evaluate `model_path` on the held-out split of `cfg`'s task (or its training split, `split="train"`);
    `key` names the model in error messages. With a search section and `sft_out`, each problem's searched
    answer is also written there as SFT data (docs/search.md); with `sft_mode="traversal"` the search's
    traversal up to it (dead ends, each followed by the `backtrack` marker, at most `max_dead_ends`)."""
    if split not in ("heldout", "train"):
        raise ConfigError(f"--split: expected heldout or train; got '{split}'")
    traversal = _traversal_spec(cfg, sft_out, sft_mode, backtrack, max_dead_ends, traversal_loss)
    if sft_out is not None and cfg.search is None:
        raise ConfigError("--sft-out: SFT data is built from searched trees; add a search section, e.g. "
                          "search.name=mcts search.max_tokens=400")
    if sft_out is not None and split != "train":
        raise ConfigError("--sft-out: search the training prompts with --split train (SFT data from the held-out "
                          "split would leak the evaluation problems into training)")
    if split == "train" and cfg.eval.size is None:
        raise ConfigError("--size: with --split train set how many training prompts to use (e.g. --size 100); "
                          "a procedural task's training split has up to task.train_size problems")
    seed_everything(cfg.run.seed)
    task = build_task(cfg.task.name, cfg.task.params)
    check_eval_model(cfg, task, model_path, key)
    device = resolve_device(cfg.model.device)
    tokenizer = load_tokenizer(cfg.model.tokenizer_path or model_path,
                               trust_remote_code=cfg.model.trust_remote_code, key=key)
    search_prm = None
    if cfg.search is not None and cfg.search.prm is not None:  # checked before the policy loads
        from rlvr.sampling.search import load_search_prm

        search_prm = load_search_prm(cfg.search.settings(), tokenizer, task, device=cfg.model.device)
    search_compare = None
    if cfg.search is not None and cfg.search.compare is not None:  # beam_prm's preference model, checked early
        from rlvr.sampling.search import load_search_compare

        search_compare = load_search_compare(cfg.search.settings(), tokenizer, device=cfg.model.device)
    scorer = select_scorer(cfg, task)  # checked before the policy loads
    dtype = resolve_dtype(cfg.model.dtype, device)
    processor = None
    visual = getattr(task, "visual", False)
    if visual or is_vision_checkpoint(model_path, trust_remote_code=cfg.model.trust_remote_code, key=key):
        # a vision-language model; on a text task it runs its language path (no processor, no images)
        model = load_vlm_for_training(model_path, dtype=dtype, device=device, trainable=False,
                                      trust_remote_code=cfg.model.trust_remote_code, key=key)
        if visual:  # images: its processor, and an engine that takes them
            processor = load_processor(model_path, trust_remote_code=cfg.model.trust_remote_code, key=key)
    else:
        model = load_causal_lm(model_path, dtype=dtype, device=device,
                               trust_remote_code=cfg.model.trust_remote_code, trainable=False, key=key)
    check_vocab(tokenizer, model)
    if traversal is not None:
        _check_marker(tokenizer, traversal.backtrack)
    renderer = PromptRenderer(task, tokenizer, cfg.model.chat_template, processor)
    engine = build_engine(cfg.rollout.engine, cfg.rollout.engine_options, cfg.rollout.batch_size, model, tokenizer)
    source = task.train if split == "train" else task.heldout
    records = list(source[: cfg.eval.size]) if cfg.eval.size else list(source)
    params = SamplingParams(n=cfg.eval.n, temperature=cfg.eval.temperature or cfg.rollout.temperature,
                            top_p=cfg.rollout.top_p, top_k=cfg.rollout.top_k,
                            max_new_tokens=cfg.rollout.max_new_tokens, stop=list(cfg.rollout.stop))
    torch.manual_seed(step_seed(cfg.run.seed, 10**9))
    if cfg.search is not None:  # the searched answer's pass@1 and the tokens spent (docs/search.md)
        from rlvr.eval.search import evaluate_search, print_search_result

        sft_rows: list[dict[str, Any]] | None = [] if sft_out is not None else None
        run_eval = functools.partial(evaluate_search, engine, renderer, task, records, params,
                                     cfg.search.settings(), tokenizer, sft_rows=sft_rows, prm=search_prm,
                                     compare=search_compare, traversal=traversal)
        show = print_search_result
    else:
        run_eval = functools.partial(evaluate, engine, renderer, task, records, params, cfg.eval.ks,
                                     scorer=scorer)
        show = print_result
    with ProgressReporter("eval", len(records), cfg.logging.progress) as progress:
        result = run_eval(on_progress=lambda done, total: progress.update(done))
    result.update(model=str(model_path), task=cfg.task.model_dump(mode="json"), split=split)
    if out is not None:
        write_results(result, out)
    show(result)
    if sft_out is not None:
        assert sft_rows is not None
        write_sft_rows(sft_rows, sft_out)
        kept = sum(r["correct"] for r in sft_rows)
        if traversal is None:
            console.print(f"SFT data: {len(sft_rows)} searched answers ({kept} verified correct) -> {sft_out}; "
                          f"train on them with: rlvr sft recipes/search_sft.yaml data.path={sft_out}")
        else:
            backs = sum(r["traversal"]["backtracks"] for r in sft_rows if r["correct"])
            console.print(f"SFT data: {len(sft_rows)} search traversals ({kept} ending verified correct, with "
                          f"{backs} backtracks among them) -> {sft_out}; train on them with: rlvr sft "
                          f"recipes/search_sft_traversal.yaml data.path={sft_out}")
    return result


def select_scorer(cfg: Config, task: Any) -> Any:
    """`eval.select_model`: a reward model (`rlvr rm`'s final/) scoring each sample, for rm@k; None without."""
    if cfg.eval.select_model is None:
        return None
    import json

    from rlvr.rewards.models import SequenceClassifierReward

    path = resolve_model_path(cfg.eval.select_model, key="eval.select_model")
    config = path / "config.json"
    archs = json.loads(config.read_text()).get("architectures") or [] if config.is_file() else []
    if not any(a.endswith("ForSequenceClassification") for a in archs):
        raise ConfigError(f"eval.select_model: {path} is not a reward model (its config.json names "
                          f"{archs or 'no architecture'}; a scoring head would start at random); use the final/ "
                          "directory of `rlvr rm`")
    if cfg.search is not None:
        raise ConfigError("eval.select_model: a search evaluation picks its own answer (search.select); remove "
                          "eval.select_model or the search section")
    rm = SequenceClassifierReward(path=str(path), normalize="raw", device=cfg.model.device)

    def score(record: Any, responses: list[str]) -> list[float]:
        question = task.plain_prompt(record) if hasattr(task, "plain_prompt") else record.question
        return rm.score_texts([question] * len(responses), responses)

    return score


def _traversal_spec(cfg: Config, sft_out: Path | None, sft_mode: str, backtrack: str | None,
                    max_dead_ends: int | None, loss: str | None = None) -> Any:
    """The `--sft-mode traversal` settings (`rlvr.eval.search.TraversalSpec`), None for `best`; every bad
    combination is a ConfigError naming the option."""
    from rlvr.eval.search import SFT_MODES, TraversalSpec

    if sft_mode not in SFT_MODES:
        raise ConfigError(f"--sft-mode: expected {' or '.join(SFT_MODES)}; got '{sft_mode}'")
    if sft_mode == "best":
        for name, v in (("--backtrack", backtrack), ("--max-dead-ends", max_dead_ends),
                        ("--traversal-loss", loss)):
            if v is not None:
                raise ConfigError(f"{name}: only used with --sft-mode traversal; add --sft-mode traversal or "
                                  f"remove {name}")
        return None
    if sft_out is None:
        raise ConfigError("--sft-mode traversal: writes SFT rows; add --sft-out FILE (with a search section and "
                          "--split train)")
    if cfg.search is not None and cfg.search.select != "verifier":
        raise ConfigError(f"search.select: --sft-mode traversal writes the attempts the verifier scored wrong as "
                          f"dead ends; use search.select=verifier (got {cfg.search.select})")
    spec = TraversalSpec()
    if backtrack is not None:
        if not backtrack.strip():
            raise ConfigError(f"--backtrack: the marker must contain a non-space character; got {backtrack!r} "
                              f"(default {spec.backtrack!r})")
        spec.backtrack = backtrack
    if max_dead_ends is not None:
        if max_dead_ends < 0:
            raise ConfigError(f"--max-dead-ends: expected >= 0 (0 writes only the answer); got {max_dead_ends}")
        spec.max_dead_ends = max_dead_ends
    if loss is not None:
        if loss not in ("all", "final"):
            raise ConfigError(f"--traversal-loss: expected all (the whole traversal is the response) or final "
                              f"(dead ends in the prompt, no loss on them); got '{loss}'")
        spec.loss = loss
    return spec


def _check_marker(tokenizer: Any, marker: str) -> None:
    """The backtrack marker must survive the tokenizer (encode, then decode) or the rows would not say it."""
    ids = tokenizer(marker, add_special_tokens=False)["input_ids"]
    back = tokenizer.decode(ids, skip_special_tokens=True)
    if back != marker:
        raise ConfigError(f"--backtrack: the tokenizer does not reproduce the marker {marker!r} (it decodes to "
                          f"{back!r}); use characters the model's tokenizer has, e.g. ' <back> '")


def write_sft_rows(rows: list[dict[str, Any]], path: Path) -> Path:
    """One JSON row per searched problem, in the rows `rlvr sft` reads (`data.format=rollouts`)."""
    import json

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def print_result(result: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title=f"{result.get('model', 'model')} on {result['num_prompts']} held-out prompts, "
                        f"n={result['n']}, T={result['temperature']}")
    table.add_column("slice")
    ks = list(result["pass@k"])
    for k in ks:
        table.add_column(f"pass@{k}", justify="right")
    table.add_column("prompts", justify="right")
    table.add_row("all", *(f"{100 * result['pass@k'][k]:.1f}%" for k in ks), str(result["num_prompts"]))
    for key in ("maj@k", "rm@k"):
        if result.get(key):
            table.add_row(f"all ({key})", *(f"{100 * result[key][k]:.1f}%" if k in result[key] else "-"
                                            for k in ks), str(result["num_prompts"]))
    for key in ("by_difficulty", "by_source"):
        for name, sub in result.get(key, {}).items():
            table.add_row(f"{key[3:]}={name}", *(f"{100 * sub['pass@k'][k]:.1f}%" for k in ks),
                          str(sub["num_prompts"]))
    console.print(table)
    console.print(f"accuracy {100 * result['accuracy']:.1f}%  mean length {result['mean_length']:.1f} tokens  "
                  f"truncated {100 * result['truncated_frac']:.1f}%  ({result.get('seconds', 0)} s)")
    if graded(result):
        console.print(f"mean verifier reward {result['mean_reward']:.3f} per sample (accuracy counts only the "
                      "correct ones)")
    if result.get("region_vote") is not None:  # GUI-RC: one voted point per prompt from all n samples
        console.print(f"GUI-RC region vote of the {result['n']} samples: {100 * result['region_vote']:.1f}% of "
                      "prompts voted inside the target box")
    b = result.get("backtracks")
    if b:
        def pct(v: float | None) -> str:
            return "-" if v is None else f"{100 * v:.1f}%"

        console.print(f"backtracks ({b['marker'].strip()}): {pct(b['with_backtrack'])} of samples, "
                      f"{b['mean_backtracks']:.2f} per sample; accuracy with {pct(b['accuracy_with_backtrack'])}, "
                      f"without {pct(b['accuracy_without_backtrack'])}; first attempt right in "
                      f"{pct(b['first_attempt_accuracy_with_backtrack'])} of those with one "
                      f"({b['fixed']} fixed, {b['broken']} broken)")
