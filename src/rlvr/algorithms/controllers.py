r"""Coefficient controllers: small stateful objects that adapt a loss coefficient between RL steps.

Each has `value` (the coefficient to use now), `update(observed, n_steps)` (called once per RL step with the
step's measured statistic), and `state_dict()` / `load_state_dict()` (plain floats, so a resumed run continues
bit-exactly). They hold no tensors and do no I/O. A non-finite observation leaves the state unchanged, so one
bad step cannot poison the coefficient.
"""

from __future__ import annotations

import math
from typing import Any


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


class FixedKLController:
    """A constant coefficient (KL or entropy): `update` does nothing."""

    def __init__(self, value: float):
        _check(math.isfinite(value) and value >= 0, f"FixedKLController: value must be >= 0; got {value}")
        self.value = float(value)

    def update(self, observed: float, n_steps: int = 1) -> None:
        del observed, n_steps

    def state_dict(self) -> dict[str, Any]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.value = float(state["value"])


class AdaptiveKLController:
    r"""Proportional control of the KL coefficient toward a target KL.

        e_t      = clip(KL_t / KL_target - 1, -0.2, 0.2)
        beta_t+1 = beta_t * (1 + e_t * n_steps / horizon)

    `observed` is the step's measured KL, `n_steps` how many samples that step used; `horizon` is in the same
    unit. The coefficient grows while the KL is above the target and shrinks while it is below.

    Source: Ziegler et al., "Fine-Tuning Language Models from Human Preferences", arXiv:1909.08593 (the
    adaptive KL: e_t as above and beta_t+1 = beta_t (1 + K_beta e_t)); the gain K_beta is written
    n_steps / horizon as in the authors' lm-human-preferences code (horizon 10000 samples), and in TRL's and
    verl's `AdaptiveKLController`.
    """

    def __init__(self, init_coef: float, target: float, horizon: int = 10_000):
        _check(math.isfinite(init_coef) and init_coef >= 0,
               f"AdaptiveKLController: init_coef must be >= 0; got {init_coef}")
        _check(math.isfinite(target) and target > 0,
               f"AdaptiveKLController: target must be > 0; got {target}")
        _check(horizon > 0, f"AdaptiveKLController: horizon must be > 0; got {horizon}")
        self.value = float(init_coef)
        self.target = float(target)
        self.horizon = float(horizon)

    def update(self, observed: float, n_steps: int = 1) -> None:
        if not math.isfinite(observed):
            return
        error = min(max(observed / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon

    def state_dict(self) -> dict[str, Any]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.value = float(state["value"])


class TargetEntropyController:
    r"""Adaptive entropy-bonus coefficient: up while entropy is below a target, down while above.

        c_k+1    = clip(c_k + delta, min_coef, max_coef)   if H_k < H_target
                   clip(c_k - delta, min_coef, max_coef)   otherwise
        alpha_k  = c_k * 1[H_k < H_target]                 (the bonus is off while entropy is above target)

    `value` is alpha (before the first observation the bonus is on: alpha = c_0). Use it as the weight of
    `entropy_bonus` (rlvr.algorithms.losses). `update(observed, n_steps)` takes the step's mean token entropy;
    the rule moves by one `delta` per call, i.e. per RL step, whatever `n_steps` (accepted for the shared
    controller interface, not used).

    Source: He et al., "Skywork Open Reasoner 1 Technical Report", arXiv:2505.22312, section "Adaptive Entropy
    Control"; checked against the authors' `EntController` (github.com/SkyworkAI/Skywork-OR1
    verl/trainer/ppo/core_algos.py). Their scripts use target 0.2, delta 1e-4, c in [0, 0.005], c_0 = 0.

    This implementation: `delta` and `min_coef` default to the paper's 1e-4 and 0; `max_coef` defaults to no
    upper bound (set 0.005 for the paper's setting), so any starting coefficient is accepted.
    """

    def __init__(self, init_coef: float, target: float, *, delta: float = 1e-4, min_coef: float = 0.0,
                 max_coef: float | None = None):
        _check(math.isfinite(target) and target > 0,
               f"TargetEntropyController: target must be > 0; got {target}")
        _check(math.isfinite(delta) and delta > 0, f"TargetEntropyController: delta must be > 0; got {delta}")
        _check(min_coef >= 0, f"TargetEntropyController: min_coef must be >= 0; got {min_coef}")
        upper = math.inf if max_coef is None else float(max_coef)
        _check(min_coef <= upper, f"TargetEntropyController: min_coef {min_coef} exceeds max_coef {max_coef}")
        _check(math.isfinite(init_coef) and min_coef <= init_coef <= upper,
               f"TargetEntropyController: init_coef must lie in [min_coef, max_coef] = "
               f"[{min_coef}, {max_coef}]; got {init_coef}")
        self.coef = float(init_coef)
        self.target = float(target)
        self.delta = float(delta)
        self.min_coef = float(min_coef)
        self.max_coef = upper
        self.enabled = True

    @property
    def value(self) -> float:
        return self.coef if self.enabled else 0.0

    def update(self, observed: float, n_steps: int = 1) -> None:
        del n_steps
        if not math.isfinite(observed):
            return
        below = observed < self.target
        step = self.delta if below else -self.delta
        self.coef = min(max(self.coef + step, self.min_coef), self.max_coef)
        self.enabled = below

    def state_dict(self) -> dict[str, Any]:
        return {"coef": self.coef, "enabled": self.enabled}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.coef = float(state["coef"])
        self.enabled = bool(state["enabled"])
