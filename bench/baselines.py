"""bench/baselines.py: classic cache-eviction policies, for bench.policies to compare against.

Each baseline is keyed by hash id (it never sees block ids) and has one call, ``access(h)``:
``h`` is used now and is cached afterwards, evicting as needed; ``h in cache`` tells whether it
is cached. ``replay`` drives one through the product's instant-replay loop
(``kvpool.replay.loop``, the loop ``simulate`` runs): a request hits the leading run
of its cached ids, then its ids are accessed tail first. Every id a request uses enters the
cache (its block is in use, so an admission filter can only choose what leaves, never refuse
what arrives).

Written from the papers' descriptions, sized with the papers' defaults:

    SIEVE     Zhang et al., NSDI'24: one FIFO, a visited bit, a hand that sweeps old to new
    S3-FIFO   Yang et al., SOSP'23: small FIFO (10%), main FIFO (90%), ghost FIFO of ids;
              two variants: move to main after 2 more uses in S (s3fifo) or after 1 (s3fifo1)
    ARC       Megiddo & Modha, FAST'03: T1/T2 resident, B1/B2 ghosts, adaptive target p
    SLRU      Karedla et al. 1994: probation (20%) and protected (80%) LRU segments
    W-TinyLFU Einziger et al., ToS'17 (Caffeine): 1% LRU window, SLRU main, frequency
              admission from window to main; counts aged by halving every 10 x capacity
              accesses. Counts are exact (a dict), an upper bound on what a sketch gives.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence

from kvpool.replay.loop import replay as replay_loop


class Baseline:
    """A hash-keyed cache of ``capacity`` ids (subclasses keep ``len(self) <= capacity``)."""

    name = "baseline"

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity={capacity}: a cache needs at least one entry")
        self.capacity = capacity

    def access(self, h: int) -> None:
        raise NotImplementedError

    def on_evict(self, h: int) -> None:
        """``h`` left the cache (an eviction). A no-op here; bench/follow.py sets it per
        instance to learn which ids an expert evicts."""

    def touch(self, h: int, depth: int, n: int) -> None:
        """The replay loop's call: a baseline sees only the id (no depth, no block)."""
        self.access(h)

    def __contains__(self, h: int) -> bool:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError


def replay(requests: Iterable[Sequence[int]], cache: Baseline) -> tuple[int, int]:
    """(hits, blocks) of ``requests`` through ``cache``: the product's loop, as ``simulate``."""
    return replay_loop(requests, cache)


class LRU(Baseline):
    """Plain LRU: the cross-check that ``replay`` and ``simulate`` agree."""

    name = "lru"

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.q: OrderedDict[int, None] = OrderedDict()  # oldest first

    def access(self, h: int) -> None:
        q = self.q
        if h in q:
            q.move_to_end(h)
            return
        if len(q) >= self.capacity:
            self.on_evict(q.popitem(last=False)[0])
        q[h] = None

    def __contains__(self, h: int) -> bool:
        return h in self.q

    def __len__(self) -> int:
        return len(self.q)


class SIEVE(Baseline):
    """One FIFO (insertion order, never reordered) and a visited bit per entry. The hand walks
    from the oldest entry towards the newest, clearing visited bits, and evicts the first entry
    it finds unvisited; it stays where it stopped, wrapping to the oldest at the end."""

    name = "sieve"

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.visited: dict[int, bool] = {}  # insertion order = FIFO order (oldest first)
        self.newer: dict[int, int | None] = {}  # id -> the next newer id (None: the newest)
        self.older: dict[int, int | None] = {}  # id -> the next older id (None: the oldest)
        self.head: int | None = None  # newest
        self.tail: int | None = None  # oldest
        self.hand: int | None = None  # None: start from the oldest

    def access(self, h: int) -> None:
        if h in self.visited:
            self.visited[h] = True
            return
        if len(self.visited) >= self.capacity:
            self._evict()
        self.visited[h] = False
        self.older[h], self.newer[h] = self.head, None
        if self.head is not None:
            self.newer[self.head] = h
        self.head = h
        if self.tail is None:
            self.tail = h

    def _evict(self) -> None:
        x = self.hand if self.hand is not None else self.tail
        while self.visited[x]:
            self.visited[x] = False
            x = self.newer[x]
            if x is None:
                x = self.tail
        self.hand = self.newer[x]
        o, n = self.older.pop(x), self.newer.pop(x)
        if o is None:
            self.tail = n
        else:
            self.newer[o] = n
        if n is None:
            self.head = o
        else:
            self.older[n] = o
        del self.visited[x]
        self.on_evict(x)

    def __contains__(self, h: int) -> bool:
        return h in self.visited

    def __len__(self) -> int:
        return len(self.visited)


