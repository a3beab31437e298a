"""Task = a prompt source (train and held-out splits) + a prompt template + a verifier.

A task never sees the model. The rollout stage renders its prompts with `PromptRenderer`, which uses the
tokenizer's chat template when it has one (and the config allows it), else the task's plain template.
"""

from __future__ import annotations

import abc
import logging
import random
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal, overload

from rlvr.registry import Registry
from rlvr.tasks.images import IMAGE_TOKEN, RAW_IMAGES, count_images
from rlvr.types import TaskRecord, VerifyResult  # noqa: F401  (VerifyResult: re-exported for tasks)

TASKS: Registry = Registry("task")
log = logging.getLogger("rlvr.tasks")


class TaskError(ValueError):
    """A task cannot be built from its config or data (missing file, missing column, bad rows)."""


class Task(abc.ABC):
    """Base class of every task. Subclasses set `_train` and `_heldout` and implement `verify`."""

    name: str = "task"
    visual: bool = False  # its records carry images: it needs a vision-language model and processor
    # `{question}` is replaced by the record's question.
    default_prompt_template: str = "{question}"
    default_chat_template: str = "{question}"
    default_system_prompt: str | None = None

    def __init__(
        self,
        *,
        prompt_template: str | None = None,
        chat_prompt_template: str | None = None,
        system_prompt: str | None = None,
    ):
        self.prompt_template = prompt_template or self.default_prompt_template
        self.chat_prompt_template = chat_prompt_template or self.default_chat_template
        self.system_prompt = system_prompt if system_prompt is not None else self.default_system_prompt
        for tpl, key in ((self.prompt_template, "prompt_template"), (self.chat_prompt_template,
                                                                      "chat_prompt_template")):
            if "{question}" not in tpl:
                raise TaskError(f"task.{key}: must contain '{{question}}'; got {tpl!r}")

    # Subclasses fill these two splits in their constructor.
    _train: Sequence[TaskRecord]
    _heldout: Sequence[TaskRecord]

    @property
    def train(self) -> Sequence[TaskRecord]:
        """Training prompts. Never overlaps `heldout` (by question text)."""
        return self._train

    @property
    def heldout(self) -> Sequence[TaskRecord]:
        """Held-out prompts for evaluation."""
        return self._heldout

    @abc.abstractmethod
    def verify(self, response: str, record: TaskRecord) -> VerifyResult:
        """Score one decoded response. May raise; the reward stage turns exceptions into reward 0."""

    # -- hooks for label-free rewards (majority vote needs answers without a reference) ------------------

    def extract_answer(self, response: str) -> str | None:
        """The final answer in a response, or None. Label-free rewards vote over these."""
        from rlvr.rewards.verifiers import extract_answer

        return extract_answer(response, "auto")

    def vote_answer(self, answer: str | None, record: TaskRecord) -> str | None:
        """The answer as a majority vote counts it (maj@k, TTRL and the other label-free rewards): the
        verifier's canonical form of `answer` for `record`, or None when it cannot be right in any form. The
        default is the extracted answer itself; a task where many written answers are the same answer (countdown:
        every right expression) returns the thing they share."""
        return answer

    def answers_match(self, a: str, b: str) -> bool:
        """Whether two extracted answers are the same answer (numbers compared as numbers)."""
        from rlvr.rewards.verifiers import exact_equal, numbers_equal, parse_number

        if parse_number(a) is not None and parse_number(b) is not None:
            return numbers_equal(a, b)[0]
        return exact_equal(a, b)[0]

    def paraphrase(self, record: TaskRecord) -> TaskRecord | None:
        """An equivalent rewording of the problem (same answer), or None when the task has none."""
        return None

    def plain_prompt(self, record: TaskRecord) -> str:
        return self.prompt_template.format(question=record.question)

    def chat_messages(self, record: TaskRecord) -> list[dict[str, str]]:
        messages = []
        if self.system_prompt:
            messages.append({"role": "system", "content": self.system_prompt})
        messages.append({"role": "user", "content": self.chat_prompt_template.format(question=record.question)})
        return messages

    def multimodal_messages(self, record: TaskRecord) -> list[dict[str, Any]]:
        """The chat with one `{"type": "image"}` entry per image (clip frames included) before the question, for a
        processor's chat template (visual tasks)."""
        messages: list[dict[str, Any]] = []
        if self.system_prompt:
            messages.append({"role": "system", "content": [{"type": "text", "text": self.system_prompt}]})
        content: list[dict[str, Any]] = [{"type": "image"} for _ in range(count_images(record))]
        content.append({"type": "text", "text": self.chat_prompt_template.format(question=record.question)})
        messages.append({"role": "user", "content": content})
        return messages

    def plain_prompt_with_images(self, record: TaskRecord, image_token: str = IMAGE_TOKEN) -> str:
        """The plain prompt preceded by one image placeholder per image."""
        return image_token * count_images(record) + self.plain_prompt(record)


