"""The `coevolve` section: a run with a second trainable role, a reward model that learns beside the policy.

    coevolve.mode=co_evolve   a separate Bradley–Terry reward model (Cooper, arXiv:2508.05613), refreshed every
                              `every` steps on the step's (correct, incorrect) pairs; the `learned_rm` reward reads it
    coevolve.mode=spark       the policy is its own generative reward model (SPARK, arXiv:2509.22624): the step's
                              rollouts and verifier labels become judge examples, trained in the same optimizer
                              steps as the policy loss
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlvr.config.base import Strict


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
    max_pairs_per_prompt: int = Field(8, ge=1, description="co_evolve: at most this many (correct, incorrect) "
                                      "pairs per group, drawn with the step's seed.")
    # spark: the policy as its own generative reward model
    objectives: list[Literal["pointwise"]] = Field(
        default_factory=lambda: ["pointwise"],
        description="spark: the judge objectives trained with the policy loss. pointwise: 'is this answer "
        "correct?' answered 'yes'/'no' from the verifier's label (pairwise and reflection: not yet).")
    coef: float = Field(0.5, ge=0, description="spark: weight of the judge loss beside the policy loss (0: judge "
                        "accuracy is measured but not trained).")
    max_examples: int = Field(32, ge=1, description="spark: judge examples per step, drawn with the step's seed, "
                              "half from correct and half from incorrect answers where the step has them.")
    question: str = Field("\nIs this answer correct? ", description="spark: the text between the answer and the "
                          "verdict.")
    yes_text: str = Field("yes", description="spark: the verdict for a correct answer (its first token is "
                          "trained and read).")
    no_text: str = Field("no", description="spark: the verdict for an incorrect answer.")
