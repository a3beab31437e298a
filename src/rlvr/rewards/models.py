"""Model-based rewards: a local sequence-classification reward model, and a generative judge.

Both load from a local Hugging Face directory (nothing is downloaded), run batched without gradients, and put
the question and response through the model's chat template when it has one.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

import torch
from pydantic import Field

from rlvr.rewards.base import REWARDS, RewardContext, RewardOutput
from rlvr.types import Group


def _load(path: str, kind: str, device: str) -> tuple[Any, Any]:
    from rlvr.models import load_tokenizer, resolve_device, resolve_dtype, resolve_model_path

    model_dir = resolve_model_path(path, key=f"rewards.{kind}.path")
    dev = resolve_device(device)
    tok = load_tokenizer(model_dir, key=f"rewards.{kind}.path")
    if kind == "reward_model":
        from transformers import AutoModelForSequenceClassification

        model = AutoModelForSequenceClassification.from_pretrained(str(model_dir), dtype=resolve_dtype("auto", dev))
        if model.config.pad_token_id is None:
            model.config.pad_token_id = tok.pad_token_id
    else:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=resolve_dtype("auto", dev))
    return model.to(dev).eval(), tok


def render_exchange(tok: Any, user: str, assistant: str | None = None) -> str:
    """The text a model scores: (user, assistant) through the tokenizer's chat template, else concatenated.
    `rlvr rm` renders its training pairs with this too, so a trained model is scored as it was trained."""
    if getattr(tok, "chat_template", None):
        messages = [{"role": "user", "content": user}]
        if assistant is not None:
            messages.append({"role": "assistant", "content": assistant})
            return tok.apply_chat_template(messages, tokenize=False)
        return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return user if assistant is None else f"{user}{assistant}"


@REWARDS.register("reward_model")
class SequenceClassifierReward:
    """A local `AutoModelForSequenceClassification` scores (question, response); its first logit is the reward,
    squashed by a sigmoid into (0, 1) with `normalize: sigmoid` (the default) or used raw."""

    def __init__(self, *, path: str, batch_size: Annotated[int, Field(ge=1)] = 16,
                 max_length: Annotated[int, Field(ge=8)] = 1024, normalize: Literal["sigmoid", "raw"] = "sigmoid",
                 device: str = "auto"):
        self.model, self.tokenizer = _load(path, "reward_model", device)
        self.batch_size, self.max_length, self.normalize = batch_size, max_length, normalize

    @torch.no_grad()
    def score_texts(self, questions: list[str], responses: list[str]) -> list[float]:
        texts = [render_exchange(self.tokenizer, q, r) for q, r in zip(questions, responses)]
        scores: list[float] = []
        device = next(self.model.parameters()).device
        self.tokenizer.padding_side = "right"
        for start in range(0, len(texts), self.batch_size):
            enc = self.tokenizer(texts[start : start + self.batch_size], padding=True, truncation=True,
                                 max_length=self.max_length, return_tensors="pt").to(device)
            logits = self.model(**enc).logits[:, 0].float()
            scores.extend((torch.sigmoid(logits) if self.normalize == "sigmoid" else logits).tolist())
        return scores

    def __call__(self, group: Group, task: Any) -> list[RewardOutput]:
        question = task.plain_prompt(group.record) if hasattr(task, "plain_prompt") else group.record.question
        scores = self.score_texts([question] * len(group.samples), [s.text for s in group.samples])
        return [RewardOutput(v, f"reward model {v:.3f}") for v in scores]


@REWARDS.register("learned_rm")
class LearnedRewardModel:
    """The run's own co-evolving reward model (`coevolve.mode=co_evolve`), read live: it scores the token ids
    the policy sampled (prompt + response), squashed by a sigmoid into (0, 1) with `normalize: sigmoid` (the
    default) or raw. Its weights are the latest refresh's, so the reward moves as the reward model learns."""

    def __init__(self, context: RewardContext, *, normalize: Literal["sigmoid", "raw"] = "sigmoid"):
        if context.reward_learner is None:
            raise ValueError("learned_rm reads the run's co-evolving reward model, and this run has none; set "
                             "coevolve.mode=co_evolve")
        self.learner, self.normalize = context.reward_learner, normalize

    def score_batch(self, groups: list[Group], task: Any) -> list[list[RewardOutput]]:
        rows = [list(s.prompt_ids) + list(s.response_ids) for g in groups for s in g.samples]
        raw = self.learner.score(rows) if rows else []
        values = torch.sigmoid(torch.tensor(raw, dtype=torch.float64)).tolist() if self.normalize == "sigmoid" \
            else raw
        out, i = [], 0
        for g in groups:
            out.append([RewardOutput(v, f"learned reward model {v:.3f}") for v in values[i : i + len(g.samples)]])
            i += len(g.samples)
        return out


