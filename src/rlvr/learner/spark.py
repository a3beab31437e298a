"""SPARK: the policy is also its own generative reward model, trained on its rollouts' verifier labels.

Liu et al., "SPARK: Synergistic Policy And Reward Co-Evolving Framework", arXiv:2509.22624. RLVR throws away
the step's rollouts and their correctness labels after the update; SPARK recycles them as judge examples and
trains the same model on them, in the same step as the policy loss.

Done here: the **pointwise** objective. Each judge example is the sampled tokens themselves (token-in: no
re-tokenized text), then a question, and the verdict the verifier gave:

    x_i = prompt_ids + response_ids (without its end token) + ids("\\nIs this answer correct? ")
    y_i = first token of "yes" if the verifier accepted the answer, else of "no"
    judge_loss = coef * mean_i( -log p_theta(y_i | x_i) )        (SFT on the verdict token)

At most `max_examples` per step, half correct and half incorrect where the step has them (a seeded draw), split
over the update's mini-batches: mini-batch j adds its share of the judge loss to its own policy loss, so each
optimizer step is policy + judge. The judge's accuracy (p(yes) > p(no) matches the label) is measured in that
forward, before the optimizer step that trains on those examples: fresh answers, so a held-out number.
Pairwise and reflection-conditioned objectives, and self-rewarded label-free steps, are not done yet.
"""

from __future__ import annotations

import random
from typing import Any

import torch
import torch.nn.functional as F

from rlvr.config import ConfigError
from rlvr.config.coevolve import CoEvolveConfig
from rlvr.learner.learner import Learner
from rlvr.learner.step import LocalTrainable
from rlvr.types import Group

JudgeExample = tuple[list[int], int]  # (token ids up to the verdict, 1 for correct / 0 for incorrect)


def pointwise_examples(groups: list[Group], question_ids: list[int], eos_id: int | None, max_examples: int,
                       seed: int) -> list[JudgeExample]:
    """The step's pointwise judge examples: at most `max_examples`, half from correct answers and half from
    incorrect ones (the other class fills in when one is short), drawn with `seed`. Samples with no verdict
    (None) or excluded (non-finite reward) are left out."""
    correct: list[JudgeExample] = []
    wrong: list[JudgeExample] = []
    for g in groups:
        for s in g.samples:
            if s.correct is None or s.excluded:
                continue
            response = list(s.response_ids)
            if response and eos_id is not None and response[-1] == eos_id:
                response = response[:-1]
            (correct if s.correct else wrong).append((list(s.prompt_ids) + response + question_ids,
                                                      int(s.correct)))
    rng = random.Random(seed)
    rng.shuffle(correct)
    rng.shuffle(wrong)
    half = max_examples // 2
    n_right = min(len(correct), max(half, max_examples - len(wrong)))
    n_wrong = min(len(wrong), max_examples - n_right)
    picked = correct[:n_right] + wrong[:n_wrong]
    rng.shuffle(picked)
    return picked


class PointwiseJudgeObjective:
    """One update's judge loss, handed out in shares: `backward(model, j, n)` trains on the j-th of n slices of
    the examples (coef * their mean NLL over the slice's share) and records accuracy before that step."""

    def __init__(self, examples: list[JudgeExample], yes_id: int, no_id: int, pad_id: int, coef: float):
        self.examples, self.yes_id, self.no_id, self.pad_id, self.coef = examples, yes_id, no_id, pad_id, coef
        self.right: list[float] = []  # per example judged: 1 when p(yes) > p(no) matches the label
        self.labels: list[int] = []
        self.nll_sum = 0.0

    def backward(self, model: torch.nn.Module, index: int, count: int) -> float:
        share = self.examples[index::count]
        if not share:
            return 0.0
        device = next(model.parameters()).device
        width = max(len(ids) for ids, _ in share)
        ids = torch.full((len(share), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros_like(ids)
        for i, (row, _) in enumerate(share):
            ids[i, : len(row)] = torch.tensor(row)
            attention[i, : len(row)] = 1
        last = torch.tensor([len(row) - 1 for row, _ in share])
        labels = torch.tensor([label for _, label in share])
        with torch.set_grad_enabled(self.coef > 0):
            logits = model(input_ids=ids.to(device), attention_mask=attention.to(device)).logits
            verdict = logits[torch.arange(len(share), device=device), last.to(device)].float()  # next-token logits
            targets = torch.where(labels == 1, self.yes_id, self.no_id).to(device)
            nll = F.cross_entropy(verdict, targets, reduction="sum")
            loss = self.coef * nll / len(self.examples)  # the slices' shares add up to coef * mean NLL
            if self.coef > 0:
                loss.backward()
        says_yes = (verdict[:, self.yes_id] > verdict[:, self.no_id]).cpu()
        self.right += (says_yes == (labels == 1)).float().tolist()
        self.labels += labels.tolist()
        self.nll_sum += float(nll.detach())
        return float(loss.detach())

    def metrics(self) -> dict[str, float]:
        out = {"rm/examples": float(len(self.examples))}
        if not self.right:
            return out
        out.update({"rm/accuracy": sum(self.right) / len(self.right), "rm/loss": self.nll_sum / len(self.right)})
        for label, key in ((1, "rm/accuracy_correct"), (0, "rm/accuracy_incorrect")):
            hits = [r for r, lab in zip(self.right, self.labels) if lab == label]
            if hits:
                out[key] = sum(hits) / len(hits)
        return out


def first_token(tokenizer: Any, text: str, key: str) -> int:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if not ids:
        raise ConfigError(f"{key}: {text!r} encodes to no token; give a non-empty verdict")
    return int(ids[0])


class SparkTrainable:
    """The policy learner (a `LocalTrainable`) whose every update also trains the policy as its own judge."""

    def __init__(self, inner: LocalTrainable, cfg: CoEvolveConfig, tokenizer: Any, seed: int):
        self.inner, self.cfg, self.seed = inner, cfg, seed
        self.learner: Learner = inner.learner
        self.question_ids = list(tokenizer(cfg.question, add_special_tokens=False)["input_ids"])
        self.yes_id = first_token(tokenizer, cfg.yes_text, "coevolve.yes_text")
        self.no_id = first_token(tokenizer, cfg.no_text, "coevolve.no_text")
        if self.yes_id == self.no_id:
            raise ConfigError(f"coevolve.yes_text / no_text: {cfg.yes_text!r} and {cfg.no_text!r} start with the same "
                              "token, so the judge's verdict could not be read; make their first tokens differ")
        self.eos_id = tokenizer.eos_token_id
        self.pad_id = inner.pad_id

    def learn(self, groups: list[Group]) -> dict[str, float]:
        # seeded by the update count the learner checkpoints, so a resumed run draws the same examples
        examples = pointwise_examples(groups, self.question_ids, self.eos_id, self.cfg.max_examples,
                                      self.seed * 1_000_003 + self.learner.updates + 1)
        objective = PointwiseJudgeObjective(examples, self.yes_id, self.no_id, self.pad_id, self.cfg.coef)
        self.learner.auxiliary = objective if examples else None
        try:
            metrics = self.inner.learn(groups)
        finally:
            self.learner.auxiliary = None
        return {**metrics, **objective.metrics()}

    def pull_weights(self, model: torch.nn.Module) -> None:
        self.inner.pull_weights(model)

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)

    def reset_reference(self) -> None:
        self.inner.reset_reference()

    def close(self) -> None:
        self.inner.close()
