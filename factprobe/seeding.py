"""Seeds that are equal in every process: every random draw of factprobe starts here.

`stable_seed(*parts)` hashes its parts (joined by `str` with a unit separator) with sha256, so the
same parts give the same 64-bit seed on every machine and Python run, unlike the salted `hash()`.
Callers pass the run's seed plus names that say what is drawn (e.g. `(seed, "trex_mc", relation,
fact_id)`), so one draw never depends on another.
"""

from __future__ import annotations

import hashlib
import random


def stable_seed(*parts: object) -> int:
    """A 64-bit seed from `parts` via sha256: equal in every process (unlike `hash()`)."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big")


def stable_rng(*parts: object) -> random.Random:
    """A `random.Random` seeded with `stable_seed(*parts)`."""
    return random.Random(stable_seed(*parts))
