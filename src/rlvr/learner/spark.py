"""SPARK: the policy is also its own generative reward model, trained on its rollouts' verifier labels.

Liu et al., "SPARK: Synergistic Policy And Reward Co-Evolving Framework", arXiv:2509.22624. RLVR throws away
the step's rollouts and their correctness labels after the update; SPARK recycles them as judge examples and
trains the same model on them, in the same step as the policy loss. Every example is the sampled tokens
themselves (token-in: no re-tokenized text; a response's end token is dropped) joined by fixed glue texts:

    pointwise   x = prompt + answer + ids(question)                       y = ids(yes_text)[0] if correct else ids(no_text)[0]
    pairwise    x = prompt + ids(pair_a) + answer_A + ids(pair_b) + answer_B + ids(pair_question)
                y = ids(pair_labels[k])[0], k the position of the correct answer (one correct, one incorrect
                answer of one group; which one is A is drawn with the step's seed, so the label is balanced)
    reflection  x = prompt + wrong answer + ids(reflection_text)         y = a correct answer of the same group
                (all its tokens, end token included: "here is an answer and the verdict that it is wrong; revise")

    judge_loss = coef * sum_objective mean_{i in objective} (1/|y_i|) sum_t -log p_theta(y_i,t | x_i, y_i,<t)

At most `max_examples` per objective and step (pointwise: half correct, half incorrect where the step has them;
pairwise: at most `max_pairs_per_prompt` per group), drawn with a seed the checkpoint keeps. The examples are
dealt over the update's mini-batches: mini-batch j adds its share of the judge loss to its own policy loss, so
each optimizer step is policy + judge. Accuracy (the verdict token beats the other one) is measured in that
forward, before the optimizer step that trains on those examples: fresh answers, so a held-out number.

Label-free self-reward (`coevolve.self_reward`): on a chosen share of the steps after the first `after`, the
verifier's reward is not used. The policy judges its own samples, pointwise, before the update:

    r_i = p(yes | x_i) / (p(yes | x_i) + p(no | x_i))   (signal: prob)     or   1[p(yes) > p(no)]   (signal: verdict)

and r_i replaces the sample's reward for the advantage; the judge trains on no example that step (there is no
label to train on). The verifier still runs and its accuracy is logged beside `reward/self_judge`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from rlvr.config import ConfigError
from rlvr.config.coevolve import CoEvolveConfig
from rlvr.learner.learner import Learner
from rlvr.learner.step import LocalTrainable
from rlvr.models.reward_head import pad_right
from rlvr.types import Group, Sample

JudgeExample = tuple[list[int], int]  # (token ids up to the verdict, the label)


@dataclass
class Example:
    """One judge example: `target` follows `context`; `alt` is the competing verdict token (None: no accuracy)."""

    kind: str  # pointwise | pairwise | reflection
    context: list[int]
    target: list[int]
    label: int = 0  # pointwise: 1 correct answer; pairwise: 1 when the correct answer is A (shown first)
    alt: int | None = None


def _answer(s: Sample, eos_id: int | None) -> list[int]:
    response = list(s.response_ids)
    if response and eos_id is not None and response[-1] == eos_id:
        response = response[:-1]
    return response


def _judged(s: Sample) -> bool:
    return s.correct is not None and not s.excluded


def pointwise_examples(groups: list[Group], question_ids: list[int], eos_id: int | None, max_examples: int,
                       seed: int) -> list[JudgeExample]:
    """The step's pointwise judge examples (x, 1 correct / 0 incorrect): at most `max_examples`, half from
    correct answers and half from incorrect ones (the other class fills in when one is short), drawn with
    `seed`. Samples with no verdict (None) or excluded (non-finite reward) are left out."""
    correct: list[JudgeExample] = []
    wrong: list[JudgeExample] = []
    for g in groups:
        for s in g.samples:
            if _judged(s):
                (correct if s.correct else wrong).append((list(s.prompt_ids) + _answer(s, eos_id) + question_ids,
                                                          int(bool(s.correct))))
    rng = random.Random(seed)
    rng.shuffle(correct)
    rng.shuffle(wrong)
    half = max_examples // 2
    n_right = min(len(correct), max(half, max_examples - len(wrong)))
    n_wrong = min(len(wrong), max_examples - n_right)
    picked = correct[:n_right] + wrong[:n_wrong]
    rng.shuffle(picked)
    return picked


def _distinct_answers(g: Group, eos_id: int | None) -> tuple[list[list[int]], list[list[int]]]:
    """A group's distinct correct and distinct incorrect answers (end token dropped), in sample order."""
    right: list[list[int]] = []
    wrong: list[list[int]] = []
    for s in g.samples:
        if _judged(s):
            bucket = right if s.correct else wrong
            answer = _answer(s, eos_id)
            if answer not in bucket:
                bucket.append(answer)
    return right, wrong


