"""BonusTuner: chooses ClassLRUPolicy's recency bonus by simulating the candidates.

Keyed by content hash, never by block id, and bounded: each ShadowCache holds a fixed number of
hashes, fed a fixed slice of hash space (the hashes whose CRC-32 falls below a threshold), so it
is a scaled-down copy of the pool that sees the same workload. It is fed release runs (a
request's blocks, tail first) and scores a run's hits as the pool's lookup does, from the head
up to the first block missing: per block, a popular block behind a prefix no cache holds looked
like a hit, and the tuner paid for such blocks with a bonus the pool could not use (below LRU
on bench.heldout's code_edit, docs/benchmarks.md "Eviction candidates and held-out shapes").
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Container

from kvpool.errors import InvariantError


NO_MISS = 1 << 62  # ReleaseRuns.miss when the run has no missed block


def run_hits(run: list[tuple], held: Container, miss: int) -> int:
    """The hits of a release run ``(key, class, depth)``, tail first, in a miniature holding
    ``held``: the blocks held from the head up to the first one missing, none deeper than
    ``miss`` (a block the pool saw for the first time), as the pool's lookup counts them."""
    hits = 0
    for h, _, d in reversed(run):
        if d > miss or h not in held:
            break
        hits += 1
    return hits


class ReleaseRuns:
    """Invariant: ``run`` is one run of strictly falling depth, collected only with a tuner.

    NOTE(runs): a policy's tuner is fed release runs, not single blocks. A request's blocks
    are released tail first (falling depth), and a miniature scores a run's hits as the
    pool's lookup does, the leading run from the head (docs/benchmarks.md "Eviction
    candidates and held-out shapes"). ``run`` holds the current run's sampled blocks,
    (key, class, depth); it ends at depth 0 or when the depth rises. ``miss`` is the lowest
    depth of the run's blocks the pool saw for the first time (no cache held them), set by
    the policy."""

    __slots__ = ("tuner", "run", "miss")

    def __init__(self, tuner: BonusTuner | None) -> None:
        self.tuner = tuner
        self.run: list[tuple] = []
        self.miss = NO_MISS

    def add(self, key, k: int, depth: int) -> bool:
        """A sampled block released at ``depth``; True when the tuner's choice changed."""
        run = self.run
        changed = False
        if run and depth >= run[-1][2]:  # the depth rose: a new run, the last is done
            changed = self.tuner.access_run(run, self.miss)
            run = self.run = []
        run.append((key, k, depth))
        return changed

    def head(self) -> bool:
        """The chain's head was released (depth 0): the run is done. True when the tuner's
        choice changed."""
        changed = False
        if self.run:
            changed = self.tuner.access_run(self.run, self.miss)
            self.run = []
        self.miss = NO_MISS
        return changed

    def check_invariants(self) -> None:
        run = self.run
        if any(a[2] <= b[2] for a, b in zip(run, run[1:])) or (run and self.tuner is None):
            raise InvariantError("the release run being collected is not one run of falling "
                                 "depth, or is collected with no tuner")


