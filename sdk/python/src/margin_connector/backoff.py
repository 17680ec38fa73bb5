"""The pause before linking again after a failed or ended link.

Doubling from 250 ms to 30 s, with jitter so a fleet of machines dropped at
once does not come back at once (the Rust and TypeScript SDKs' `backoff`).
"""

from __future__ import annotations

import random as _random
from collections.abc import Callable

# The first pause before linking again, in seconds.
FIRST_PAUSE = 0.25
# The longest pause between attempts to link again, in seconds.
MAX_PAUSE = 30.0


def backoff(failures: int, random: Callable[[], float] = _random.random) -> float:
    """The pause after `failures` failed attempts in a row, in seconds.

    250 ms × 2^failures, at most 30 s, then moved by up to a quarter either way.
    """
    base = min(FIRST_PAUSE * 2 ** min(failures, 8), MAX_PAUSE)
    return base * (0.75 + random() * 0.5)
