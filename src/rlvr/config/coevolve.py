"""The `coevolve` section: a run with a second trainable role, a reward model that learns beside the policy.

    coevolve.mode=co_evolve   a separate Bradley–Terry reward model (Cooper, arXiv:2508.05613), refreshed every
                              `every` steps on the step's (correct, incorrect) pairs; the `learned_rm` reward reads it
    coevolve.mode=spark       the policy is its own generative reward model (SPARK, arXiv:2509.22624): the step's
                              rollouts and verifier labels become judge examples, trained in the same optimizer
                              steps as the policy loss
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from rlvr.config.base import Strict


class SelfRewardConfig(Strict):
    """Label-free steps (SPARK's self-reward): the policy judges its own samples instead of the verifier."""

    after: int = Field(0, ge=0, description="the first `after` steps always use the verifier's reward.")
    share: float = Field(1.0, ge=0, le=1, description="of the later steps, this share is label-free, each step "
                         "drawn with a seed from (run.seed, step); 1: every later step.")
    signal: Literal["prob", "verdict"] = Field(
        "prob", description="prob: reward = p(yes) / (p(yes) + p(no)); verdict: 1 when p(yes) > p(no), else 0.")


class CoEvolveConfig(Strict):
    mode: Literal["co_evolve", "spark"] = Field(
        ..., description="co_evolve: a separate reward model (read by the `learned_rm` reward); spark: the policy "
        "also learns to judge its own answers.")
    # co_evolve: the separate reward model
    every: int = Field(1, ge=1, description="co_evolve: refresh the reward model every k steps, on that step's "
                       "fresh (correct, incorrect) pairs.")
    rm_path: str | None = Field(None, description="co_evolve: the reward model's starting checkpoint (a causal "
                                "LM gets a fresh scalar head, seeded by run.seed); None: model.path.")
    rm_lr: float = Field(1e-4, gt=0, description="co_evolve: the reward model's AdamW learning rate.")
    rm_updates: int = Field(1, ge=1, description="co_evolve: passes over each refresh's pairs.")
    rm_batch_size: int = Field(32, ge=1, description="co_evolve: pairs per reward-model optimizer step.")
    max_pairs_per_prompt: int = Field(8, ge=1, description="co_evolve, and spark's pairwise objective: at "
                                      "most this many (correct, incorrect) pairs per group, drawn with the step's "
                                      "seed.")
    # spark: the policy as its own generative reward model
    objectives: list[Literal["pointwise", "pairwise", "reflection"]] = Field(
        default_factory=lambda: ["pointwise"],
        description="spark: the judge objectives trained with the policy loss, each weighing 1. pointwise: 'is "
        "this answer correct?' -> yes/no; pairwise: 'which of A/B is correct?' from one correct and one incorrect "
        "answer of a group (order drawn with the step's seed); reflection: a wrong answer, the reflection text, "
        "then a correct answer of the same group as the target.")
    coef: float = Field(0.5, ge=0, description="spark: weight of the judge loss beside the policy loss (0: judge "
                        "accuracy is measured but not trained).")
    max_examples: int = Field(32, ge=1, description="spark: judge examples per objective and step, drawn "
                              "with the step's seed (pointwise: half from correct and half from incorrect answers "
                              "where the step has them).")
    question: str = Field("\nIs this answer correct? ", description="spark: the text between the answer and the "
                          "verdict.")
    yes_text: str = Field("yes", description="spark: the verdict for a correct answer (its first token is "
                          "trained and read).")
    no_text: str = Field("no", description="spark: the verdict for an incorrect answer.")
    pair_a: str = Field("\nAnswer A: ", description="spark pairwise: the text before the first answer.")
    pair_b: str = Field("\nAnswer B: ", description="spark pairwise: the text before the second answer.")
    pair_question: str = Field("\nWhich answer is correct? ", description="spark pairwise: the text before "
                               "the verdict.")
    pair_labels: tuple[str, str] = Field(("A", "B"), description="spark pairwise: the verdicts naming the first "
                                         "and the second answer (their first tokens are trained and read).")
    reflection_text: str = Field("\nThis answer is wrong. A corrected answer:\n", description="spark "
                                 "reflection: the text between a wrong answer and the correct one it is revised to.")
    self_reward: SelfRewardConfig | None = Field(
        None, description="spark: label-free steps on which the policy's own pointwise judgement replaces the "
        "verifier's reward (None: never).")

    @field_validator("objectives")
    @classmethod
    def _objectives(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("give at least one of pointwise, pairwise, reflection (e.g. [pointwise, pairwise]); "
                             "to measure the judge without training it set coevolve.coef=0")
        repeated = sorted({o for o in v if v.count(o) > 1})
        if repeated:
            raise ValueError(f"{', '.join(repeated)} listed more than once; list each objective once")
        return v
