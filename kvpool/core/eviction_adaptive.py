"""The adaptive machinery of ClassLRUPolicy (a frequency sketch and a shadow-cache tuner) and
of SessionPolicy (the sketch and a retention planner).

None of them knows block ids: all are keyed by content hash, so history survives block reuse
and eviction, and all are bounded (the sketch is a fixed table; shadows hold a fixed count; the
planner follows a fixed sample of hashes for a bounded age).

How a content hash is spread (``probe``). CRC-32 in C costs ~1/3 of one 64-bit big-int
multiply chain in CPython, and it is deterministic (Python's ``hash()`` is salted per process)::

    c = crc32(hash)                         32 bits; SHA-256 digests or small test ints alike
    i = c & (2**b - 1)                      sketch row 1 (b = log2 of the sketch size)
    j = (c * GOLDEN32 mod 2**32) >> (32-b)  sketch row 2 (Fibonacci hashing of c)
    sample key = c >> 12                    20 bits: a fixed slice of hash space is simulated
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Sequence
from zlib import crc32

import numpy as np

from kvpool.errors import InvariantError

GOLDEN32 = 0x9E3779B1  # 2**32 / golden ratio, odd
_HALVE = bytes(i >> 1 for i in range(256))
SATURATE = 15  # counters stop here: "used 5+ times" is the top class anyway
_LEGAL = bytes(range(SATURATE + 1))


def probe(block_hash: bytes, bits: int) -> tuple[int, int, int]:
    """(i, j, crc) for a hash and a sketch of ``2**bits`` counters; see the module docstring."""
    c = crc32(block_hash)
    return c & ((1 << bits) - 1), ((c * GOLDEN32) & 0xFFFFFFFF) >> (32 - bits), c


class FrequencySketch:
    """Invariant: every counter <= SATURATE; ``0 < left <= period``; the table has ``2**bits``
    counters and at most ``period`` = 1/4 of that many additions land between halvings.

    How often each content hash was used recently (approximately; between halvings it never
    under-counts). A count-min sketch with two probes into one byte table, conservative update,
    halved in place every ``period`` additions so that old popularity fades. ClassLRUPolicy
    inlines ``add`` on its hot path (NOTE(inline) there); keep the two in step.
    """

    __slots__ = ("table", "bits", "period", "left", "halvings")

    def __init__(self, capacity: int, min_bits: int = 20) -> None:
        # NOTE(sizing): 8 counters per pool block, but at least 2**20: reuse distances are
        # trace properties, not pool properties, so a small pool still needs a long memory.
        bits = min(30, max(min_bits, (8 * max(capacity, 1) - 1).bit_length()))
        self.table = bytearray(1 << bits)  # the counters (owned here; halved in place)
        self.bits = bits  # log2 of the table size; see probe()
        self.period = 1 << (bits - 2)  # additions between halvings: load <= 1/4
        self.left = self.period  # additions until the next halving
        self.halvings = 0  # how many times the table was halved

    def add(self, i: int, j: int) -> int:
        """Count one use of the hash probing (i, j); returns its new estimate."""
        t = self.table
        a = t[i]
        b = t[j]
        m = a if a < b else b
        if m < SATURATE:
            m += 1
            if a < m:
                t[i] = m
            if b < m:
                t[j] = m
        self.left -= 1
        if not self.left:
            self.halve()
        return m

    def halve(self) -> None:
        self.table[:] = self.table.translate(_HALVE)
        self.left = self.period
        self.halvings += 1

    def estimate(self, i: int, j: int) -> int:
        t = self.table
        a = t[i]
        b = t[j]
        return a if a < b else b

    def check_invariants(self) -> None:
        # NOTE(cost): translate drops the legal counter values in C; whatever remains is over
        # SATURATE (max() over a 4 MB table cost ~100 ms per check).
        if self.table.translate(None, _LEGAL) or not 0 < self.left <= self.period:
            raise InvariantError("frequency sketch counter or period out of range")


class ShadowCache:
    """Invariant: ``where`` maps each held hash to its class queue, the queues hold exactly those
    hashes with non-decreasing stamps, and ``len(where) <= capacity``. ``hits`` counts accesses
    that found their hash held since the tuner last read it.

    A miniature of ClassLRUPolicy keyed by hash, fed a sampled slice of the accesses.
    """

    __slots__ = ("capacity", "bonus", "queues", "where", "clock", "hits", "_keyed")

    def __init__(self, capacity: int, bonus: float, classes: int) -> None:
        self.capacity = capacity  # hashes held at most
        self.bonus = bonus  # eviction key = stamp + class * bonus (shadow clock units)
        self.queues: list[OrderedDict[bytes, int]] = [OrderedDict() for _ in range(classes)]
        self.where: dict[bytes, int] = {}  # hash -> class queue
        self.clock = 0  # accesses seen
        self.hits = 0  # hits since the last tuning period
        self._keyed = [(q, k * bonus) for k, q in enumerate(self.queues)]  # (queue, its bonus)

    def set_offsets(self, offsets: Sequence[float]) -> None:
        """Evict by ``stamp + offsets[class]`` from now on (PlanGuard: the planned retentions)."""
        self._keyed = list(zip(self.queues, offsets))

    def access(self, h: bytes, k: int, t: int | None = None) -> bool:
        """Hash ``h`` used with class ``k`` at time ``t`` (default: this shadow's own clock,
        one tick per access); True when it was held (a hit)."""
        if t is None:
            t = self.clock = self.clock + 1
        where = self.where
        c = where.get(h)
        hit = c is not None
        if hit:
            del self.queues[c][h]
            self.hits += 1
        elif len(where) >= self.capacity:
            best = None
            bkey = 0.0
            for queue, w in self._keyed:
                if queue:
                    key = queue[next(iter(queue))] + w
                    if best is None or key < bkey:
                        best, bkey = queue, key
            del where[best.popitem(last=False)[0]]
        self.queues[k][h] = t
        where[h] = k
        return hit

    def check_invariants(self) -> None:
        n = 0
        for q, queue in enumerate(self.queues):
            stamps = list(queue.values())
            if stamps != sorted(stamps) or any(self.where.get(h) != q for h in queue):
                raise InvariantError(f"shadow queue {q} out of order or out of sync")
            n += len(queue)
        if n != len(self.where) or n > self.capacity:
            raise InvariantError(f"shadow holds {n} hashes, map {len(self.where)}, "
                                 f"capacity {self.capacity}")


class BonusTuner:
    """Invariant: ``0 <= current < len(GRID)``; shadow ``i`` evicts with bonus ``GRID[i] * its
    capacity`` (the same number of turnovers as the pool's); ``threshold`` samples the same
    fraction of hash space as shadow capacity / pool capacity.

    Chooses ClassLRUPolicy's bonus by simulation: one ShadowCache per candidate in GRID, all
    fed the same hash-sampled accesses. Once per period (one shadow turnover) it compares their
    hits and moves to the candidate with the best recent gain over the current choice, among
    those whose gain passes a paired one-sided test in BOTH evidence windows: a fast one (reacts
    within ~10 periods) and a slow one (~50 periods), so a phase that merely favours another
    bonus for a while does not make it chase noise.
    """

    # Candidate bonuses in pool turnovers: 0 is plain LRU, 8 keeps a block used 2+ times for
    # ~8 extra turnovers per class. Log spaced (x2): a bracket, not a fit to one trace.
    GRID = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
    ALPHAS = (0.1, 0.02)  # EWMA weight of one period in the fast and the slow window
    Z = 1.0  # a switch needs a mean paired gain > Z standard errors in every window
    MIN_PERIODS = 3  # ... and this many periods of evidence (a variance from 2 is noise)

    def __init__(self, capacity: int, classes: int) -> None:
        # NOTE(sampling): shadows of 2048 hashes (a quarter of the pool if smaller) are
        # faithful enough; they see that fraction of hash space, so they cost 7 * 2048 / C
        # extra accesses per access (at most 7/4 on small pools) and ~2 MB in all.
        size = max(8, min(2048, capacity // 4))
        self.threshold = max(1, (size << 20) // max(capacity, 1))  # sample: crc >> 12 < this
        self.shadows = [ShadowCache(size, g * size, classes) for g in self.GRID]
        self.period = size  # sampled accesses per tuning step
        self.current = 0  # index into GRID; start as plain LRU
        self.steps = 0  # tuning steps taken
        self.switches = 0  # how often the choice changed
        self._since = 0  # sampled accesses since the last step
        n = len(self.GRID)
        # per window: EWMA of hits[i] - hits[j] per period, and of its square
        self._mean = [[[0.0] * n for _ in range(n)] for _ in self.ALPHAS]
        self._sq = [[[0.0] * n for _ in range(n)] for _ in self.ALPHAS]

    @property
    def bonus(self) -> float:
        """The chosen bonus in pool turnovers."""
        return self.GRID[self.current]

    def access(self, h: bytes, k: int) -> bool:
        """Feed one sampled access (``k`` = its class); True when the chosen bonus changed."""
        for s in self.shadows:
            s.access(h, k)
        self._since += 1
        if self._since < self.period:
            return False
        self._since = 0
        return self._step()

    def _step(self) -> bool:
        hits = [s.hits for s in self.shadows]
        for s in self.shadows:
            s.hits = 0
        self.steps += 1
        n = len(hits)
        cur = self.current
        passed = [True] * n
        gain = [0.0] * n  # bias-corrected mean gain over ``cur``, fast window
        for w, a in enumerate(self.ALPHAS):
            mean, sq = self._mean[w], self._sq[w]
            for i in range(n):
                mi, si, hi = mean[i], sq[i], hits[i]
                for j in range(n):
                    d = hi - hits[j]
                    mi[j] += a * (d - mi[j])
                    si[j] += a * (d * d - si[j])
            n_eff = min(self.steps, (2 - a) / a)  # effective sample size of the EWMA
            unbias = 1.0 / (1.0 - (1.0 - a) ** self.steps)  # the EWMAs started at 0
            bessel = n_eff / (n_eff - 1) if n_eff > self.MIN_PERIODS - 1 else 0.0
            for i in range(n):
                m = mean[i][cur] * unbias
                var = (sq[i][cur] * unbias - m * m) * bessel
                # NOTE(floor): a difference of hit counts varies at least like a count
                if not (bessel and m > 0 and m * m * n_eff > self.Z * self.Z * max(var, m)):
                    passed[i] = False
                if w == 0:
                    gain[i] = m
        best = cur
        for i in range(n):
            if passed[i] and (best == cur or gain[i] > gain[best]):
                best = i
        if best != cur:
            self.current = best
            self.switches += 1
            return True
        return False

    def check_invariants(self) -> None:
        if not 0 <= self.current < len(self.GRID):
            raise InvariantError(f"tuner index {self.current} outside the grid")
        if not 0 <= self._since < self.period:
            raise InvariantError("tuner period counter out of range")
        for g, s in zip(self.GRID, self.shadows, strict=True):
            if s.bonus != g * s.capacity:
                raise InvariantError("shadow bonus does not match its grid value")
            s.check_invariants()


class RetentionPlanner:
    """Invariant: ``open`` counts, per start-period slot, hash half and class, the followed
    stints (releases of a followed hash) neither reused nor older than ``amax``; ``rec`` holds
    the last release (half * nc + class, tick) of each followed hash; ``R`` has one retention
    per class, in ticks, within ``[0, amax]``, non-decreasing in the level (class = session
    class * levels + level) within each session class.

    Chooses SessionPolicy's retentions. Statistics, per class and age bin (log spaced from 1/8
    to 16 turnovers; ticks are the policy's operations): reuses (``ev``) and exposure
    (stint-ticks spent at that age, ``ex``: counted for open stints too, so reuse that has not
    come yet biases nothing), decayed with a half-life of half the history, 2 to 64 turnovers.
    Hazard = ev / ex shrunk towards all classes' hazard by ``prior`` stints' worth of exposure;
    survival S(a) = exp(-integrated hazard). Kept R ticks, a class costs ``rate * E[min(gap,
    R)]`` blocks of the pool and earns ``rate * (1 - S(R))`` reuses per tick. The plan gives
    the pool to the classes and retentions with the most reuses per block-tick (each class's
    concave hull, filled greedily: a fractional knapsack), then pools adjacent levels that
    would be kept in the wrong order and plans again (pool-adjacent-violators) until monotone.

    How far to trust a class's own statistics is measured, not assumed: followed hashes fall in
    two halves by a hash bit, and every CV plans each prior in PRIORS plans on one half and is
    scored on the other (reuses within the pool's capacity). The best prior plans with both.
    ``inf`` = one hazard for all: every class kept alike.
    """

    PRIORS = (1.0, 16.0, 256.0, float("inf"))
    CV = 16  # plans between two choices of the prior
    PLAN_TICKS = 2048  # at least this many ticks between plans (a plan costs ~2 ms)
    HALF_MAX = 64.0  # the statistics' half-life is at most this many turnovers

    def __init__(self, capacity: int, ns: int, nl: int, sample: int = 4096,
                 period: int | None = None) -> None:
        cap = max(capacity, 8)
        self.cap, self.ns, self.nl = cap, ns, nl
        self.nc = nc = ns * nl
        self.edges = [0.0] + [cap * 2 ** (i / 2) for i in range(-6, 9)]
        self.nbins = nb = len(self.edges) - 1
        self.amax = self.edges[-1]
        self.P = p = period or max(256, cap // 16)  # ticks per accounting period
        self.G = g = int(self.amax // p) + 2  # start-period slots followed
        self.every = max(1, self.PLAN_TICKS // p)  # periods per plan
        frac = min(1.0, sample / cap)
        # NOTE(sampling): 4k followed hashes (all of a smaller pool) keep the statistics
        # faithful; a hash is followed iff (crc >> 12) < thr, its half is crc bit 11.
        self.thr = max(1, int(frac * (1 << 20)))
        self.budget = cap * self.thr / (1 << 20)  # the pool, in followed blocks
        self.rec: dict[bytes, tuple[int, int]] = {}
        self.opened: list[int] = []  # since the last period: slot * 2nc + half * nc + class
        self.started = [0] * (2 * nc)  # ... releases, by half * nc + class
        self.closed: list[int] = []  # ... stints reused, by start slot, half and class
        self.reused: list[int] = []  # ... (half * nc + class) * nbins + age bin
        self.open = np.zeros(g * 2 * nc)
        self.ev = np.zeros((2 * nc, nb))
        self.ex = np.zeros((2 * nc, nb))
        self.st = np.zeros(2 * nc)
        self.ticks = 0.0  # decayed ticks the statistics cover
        self.period = 0
        w = np.zeros((g, nb))  # w[m, j]: ticks of age bin j in a period at age m periods
        for m in range(g):
            lo, hi = max(0.0, (m - 0.5) * p), (m + 0.5) * p
            for j in range(nb):
                w[m, j] = max(0.0, min(hi, self.edges[j + 1]) - max(lo, self.edges[j]))
        self.w = w
        self.widths = np.diff(np.array(self.edges))
        self.score = [0.0] * len(self.PRIORS)  # EWMA of each prior's held-out reuses
        self.prior = self.PRIORS[-1]
        self.R = [0.0] * nc  # all equal: plain LRU until there is evidence
        self.plans = 0

    def touch(self, h: bytes, k: int, t: int) -> None:
        """Followed hash ``h`` was released at tick ``t`` into class ``k`` (+ nc: half 1)."""
        rec = self.rec
        r = rec.get(h)
        if r is not None:
            k0, t0 = r
            gap = t - t0
            if gap < self.amax:
                self.reused.append(k0 * self.nbins + bisect_right(self.edges, gap) - 1)
                self.closed.append((t0 // self.P) % self.G * 2 * self.nc + k0)
        rec[h] = (k, t)
        self.opened.append((t // self.P) % self.G * 2 * self.nc + k)
        self.started[k] += 1

    def tick(self) -> list[float] | None:
        """End of a period: account exposure, age the statistics; a new plan or None."""
        c, g, p, nc2 = self.period, self.G, self.P, 2 * self.nc
        size = g * nc2
        op = self.open
        op += np.bincount(self.opened, minlength=size)[:size]
        op -= np.bincount(self.closed, minlength=size)[:size]
        self.st += self.started
        self.ev += np.bincount(self.reused, minlength=nc2 * self.nbins).reshape(nc2, -1)
        self.opened, self.closed, self.reused, self.started = [], [], [], [0] * nc2
        self.ex += op.reshape(g, nc2)[(c - np.arange(g)) % g].T @ self.w
        self.ticks += p
        half = min(self.HALF_MAX * self.cap, max(2.0 * self.cap, 0.5 * (c + 1) * p))
        d = 0.5 ** (p / half)
        self.ev *= d
        self.ex *= d
        self.st *= d
        self.ticks *= d
        self.period = c = c + 1
        s = c % g  # the recycled slot: its stints reach amax unreused (censored)
        op[s * nc2:(s + 1) * nc2] = 0.0
        if c % (g // 2 + 1) == 0:  # forget hashes released amax ago (their stints are over)
            lim = (c - g + 2) * p
            self.rec = {h: r for h, r in self.rec.items() if r[1] >= lim}
        if c < 4 or c % self.every or self.st.sum() <= 0:
            return None
        if self.plans % self.CV == 0:
            self.choose_prior()
        nc = self.nc
        ev, ex, st = self.ev, self.ex, self.st
        self.R = self.plan(ev[:nc] + ev[nc:], ex[:nc] + ex[nc:], st[:nc] + st[nc:],
                           self.prior, self.budget)
        self.plans += 1
        return self.R

    def choose_prior(self) -> None:
        nc, b = self.nc, self.budget / 2
        part = [(self.ev[x:x + nc], self.ex[x:x + nc], self.st[x:x + nc]) for x in (0, nc)]
        for i, a in enumerate(self.PRIORS):
            v = sum(self.value(self.plan(*part[h], a, b), *part[1 - h], b) for h in (0, 1))
            self.score[i] += 0.5 * (v - self.score[i])
        self.prior = self.PRIORS[max(range(len(self.PRIORS)), key=self.score.__getitem__)]

    def hazard(self, ev: np.ndarray, ex: np.ndarray, prior: float) -> np.ndarray:
        tot = ex.sum(0)
        pool = np.divide(ev.sum(0), tot, out=np.zeros(self.nbins), where=tot > 0)
        if prior == float("inf"):
            return np.broadcast_to(pool, ev.shape)
        a = prior * self.widths
        return (ev + a * pool) / (ex + a)

    def curves(self, haz: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Survival and E[min(gap, a)] at the bin edges, per row of ``haz``."""
        n = haz.shape[0]
        hw = haz * self.widths
        surv = np.exp(-np.concatenate([np.zeros((n, 1)), np.cumsum(hw, 1)], 1))
        with np.errstate(divide="ignore", invalid="ignore"):
            inside = np.where(hw > 1e-12, -np.expm1(-hw) / haz, self.widths)
        emin = np.concatenate([np.zeros((n, 1)), np.cumsum(surv[:, :-1] * inside, 1)], 1)
        return surv, emin

    def plan(self, ev: np.ndarray, ex: np.ndarray, st: np.ndarray, prior: float,
             budget: float) -> list[float]:
        """Retention per class: the knapsack, pooled until monotone in the level."""
        nl = self.nl
        pools = [[[lv] for lv in range(nl)] for _ in range(self.ns)]
        while True:
            groups = [[s * nl + lv for lv in grp] for s, ps in enumerate(pools) for grp in ps]
            rg = self.solve(groups, ev, ex, st, prior, budget)
            merged = False
            i = 0
            for ps in pools:
                n = len(ps)
                for a in range(n - 2, -1, -1):  # merge every violating pair, right to left
                    if rg[i + a] > rg[i + a + 1]:
                        ps[a:a + 2] = [ps[a] + ps[a + 1]]
                        merged = True
                i += n
            if not merged:
                break
        r = [0.0] * self.nc
        for grp, x in zip(groups, rg, strict=True):
            for k in grp:
                r[k] = x
        return r

    def solve(self, groups: list[list[int]], ev: np.ndarray, ex: np.ndarray, st: np.ndarray,
              prior: float, budget: float) -> list[float]:
        """Retention per group of classes (statistics summed) within ``budget`` blocks."""
        n = len(groups)
        m = np.zeros((n, self.nc))
        for i, grp in enumerate(groups):
            m[i, grp] = 1.0
        surv, emin = self.curves(self.hazard(m @ ev, m @ ex, prior))
        rate = (m @ st) / max(self.ticks, 1e-9)
        cost = (rate[:, None] * emin).tolist()
        gain = (rate[:, None] * (1.0 - surv)).tolist()
        segs = []  # (reuses per block-tick, group, from edge, to edge, blocks)
        for k in range(n):
            cs, hs = cost[k], gain[k]
            hull = [0]
            for j in range(1, self.nbins + 1):
                cj, hj = cs[j], hs[j]
                while len(hull) >= 2:
                    i0, i1 = hull[-2], hull[-1]
                    if (hs[i1] - hs[i0]) * (cj - cs[i0]) > (hj - hs[i0]) * (cs[i1] - cs[i0]):
                        break
                    hull.pop()
                hull.append(j)
            for i0, i1 in zip(hull, hull[1:]):
                dc = cs[i1] - cs[i0]
                if dc > 0 and hs[i1] > hs[i0]:
                    segs.append(((hs[i1] - hs[i0]) / dc, k, i0, i1, dc))
        if sum(c[-1] for c in cost) <= budget:
            return [self.amax] * n  # everything fits: retention is no constraint
        segs.sort(key=lambda x: -x[0])
        r = [0.0] * n
        e = self.edges
        i = 0
        while i < len(segs):  # densest first; equal densities share a shortfall evenly
            j = i + 1
            while j < len(segs) and segs[j][0] >= segs[i][0] * (1 - 1e-9):
                j += 1
            need = sum(x[4] for x in segs[i:j])
            f = min(1.0, budget / need)
            for _, k, i0, i1, _ in segs[i:j]:
                r[k] = e[i0] + f * (e[i1] - e[i0])
            if f < 1.0:
                break
            budget -= need
            i = j
        return r  # what is left over buys no reuse: the pool keeps it anyway, evicting later

    def value(self, r: list[float], ev: np.ndarray, ex: np.ndarray, st: np.ndarray,
              budget: float) -> float:
        """Reuses per tick that retentions ``r`` get on these statistics, scaled down by the
        share of them that ``budget`` blocks can hold."""
        haz = self.hazard(ev, ex, 1.0)
        surv, emin = self.curves(haz)
        rate = (st / max(self.ticks, 1e-9)).tolist()
        gain = cost = 0.0
        e = self.edges
        for k in range(self.nc):
            if rate[k] <= 0:
                continue
            j = min(bisect_right(e, r[k]) - 1, self.nbins - 1)
            x, h, s0 = r[k] - e[j], float(haz[k, j]), float(surv[k, j])
            s = s0 * math.exp(-h * x)
            gain += rate[k] * (1.0 - s)
            cost += rate[k] * (emin[k, j] + ((s0 - s) / h if h > 1e-12 else s0 * x))
        return gain * min(1.0, budget / cost) if cost > 0 else gain

    def check_invariants(self) -> None:
        if self.open.min() < 0:
            raise InvariantError("planner: negative open stint count")
        r = self.R
        if len(r) != self.nc or not all(0.0 <= x <= self.amax for x in r):
            raise InvariantError("planner: retention out of range")
        for s in range(self.ns):
            if r[s * self.nl:(s + 1) * self.nl] != sorted(r[s * self.nl:(s + 1) * self.nl]):
                raise InvariantError(f"planner: session class {s} kept out of level order")
        if sum(self.started) != len(self.opened) or len(self.closed) != len(self.reused):
            raise InvariantError("planner: release and reuse records out of step")
