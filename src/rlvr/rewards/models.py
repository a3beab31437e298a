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


DEFAULT_META_TEMPLATE = (
    "{question}\nJudgement: {response}\nIs this judgement right? Answer yes or no.\nAnswer:"
)


def meta_rm_vote(scores: list[float | None], meta: list[float] | None, keep: int | None,
                 vote: Literal["mean", "majority"]) -> float | None:
    """Meta-RM-guided voting over k sampled judgements of one response (DeepSeek-GRM / SPCT, arXiv:2504.02495,
    section 4): rank the judgements by their meta-RM score (highest first; ties, and no meta-RM: sample order),
    keep the first `keep` (None: all), drop those with no parsed score, then vote:

        mean:      (1 / |K|) * sum_{j in K} s_j                      (the paper's sum of scores, divided by |K|)
        majority:  the most frequent s_j in K; a tie goes to the value whose best-ranked judgement ranks first

    Returns None when no kept judgement has a score."""
    order = sorted(range(len(scores)), key=lambda j: -meta[j]) if meta is not None else list(range(len(scores)))
    kept = [scores[j] for j in order[: keep if keep is not None else len(order)]]
    valid = [v for v in kept if v is not None]
    if not valid:
        return None
    if vote == "mean":
        return sum(valid) / len(valid)
    counts = {v: valid.count(v) for v in valid}  # insertion order = best rank first
    return max(counts, key=lambda v: counts[v])  # max keeps the first of equal counts


