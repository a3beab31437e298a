"""A bounded cache of token-prefix KV for the fast engine, reused across `generate` calls.

Tree search asks the engine for continuations of prompt + a node's response, and a child's prompt extends its
parent's: without a cache every call prefills its whole prefix again. With one, the engine stores the per-layer
K/V of every row it decoded (prompt + response, all positions that were fed through the model) keyed by those
token ids, and a later call prefills only the tokens after the longest common prefix with a stored entry:

    reuse(q) = max over entries e of lcp(q, key(e)),  capped at len(q) - 1
               (the K/V at position i depends only on tokens 0..i, so an entry whose key diverges from q after j
               tokens still serves q's first j positions; one token is always run, for the next-token logits)

Bounded by bytes and by entry count; least recently used (stored or served) entries are evicted first. An entry
whose key is a prefix of a stored key adds nothing and is not stored; a stored key that is a prefix of a new key
is dropped. The cache does not know about weights: the engine clears it when the weights change (see
`FastEngine.prefix_cache`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import torch

DEFAULT_MAX_ENTRIES = 256


def common_prefix_len(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """The number of leading tokens `a` and `b` share (binary search over slice equality, C-speed compares)."""
    hi = min(len(a), len(b))
    if a[:hi] == b[:hi]:
        return hi
    lo, hi = 0, hi - 1  # a[:lo] == b[:lo] and a[:hi + 1] != b[:hi + 1]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass
class PrefixCacheStats:
    lookups: int = 0
    hits: int = 0  # lookups that reused at least one position
    reused_tokens: int = 0  # positions served from the cache (not prefilled)
    stored: int = 0
    evicted: int = 0
    cleared: int = 0  # times the whole cache was dropped (weights changed)


class PrefixKVCache:
    """token-id prefix -> K/V [layers, 2, kv_heads, len, head_dim], LRU within `max_bytes` and `max_entries`."""

    def __init__(self, max_bytes: int, max_entries: int = DEFAULT_MAX_ENTRIES):
        if max_bytes <= 0 or max_entries <= 0:
            raise ValueError(f"a prefix cache needs max_bytes > 0 and max_entries > 0; got {max_bytes}, {max_entries}")
        self.max_bytes, self.max_entries = int(max_bytes), int(max_entries)
        self.entries: OrderedDict[tuple[int, ...], torch.Tensor] = OrderedDict()  # oldest first
        self.bytes = 0
        self.stats = PrefixCacheStats()

    def __len__(self) -> int:
        return len(self.entries)

    def lookup(self, ids: Sequence[int], limit: int | None = None) -> tuple[int, torch.Tensor | None]:
        """(n, kv): the most positions of `ids` (at most `limit`) some entry holds, and that entry's K/V (its first n
        positions are `ids[:n]`'s); (0, None) on a miss. The entry becomes the most recently used."""
        query = tuple(int(t) for t in ids)
        cap = len(query) if limit is None else min(limit, len(query))
        best, best_key = 0, None
        for key in self.entries:
            n = common_prefix_len(key, query)
            if n > best:
                best, best_key = n, key
        best = min(best, cap)
        self.stats.lookups += 1
        if best <= 0 or best_key is None:
            return 0, None
        self.entries.move_to_end(best_key)
        self.stats.hits += 1
        self.stats.reused_tokens += best
        return best, self.entries[best_key]

    def insert(self, ids: Sequence[int], kv: torch.Tensor) -> bool:
        """Store `kv` (its length, dim 3, equals len(ids)) under `ids`; False if it was not stored (already covered
        by a longer entry, or larger than the whole budget)."""
        key = tuple(int(t) for t in ids)
        if kv.shape[3] != len(key):
            raise ValueError(f"prefix cache: K/V of {kv.shape[3]} positions for {len(key)} token ids")
        size = kv.numel() * kv.element_size()
        if not key or size > self.max_bytes:
            return False
        for old in list(self.entries):
            n = common_prefix_len(old, key)
            if n == len(key):  # covered by a stored entry: keep that one, mark it used
                self.entries.move_to_end(old)
                return False
            if n == len(old):  # a stored prefix of the new key: superseded
                self._drop(old)
        self.entries[key] = kv
        self.bytes += size
        self.stats.stored += 1
        while self.bytes > self.max_bytes or len(self.entries) > self.max_entries:
            self._drop(next(iter(self.entries)))
            self.stats.evicted += 1
        return True

    def clear(self) -> None:
        if self.entries:
            self.stats.cleared += 1
        self.entries.clear()
        self.bytes = 0

    def _drop(self, key: tuple[int, ...]) -> None:
        kv = self.entries.pop(key)
        self.bytes -= kv.numel() * kv.element_size()