class S3FIFO(Baseline):
    """Small FIFO S (10% of capacity) for new ids, main FIFO M for ids used again, ghost G of
    ids recently evicted from S (as many as M holds). A hit only bumps a 2-bit count. An id
    leaving S with count >= 2 moves to M, else it is evicted into G; an id in G comes back
    straight into M. M is a FIFO with reinsertion: a head with count > 0 goes back with count
    - 1."""

    name = "s3fifo"
    SMALL = 0.1
    PROMOTE = 2  # the paper's "freq > 1"

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.small_cap = max(1, int(self.SMALL * capacity))
        self.ghost_cap = max(1, capacity - self.small_cap)
        self.freq: dict[int, int] = {}  # resident id -> count (0..3)
        self.s: OrderedDict[int, None] = OrderedDict()  # oldest first
        self.m: OrderedDict[int, None] = OrderedDict()  # oldest first
        self.g: OrderedDict[int, None] = OrderedDict()  # oldest first

    def access(self, h: int) -> None:
        f = self.freq.get(h)
        if f is not None:
            self.freq[h] = min(f + 1, 3)
            return
        if len(self.freq) >= self.capacity:
            self._evict()
        self.freq[h] = 0
        if h in self.g:  # evicted from S not long ago: used again, so it goes to M
            del self.g[h]
            self.m[h] = None
        else:
            self.s[h] = None

    def _evict(self) -> None:
        while True:  # until one id leaves the cache
            if len(self.s) >= self.small_cap or not self.m:
                h, _ = self.s.popitem(last=False)
                if self.freq[h] >= self.PROMOTE:
                    self.freq[h] = 0
                    self.m[h] = None
                    continue
                del self.freq[h]
                self.on_evict(h)
                self.g[h] = None
                if len(self.g) > self.ghost_cap:
                    self.g.popitem(last=False)
                return
            h, _ = self.m.popitem(last=False)
            if self.freq[h] > 0:
                self.freq[h] -= 1
                self.m[h] = None
                continue
            del self.freq[h]
            self.on_evict(h)
            return

    def __contains__(self, h: int) -> bool:
        return h in self.freq

    def __len__(self) -> int:
        return len(self.freq)


class S3FIFO1(S3FIFO):
    """S3-FIFO with move-to-main threshold 1: an id leaving S goes to M if it was used again
    at all while in S (the reading of "freq > 0" some implementations take); the default
    S3FIFO above needs two further uses."""

    name = "s3fifo1"
    PROMOTE = 1


class ARC(Baseline):
    """T1 (seen once recently) and T2 (seen at least twice) are resident LRU lists; B1 and B2
    remember the ids evicted from each. A miss found in B1 grows T1's target size p, one found
    in B2 shrinks it; eviction takes T1's LRU end while T1 is above p, else T2's."""

    name = "arc"

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.p = 0.0  # target size of T1
        self.t1: OrderedDict[int, None] = OrderedDict()  # LRU first
        self.t2: OrderedDict[int, None] = OrderedDict()
        self.b1: OrderedDict[int, None] = OrderedDict()
        self.b2: OrderedDict[int, None] = OrderedDict()

    def _replace(self, in_b2: bool) -> None:
        t1 = len(self.t1)
        if t1 and (t1 > self.p or (in_b2 and t1 == self.p)) or not self.t2:
            h, _ = self.t1.popitem(last=False)
            self.b1[h] = None
        else:
            h, _ = self.t2.popitem(last=False)
            self.b2[h] = None
        self.on_evict(h)

    def access(self, h: int) -> None:
        c = self.capacity
        if h in self.t1:
            del self.t1[h]
            self.t2[h] = None
            return
        if h in self.t2:
            self.t2.move_to_end(h)
            return
        full = len(self.t1) + len(self.t2) >= c
        if h in self.b1:
            self.p = min(c, self.p + max(len(self.b2) / len(self.b1), 1.0))
            del self.b1[h]
            if full:
                self._replace(False)
            self.t2[h] = None
            return
        if h in self.b2:
            self.p = max(0.0, self.p - max(len(self.b1) / len(self.b2), 1.0))
            del self.b2[h]
            if full:
                self._replace(True)
            self.t2[h] = None
            return
        if len(self.t1) + len(self.b1) >= c:
            if len(self.t1) < c:
                self.b1.popitem(last=False)
                if full:
                    self._replace(False)
            else:
                self.on_evict(self.t1.popitem(last=False)[0])
        elif full:
            if len(self.t1) + len(self.t2) + len(self.b1) + len(self.b2) >= 2 * c:
                self.b2.popitem(last=False)
            self._replace(False)
        self.t1[h] = None

    def __contains__(self, h: int) -> bool:
        return h in self.t1 or h in self.t2

    def __len__(self) -> int:
        return len(self.t1) + len(self.t2)


