"""Instant replay: pure cache-policy replay of a trace through the real BlockPool.

Semantics (docs/benchmarks.md "Trace replay"; one pool block per trace hash id,
capacity ``C`` blocks, block size irrelevant), for each request in arrival order (read_trace's,
NOTE(time-order) in trace.py)::

    hits += length of the leading run of its hash_ids currently cached
    for h in reversed(hash_ids):          # tail first: the head ends most recently used
        if h is cached in block b:  acquire b, release b     (the policy sees remove + insert)
        else:                       b = allocate (free list first, else the policy evicts)
                                    register b under digest(h), release b
    hit_rate = hits / total hash ids

The pool's writer-section primitives are used under one ``with pool.writing():`` per request,
which is how the BlockSpaceManager itself drives them. Time is logical (the request index), so a
replay is deterministic for time-aware policies too.
"""

from __future__ import annotations

from collections.abc import Callable

from kvpool.core import BlockPool, Device
from kvpool.replay.loop import replay
from kvpool.replay.report import Timeline
from kvpool.replay.trace import TraceRequest


def digest(hash_id: int) -> bytes:
    """The cache key of one trace block (fixed-width, so distinct ids never collide)."""
    return hash_id.to_bytes(8, "little")


class InstantReplay:
    """Hit rate of one eviction policy at one capacity.

    Invariant: after each request the pool holds no referenced block (everything touched is
    released again), so ``num_cached <= capacity`` and the policy holds every cached block.
    """

    def __init__(self, capacity_blocks: int, policy: str = "lru") -> None:
        if capacity_blocks < 1:
            raise ValueError("--capacity-blocks must be >= 1")
        self.capacity = capacity_blocks  # pool blocks (= trace blocks held)
        self.policy_name = policy  # eviction policy name (kvpool.core.eviction)
        self.pool = BlockPool(Device.DEVICE, capacity_blocks, 1, caching=True, policy=policy)
        self.index = self.pool.index  # the pool's prefix index (caching is on)
        self.hits = 0  # leading-run hits so far
        self.blocks = 0  # trace blocks seen so far
        self.requests = 0  # requests replayed so far

    def step(self, hash_ids: tuple[int, ...] | list[int]) -> int:
        """Replay one request through the one instant-replay loop; returns its hits."""
        with self.pool.writing():
            k, n = replay((hash_ids,), self)
        self.blocks += n
        self.hits += k
        self.requests += 1
        return k

    # the ReplayCache side (kvpool.replay.loop): called by ``replay`` inside step
    def __contains__(self, h: int) -> bool:
        return self.index.lookup(digest(h)) is not None

    def touch(self, h: int, depth: int, n: int) -> None:
        """A cached block is acquired and released (the policy sees remove + insert); a new
        one is taken (free list first, else the policy evicts) and registered, then released."""
        pool = self.pool
        key = digest(h)
        b = self.index.lookup(key)
        if b is not None:
            pool.acquire_blocks((b,))
        else:
            got = pool.take(1)
            if got is None:  # every block referenced: impossible, all are released
                raise RuntimeError("instant replay: pool exhausted")
            b = got[0]
            self.index.register_block(b, key, depth)
        pool.release((b,), float(self.requests))

    @property
    def hit_rate(self) -> float:
        return self.hits / self.blocks if self.blocks else 0.0

    def run(self, reqs: list[TraceRequest], progress: Callable[[int], None] | None = None,
            samples: int = 500) -> dict:
        """Replay ``reqs`` in order; returns the JSON report."""
        tl = Timeline()
        every = max(1, len(reqs) // samples)
        for i, r in enumerate(reqs):
            self.step(r.hash_ids)
            if (i + 1) % every == 0 or i + 1 == len(reqs):
                tl.add(i + 1, self.hit_rate, self.index.num_cached / self.capacity)
                if progress is not None:
                    progress(i + 1)
        st = self.pool.stats()
        return {"mode": "instant", "policy": self.policy_name,
                "capacity_blocks": self.capacity, "requests": self.requests,
                "blocks": self.blocks, "hits": self.hits, "hit_rate": round(self.hit_rate, 6),
                "evictions": st.evictions, "cached_blocks": st.num_cached,
                "timeline": tl.downsample()}