def encode_prompt(tokenizer: Any, *, messages: list[dict[str, str]] | None = None,
                  text: str | None = None) -> tuple[list[int], str]:
    """Token ids and text of a prompt: chat `messages` through the chat template, or plain `text`."""
    if messages is not None:
        rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return list(tokenizer(rendered, add_special_tokens=False)["input_ids"]), rendered
    assert text is not None
    return list(tokenizer(text)["input_ids"]), text


def uses_chat_template(tokenizer: Any, mode: Literal["auto", "on", "off"] = "auto") -> bool:
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if mode == "on" and not has_template:
        raise TaskError("model.chat_template: 'on' was asked for, but the tokenizer has no chat template")
    return has_template and mode != "off"


class PromptRenderer:
    """Turns a task record into prompt token ids for one tokenizer.

    A visual task (`task.visual`) is rendered by the model's `processor` (`render_multimodal`): the chat with
    one image placeholder per image, checked against the record's images, then the processor's token ids (image
    placeholders expanded to the image's tokens) and its other outputs (`pixel_values`, ...), the prompt's
    `mm_inputs`. A record whose image does not decode is skipped and counted (`skipped_images`), not a crash.
    """

    def __init__(self, task: Task, tokenizer: Any, chat_template: Literal["auto", "on", "off"] = "auto",
                 processor: Any = None):
        self.task = task
        self.tokenizer = tokenizer
        self.uses_chat = uses_chat_template(tokenizer, chat_template)
        self.processor = processor
        self.multimodal = bool(getattr(task, "visual", False))
        self.skipped_images: list[tuple[str, str]] = []  # (record id, why) of records left out
        if self.multimodal and processor is None:
            raise TaskError(f"task {getattr(task, 'name', '?')!r} has images: it needs a vision-language model "
                            "(model.path with a vision tower and a processor, e.g. builtin-vl)")
        if hasattr(task, "plain_prompts"):  # a task whose verifier depends on how its prompt was rendered
            task.plain_prompts = not self.uses_chat

    def render(self, record: TaskRecord) -> tuple[list[int], str]:
        if self.multimodal:
            ids, text, _ = self.render_multimodal(record)
            return ids, text
        if self.uses_chat:
            return encode_prompt(self.tokenizer, messages=self.task.chat_messages(record))
        return encode_prompt(self.tokenizer, text=self.task.plain_prompt(record))

    def render_multimodal(self, record: TaskRecord, images: list[Any] | None = None
                          ) -> tuple[list[int], str, dict[str, Any]]:
        """(prompt ids with the image tokens expanded, prompt text, the processor's other outputs plus the decoded
        images under `RAW_IMAGES`). Raises `ImageError` when an image does not decode or the placeholders do not
        match the images."""
        from rlvr.tasks.images import IMAGE_TOKEN, check_placeholders, record_images

        images = record_images(record) if images is None else images
        token = getattr(self.processor, "image_token", None) or IMAGE_TOKEN
        if self.uses_chat:
            text = self.processor.apply_chat_template(self.task.multimodal_messages(record),
                                                      add_generation_prompt=True, tokenize=False)
        else:
            text = self.task.plain_prompt_with_images(record, token)
        check_placeholders(text, len(images), record_id=record.id, token=token)
        enc = self.processor(text=text, images=images or None, return_tensors="pt")
        ids = enc["input_ids"][0].tolist()
        mm = {k: v for k, v in enc.items() if k not in ("input_ids", "attention_mask", "token_type_ids")}
        mm[RAW_IMAGES] = list(images)  # the decoded images: an engine that runs its own processor (vLLM) takes these
        return ids, text, mm

    def render_or_skip(self, record: TaskRecord) -> tuple[list[int], str, dict[str, Any]] | None:
        """`render_multimodal`, or None (counted in `skipped_images`, with a warning) when an image of the record
        does not decode. A placeholder mismatch is the prompt template's fault, not the data's: it raises."""
        from rlvr.tasks.images import ImageError, record_images

        try:
            images = record_images(record)
        except ImageError as err:
            self.skipped_images.append((record.id, str(err)))
            log.warning("skipped a prompt whose image does not decode (%d so far): %s", len(self.skipped_images),
                        err)
            return None
        return self.render_multimodal(record, images)


