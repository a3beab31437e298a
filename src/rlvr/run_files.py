"""Every file and directory rlvr writes into a run directory, declared in one place.

An entry's `path` is relative to the run directory. `{name}` stands for one variable path segment (or part of
one: `eval_{tag}.json`); a path ending in `/` is a directory. A directory entry with `opaque=True` is declared
with everything below it (a Hugging Face model directory, a metric sink's own files); its contents are not
listed one by one. `declared(relpath)` says whether a path is covered. docs/reference/run-directory.md is
generated from this module (scripts/gen_reference.py), and tests/unit/test_run_files.py runs a short training
and fails when the run directory holds a path declared nowhere here.

This module imports nothing heavy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["AREAS", "RUN_FILES", "RunFile", "declared"]


@dataclass(frozen=True)
class RunFile:
    path: str
    area: str
    when: str  # which command writes it, and when
    description: str
    opaque: bool = False

    @property
    def is_dir(self) -> bool:
        return self.path.endswith("/")

    def regex(self) -> re.Pattern[str]:
        parts = re.split(r"(\{[^}/]+\})", self.path.rstrip("/"))
        body = "".join("[^/]+" if p.startswith("{") else re.escape(p) for p in parts)
        return re.compile(body + ("(/.*)?" if self.opaque else "") + r"\Z")


AREAS = {
    "train": "A training run (`rlvr train`; `rlvr sft`, `rlvr rm` and `rlvr prm` write the common files too)",
    "checkpoint": "Checkpoints",
    "models": "Reward-model commands (`rlvr rm`, `rlvr prm`)",
    "optional": "Written on request",
}

RUN_FILES: tuple[RunFile, ...] = (
    RunFile("config.yaml", "train", "every command, at the start",
            "The resolved config, every default filled in; `rlvr train --resume` and `rlvr eval --config` read it."),
    RunFile("versions.json", "train", "every command, at the start",
            "Package versions, Python, the device and the code sandbox's isolation the run started with."),
    RunFile("train.log", "train", "every command",
            "The detailed log: warnings (zero reward spread, skipped steps, non-finite rewards), faults and resumes."),
    RunFile("metrics.jsonl", "train", "every step",
            "One JSON line per step; every key is in the [metrics reference](metrics.md)."),
    RunFile("rollouts.jsonl", "train", "`rlvr train` with `logging.rollouts_every` > 0 (default 10)",
            "Stored samples: prompt, response, reward and its components, reasons, advantage, length; prompt "
            "images as small PNG data URIs on image tasks ([tracking.md](../tracking.md#rollout-samples))."),
    RunFile("eval_{tag}.json", "train", "`eval.before` (`eval_before.json`), `eval.after` (`eval_after.json`)",
            "A held-out evaluation: pass@k, maj@k, accuracy, lengths, per-problem results "
            "([evaluation.md](../evaluation.md))."),
    RunFile("final/", "train", "at the end of training", "The trained policy as a Hugging Face model directory "
            "(`AutoModelForCausalLM` loads it; merged weights with LoRA).", opaque=True),
    RunFile("final_rm/", "train", "`coevolve.mode: co_evolve`, at the end",
            "The co-evolved reward model, a Hugging Face directory.", opaque=True),
    RunFile("report.html", "train", "`rlvr train` at the end, or `rlvr report RUN_DIR`",
            "The self-contained HTML report ([report.md](../report.md))."),
    RunFile("stages.json", "train", "a recipe with `stages:`",
            "Each stage's status, run directory, starting model and held-out summary "
            "([configuration.md](../configuration.md#stages-several-runs-from-one-recipe))."),
    RunFile("stages/", "train", "a recipe with `stages:`",
            "One normal run directory per stage, `stages/<i>-<name>/`.", opaque=True),
    RunFile("checkpoints/", "checkpoint", "`checkpoint.every` > 0, and at the end", "The checkpoints."),
    RunFile("checkpoints/step_{step}/", "checkpoint", "every `checkpoint.every` steps and at the end "
            "(`keep_last` kept)", "A Hugging Face model directory plus `trainer_state.pt` (optimizer, scheduler, "
            "sampler position, random states, step) and `manifest.json` (size and CRC-32 of every other file); "
            "`rlvr train --resume RUN_DIR` verifies it against the manifest before loading.", opaque=True),
    RunFile("checkpoints/damaged/", "checkpoint", "`rlvr train --resume`, when a checkpoint fails verification",
            "Checkpoints that did not verify, moved aside, never deleted.", opaque=True),
    RunFile("rm_eval.json", "models", "`rlvr rm`, at the end",
            "The reward model's held-out pairwise accuracy and margin, before and after training "
            "([reward-models.md](../reward-models.md))."),
    RunFile("prm_eval.json", "models", "`rlvr prm`, at the end",
            "The process reward model's fit on held-out solutions, before and after training."),
    RunFile("token_rm_eval.json", "models", "`rlvr prm` with `loss.type: oreal`, at the end",
            "The token-level reward model's fit on held-out solutions, before and after training."),
    RunFile("labels.jsonl", "models", "`rlvr prm`",
            "The sampled solutions it trained on, with their step labels (`loss.type: oreal`: their outcomes); "
            "`label.path` reuses such a file."),
    RunFile("tensorboard/", "optional", "`logging.sinks` has `tensorboard`", "TensorBoard event files.",
            opaque=True),
    RunFile("wandb/", "optional", "`logging.sinks` has `wandb`", "The offline Weights & Biases run.", opaque=True),
    RunFile("mlruns/", "optional", "`logging.sinks` has `mlflow`", "The local MLflow file store.", opaque=True),
    RunFile("search_{name}.json", "optional",
            "you, with `rlvr eval ... search.name=... --out RUN_DIR/search_<name>.json`",
            "A test-time search result; the report plots it ([search.md](../search.md))."),
)


_PATTERNS = tuple((entry, entry.regex()) for entry in RUN_FILES)


def declared(relpath: str) -> RunFile | None:
    """The entry that covers `relpath` (a path relative to the run directory, `/`-separated), or None."""
    path = relpath.strip("/")
    return next((entry for entry, pattern in _PATTERNS if pattern.match(path)), None)
