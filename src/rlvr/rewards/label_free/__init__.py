"""Label-free rewards: test-time RL and its successors. None of them reads the reference answer.

Answers are taken from each response with the task's `extract_answer` and grouped with its `answers_match`.
When the task does have reference answers, the majority-vote components also report how good their
pseudo-labels are (`label_accuracy`, `reward_accuracy`, `maj_accuracy`) — measured, never trained on.

The components, one family per module: `voting` (ttrl, ttrv), `novelty` (evol_rl), `agreement` (co_reward),
`likelihood` (rlpr, self_certainty), `region` (gui_rcpo: spatial voting on boxes and points).
"""

from rlvr.rewards.label_free.agreement import CrossAgreementReward
from rlvr.rewards.label_free.likelihood import ReferenceProbabilityReward, SelfCertaintyReward
from rlvr.rewards.label_free.novelty import MajorityNoveltyReward
from rlvr.rewards.label_free.region import RegionConsistencyReward, region_cells, region_consistency
from rlvr.rewards.label_free.voting import (
    FrequencyEntropyReward,
    MajorityVoteReward,
    answer_clusters,
    majority,
)

__all__ = [
    "CrossAgreementReward",
    "FrequencyEntropyReward",
    "MajorityNoveltyReward",
    "MajorityVoteReward",
    "ReferenceProbabilityReward",
    "RegionConsistencyReward",
    "SelfCertaintyReward",
    "answer_clusters",
    "majority",
    "region_cells",
    "region_consistency",
]
