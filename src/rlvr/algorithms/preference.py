"""The pairwise reward-model loss: pure tensor functions (no config, no I/O). Used by `rlvr rm` and by the
co-evolving reward model of a training run (`coevolve.mode=co_evolve`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def bradley_terry_loss(chosen: torch.Tensor, rejected: torch.Tensor, margin: torch.Tensor | None = None,
                       center_coef: float = 0.0) -> torch.Tensor:
    """Mean pairwise loss over a batch of preference pairs with scalar rewards r_c (chosen) and r_r (rejected).

        loss = -mean( log sigmoid(r_c - r_r - m) )  +  center_coef * mean( (r_c + r_r)^2 )

    - The first term is the Bradley–Terry model's negative log-likelihood, P(chosen > rejected) =
      sigmoid(r_c - r_r) (Bradley & Terry 1952), as the reward-model loss of InstructGPT (Ouyang et al.,
      "Training language models to follow instructions with human feedback", arXiv:2203.02155, eq. 1).
    - `margin` m (per pair, >= 0 for a clear preference) asks the chosen reward to beat the rejected one by at
      least m: Llama 2 (Touvron et al., "Llama 2: Open Foundation and Fine-Tuned Chat Models",
      arXiv:2307.09288, eq. 2). m = 0 is the plain loss.
    - `center_coef` adds the auxiliary term of Eisenstein et al., "Helping or Herding? Reward Model Ensembles
      Mitigate but do not Eliminate Reward Hacking" (arXiv:2312.09244), which pulls rewards towards zero mean
      (Bradley–Terry fixes only differences); TRL calls it center_rewards_coefficient.
    """
    diff = chosen - rejected
    if margin is not None:
        diff = diff - margin
    loss = -F.logsigmoid(diff).mean()
    if center_coef:
        loss = loss + center_coef * ((chosen + rejected) ** 2).mean()
    return loss


def pair_accuracy(chosen: torch.Tensor, rejected: torch.Tensor) -> float:
    """Share of pairs the model ranks right: r_c > r_r counts 1, a tie 1/2 (a coin flip), r_c < r_r 0."""
    if chosen.numel() == 0:
        return float("nan")
    wins = (chosen > rejected).float() + 0.5 * (chosen == rejected).float()
    return float(wins.mean())