class SLRU(Baseline):
    """New ids enter probation (LRU); a hit there promotes to protected (LRU, 80% of the
    capacity), whose overflow is demoted back to probation's MRU end. Eviction takes
    probation's LRU end (protected's when probation is empty)."""

    name = "slru"
    PROTECTED = 0.8

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.prot_cap = int(self.PROTECTED * capacity)
        self.prob: OrderedDict[int, None] = OrderedDict()  # LRU first
        self.prot: OrderedDict[int, None] = OrderedDict()

    def access(self, h: int) -> None:
        if h in self.prot:
            self.prot.move_to_end(h)
            return
        if h in self.prob:
            del self.prob[h]
            self.prot[h] = None
            if len(self.prot) > self.prot_cap:
                self.prob[self.prot.popitem(last=False)[0]] = None
            return
        if len(self.prob) + len(self.prot) >= self.capacity:
            self.on_evict((self.prob or self.prot).popitem(last=False)[0])
        self.prob[h] = None

    def __contains__(self, h: int) -> bool:
        return h in self.prob or h in self.prot

    def __len__(self) -> int:
        return len(self.prob) + len(self.prot)


class AgingCounts:
    """TinyLFU's exact access counts: every count halves once per ``period`` accesses (ids
    that reach 0 are dropped), so the counts follow what is popular now."""

    def __init__(self, period: int) -> None:
        self.period = period
        self.left = period  # accesses until the next halving
        self.counts: dict[int, int] = {}

    def add(self, h: int) -> None:
        self.counts[h] = self.counts.get(h, 0) + 1
        self.left -= 1
        if not self.left:
            self.left = self.period
            self.counts = {k: v >> 1 for k, v in self.counts.items() if v > 1}

    def get(self, h: int) -> int:
        return self.counts.get(h, 0)


class WTinyLFU(Baseline):
    """A 1% LRU window in front of an SLRU main cache (probation 20%, protected 80% of it).
    Every access counts the id; when the window overflows its LRU id (the candidate) enters
    main if main has room, else it duels main's next victim (probation's LRU end) and the one
    used more often recently stays. Counts halve every ``10 * capacity`` accesses."""

    name = "wtinylfu"
    WINDOW = 0.01
    SAMPLE = 10

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.win_cap = max(1, int(self.WINDOW * capacity))
        # a 1-entry cache is all window (main would have no room)
        self.main = SLRU(capacity - self.win_cap) if capacity > self.win_cap else None
        self.win: OrderedDict[int, None] = OrderedDict()  # LRU first
        self.freq = AgingCounts(self.SAMPLE * capacity)

    def access(self, h: int) -> None:
        self.freq.add(h)
        if h in self.win:
            self.win.move_to_end(h)
            return
        main = self.main
        if main is not None and h in main:
            main.access(h)
            return
        self.win[h] = None
        if len(self.win) <= self.win_cap:
            return
        cand, _ = self.win.popitem(last=False)
        if main is None:
            self.on_evict(cand)
            return
        if len(main) < main.capacity:
            main.access(cand)
            return
        victims = main.prob or main.prot
        victim = next(iter(victims))
        if self.freq.get(cand) > self.freq.get(victim):
            del victims[victim]
            main.access(cand)
            self.on_evict(victim)
        else:
            self.on_evict(cand)

    def __contains__(self, h: int) -> bool:
        return h in self.win or (self.main is not None and h in self.main)

    def __len__(self) -> int:
        return len(self.win) + (len(self.main) if self.main is not None else 0)


BASELINES: dict[str, type[Baseline]] = {
    b.name: b for b in (SIEVE, S3FIFO, S3FIFO1, ARC, SLRU, WTinyLFU)}
