"""bench/policies.py's generated traces (seeded, in memory, never written to disk), each shaped
to stress a different assumption; bench.policies replays them by name (``GENERATED``)."""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Callable

Trace = list[list[int]]


def zipf_prefix(seed: int = 1, requests: int = 8000, prefixes: int = 2000) -> Trace:
    """Popular shared prefixes (4..32 blocks, Zipf(1) over 2000) plus a unique 1..16 tail."""
    rng = random.Random(seed)
    ids = itertools.count()
    pre = [[next(ids) for _ in range(rng.randint(4, 32))] for _ in range(prefixes)]
    cdf = list(itertools.accumulate(1.0 / (r + 1) for r in range(prefixes)))
    out = []
    for _ in range(requests):
        p = pre[min(bisect.bisect_left(cdf, rng.random() * cdf[-1]), prefixes - 1)]
        out.append(p + [next(ids) for _ in range(rng.randint(1, 16))])
    return out


def multiturn(seed: int = 2, requests: int = 10000, active: int = 300,
              mean_turns: float = 5.0) -> Trace:
    """300 concurrent sessions (a shared system block, then 3..30 blocks); each request is the
    next turn of a random session: the previous turn's ids plus 1..8 new blocks. Sessions end
    after a geometric number of turns and are replaced."""
    rng = random.Random(seed)
    ids = itertools.count(1)

    def new() -> list:
        turns = 1 + int(rng.expovariate(1 / (mean_turns - 1)))
        return [[0] + [next(ids) for _ in range(rng.randint(3, 30))], turns]

    sessions = [new() for _ in range(active)]
    out = []
    for _ in range(requests):
        i = rng.randrange(active)
        s = sessions[i]
        out.append(list(s[0]))
        s[1] -= 1
        if s[1] <= 0:
            sessions[i] = new()
        else:
            s[0] = s[0] + [next(ids) for _ in range(rng.randint(1, 8))]
    return out


def scan_mix(seed: int = 3, requests: int = 6000, hot: int = 300,
             scan_frac: float = 0.3) -> Trace:
    """70%: one of 300 hot prefixes (8..24 blocks); 30%: a one-off scan of 32..160 blocks."""
    rng = random.Random(seed)
    ids = itertools.count()
    hot_p = [[next(ids) for _ in range(rng.randint(8, 24))] for _ in range(hot)]
    out = []
    for _ in range(requests):
        if rng.random() < scan_frac:
            out.append([next(ids) for _ in range(rng.randint(32, 160))])
        else:
            out.append(list(rng.choice(hot_p)))
    return out


def uniform(seed: int = 4, requests: int = 8000, docs: int = 6000) -> Trace:
    """A uniformly chosen document (1..48 blocks), a uniformly random-length prefix of it."""
    rng = random.Random(seed)
    ids = itertools.count()
    d = [[next(ids) for _ in range(rng.randint(1, 48))] for _ in range(docs)]
    out = []
    for _ in range(requests):
        x = rng.choice(d)
        out.append(x[:rng.randint(1, len(x))])
    return out


GENERATED: dict[str, Callable[[], Trace]] = {
    "zipf_prefix": zipf_prefix, "multiturn": multiturn, "scan_mix": scan_mix,
    "uniform": uniform,
}
