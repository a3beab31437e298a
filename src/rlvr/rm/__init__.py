"""Reward models you train: `rlvr rm` fits a Bradley–Terry reward model on preference pairs (data.py reads or
mines them, loss.py holds the loss, trainer.py the loop); its final/ is what the `reward_model` scorer loads."""

from rlvr.rm.data import PreferencePair, RMDataError, mine_rollout_pairs, read_pairs, split_pairs
from rlvr.rm.loss import bradley_terry_loss, pair_accuracy

__all__ = ["PreferencePair", "RMDataError", "bradley_terry_loss", "mine_rollout_pairs", "pair_accuracy",
           "read_pairs", "split_pairs"]
