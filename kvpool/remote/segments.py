"""How one call's keys are cut into round trips that each stay in one cluster slot.

A prefix's keys share a hash tag per segment of ``SEGMENT_BLOCKS`` blocks (``keys.py``), so a
script or an MGET over one segment's keys never gets CROSSSLOT. The probe runs one script per
segment, all at once (one round trip of latency; redis-py sends each to its slot's node), and
adds the runs up to the first segment that was not whole: a prefix is usable up to its first
hole. A get's MGETs are split on segment borders, and a segment further when there are fewer
segments than parts wanted (``GET_PARTS``: checks overlap reads, ``redis_tier.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from kvpool.remote.keys import segment_of


def segments(keys: Sequence[str]) -> list[list[str]]:
    """``keys`` in runs of consecutive keys with the same hash tag, in order."""
    out: list[list[str]] = []
    last = None
    for k in keys:
        tag = segment_of(k)
        if tag != last:
            out.append([])
            last = tag
        out[-1].append(k)
    return out


def probe_plan(refresh: Sequence[str], keys: Sequence[str]) -> list[tuple[list[str], int]]:
    """(keys of one script, how many of them lead as refresh-only) per segment of
    ``refresh + keys``: the probe script TOUCHes the first ones uncounted."""
    skip = len(refresh)
    plan = []
    for seg in segments(list(refresh) + list(keys)):
        lead = min(skip, len(seg))
        skip -= lead
        plan.append((seg, lead))
    return plan


def leading_run(plan: Sequence[tuple[list[str], int]], runs: Sequence[int | None]) -> int:
    """The probed keys' leading run from each segment's run (None: that script failed)."""
    n = 0
    for (seg, lead), run in zip(plan, runs):
        if run is None:
            break
        n += run
        if run < len(seg) - lead:
            break
    return n


def parts(keys: list[str], n: int) -> list[list[str]]:
    """``keys`` in at least ``min(n, len(keys))`` contiguous parts, each inside one segment:
    every segment is split into near-equal parts so the total is about ``n``."""
    segs = segments(keys)
    out: list[list[str]] = []
    for seg in segs:
        out += _even(seg, -(-n * len(seg) // len(keys)) if keys else 1)
    return out


def _even(keys: list[str], n: int) -> list[list[str]]:
    """``keys`` in ``n`` contiguous, near-equal parts (fewer when there are fewer keys)."""
    n = max(1, min(n, len(keys)))
    q, r = divmod(len(keys), n)
    out, i = [], 0
    for j in range(n):
        k = q + (j < r)
        out.append(keys[i:i + k])
        i += k
    return out
