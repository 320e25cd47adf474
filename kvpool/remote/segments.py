"""How one call's keys are cut into round trips that each stay in one cluster slot.

A prefix's keys share a hash tag per segment of ``SEGMENT_BLOCKS`` blocks (``keys.py``), so a
script or an MGET over one segment's keys never gets CROSSSLOT. The probe runs one script per
segment, all at once (one round trip of latency; redis-py sends each to its slot's node), and
adds the runs up to the first segment that was not whole: a prefix is usable up to its first
hole. A get's MGETs are split on segment borders, and a segment further when there are fewer
segments than parts wanted (``GET_PARTS``: checks overlap reads, ``redis_tier.py``).

NOTE(segment-size): 64 blocks (1024 tokens at block size 16). The probe's cost on a cluster is
redis-py's cluster client, on the CPU (~0.16 ms a command here), not the network: two scripts
cost about twice one, in parallel or not. With 32-block segments a 64-key probe was 2.5x
[1.9-3.1] the single server's p50; with 64 one script serves it (bench.remote --cluster).
A prefix still spreads: each prompt's root picks its own slots.

One server (or a Sentinel-managed master) has no slots: ``by_slot=False`` keeps one script
per probe and parts cut anywhere, as before the tags (the same keys, fewer round trips).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from kvpool.remote.keys import segment_of

T = TypeVar("T")

# NOTE(probe): TOUCH both answers "exists?" and refreshes the LRU clock (EXISTS does not), so
# one call per key walks the run and refreshes it. The script stops at the first miss: a
# prefix is only usable up to its first hole. The first ARGV[1] keys are the chain's head the
# caller holds locally: refreshed whatever their state, not counted (NOTE(chain-lru)).
# A key of another type (a LIST where a value belongs: nothing of ours writes one) would
# count as present here, read as nil by MGET and never be replaced (SET NX): the probe stops
# there and deletes it, so the prefix heals on the next write. So does a string longer than
# ARGV[2] bytes (the codec's largest value; 0: unchecked), which the request's MGET would read
# whole, past its deadline (a timeout opens the breaker for every key), on every request for
# that prefix. So does an empty string, which the get's GETRANGE reads as a missing key
# (NOTE(bounded-get)). STRLEN is a pcall: a user of an older ACL line without +strlen still
# probes.
PROBE_LUA = """
local skip = tonumber(ARGV[1]) or 0
local most = tonumber(ARGV[2]) or 0
for i = 1, skip do redis.call('TOUCH', KEYS[i]) end
local n = 0
for i = skip + 1, #KEYS do
  local kind = redis.call('TYPE', KEYS[i])['ok']
  local len = kind == 'string' and redis.pcall('STRLEN', KEYS[i])
  if kind ~= 'string' or len == 0 or (most > 0 and type(len) == 'number' and len > most) then
    if kind ~= 'none' then redis.call('DEL', KEYS[i]) end
    break
  end
  redis.call('TOUCH', KEYS[i])
  n = i - skip
end
return n
"""


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


def probe_plan(refresh: Sequence[str], keys: Sequence[str], by_slot: bool = True
               ) -> list[tuple[list[str], int]]:
    """(keys of one script, how many of them lead as refresh-only) per segment of
    ``refresh + keys`` (one script for them all unless ``by_slot``): the probe script
    TOUCHes the first ones uncounted."""
    skip = len(refresh)
    if not by_slot:
        return [(list(refresh) + list(keys), skip)]
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


def parts(keys: list[str], n: int, by_slot: bool = True) -> list[list[str]]:
    """``keys`` in contiguous parts, each inside one segment when ``by_slot``: ``n`` of them
    (fewer with fewer keys), shared among the segments by size; one per segment when there
    are more than ``n`` segments (an MGET never spans two slots)."""
    if not by_slot:
        return _even(keys, n)
    segs = segments(keys)
    if not segs:
        return []
    counts = [max(1, len(seg) * n // len(keys)) for seg in segs]
    while sum(counts) < min(n, len(keys)):
        i = max(range(len(segs)), key=lambda j: len(segs[j]) / counts[j])
        counts[i] += 1
    return [p for seg, c in zip(segs, counts) for p in _even(seg, c)]


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


async def all_at_once(calls: Sequence[Callable[[], Awaitable[T]]]) -> list[T]:
    """Every call at once (one round trip of latency), results in order; the first failure
    cancels the others and is raised as itself (the tier classifies one exception, not a
    group)."""
    if len(calls) == 1:
        return [await calls[0]()]
    try:
        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(c()) for c in calls]
    except BaseExceptionGroup as eg:
        first = eg.exceptions[0]
    else:
        return [t.result() for t in tasks]
    # raised outside the except: "from None" there erased its __cause__, the chain classify
    # reads (the cluster client's "cannot be connected" from a seed's InvalidResponse was
    # "Redis answered an error", NOTE(cluster-seed))
    raise first