DEFAULT_JUDGE_TEMPLATE = (
    "Question: {question}\nReference answer: {answer}\nResponse: {response}\n"
    "Is the response's final answer correct? Answer yes or no.\nAnswer:"
)


@REWARDS.register("judge")
class GenerativeJudgeReward:
    """A local causal LM judges each response.

    - `mode: prob` (default): the reward is P(yes) / (P(yes) + P(no)) from the judge's next-token distribution
      after the prompt, with `yes`/`no` the first tokens of `yes_text`/`no_text`.
    - `mode: score`: the judge generates up to `max_new_tokens` greedily; the first number in its output,
      divided by `score_max` and clipped to [0, 1], is the reward (0 if there is none).
    The prompt `template` may use {question}, {response} and {answer} (the task's reference, or "unknown").
    """

    def __init__(self, *, path: str, template: str = DEFAULT_JUDGE_TEMPLATE, mode: Literal["prob", "score"] = "prob",
                 yes_text: str = " yes", no_text: str = " no", score_max: Annotated[float, Field(gt=0)] = 10.0,
                 max_new_tokens: Annotated[int, Field(ge=1)] = 8, batch_size: Annotated[int, Field(ge=1)] = 8,
                 device: str = "auto"):
        self.model, self.tokenizer = _load(path, "judge", device)
        self.template, self.mode = template, mode
        self.yes_id = self._first_token(yes_text)
        self.no_id = self._first_token(no_text)
        self.score_max, self.max_new_tokens, self.batch_size = score_max, max_new_tokens, batch_size

    def _first_token(self, text: str) -> int:
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        if not ids:
            raise ValueError(f"rewards.judge: {text!r} encodes to no token")
        return int(ids[0])

    def prompts(self, group: Group) -> list[str]:
        answer = group.record.answer if group.record.answer is not None else "unknown"
        return [render_exchange(self.tokenizer, self.template.format(question=group.record.question, response=s.text,
                                                             answer=answer)) for s in group.samples]

    @torch.no_grad()
    def judge(self, prompts: list[str]) -> list[float]:
        device = next(self.model.parameters()).device
        self.tokenizer.padding_side = "left"
        out: list[float] = []
        for start in range(0, len(prompts), self.batch_size):
            enc = self.tokenizer(prompts[start : start + self.batch_size], padding=True, return_tensors="pt",
                                 add_special_tokens=False).to(device)
            if self.mode == "prob":
                logits = self.model(**enc).logits[:, -1].float()
                pair = torch.log_softmax(logits[:, [self.yes_id, self.no_id]], dim=-1).exp()
                out.extend(pair[:, 0].tolist())
            else:
                gen = self.model.generate(**enc, max_new_tokens=self.max_new_tokens, do_sample=False,
                                          pad_token_id=self.tokenizer.pad_token_id)
                for row in gen[:, enc["input_ids"].shape[1]:]:
                    text = self.tokenizer.decode(row, skip_special_tokens=True)
                    m = re.search(r"-?\d+(?:\.\d+)?", text)
                    value = float(m.group()) / self.score_max if m else 0.0
                    out.append(min(1.0, max(0.0, value)) if math.isfinite(value) else 0.0)
        return out

    def __call__(self, group: Group, task: Any) -> list[RewardOutput]:
        return [RewardOutput(v, f"judge {self.mode} {v:.3f}") for v in self.judge(self.prompts(group))]
