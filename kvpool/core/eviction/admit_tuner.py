"""AdmitTuner: chooses AdaptivePolicy's configuration by simulating the candidates.

A configuration is ``(bonus, share, duel)`` (docs/eviction.md has the story):

- ``bonus``: classlru's recency bonus per frequency class, in pool turnovers;
- ``share``: the admission window's share of the pool; 1.0 is no window;
- ``duel``: what decides where new content goes while there is a window. True: all new content
  enters the window, and its oldest block duels main's victim on sketch counts (W-TinyLFU's
  admission). False: content the FrequencySketch has never counted enters the window, the rest
  goes to main (S3-FIFO's filter, with the sketch's long memory as "seen before"). None: the
  same filter, but "seen before" means "evicted recently" (a ghost, ARC's memory).

Each candidate runs in a MiniAdmit: a scaled-down copy of the policy keyed by CRC, fed release
runs of a sampled slice of hash space as classlru's ShadowCache is (kvpool/core/eviction/
tuner.py). BonusTuner's statistical rule picks among them, with three changes:
NOTE(effect) a lower bar away from LRU, NOTE(lead) a window must also lead every no-window
candidate, NOTE(big) a gain above BIG passes without the variance test.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from math import inf

from kvpool.core.eviction.classlru import CLASS_OF_COUNT
from kvpool.core.eviction.ghost import ExactGhost, GhostTable
from kvpool.core.eviction.tuner import NO_MISS, BonusTuner, run_hits
from kvpool.errors import InvariantError

CLASSES = 5  # main's class queues 0..4, as classlru's
WIN = 5  # the window queue
Cfg = tuple[float, float, "bool | None"]  # (bonus in pool turnovers, window share, duel)
LRU: Cfg = (0.0, 1.0, False)
GHOST_FILTER: Cfg = (0.0, 0.1, None)


def moved(p: float, cap: int, from_window: int, n_win: int, n_main: int) -> float:
    """NOTE(arc): the ghost filter's target ``p`` (blocks of ``cap``) after a ghost returns
    from the window (``from_window``) or from main; ``n_win`` / ``n_main``: the ghosts of
    each side before it returned."""
    if from_window:
        return min(cap - 1.0, p + max(1.0, n_main / max(n_win, 1)))
    return max(1.0, p - max(1.0, n_win / max(n_main, 1)))


def returned(p: float, cap: int, side: int, ghost: ExactGhost | GhostTable) -> float:
    """NOTE(arc): ``moved`` for a ghost of ``side`` that ``ghost.take_side`` just forgot, with
    the counts of each side as they were before it returned."""
    n_win = ghost.windowed + side
    return moved(p, cap, side, n_win, ghost.held + 1 - n_win)


def to_window(duel: bool | None, k: int, ghost_take: Callable[[int], bool], c: int) -> bool:
    """Whether new content (CRC ``c``, class ``k`` after counting this use) enters the window:
    all of it under the duel; under the sketch filter what the sketch had never counted
    (class 0); under the ghost filter what is not a ghost (a ghost is forgotten: it is held
    again)."""
    if duel is None:
        return not ghost_take(c)
    return duel or k == 0


class MiniAdmit:
    """Invariant: every held crc is in exactly one queue (``where``), the class queues have
    non-decreasing stamps, at most ``capacity`` crcs are held, and the ghost holds at most
    ``capacity`` crcs, none of them held.

    A crc-keyed miniature of AdaptivePolicy with configuration ``cfg``, sharing the policy's
    sketches: ``freq`` for classes on the way to main, ``duel_freq`` (``freq`` if None) for
    the duel (the policy's NOTE(age)); ``hits`` counts accesses found
    held since the tuner last read it. Only the ghost filter's miniature keeps a ghost (exact:
    a miniature holds at most 2048 crcs); when ``moves`` (``moving``, the ghost filter) it
    moves its share as ARC does, ``share == p / capacity`` (NOTE(arc))."""

    __slots__ = ("capacity", "cfg", "bonus", "share", "duel", "qs", "where", "clock", "hits",
                 "freq", "duel_freq", "ghost", "_keyed", "p", "moves", "_take")

    def __init__(self, capacity: int, cfg: Cfg, freq: Callable[[int], int],
                 duel_freq: Callable[[int], int] | None = None, moving: bool = False) -> None:
        self.capacity = capacity
        self.cfg = cfg
        b, self.share, self.duel = cfg
        self.moves = moving and self.duel is None and self.share < 1.0
        self.p = self.share * capacity
        self.bonus = [k * b * capacity for k in range(CLASSES)]
        self.qs: list[OrderedDict[int, int]] = [OrderedDict() for _ in range(CLASSES + 1)]
        self._keyed = list(zip(self.qs, self.bonus))  # (class queue, its bonus)
        self.where: dict[int, int] = {}  # crc -> queue
        self.clock = 0
        self.hits = 0
        self.freq = freq
        self.duel_freq = freq if duel_freq is None else duel_freq
        self.ghost = ExactGhost(capacity)  # evicted crcs (the ghost filter's only)
        self._take = self._arc_take if self.moves else self.ghost.take  # the filter's ask

    @property
    def live(self) -> bool:
        """Whether it reads the policy's sketches (the duel's miniatures): BonusTuner's
        NOTE(defer) feeds the others in batches."""
        return bool(self.duel) and self.share < 1.0

    def access(self, c: int, k: int) -> bool:
        """Content with CRC ``c`` used now, class ``k`` after counting the use; True on a hit
        (a run of one block)."""
        return self.access_run([(c, k, 0)], NO_MISS) > 0

    def access_run(self, run: list[tuple[int, int, int]], miss: int) -> int:
        """One release run, ``(crc, class, depth)`` tail first, scored as the pool's lookup
        scores it (ShadowCache.access_run); then each block is used, one clock tick each. The
        hits."""
        return self.access_runs(((run, miss),))

    def access_runs(self, runs) -> int:
        """``access_run`` for each ``(run, miss)`` of ``runs`` in turn (NOTE(defer) in
        tuner.py: one loop, the maps' lookups hoisted); the hits of all."""
        where, qs, cap, duel = self.where, self.qs, self.capacity, self.duel
        windowed, take, keyed = self.share < 1.0, self._take, self._keyed
        hits = 0
        t = self.clock
        for run, miss in runs:
            hits += run_hits(run, where, miss)
            for c, k, _ in run:
                t += 1
                q = where.get(c)
                if q is None:
                    if len(where) >= cap and windowed:
                        self.clock = t  # _to_main stamps with it
                        self._evict()
                    elif len(where) >= cap:  # NOTE(speed): _evict with no window, inlined
                        best, key = None, inf
                        for qk, w in keyed:  # main's victim (as _evict's); ties: lower class
                            if qk:
                                s = qk[next(iter(qk))] + w
                                if s < key:
                                    best, key = qk, s
                        del where[best.popitem(last=False)[0]]
                    # under the duel to_window's answer is True: all new content
                    if windowed and (duel or to_window(duel, k, take, c)):
                        k = WIN
                elif q == k:  # a hit in its own queue: to the tail, restamped
                    qk = qs[k]
                    qk.move_to_end(c)
                    qk[c] = t
                    continue
                else:
                    del qs[q][c]
                qs[k][c] = t
                where[c] = k
        self.clock = t
        self.hits += hits
        return hits

    def _arc_take(self, c: int) -> bool:
        """The ghost filter's ask with NOTE(arc): whether ``c`` is a ghost (then forgotten);
        a returning ghost moves the share by the side it left from."""
        side = self.ghost.take_side(c)
        if side < 0:
            return False
        self.p = returned(self.p, self.capacity, side, self.ghost)
        self.share = self.p / self.capacity
        return True

    def _to_main(self, c: int) -> None:
        k = CLASS_OF_COUNT[self.freq(c)]
        self.qs[k][c] = self.clock
        self.where[c] = k

    def _evict(self) -> None:
        """Evict one crc by the policy's rule with a window (AdaptivePolicy.evict;
        access_runs evicts without one)."""
        qs, where = self.qs, self.where
        win, duel = qs[WIN], self.duel
        target = self.share * len(where)
        if duel:
            for _ in range(2):  # NOTE(fill), as the policy's
                if len(win) <= target + 1:
                    break
                self._to_main(win.popitem(last=False)[0])
        qv, key = None, inf  # main's victim queue: the head with the smallest key
        for qk, w in self._keyed:  # ties go to the lower class
            if qk:
                s = qk[next(iter(qk))] + w
                if s < key:
                    qv, key = qk, s
        if qv is None or (win and len(win) >= target):
            c = win.popitem(last=False)[0]
            if qv is not None and duel:
                est = self.duel_freq
                vc = next(iter(qv))
                if est(c) > est(vc):
                    del qv[vc], where[vc]
                    self._to_main(c)
                    return
            side = True
        else:
            c = qv.popitem(last=False)[0]
            side = False
        del where[c]
        if duel is None:
            self.ghost.add(c, side)

    def check_invariants(self) -> None:
        n = 0
        for q, qq in enumerate(self.qs):
            if any(self.where.get(c) != q for c in qq):
                raise InvariantError(f"miniature queue {q} out of sync")
            if q < CLASSES and list(qq.values()) != sorted(qq.values()):
                raise InvariantError(f"miniature queue {q} out of order")
            n += len(qq)
        if n != len(self.where) or n > self.capacity:
            raise InvariantError("miniature over capacity or out of sync")
        self.ghost.check_invariants()
        if any(c in self.where for c in self.ghost):
            raise InvariantError("miniature ghost holding a held crc")


class AdmitTuner(BonusTuner):
    """Invariant: shadow ``i`` is a MiniAdmit running ``GRID[i]``; the rest is BonusTuner's.

    BonusTuner's sampling and statistical rule over MiniAdmit miniatures: ``bonus`` is the
    configuration chosen. Index 0 is LRU; a move up the index must also clear EFFECT. The two
    filters sit side by side, so the nearest-first rule sees them as neighbours."""

    GRID: tuple[Cfg, ...] = (
        LRU, (0.25, 1.0, False), (0.5, 1.0, False), (1.0, 1.0, False),
        (2.0, 1.0, False), (4.0, 1.0, False), (8.0, 1.0, False),
        (0.0, 0.1, False), GHOST_FILTER, (0.0, 0.2, True), (0.0, 0.01, True))

    # NOTE(effect): BonusTuner's 1.5-point bar for a move away from LRU kept the tuner on LRU
    # where a filter gains ~0.6 points; at 0.4 points they pass. The cost: moves on small
    # gains the live pool does not get (a few hundredths of a point below LRU on some cells,
    # docs/benchmarks.md "admitlru").
    EFFECT = 0.004
    # NOTE(big): where a candidate's hits come in bursts (a loop longer than the pool: a
    # duel's miniature hits the loop's first blocks once per pass), the variance test passes
    # only after several passes however large the gain. A mean gain above BIG of a period's
    # sampled accesses in every window, after MIN_BIG steps, is no noise: it passes on size.
    # Both were set once, before any run ("well above EFFECT", "past a cold pool's first
    # periods"), not fitted (docs/benchmarks.md "admitbig").
    BIG = 0.04
    MIN_BIG = 8
    # NOTE(long): a move away from LRU (up the index) also needs the candidate to be at least
    # level with the current choice in a long window (EWMA weight LONG per period, ~250
    # periods). Where a candidate leads in phases but loses overall, the fast and slow
    # windows passed it in each phase and every round trip paid a transient: on
    # support_desk@2@1000 the tuner went 7 times between bonuses and the sketch filter
    # (0.5306, LRU 0.5361, the sketch filter fixed 0.5204; with the guard 0.5399). Added
    # after that shape was seen; on the other 134 cells it changed two (docs/benchmarks.md
    # "The long window"). 0 turns the guard off (the research steps in bench/).
    LONG = 0.004
    # NOTE(bursts): a candidate also passes on the long window's evidence alone, once that
    # window has its full effective size (BURST_STEPS periods): a mean gain over the current
    # choice above Z standard errors in NOTE(long)'s EWMA, above EFFECT for a move up the
    # index, and still positive in the slow window (a gain that has turned does not pass).
    # Where a configuration gains in bursts (a long document read again now and then: a
    # hundred sampled hits one period in ten or twenty, ties in between), the fast window's
    # variance test never passes however large the gain over a day; the long window's does.
    # The blind shapes catalog_backfill and ediscovery_review lost 0.3-0.5 points to ARC that
    # way. Counted from an effective 20 periods, the long window was no longer than the slow
    # one on a trace's opening and passed a bonus that then lost (clinical_scribe@2@4000,
    # 0.0036 below LRU). Over 261 cells 45 lost (46 without), shortfall 0.141 (0.159), below
    # LRU in 17 (16); on travel_agent and insurance_claims, written after it was frozen, the
    # shortfall went from 0.0077 to 0.0020, none below LRU (docs/benchmarks.md "`bursts`").
    # Z, LONG and EFFECT are the numbers set before; LONG = 0 or ``bursts`` False (the
    # research steps in bench/) turns it off.
    BURST_STEPS = round((2 - LONG) / LONG)

    # NOTE(arc): the ghost filter is ARC (Megiddo & Modha, FAST'03) with its target moving:
    # new content that is no ghost waits in the window (ARC's T1), a hit or a ghost goes to
    # main (T2), and a returning ghost moves the window's share, which starts at GHOST_FILTER's
    # 10 %: a ghost of the window (B1) grows it by max(1, |B2| / |B1|) blocks, a ghost of main
    # shrinks it by max(1, |B1| / |B2|), between one block and the pool less one. With the
    # share frozen at 10 % the filter trailed ARC where ARC led: over 219 cells `adaptive`
    # lost 42 (ARC led 9 of bench.heldout's 27) and 35 with the share moving, below LRU in 8
    # and 6 (docs/benchmarks.md "`arcsplit`"). The pool's ghosts keep their side (NOTE(side)
    # in ghost.py); the pool's share moves only while the pool runs the ghost filter, from
    # the miniature's when the tuner moves to it. False: the research steps in bench/.
    def __init__(self, capacity: int, freq: Callable[[int], int],
                 duel_freq: Callable[[int], int] | None = None, moving: bool = True,
                 bursts: bool = True) -> None:
        self._freq = freq  # the policy's sketch estimates, for the miniatures
        self._duel_freq = duel_freq  # NOTE(age) in adaptive.py; None: MiniAdmit uses freq
        self._moving = moving  # NOTE(arc)
        super().__init__(capacity, CLASSES)
        self._plain = [j for j, g in enumerate(self.GRID) if g[1] >= 1.0]  # no window
        self.bigs = 0  # candidates passed on size alone (a diagnostic)
        self.held = 0  # passes held back by NOTE(long) (a diagnostic)
        self._long = [0.0] * len(self.GRID)  # EWMA of each miniature's hits per period
        self._bursts = bursts and self.LONG > 0  # NOTE(bursts)
        n = len(self.GRID)
        self._long_sq = [[0.0] * n for _ in range(n)]  # EWMA of (hits[i] - hits[j]) ** 2
        self.burst_passes = 0  # candidates passed by NOTE(bursts) alone (a diagnostic)

    def _miniatures(self, size: int, classes: int) -> list:
        return [MiniAdmit(size, g, self._freq, self._duel_freq, self._moving) for g in self.GRID]

    def ghost_share(self) -> float:
        """NOTE(arc): the ghost filter's share as its miniature has moved it (GHOST_FILTER's
        where none moves)."""
        return next((s.share for s in self.shadows if s.moves), GHOST_FILTER[1])

    def _step(self) -> bool:
        a, lg = self.LONG, self._long
        hits = [s.hits for s in self.shadows]  # read before BonusTuner's step zeroes them
        for i, h in enumerate(hits):
            lg[i] += a * (h - lg[i])
        if self._bursts:
            for hi, si in zip(hits, self._long_sq, strict=True):
                for j, hj in enumerate(hits):
                    d = hi - hj
                    si[j] += a * (d * d - si[j])
        return super()._step()

    def _in_bursts(self, i: int, cur: int) -> bool:
        """NOTE(bursts): candidate ``i``'s gain over ``cur`` passes in the long window."""
        a, steps = self.LONG, self.steps
        n_eff = min(steps, (2 - a) / a) if self._bursts else 0
        if i == cur or n_eff < self.BURST_STEPS:
            return False
        unbias = 1.0 / (1.0 - (1.0 - a) ** steps)
        m = (self._long[i] - self._long[cur]) * unbias
        var = (self._long_sq[i][cur] * unbias - m * m) * n_eff / (n_eff - 1)
        return (m > 0 and m * m * n_eff > self.Z * self.Z * max(var, m)
                and (i < cur or m > self.EFFECT * self.period) and self._mean[1][i][cur] > 0)

    def _nearest(self, passed: list[bool], gain: list[float], cur: int) -> int:
        """NOTE(bursts), NOTE(long), NOTE(big), then NOTE(lead): BonusTuner's rule, but a window
        configuration passes only while it also leads every no-window one in the fast window:
        early on a duel's miniature could pass against LRU first and hold the choice for a
        hundred periods where a bonus was better (the conversation trace at 1000 blocks)."""
        lg = self._long
        burst = [not p and self._in_bursts(i, cur) for i, p in enumerate(passed)]
        self.burst_passes += sum(burst)
        passed = [p or b for p, b in zip(passed, burst, strict=True)]
        kept = [p and (i <= cur or lg[i] >= lg[cur]) for i, p in enumerate(passed)]
        self.held += sum(passed) - sum(kept)
        passed = kept
        if self.steps >= self.MIN_BIG:
            big = [i != cur and not ok and self._large(i, cur) for i, ok in enumerate(passed)]
            self.bigs += sum(big)
            passed = [ok or b for ok, b in zip(passed, big, strict=True)]
        fast = self._mean[0]
        ok = [p and (i in self._plain or all(fast[i][j] > 0 for j in self._plain))
              for i, p in enumerate(passed)]
        return super()._nearest(ok, gain, cur)

    def _large(self, i: int, cur: int) -> bool:
        """Candidate ``i``'s mean gain over ``cur`` is above BIG in every window."""
        bar = self.BIG * self.period
        return all(self._mean[w][i][cur] / (1.0 - (1.0 - a) ** self.steps) > bar
                   for w, a in enumerate(self.ALPHAS))

    def check_invariants(self) -> None:
        if not 0 <= self.current < len(self.GRID):
            raise InvariantError(f"tuner index {self.current} outside the grid")
        self._check_pending()
        sq = self._long_sq  # NOTE(bursts): squared gains, symmetric, none of a candidate on itself
        if any(sq[i][i] or sq[i][j] != sq[j][i] or sq[i][j] < 0
               for i in range(len(sq)) for j in range(i + 1)):
            raise InvariantError("the long window's squared gains are not symmetric")
        for g, s in zip(self.GRID, self.shadows, strict=True):
            if s.cfg != g:
                raise InvariantError("miniature configuration does not match its grid value")
            s.check_invariants()