@REWARDS.register("judge")
class GenerativeJudgeReward:
    """A local causal LM judges each response.

    - `mode: prob` (default): the reward is P(yes) / (P(yes) + P(no)) from the judge's next-token distribution
      after the prompt, with `yes`/`no` the first tokens of `yes_text`/`no_text`.
    - `mode: score`: the judge generates up to `max_new_tokens` greedily; the first number in its output,
      divided by `score_max` and clipped to [0, 1], is the reward (0 if there is none).
    - `mode: score` with `samples: k > 1` (DeepSeek-GRM's inference-time scaling): k judgements sampled at
      `temperature` (seeded by `seed` and the call count), optionally ranked by a meta reward model
      (`meta_path`: a `reward_model` directory scoring (judge prompt, judgement), or with `meta_kind: judge`
      a causal LM's P(yes) under `meta_template`), the best `meta_keep` kept, and their scores voted
      (`vote: mean | majority`, see `meta_rm_vote`) before dividing by `score_max`.
    The prompt `template` may use {question}, {response} and {answer} (the task's reference, or "unknown").
    """

    def __init__(self, *, path: str, template: str = DEFAULT_JUDGE_TEMPLATE, mode: Literal["prob", "score"] = "prob",
                 yes_text: str = " yes", no_text: str = " no", score_max: Annotated[float, Field(gt=0)] = 10.0,
                 max_new_tokens: Annotated[int, Field(ge=1)] = 8, batch_size: Annotated[int, Field(ge=1)] = 8,
                 device: str = "auto", samples: Annotated[int, Field(ge=1)] = 1,
                 temperature: Annotated[float, Field(gt=0)] = 1.0, seed: int = 0,
                 meta_path: str | None = None, meta_kind: Literal["reward_model", "judge"] = "reward_model",
                 meta_template: str = DEFAULT_META_TEMPLATE, meta_keep: Annotated[int, Field(ge=1)] | None = None,
                 vote: Literal["mean", "majority"] = "mean"):
        from rlvr.errors import ConfigError

        if mode == "prob" and (samples > 1 or meta_path is not None or meta_keep is not None):
            raise ConfigError("rewards.judge: samples, meta_path and meta_keep vote over sampled score "
                              "judgements; set mode: score (mode: prob reads one deterministic P(yes))")
        if meta_keep is not None and meta_keep > samples:
            raise ConfigError(f"rewards.judge.meta_keep: {meta_keep} is more than samples ({samples}); keep at "
                              "most as many judgements as are sampled")
        if meta_keep is not None and meta_path is None:
            raise ConfigError("rewards.judge.meta_keep: keeping the top judgements needs a meta reward model; set "
                              "meta_path (a reward_model directory, or a causal LM with meta_kind: judge)")
        self.model, self.tokenizer = _load(path, "judge", device)
        self.template, self.mode = template, mode
        self.yes_id = self._first_token(yes_text)
        self.no_id = self._first_token(no_text)
        self.score_max, self.max_new_tokens, self.batch_size = score_max, max_new_tokens, batch_size
        self.samples, self.temperature, self.seed, self.calls = samples, temperature, seed, 0
        self.meta_keep, self.vote, self.meta_template = meta_keep, vote, meta_template
        self.meta: Any = None
        if meta_path is not None:
            self.meta = (SequenceClassifierReward(path=meta_path, device=device) if meta_kind == "reward_model"
                         else GenerativeJudgeReward(path=meta_path, device=device, template=meta_template))

    def _first_token(self, text: str) -> int:
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        if not ids:
            raise ValueError(f"rewards.judge: {text!r} encodes to no token")
        return int(ids[0])

    def prompts(self, group: Group) -> list[str]:
        return [render_exchange(self.tokenizer, text) for text in self.prompt_texts(group)]

    def prompt_texts(self, group: Group) -> list[str]:
        answer = group.record.answer if group.record.answer is not None else "unknown"
        return [self.template.format(question=group.record.question, response=s.text, answer=answer)
                for s in group.samples]

    def score_texts(self, questions: list[str], responses: list[str]) -> list[float]:
        """As a meta reward model: P(yes) that `response` (a judgement) is right about `question` (its prompt)."""
        return self.judge([render_exchange(self.tokenizer, self.template.format(question=q, response=r,
                                                                                answer="unknown"))
                           for q, r in zip(questions, responses)])

    @torch.no_grad()
    def generate(self, prompts: list[str], k: int) -> list[list[str]]:
        """k judgements of each prompt: greedy when k is 1, else sampled at `temperature` (seeded)."""
        device = next(self.model.parameters()).device
        self.tokenizer.padding_side = "left"
        out: list[list[str]] = []
        sample = k > 1
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed * 1_000_003 + self.calls)
            self.calls += 1
            for start in range(0, len(prompts), self.batch_size):
                enc = self.tokenizer(prompts[start : start + self.batch_size], padding=True, return_tensors="pt",
                                     add_special_tokens=False).to(device)
                extra = {"do_sample": True, "temperature": self.temperature, "top_k": 0} if sample \
                    else {"do_sample": False}
                gen = self.model.generate(**enc, max_new_tokens=self.max_new_tokens, num_return_sequences=k,
                                          pad_token_id=self.tokenizer.pad_token_id, **extra)
                texts = [self.tokenizer.decode(row, skip_special_tokens=True)
                         for row in gen[:, enc["input_ids"].shape[1]:]]
                out.extend(texts[i : i + k] for i in range(0, len(texts), k))
        return out

    @staticmethod
    def parse_score(text: str) -> float | None:
        m = re.search(r"-?\d+(?:\.\d+)?", text)
        value = float(m.group()) if m else None
        return value if value is not None and math.isfinite(value) else None

    @torch.no_grad()
    def judge(self, prompts: list[str], plain: list[str] | None = None) -> list[float]:
        if self.mode == "score":
            return self.vote_scores(prompts, plain if plain is not None else prompts)
        device = next(self.model.parameters()).device
        self.tokenizer.padding_side = "left"
        out: list[float] = []
        for start in range(0, len(prompts), self.batch_size):
            enc = self.tokenizer(prompts[start : start + self.batch_size], padding=True, return_tensors="pt",
                                 add_special_tokens=False).to(device)
            logits = self.model(**enc).logits[:, -1].float()
            pair = torch.log_softmax(logits[:, [self.yes_id, self.no_id]], dim=-1).exp()
            out.extend(pair[:, 0].tolist())
        return out

    def vote_scores(self, prompts: list[str], plain: list[str]) -> list[float]:
        """Score mode: k judgements per prompt, meta-RM ranking when set, the vote, / score_max in [0, 1]."""
        judgements = self.generate(prompts, self.samples)
        self.last_judgements = judgements
        out: list[float] = []
        for question, texts in zip(plain, judgements):
            scores = [self.parse_score(t) for t in texts]
            meta = self.meta.score_texts([question] * len(texts), texts) if self.meta is not None else None
            value = meta_rm_vote(scores, meta, self.meta_keep, self.vote)
            out.append(0.0 if value is None else min(1.0, max(0.0, value / self.score_max)))
        return out

    def __call__(self, group: Group, task: Any) -> list[RewardOutput]:
        plain = self.prompt_texts(group)
        values = self.judge([render_exchange(self.tokenizer, t) for t in plain], plain)
        return [RewardOutput(v, f"judge {self.mode} {v:.3f}") for v in values]
