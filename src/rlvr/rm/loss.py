"""The pairwise reward-model loss (it lives in `rlvr.algorithms.preference`, so a run's co-evolving reward model
uses the same function); re-exported here for `rlvr rm`."""

from rlvr.algorithms.preference import bradley_terry_loss, pair_accuracy

__all__ = ["bradley_terry_loss", "pair_accuracy"]