class LazySplit(Sequence[TaskRecord]):
    """A split of `size` records made on demand by `make(index, attempt)`, skipping excluded questions.

    Procedural tasks use it for their training split: record i is the first attempt whose question is not
    in `exclude` (the held-out questions), so the two splits never overlap and stay deterministic.
    """

    def __init__(self, size: int, make: Callable[[int, int], TaskRecord], exclude: set[str] | None = None,
                 max_attempts: int = 100, key: Callable[[TaskRecord], str] | None = None,
                 held_out: Callable[[TaskRecord], bool] | None = None):
        self.size = size
        self.make = make
        self.exclude = exclude or set()
        self.max_attempts = max_attempts
        # What makes two problems the same: the question text, or e.g. the scene drawn in an image.
        self.key = key or (lambda r: r.question)
        # Held out by construction (tasks/heldout.py): a problem of the task family's held-out pool is never a
        # training record, whichever variant, seed or split drew it.
        self.held_out = held_out or (lambda r: False)

    def __len__(self) -> int:
        return self.size

    @overload
    def __getitem__(self, i: int) -> TaskRecord: ...
    @overload
    def __getitem__(self, i: slice) -> list[TaskRecord]: ...

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self.size))]
        if i < 0:
            i += self.size
        if not 0 <= i < self.size:
            raise IndexError(i)
        for attempt in range(self.max_attempts):
            record = self.make(i, attempt)
            if self.key(record) not in self.exclude and not self.held_out(record):
                return record
        raise TaskError(f"could not make a training problem distinct from the held-out set at index {i}; "
                        "the task's problem space is too small for its eval_size")

    def __iter__(self) -> Iterator[TaskRecord]:
        return (self[i] for i in range(self.size))


def distinct_records(make: Callable[[int], TaskRecord], size: int, what: str = "task.eval_size",
                     key: Callable[[TaskRecord], str] | None = None) -> list[TaskRecord]:
    """`size` records with distinct questions (or `key`s) from make(0), make(1), ... (procedural held-out splits)."""
    key = key or (lambda r: r.question)
    seen: set[str] = set()
    out: list[TaskRecord] = []
    for i in range(size * 50):
        record = make(i)
        if key(record) not in seen:
            seen.add(key(record))
            out.append(record)
            if len(out) == size:
                return out
    raise TaskError(f"{what}: {size} distinct problems could not be generated; use a smaller value")


def holdout_split(train: list[TaskRecord], heldout: list[TaskRecord] | None, *, eval_fraction: float, seed: int,
                  source: str, key: Callable[[TaskRecord], Any] = lambda r: r.question
                  ) -> tuple[list[TaskRecord], list[TaskRecord]]:
    """(train, heldout) from loaded rows: without an explicit held-out file, a seeded `eval_fraction` of `train`
    is held out. Training rows whose `key` (the question; for image rows the question and the images) is held
    out are dropped, so the splits never overlap."""
    if heldout is None:
        order = list(range(len(train)))
        random.Random(seed).shuffle(order)
        n_eval = max(1, round(len(train) * eval_fraction))
        heldout = [train[i] for i in sorted(order[:n_eval])]
        train = [train[i] for i in sorted(order[n_eval:])]
    held = {key(r) for r in heldout}
    train = [r for r in train if key(r) not in held]
    if not train:
        raise TaskError(f"task.path: no training rows left in '{source}' after holding out the eval split")
    return train, heldout


def build_task(name: str, params: dict[str, Any] | None = None) -> Task:
    return TASKS.build(name, params or {}, where="task")
