"""The roles a run is made of, as small protocols. The controller calls these methods and nothing else, so a
role can run in this process, on a torchrun rank or on Ray actors without the controller knowing which.

    Generator      samples responses: the fast, hf and vllm engines, or Ray rollout workers behind them
    Scorer         rewards groups: verifiers, label-free signals, judges, reward models (`RewardFunction`)
    LogProbModel   scores given tokens under a frozen model: the KL reference (a teacher next)
    Trainable      learns from groups: the policy learner with its critic
    RewardLearner  learns from (chosen, rejected) token pairs and scores token rows: co_evolve's reward model
                   (in this process, or a Ray actor behind `RemoteRewardLearner`)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch

    from rlvr.rollout.base import SamplingParams
    from rlvr.types import Batch, Group, Sample


@runtime_checkable
class Generator(Protocol):
    policy_version: int

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Sample]]: ...

    def sync_weights(self, model: Any, version: int) -> None: ...

    def sleep(self) -> None: ...

    def wake(self) -> None: ...

    def metrics(self) -> dict[str, float]: ...

    def shutdown(self) -> None: ...


@runtime_checkable
class Scorer(Protocol):
    def __call__(self, groups: list[Group], task: Any) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class LogProbModel(Protocol):
    """A frozen model that scores tokens. A GKD teacher outside the learner's process also answers
    `token_distributions(batch, temperature, top_k, chunk)` (its next-token log-probs; not part of this protocol,
    since the reference and KDRL's teacher never need it)."""

    def token_logprobs(self, batch: Batch, temperature: float) -> torch.Tensor: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class Trainable(Protocol):
    def learn(self, groups: list[Group]) -> dict[str, float]: ...

    def pull_weights(self, model: torch.nn.Module) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def reset_reference(self) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class RewardLearner(Protocol):
    def learn(self, pairs: list[tuple[list[int], list[int]]]) -> dict[str, float]: ...

    def score(self, rows: list[list[int]]) -> list[float]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def hf_model(self) -> Any: ...

    def close(self) -> None: ...
