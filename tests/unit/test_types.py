"""The batch builder: one place turns groups of samples into padded, masked tensors."""

from __future__ import annotations

import pytest
import torch

from rlvr.types import Batch, Group, Sample, TaskRecord


def _group(prompt, responses, advantages, loss_masks=None, logprobs=True):
    samples = []
    for i, (r, a) in enumerate(zip(responses, advantages)):
        samples.append(Sample(prompt_ids=list(prompt), response_ids=list(r),
                              logprobs=[-0.1 * (j + 1) for j in range(len(r))] if logprobs else None,
                              loss_mask=None if loss_masks is None else loss_masks[i], advantage=a))
    return Group(TaskRecord(id="x", question="q"), list(prompt), samples)


def test_padding_masks_and_alignment():
    g1 = _group([5, 6], [[7, 8, 9], [10]], [1.0, -1.0])
    g2 = _group([11], [[12, 13]], [0.5])
    b = Batch.from_groups([g1, g2], pad_id=0)
    assert b.input_ids.tolist() == [[5, 6, 7, 8, 9], [5, 6, 10, 0, 0], [11, 12, 13, 0, 0]]
    assert b.attention_mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 0, 0]]
    # mask marks response tokens only (indexed by the token itself)
    assert b.mask.tolist() == [[0, 0, 1, 1, 1], [0, 0, 1, 0, 0], [0, 1, 1, 0, 0]]
    assert b.advantages[0].tolist() == [0, 0, 1, 1, 1]
    assert b.advantages[1].tolist() == [0, 0, -1, 0, 0]
    assert b.old_logprobs[0].tolist() == pytest.approx([0, 0, -0.1, -0.2, -0.3])
    assert b.group_ids.tolist() == [0, 0, 1]
    assert b.prompt_lengths.tolist() == [2, 2, 1]
    assert b.response_lengths.tolist() == [3, 1, 2]
    assert b.num_tokens == 11


def test_loss_mask_zero_tokens_are_not_trained():
    g = _group([1], [[2, 3, 4]], [1.0], loss_masks=[[1, 0, 1]])
    b = Batch.from_groups([g], pad_id=0)
    assert b.mask.tolist() == [[0, 1, 0, 1]]


def test_per_token_advantages():
    g = _group([1], [[2, 3]], [[0.5, -0.5]])
    b = Batch.from_groups([g], pad_id=0)
    assert b.advantages.tolist() == [[0, 0.5, -0.5]]


def test_missing_logprobs_leave_old_logprobs_unset():
    b = Batch.from_groups([_group([1], [[2]], [1.0], logprobs=False)], pad_id=0)
    assert b.old_logprobs is None


def test_select_trims_trailing_padding():
    g = _group([1, 2], [[3, 4, 5, 6], [7]], [1.0, 1.0])
    b = Batch.from_groups([g], pad_id=0)
    sub = b.select([1])
    assert sub.input_ids.tolist() == [[1, 2, 7]]
    assert sub.mask.shape == (1, 3)
    assert sub.group_ids.tolist() == [0]


def test_bad_inputs_are_rejected():
    # advantages may be left unset: they are computed on the batch afterwards
    assert Batch.from_groups([_group([1], [[2]], [None])], pad_id=0).advantages.abs().sum() == 0
    with pytest.raises(ValueError, match="zero samples"):
        Batch.from_groups([], pad_id=0)
    with pytest.raises(ValueError, match="per-token advantage"):
        Batch.from_groups([_group([1], [[2, 3]], [[1.0]])], pad_id=0)
    with pytest.raises(ValueError, match="loss_mask"):
        Sample(prompt_ids=[1], response_ids=[2, 3], loss_mask=[1])
    with pytest.raises(ValueError, match="logprobs"):
        Sample(prompt_ids=[1], response_ids=[2, 3], logprobs=[0.0])


def test_to_moves_every_tensor():
    b = Batch.from_groups([_group([1], [[2]], [1.0])], pad_id=0).to("cpu")
    assert b.input_ids.device == torch.device("cpu")