def pairwise_examples(groups: list[Group], glue: tuple[list[int], list[int], list[int]], eos_id: int | None,
                      max_examples: int, max_per_group: int, seed: int) -> list[JudgeExample]:
    """The step's pairwise examples (x, 1 when the correct answer is A): from each group, (correct, incorrect)
    pairs of distinct answers, at most `max_per_group` per group, at most `max_examples` in all, each pair's
    order (correct first or second) drawn with `seed`. `glue` = ids of (before A, before B, the question)."""
    before_a, before_b, question = glue
    rng = random.Random(seed)
    pool: list[JudgeExample] = []
    for g in groups:
        right, wrong = _distinct_answers(g, eos_id)
        pairs = [(r, w) for r in right for w in wrong]
        rng.shuffle(pairs)
        for r, w in pairs[:max_per_group]:
            correct_first = rng.random() < 0.5
            a, b = (r, w) if correct_first else (w, r)
            pool.append((list(g.samples[0].prompt_ids) + before_a + a + before_b + b + question, int(correct_first)))
    rng.shuffle(pool)
    return pool[:max_examples]


def reflection_examples(groups: list[Group], reflection_ids: list[int], eos_id: int | None, max_examples: int,
                        seed: int) -> list[tuple[list[int], list[int]]]:
    """The step's reflection examples (x, y): each distinct incorrect answer of a group that also has a correct
    one, followed by the reflection text; the target y is one of the group's correct answers (drawn with
    `seed`), with its end token. At most `max_examples` in all."""
    rng = random.Random(seed)
    pool: list[tuple[list[int], list[int]]] = []
    for g in groups:
        right = [s for s in g.samples if _judged(s) and s.correct]
        _, wrong = _distinct_answers(g, eos_id)
        if not right:
            continue
        for w in wrong:
            target = list(rng.choice(right).response_ids)
            pool.append((list(g.samples[0].prompt_ids) + w + reflection_ids, target))
    rng.shuffle(pool)
    return pool[:max_examples]


def deal_judge_examples(num_examples: int, mini_batches: int, ranks: int) -> list[list[list[int]]]:
    """Which judge examples each data-parallel rank trains in each mini-batch: `out[r][j]` lists the indices
    rank r adds to mini-batch j. Mini-batch j's examples are those one process gives it (indices j, j + n,
    j + 2n, ... for n = `mini_batches`), dealt round-robin over the ranks, so the ranks together train exactly
    the single process's set in every optimizer step."""
    out: list[list[list[int]]] = [[[] for _ in range(mini_batches)] for _ in range(ranks)]
    for j in range(mini_batches):
        for k, i in enumerate(range(j, num_examples, mini_batches)):
            out[k % ranks][j].append(i)
    return out


