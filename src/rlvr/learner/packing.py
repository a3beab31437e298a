"""Token-budget micro-batching: cut a mini-batch into micro-batches by padded tokens, not by row count.

A micro-batch runs padded to its longest row (`Batch.select` trims the columns that are padding in every
selected row), so its cost is rows x longest row. Sorting by length before cutting puts rows of similar
length together and bounds each micro-batch's padded size by a token budget:

    cost(micro-batch) = len(rows) * max(length[r] for r in rows)  <=  max_tokens

Whole groups stay together (losses with group statistics, e.g. PACS, need complete groups), so the unit
that is sorted and packed is a group, with the group's longest row as its length. A single group costlier
than the budget is a micro-batch by itself. The loss is normalised by mini-batch totals (see
`Learner.update`), so how rows are cut into micro-batches changes only the floating-point summation order
of the gradient, never its value.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def row_lengths(attention_mask: torch.Tensor) -> torch.Tensor:
    """[B] tokens each row runs on (prompt + response, padding excluded)."""
    return attention_mask.sum(dim=1)


def padded_cost(rows: torch.Tensor, lengths: torch.Tensor) -> int:
    """Tokens a micro-batch of `rows` runs on once padded to its longest row."""
    if rows.numel() == 0:
        return 0
    return int(rows.numel() * int(lengths[rows].max()))


def pack_by_tokens(units: Sequence[torch.Tensor], lengths: torch.Tensor, max_tokens: int,
                   max_rows: int | None = None) -> list[torch.Tensor]:
    """Pack `units` (tensors of row indices that must stay together) into micro-batches of at most
    `max_tokens` padded tokens (and at most `max_rows` rows, if given), after sorting the units by their
    longest row. Returns the micro-batches' row indices, shortest rows first."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    lengths = lengths.cpu()
    longest = [int(lengths[u].max()) if u.numel() else 0 for u in units]
    order = sorted(range(len(units)), key=lambda i: (longest[i], i))
    out: list[torch.Tensor] = []
    current: list[torch.Tensor] = []
    rows = 0
    for i in order:
        unit = units[i]
        if unit.numel() == 0:
            continue
        # Sorted ascending, so the newcomer is the longest: the padded cost is (rows + its rows) * its length.
        new_rows = rows + unit.numel()
        too_many = max_rows is not None and new_rows > max_rows
        if current and (new_rows * longest[i] > max_tokens or too_many):
            out.append(torch.cat(current))
            current, new_rows = [], unit.numel()
        current.append(unit)
        rows = new_rows
    if current:
        out.append(torch.cat(current))
    return out


def group_token_micro_batches(rows: torch.Tensor, group_ids: torch.Tensor, lengths: torch.Tensor,
                              max_tokens: int, max_rows: int | None = None) -> list[torch.Tensor]:
    """Micro-batches of a mini-batch's `rows` (indices into the batch) by padded-token budget, whole groups
    together: the drop-in replacement for the row-count cut in `Learner._split`."""
    group_ids = group_ids.cpu()
    rows = rows.cpu()
    units = [rows[group_ids[rows] == g] for g in torch.unique(group_ids[rows], sorted=True).tolist()]
    return pack_by_tokens(units, lengths, max_tokens, max_rows)


def row_token_micro_batches(num_rows: int, lengths: torch.Tensor, max_tokens: int,
                            max_rows: int | None = None) -> list[torch.Tensor]:
    """Micro-batches of all rows by padded-token budget, rows sorted by length (no group constraint): for
    no-grad passes such as old/reference log-probs and values."""
    return pack_by_tokens(list(torch.arange(num_rows)[:, None]), lengths, max_tokens, max_rows)


def padding_report(micro_batches: Sequence[torch.Tensor], lengths: torch.Tensor) -> dict[str, float]:
    """Real tokens, padded tokens run and the padding fraction of a micro-batch plan."""
    lengths = lengths.cpu()
    real = sum(int(lengths[mb].sum()) for mb in micro_batches)
    padded = sum(padded_cost(mb, lengths) for mb in micro_batches)
    return {"micro_batches": float(len(micro_batches)), "real_tokens": float(real),
            "padded_tokens": float(padded), "padding_frac": 1.0 - real / max(padded, 1)}


def group_mini_batches(group_ids: torch.Tensor, lengths: torch.Tensor, order: torch.Tensor, mini_batches: int,
                       micro_batch_size: int, micro_batch_tokens: int | None, keep_empty: bool = False,
                       ) -> list[tuple[torch.Tensor, list[torch.Tensor]]]:
    """Mini-batches of whole groups, taken from `order` (a permutation of the group ids) in `mini_batches`
    slices, each cut into micro-batches of whole groups holding at most `micro_batch_size` rows (a bigger group
    is one micro-batch), or, with `micro_batch_tokens`, at most that many padded tokens (groups sorted by length
    first, so little compute goes to padding). Groups never straddle a boundary, so losses with group
    statistics (PACS) see complete groups. An empty slice is kept (as no rows) when `keep_empty`: data-parallel
    ranks must all take the same number of optimizer steps. Returns (rows of the mini-batch, its micro-batches)."""
    rows_of = [torch.nonzero(group_ids == g).squeeze(1) for g in range(len(order))]
    out: list[tuple[torch.Tensor, list[torch.Tensor]]] = []
    for groups in torch.tensor_split(order, mini_batches):
        if groups.numel() == 0:
            if keep_empty:
                out.append((torch.zeros(0, dtype=torch.long), []))
            continue
        if micro_batch_tokens is not None:  # by padded tokens, similar lengths together
            sel = torch.cat([rows_of[g] for g in groups.tolist()])
            micro = group_token_micro_batches(sel, group_ids, lengths, micro_batch_tokens, micro_batch_size)
            out.append((torch.cat(micro), micro))
            continue
        micro = []
        current: list[torch.Tensor] = []
        for g in groups.tolist():
            if current and sum(len(r) for r in current) + len(rows_of[g]) > micro_batch_size:
                micro.append(torch.cat(current))
                current = []
            current.append(rows_of[g])
        micro.append(torch.cat(current))
        out.append((torch.cat(micro), micro))
    return out
