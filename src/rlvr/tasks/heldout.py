"""Held out by construction: whether a procedural problem is held out is a property of the problem itself.

A problem's canonical form (the part that makes two problems the same, e.g. countdown's sorted numbers and
target) is hashed with a fixed key per task family. The hash, read as a number in [0, 1), is the problem's
*held-out score*; a problem whose score is below the family's held-out share is in the held-out pool:

    held_out(family, canonical) = blake2b(canonical, key="rlvr-held-out-v1/" + family) / 2**64 < share

The held-out split is drawn only from the pool and every training split only from outside it. So no task
variant (another seed, another size mix, `pair_only` on or off), no build script and no training run can train on
a held-out problem, however its data was drawn: the split is not a record of which problems were drawn first.
The key is versioned: changing it (or a family's share) changes every held-out set of that family, and every
result measured on one.
"""

from __future__ import annotations

import hashlib

HELD_OUT_KEY = "rlvr-held-out-v1"


def held_out_score(family: str, canonical: str) -> float:
    """The problem's place in [0, 1): a keyed BLAKE2b hash of its canonical form, uniform over problems."""
    key = f"{HELD_OUT_KEY}/{family}".encode()[:64]
    digest = hashlib.blake2b(canonical.encode(), key=key, digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def is_held_out(family: str, canonical: str, share: float) -> bool:
    """True when the problem belongs to `family`'s held-out pool (a `share` of all its problems)."""
    if not 0.0 < share < 1.0:
        raise ValueError(f"held-out share must be in (0, 1); got {share}")
    return held_out_score(family, canonical) < share