class JudgeObjective:
    """One update's judge loss, handed out in shares: `backward(model, j, n)` trains on the j-th of n slices of
    the examples and records their accuracy before that step. Each objective (kind) weighs 1 in the sum: an
    example's per-token mean NLL is divided by its kind's example count, so the shares add up to
    coef * sum over kinds of the kind's mean NLL.

    On a data-parallel rank, `shares[j]` lists the (index, example) pairs this rank adds to mini-batch j and
    `counts` are the whole batch's per-kind counts (not the rank's), so the ranks' summed gradients and losses
    are the single process's; the controller merges the ranks' records with `record`."""

    def __init__(self, examples: list[Example], pad_id: int, coef: float, counts: dict[str, int] | None = None,
                 shares: list[list[tuple[int, Example]]] | None = None):
        self.examples, self.pad_id, self.coef, self.shares = examples, pad_id, coef, shares
        if counts is None:
            counts = {}
            for ex in examples:
                counts[ex.kind] = counts.get(ex.kind, 0) + 1
        self.counts: dict[str, int] = dict(counts)
        # (index in examples, example, its mean NLL, right 1/0 or None), in the order they were trained
        self.seen: list[tuple[int, Example, float, float | None]] = []

    def _share(self, index: int, count: int) -> list[tuple[int, Example]]:
        if self.shares is not None:
            return self.shares[index] if index < len(self.shares) else []
        return [(i, self.examples[i]) for i in range(index, len(self.examples), count)]

    def backward(self, model: torch.nn.Module, index: int, count: int) -> float:
        indexed = self._share(index, count)
        if not indexed:
            return 0.0
        share = [ex for _, ex in indexed]
        device = next(model.parameters()).device
        rows = [ex.context + ex.target[:-1] for ex in share]
        width = max(len(r) for r in rows)
        ids = torch.full((len(share), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros_like(ids)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = torch.tensor(row)
            attention[i, : len(row)] = 1
        with torch.set_grad_enabled(self.coef > 0):
            logits = model(input_ids=ids.to(device), attention_mask=attention.to(device)).logits
            nlls, firsts = [], []
            for i, ex in enumerate(share):  # the positions whose next token is the target's
                start = len(ex.context) - 1
                pred = logits[i, start : start + len(ex.target)].float()
                nlls.append(F.cross_entropy(pred, torch.tensor(ex.target, device=device), reduction="mean"))
                firsts.append(pred[0])
            nll = torch.stack(nlls)
            weights = torch.tensor([1.0 / self.counts[ex.kind] for ex in share], device=device)
            loss = self.coef * (weights * nll).sum()
            if self.coef > 0:
                loss.backward()
        for (i, ex), value, first in zip(indexed, nll.detach().cpu().tolist(), firsts):
            right = None
            if ex.alt is not None:
                right = float(bool(first[ex.target[0]] > first[ex.alt]))
            self.seen.append((i, ex, value, right))
        return float(loss.detach())

    def records(self) -> list[tuple[int, float, float | None]]:
        """What a rank sends back: (index, mean NLL, right) of each example it trained."""
        return [(i, v, r) for i, _, v, r in self.seen]

    def record(self, records: list[tuple[int, float, float | None]], mini_batches: int) -> None:
        """The ranks' records, in the order one process with `mini_batches` slices trains them."""
        ordered = sorted(records, key=lambda rec: (rec[0] % mini_batches, rec[0] // mini_batches))
        self.seen = [(i, self.examples[i], v, r) for i, v, r in ordered]

    def metrics(self) -> dict[str, float]:
        out: dict[str, float] = {"rm/examples": float(self.counts.get("pointwise", 0))}
        for kind, count in self.counts.items():
            if kind != "pointwise":
                out[f"rm/{kind}_examples"] = float(count)
        for kind, prefix in (("pointwise", "rm/"), ("pairwise", "rm/pairwise_"), ("reflection", "rm/reflection_")):
            seen = [(ex, v, r) for _, ex, v, r in self.seen if ex.kind == kind]
            if not seen:
                continue
            out[f"{prefix}loss"] = sum(v for _, v, _ in seen) / len(seen)
            if kind == "reflection":
                continue
            out[f"{prefix}accuracy"] = sum(r or 0.0 for _, _, r in seen) / len(seen)
            names = (("correct", "incorrect") if kind == "pointwise" else ("first", "second"))
            for label, name in zip((1, 0), names):
                hits = [r or 0.0 for ex, _, r in seen if ex.label == label]
                if hits:
                    out[f"{prefix}accuracy_{name}"] = sum(hits) / len(hits)
        return out


def first_token(tokenizer: Any, text: str, key: str) -> int:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if not ids:
        raise ConfigError(f"{key}: {text!r} encodes to no token; give a non-empty verdict")
    return int(ids[0])


def _distinct_verdicts(tokenizer: Any, texts: list[str], key: str) -> list[int]:
    ids = [first_token(tokenizer, t, key) for t in texts]
    if ids[0] == ids[1]:
        raise ConfigError(f"{key}: {texts[0]!r} and {texts[1]!r} start with the same token, so the judge's verdict "
                          "could not be read; make their first tokens differ")
    return ids


def self_reward_step(cfg: CoEvolveConfig, seed: int, step: int) -> bool:
    """Whether `step` (1-based) is a label-free self-reward step: after the first `self_reward.after` steps,
    a share `self_reward.share` of the steps, each decided by a draw seeded from (seed, step)."""
    sr = cfg.self_reward
    if sr is None or step <= sr.after:
        return False
    return sr.share >= 1.0 or random.Random(seed * 7_919 + step).random() < sr.share


@torch.no_grad()
def self_judge(model: torch.nn.Module, rows: list[list[int]], yes_id: int, no_id: int, pad_id: int,
               batch_size: int = 64) -> list[float]:
    """p(yes) / (p(yes) + p(no)) after each row (prompt + answer + question ids), from one forward pass."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out: list[float] = []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        ids, attention = pad_right(chunk, pad_id)
        logits = model(input_ids=ids.to(device), attention_mask=attention.to(device)).logits.float()
        last = logits[torch.arange(len(chunk), device=device), torch.tensor([len(r) - 1 for r in chunk], device=device)]
        out += torch.softmax(last[:, [yes_id, no_id]], dim=-1)[:, 0].cpu().tolist()
    model.train(was_training)
    return out


class SparkTrainable:
    """The policy learner whose every update also trains the policy as its own judge, and which, on label-free
    steps, rewards the policy with its own judgement instead of the verifier's.

    `inner` is a `LocalTrainable` (the judge loss is the learner's `auxiliary`), or a `RayLearnerGroup` (data-
    parallel ranks: `inner.learn(groups, judge=...)` deals the examples to the ranks and merges their records).
    With Ray ranks the label-free judgement is read from `judge_model`, the controller's copy of the policy,
    which holds the ranks' weights after every update (`pull_weights`), so no rank waits on an extra call."""

    def __init__(self, inner: LocalTrainable | Any, cfg: CoEvolveConfig, tokenizer: Any, seed: int,
                 judge_model: torch.nn.Module | None = None):
        self.inner, self.cfg, self.seed = inner, cfg, seed
        self.learner: Learner | None = getattr(inner, "learner", None)
        self.judge_model = judge_model  # None: the in-process learner's model

        def ids(text: str) -> list[int]:
            return list(tokenizer(text, add_special_tokens=False)["input_ids"])

        self.question_ids = ids(cfg.question)
        self.yes_id, self.no_id = _distinct_verdicts(tokenizer, [cfg.yes_text, cfg.no_text],
                                                     "coevolve.yes_text / no_text")
        self.a_id, self.b_id = _distinct_verdicts(tokenizer, list(cfg.pair_labels), "coevolve.pair_labels")
        self.pair_glue = (ids(cfg.pair_a), ids(cfg.pair_b), ids(cfg.pair_question))
        self.reflection_ids = ids(cfg.reflection_text)
        self.eos_id = tokenizer.eos_token_id
        self.pad_id = inner.pad_id

    def examples(self, groups: list[Group], seed: int) -> list[Example]:
        """This step's judge examples of every objective in `coevolve.objectives`, shuffled together."""
        cfg, out = self.cfg, []
        if "pointwise" in cfg.objectives:
            for ctx, label in pointwise_examples(groups, self.question_ids, self.eos_id, cfg.max_examples, seed):
                out.append(Example("pointwise", ctx, [self.yes_id if label else self.no_id], label,
                                   self.no_id if label else self.yes_id))
        if "pairwise" in cfg.objectives:
            for ctx, first in pairwise_examples(groups, self.pair_glue, self.eos_id, cfg.max_examples,
                                                cfg.max_pairs_per_prompt, seed + 1):
                out.append(Example("pairwise", ctx, [self.a_id if first else self.b_id], first,
                                   self.b_id if first else self.a_id))
        if "reflection" in cfg.objectives:
            for ctx, target in reflection_examples(groups, self.reflection_ids, self.eos_id, cfg.max_examples,
                                                   seed + 2):
                out.append(Example("reflection", ctx, target))
        if len(cfg.objectives) > 1:  # mixed kinds in every mini-batch's slice (one kind: the draw's own order)
            random.Random(seed + 3).shuffle(out)
        return out

    def apply_self_reward(self, groups: list[Group]) -> dict[str, float]:
        """A label-free step: each sample's reward becomes the policy's own judgement of it."""
        samples = [s for g in groups for s in g.samples if not s.excluded]
        rows = [list(s.prompt_ids) + _answer(s, self.eos_id) + self.question_ids for s in samples]
        model = self.judge_model if self.judge_model is not None else self.learner.model  # type: ignore[union-attr]
        probs = self_judge(model, rows, self.yes_id, self.no_id, self.pad_id) if rows else []
        verdict = self.cfg.self_reward is not None and self.cfg.self_reward.signal == "verdict"
        agree, values = [], []
        for s, p in zip(samples, probs):
            value = float(p > 0.5) if verdict else p
            s.rewards["self_judge"] = value
            s.reward = value
            values.append(value)
            if s.correct is not None:
                agree.append(float((p > 0.5) == bool(s.correct)))
        # reward/self_judge is plotted beside reward/correctness (still computed, not used) by `rlvr report`
        out = {"self_reward/step": 1.0, "reward/self_judge": sum(values) / max(len(values), 1),
               "self_reward/p_yes": sum(probs) / max(len(probs), 1)}
        if agree:
            out["self_reward/agreement"] = sum(agree) / len(agree)  # with the (unused) verifier
        return out

    @property
    def updates(self) -> int:
        """Updates so far: the learner's checkpointed count (learner ranks: the group's mirror of rank 0's)."""
        return self.learner.updates if self.learner is not None else int(self.inner.updates)

    def learn(self, groups: list[Group]) -> dict[str, float]:
        step = self.updates + 1  # the learner checkpoints its update count: a resumed run agrees
        if self_reward_step(self.cfg, self.seed, step):
            extra = self.apply_self_reward(groups)
            return {**self.inner.learn(groups), **extra}
        # seeded by the update count the learner checkpoints, so a resumed run draws the same examples
        examples = self.examples(groups, self.seed * 1_000_003 + step)
        objective = JudgeObjective(examples, self.pad_id, self.cfg.coef)
        if self.learner is None:  # learner ranks: the group deals the examples and merges what the ranks saw
            metrics = self.inner.learn(groups, judge=objective if examples else None)
        else:
            self.learner.auxiliary = objective if examples else None
            try:
                metrics = self.inner.learn(groups)
            finally:
                self.learner.auxiliary = None
        out = {**metrics, **objective.metrics()}
        if self.cfg.self_reward is not None:
            out["self_reward/step"] = 0.0
        return out

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