class ShadowCache:
    """Invariant: ``where`` maps each held hash to its class queue, the queues hold exactly those
    hashes with non-decreasing stamps, and ``len(where) <= capacity``. ``hits`` counts accesses
    that found their hash held since the tuner last read it.

    A miniature of ClassLRUPolicy keyed by hash, fed a sampled slice of the accesses.
    """

    __slots__ = ("capacity", "bonus", "queues", "where", "clock", "hits", "_keyed")
    live = False  # NOTE(defer): it reads nothing but the runs it is fed

    def __init__(self, capacity: int, bonus: float, classes: int) -> None:
        self.capacity = capacity  # hashes held at most
        self.bonus = bonus  # eviction key = stamp + class * bonus (shadow clock units)
        self.queues: list[OrderedDict[bytes, int]] = [OrderedDict() for _ in range(classes)]
        self.where: dict[bytes, int] = {}  # hash -> class queue
        self.clock = 0  # accesses seen
        self.hits = 0  # hits since the last tuning period
        self._keyed = [(q, k * bonus) for k, q in enumerate(self.queues)]  # (queue, its bonus)

    def access_run(self, run: list[tuple[bytes, int, int]], miss: int) -> int:
        """The sampled blocks of one release run, ``(hash, class, depth)`` tail first (the
        pool's order). Its hits are the blocks held now from the head up to the first one
        missing, as the pool's lookup counts them, and none deeper than ``miss`` (a block the
        pool saw for the first time: no cache held it). Then every block is used, tail first,
        one clock tick each. A held block behind a missing one is no hit: no request could
        reach it (docs/benchmarks.md "Eviction candidates and held-out shapes"). Returns
        the hits."""
        return self.access_runs(((run, miss),))

    def access_runs(self, runs) -> int:
        """``access_run`` for each ``(run, miss)`` of ``runs`` in turn (NOTE(defer): one
        loop); the hits of all."""
        where, queues, keyed, cap = self.where, self.queues, self._keyed, self.capacity
        hits = 0
        t = self.clock
        for run, miss in runs:
            hits += run_hits(run, where, miss)
            for h, k, _ in run:  # each block used: to the tail of its class queue
                t += 1
                c = where.get(h)
                if c is not None:
                    del queues[c][h]
                elif len(where) >= cap:  # evict the queue head with the smallest key
                    best = None
                    bkey = 0.0
                    for queue, w in keyed:
                        if queue:
                            key = queue[next(iter(queue))] + w
                            if best is None or key < bkey:
                                best, bkey = queue, key
                    del where[best.popitem(last=False)[0]]
                queues[k][h] = t
                where[h] = k
        self.clock = t
        self.hits += hits
        return hits

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
    fed the same hash-sampled accesses. Once per period (256 sampled accesses at most) it
    compares their hits and moves to the candidate nearest the current choice among those whose
    gain over it passes a paired one-sided test in BOTH evidence windows: a fast one (reacts
    within ~10 periods) and a slow one (~50 periods), so a phase that merely favours another
    bonus for a while does not make it chase noise. A move to a larger bonus (further from
    LRU) must also be worth it: a slow-window gain of at least EFFECT of the sampled accesses.
    """

    # Candidate bonuses in pool turnovers: 0 is plain LRU, 8 keeps a block used 2+ times for
    # ~8 extra turnovers per class. Log spaced (x2): a bracket, not a fit to one trace.
    GRID = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
    ALPHAS = (0.1, 0.02)  # EWMA weight of one period in the fast and the slow window
    # NOTE(z): a switch needs a mean paired gain > Z standard errors in every window. The test
    # is repeated every period, so a single pass is weak evidence: at Z = 1 noise moved the
    # bonus off 0 on workloads where every candidate ties with LRU, and that cost hits.
    Z = 2.5
    MIN_PERIODS = 3  # ... and this many periods of evidence (a variance from 2 is noise)
    # NOTE(effect): a move to a larger bonus also needs a slow-window mean gain above this
    # share of the period's sampled accesses (1.5 hit-rate points); a move toward LRU needs
    # only the test. On traces where every bonus ties with LRU to a fraction of a point
    # (memoryless session reuse, uniform documents), the test, repeated every period, still
    # passed now and then on a burst; the departure then lost hits to LRU. Gains this large
    # (scans, skewed popularity, the conversation trace) outlast such bursts.
    EFFECT = 0.015
    # NOTE(defer): a miniature that reads nothing but its runs (``live`` False) is fed them
    # in batches of about DEFER sampled blocks, and always before a step reads its hits, so
    # every count and every choice is what feeding each run at once gives. Fed one run at a
    # time, between two sampled blocks the pool's own work pushed the miniatures' maps out
    # of the CPU's caches, and an access cost about twice what it costs in a loop of its own
    # (docs/benchmarks.md "Cost per call: deferred miniatures"). A miniature that reads the
    # policy's sketches (the duel's) is fed at once: the counts move on with every call.
    DEFER = 32
    MINI_MAX = 2048  # NOTE(sampling): hashes per miniature, at most ...
    MINI_DIV = 4  # ... and at most the pool's blocks / MINI_DIV

    def __init__(self, capacity: int, classes: int) -> None:
        # NOTE(sampling): shadows of 2048 hashes (a quarter of the pool if smaller) are
        # faithful enough; they see that fraction of hash space, so they cost 7 * 2048 / C
        # extra accesses per access (at most 7/4 on small pools) and ~2 MB in all. Whole-pool
        # shadows on small pools doubled the cost per block and won nothing measurable.
        # Smaller ones cost hits: AdaptivePolicy with an eighth / a sixteenth of the pool
        # inserted in 5.2 / 4.1 us instead of 9.9 at 4000 blocks, but lost 36 / 39 of the
        # 135 cells (shortfall 0.299 / 0.387, against 33 and 0.217), the loop at 4000
        # blocks most (docs/benchmarks.md "Cost per call").
        size = max(8, min(self.MINI_MAX, capacity // self.MINI_DIV))
        self.threshold = max(1, (size << 20) // max(capacity, 1))  # sample: crc >> 12 < this
        self._pending: list[tuple[list, int]] = []  # NOTE(defer): runs not fed yet
        self._waiting = 0  # sampled blocks in them
        self.shadows = self._miniatures(size, classes)
        # NOTE(period): at most 256 sampled accesses per step, so a large pool still takes
        # several steps per turnover; one step per shadow turnover left 16000-block pools on
        # LRU for most of a 200k-block trace, and 512 made the EFFECT bar late there.
        self.period = min(size, 256)  # sampled accesses per tuning step
        self.current = 0  # index into GRID; start as plain LRU
        self.steps = 0  # tuning steps taken
        self.switches = 0  # how often the choice changed
        self._since = 0  # sampled accesses since the last step
        n = len(self.GRID)
        # per window: EWMA of hits[i] - hits[j] per period, and of its square
        self._mean = [[[0.0] * n for _ in range(n)] for _ in self.ALPHAS]
        self._sq = [[[0.0] * n for _ in range(n)] for _ in self.ALPHAS]

    def _miniatures(self, size: int, classes: int) -> list:
        """One miniature of ``size`` hashes per GRID candidate (AdmitTuner's are
        MiniAdmits)."""
        return [ShadowCache(size, g * size, classes) for g in self.GRID]

    @property
    def shadows(self) -> list:
        """The miniatures, one per GRID candidate."""
        return self._shadows

    @shadows.setter
    def shadows(self, shadows: list) -> None:
        self._flush()
        self._shadows = list(shadows)
        self._now = [s for s in self._shadows if getattr(s, "live", True)]  # NOTE(defer)
        self._later = [s for s in self._shadows if not getattr(s, "live", True)]

    @property
    def bonus(self) -> float:
        """The chosen bonus in pool turnovers."""
        return self.GRID[self.current]

    def start_at(self, choice) -> None:
        """Take ``choice`` (a GRID value) as the current one before any evidence: the
        policy's NOTE(cold). The tuner goes on from there by its own rule."""
        self.current = self.GRID.index(choice)

    def access_run(self, run: list[tuple[bytes, int, int]], miss: int) -> bool:
        """Feed the sampled blocks of one release run (``(hash, class, depth)``, tail first;
        ``miss``: ShadowCache.access_run); True when the chosen bonus changed."""
        for s in self._now:
            s.access_run(run, miss)
        if self._later:  # NOTE(defer)
            self._pending.append((run, miss))
            self._waiting += len(run)
            if self._waiting >= self.DEFER:
                self._flush()
        return self.tick(len(run))

    def _flush(self) -> None:
        """NOTE(defer): the runs waiting, fed to the deferred miniatures, one after another."""
        pending = self._pending
        if pending:
            for s in self._later:
                s.access_runs(pending)
            pending.clear()
            self._waiting = 0

    def tick(self, n: int) -> bool:
        """``n`` more sampled accesses were fed to every shadow; a tuning step once they make
        a period. True when the step changed the choice."""
        self._since += n
        if self._since < self.period:
            return False
        self._since = 0
        self._flush()
        return self._step()

    def _step(self) -> bool:
        hits = [s.hits for s in self.shadows]
        for s in self.shadows:
            s.hits = 0
        self.steps += 1
        n = len(hits)
        cur = self.current
        passed = [True] * n
        bar = self.EFFECT * self.period  # NOTE(effect): hits per period, larger bonuses only
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
                elif w == 1 and i > cur and m <= bar:
                    passed[i] = False
                if w == 0:
                    gain[i] = m
        best = self._nearest(passed, gain, cur)
        if best != cur:
            self.current = best
            self.switches += 1
            return True
        return False

    @staticmethod
    def _nearest(passed: list[bool], gain: list[float], cur: int) -> int:
        """NOTE(step): of the candidates that pass, the one nearest the current choice (the
        larger gain on a tie of distance); ``cur`` when none does. The largest gain is the
        noisiest pick, and every switch costs a transient; the pairwise evidence is kept for
        every pair, so a walk toward a far winner passes one period after another."""
        best = cur
        for i, ok in enumerate(passed):
            if ok and (best == cur or abs(i - cur) < abs(best - cur)
                       or (abs(i - cur) == abs(best - cur) and gain[i] > gain[best])):
                best = i
        return best

    def _check_pending(self) -> None:
        """NOTE(defer): the runs waiting hold ``_waiting`` blocks, fewer than DEFER, and wait
        for a miniature that is deferred."""
        if (self._waiting != sum(len(run) for run, _ in self._pending)
                or self._waiting >= self.DEFER or (self._pending and not self._later)):
            raise InvariantError("deferred runs miscounted, too many, or for no miniature")

    def check_invariants(self) -> None:
        if not 0 <= self.current < len(self.GRID):
            raise InvariantError(f"tuner index {self.current} outside the grid")
        if not 0 <= self._since < self.period:
            raise InvariantError("tuner period counter out of range")
        self._check_pending()
        for g, s in zip(self.GRID, self.shadows, strict=True):
            if s.bonus != g * s.capacity:
                raise InvariantError("shadow bonus does not match its grid value")
            s.check_invariants()
