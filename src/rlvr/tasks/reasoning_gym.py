"""Any reasoning-gym procedural dataset, by name, scored by the dataset's own scorer. Seeded and offline."""

from __future__ import annotations

import functools
from typing import Annotated, Any

from pydantic import AfterValidator, Field

from rlvr.registry import did_you_mean
from rlvr.tasks.base import TASKS, LazySplit, Task, TaskError, VerifyResult
from rlvr.types import TaskRecord


def _dataset_names() -> list[str]:
    import reasoning_gym.factory

    return sorted(reasoning_gym.factory.DATASETS)


def _known_dataset(name: str) -> str:
    names = _dataset_names()
    if name not in names:
        raise ValueError(f"unknown reasoning-gym dataset '{name}'.{did_you_mean(name, names)} "
                         f"There are {len(names)}, e.g. {', '.join(names[:8])}, ...")
    return name


def _default_system_prompt() -> str:
    from reasoning_gym.utils import SYSTEM_PROMPTS

    return SYSTEM_PROMPTS["default"]


PLAIN_TEMPLATE = "{question}\nPut only the final answer inside <answer></answer>.\n<answer>"


@TASKS.register("reasoning_gym")
class ReasoningGymTask(Task):
    """Wraps `reasoning_gym.create_dataset(dataset, seed=..., size=..., **config)`.

    With a chat template, the model is asked (system prompt) to put its final answer in <answer></answer> tags;
    the text inside the last pair is handed to the dataset's `score_answer`. A model without a chat template
    never sees a system prompt, so the plain prompt carries the format itself, short enough for small context
    windows, and ends with an opened `<answer>` tag (`PLAIN_TEMPLATE`): the response then starts inside the
    tag, and its text up to `</answer>` (or the whole response, if it never closes the tag) is the answer. The held-out split uses its own seed, and training
    problems whose question equals a held-out one are replaced, so the splits never overlap.
    """

    name = "reasoning_gym"
    default_prompt_template = PLAIN_TEMPLATE

    def __init__(
        self,
        *,
        dataset: Annotated[str, AfterValidator(_known_dataset)],
        config: dict[str, Any] | None = None,
        train_size: Annotated[int, Field(ge=1)] = 10_000,
        eval_size: Annotated[int, Field(ge=1)] = 200,
        seed: Annotated[int, Field(ge=0)] = 0,
        prompt_template: str | None = None,
        chat_prompt_template: str | None = None,
        system_prompt: str | None = None,
    ):
        super().__init__(prompt_template=prompt_template, chat_prompt_template=chat_prompt_template,
                         system_prompt=system_prompt if system_prompt is not None else _default_system_prompt())
        import reasoning_gym

        self.plain_prompts = False  # set by PromptRenderer: prompts are rendered without a chat template
        self.dataset_name = dataset
        self.config = dict(config or {})
        try:
            self._heldout_ds = reasoning_gym.create_dataset(dataset, seed=seed + 1_000_003, size=eval_size,
                                                            **self.config)
        except Exception as err:  # reasoning-gym raises assorted errors for bad dataset configs
            raise TaskError(f"task.config: reasoning-gym rejected the config for '{dataset}': {err}") from None
        self._heldout = [self._record(self._heldout_ds, i, "heldout") for i in range(eval_size)]
        spare = functools.lru_cache(maxsize=8)(
            lambda attempt: reasoning_gym.create_dataset(dataset, seed=seed + 7919 * attempt, size=train_size,
                                                         **self.config)
        )
        self._train = LazySplit(
            train_size,
            lambda i, attempt: self._record(spare(attempt), i, f"train{attempt}"),
            {r.question for r in self._heldout},
        )

    def _record(self, ds: Any, i: int, split: str) -> TaskRecord:
        entry = ds[i]
        meta = entry.get("metadata", {})
        difficulty = meta.get("difficulty")
        return TaskRecord(
            id=f"{self.dataset_name}-{split}-{i}",
            question=entry["question"],
            answer=entry["answer"],
            difficulty=difficulty if isinstance(difficulty, (int, float)) else None,
            source=meta.get("source_dataset", self.dataset_name),
            meta={"entry": entry, "scorer": ds},
        )

    @property
    def prefilled(self) -> bool:
        """Whether each prompt ended with an opened <answer> tag (plain prompts with such a template)."""
        return self.plain_prompts and self.prompt_template.rstrip().endswith("<answer>")

    def extract_answer(self, response: str) -> str | None:
        from reasoning_gym.utils import extract_answer

        found = extract_answer(response)
        if found is None and self.prefilled and "<answer>" not in response:
            found = response.split("</answer>", 1)[0].strip() or None
        return found

    def verify(self, response: str, record: TaskRecord) -> VerifyResult:
        from reasoning_gym.utils import extract_answer

        answer = extract_answer(response)
        if answer is None and self.prefilled and "<answer>" not in response:
            answer = response.split("</answer>", 1)[0].strip() or None  # the prompt opened the tag
        if answer is None:
            return VerifyResult(0.0, False, "no <answer> tag" if not self.prefilled else "empty answer")
        score = float(record.meta["scorer"].score_answer(answer, record.meta["entry"]))
        score = min(1.0, max(0.0, score))
        reason = "correct" if score >= 1.0 else f"scored {score:.2f}: got {answer!r}, expected {record.answer!r}"
        return VerifyResult(score, score >= 1.0, reason, answer)
