"""bench/ghostwin.py: a research eviction policy (not in the product): W-TinyLFU whose window
is sized by ARC-style ghost feedback that respects prefix chains. bench.policies and
bench.heldout report it beside the classics as ``ghostwin`` (bench.policies.CANDIDATES).

Why this shape: every classic wins somewhere and loses elsewhere (W-TinyLFU's frequency
admission keeps part of a loop and the popular prefixes, but turns away the new turns of
returning conversations; LRU and ARC do the reverse). A W-TinyLFU window of ~100 % is LRU and
a small one is LFU-like, so one number spans both. It is moved the way ARC moves its target:
an id given up by the window (a duel loser) that comes back grows the window, one given up by
the main cache shrinks it, by the ratio of the two ghost lists' sizes (at least 1).

Prefix-aware: a ghost id moves the window only if every id before it in its request was
cached or a ghost too (else keeping it could not have made a hit: a prefix hit needs the whole
leading run). The replay touches a request's ids tail first (``depth == n - 1`` first, 0
last), so the request is complete when its depth-0 touch arrives.

Tried on bench.policies and dropped (each lost more cells): a hill climber on the cache's own
hit rate per period (Caffeine's; period-to-period noise walked the window away from the best
size), a ghost gain of 4 or 16, growing faster than shrinking, doubling the step while its sign
holds (all too LRU-like on zipf_prefix and scan_mix), admitting on a count tie, classifying
ghosts by count, ARC's ghost bound (segment + ghosts <= capacity), a starting window of 20, 50
or 100 % (100 % never leaves LRU: no main, no main ghosts), and a full-size LRU shadow whose
lead over a period (or since the start) pushes the window towards LRU's: on multiturn it still
ends below LRU, and the cumulative form locked zipf_prefix into LRU. Ghost lists of 1/4 of the
capacity each did best (15 of 39 cells below the best classic - 0.002, 1 and 1/2: 19, 17).

Hash-keyed like the baselines (OrderedDict LRU segments, exact counts halved every
``AGE * capacity`` touches, two ghost lists of ``GHOST * capacity`` ids): the figures say what the
mechanism is worth, not what a flat-array version would cost.
"""

from __future__ import annotations

from collections import OrderedDict

from bench.baselines import AgingCounts, Baseline

RESIDENT, GW, GM, NEW = 0, 1, 2, 3  # what a touched id was just before its touch


class GhostWindowTinyLFU(Baseline):
    """Invariant: ``win``, ``prob`` and ``prot`` are disjoint LRU segments (oldest first) of at
    most ``capacity`` ids in all, ``len(prot) <= PROTECTED * capacity``; the ghost lists
    ``gw`` and ``gm`` hold at most ``ghost_cap`` ids each, none of them cached;
    ``1 <= target <= capacity`` (the window's size to aim for)."""

    name = "ghostwin"
    PROTECTED = 0.8  # of main: SLRU's protected segment
    AGE = 10  # counts halve every AGE * capacity touches
    START = 0.01  # initial window, x capacity
    GHOST = 0.25  # each ghost list's length, x capacity

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.win: OrderedDict[int, None] = OrderedDict()
        self.prob: OrderedDict[int, None] = OrderedDict()
        self.prot: OrderedDict[int, None] = OrderedDict()
        self.freq = AgingCounts(self.AGE * capacity)
        self.target = max(1, round(self.START * capacity))  # window size
        self.ghost_cap = max(1, int(self.GHOST * capacity))
        self.run: list[int] = []  # per id of this request, tail first: RESIDENT, GW, GM, NEW
        self.gw: OrderedDict[int, None] = OrderedDict()  # ids the window gave up (duel losers)
        self.gm: OrderedDict[int, None] = OrderedDict()  # ids main gave up

    # ------------------------------------------------------------ window feedback
    def touch(self, h: int, depth: int, n: int) -> None:
        if depth == n - 1:
            self.run = []
        self.run.append(RESIDENT if h in self else GW if h in self.gw else GM if h in self.gm
                        else NEW)
        self.access(h)
        if depth == 0:
            run = self.run[::-1]
            k = 0
            while k < n and not run[k]:
                k += 1
            self._ghost_feedback(run[k:])

    def _ghost_feedback(self, run: list[int]) -> None:
        """ARC's adaptation, prefix-aware: a ghost id counts only where every id before it
        in the request was cached or a ghost too (else it could not have been a hit)."""
        delta = 0.0
        for r in run:
            if r == NEW:
                break
            if r == GW:
                delta += (max(1.0, len(self.gm) / len(self.gw)) if self.gw else 1.0)
            elif r == GM:
                delta -= max(1.0, len(self.gw) / len(self.gm)) if self.gm else 1.0
        self.target = min(float(self.capacity), max(1.0, self.target + delta))

    # ------------------------------------------------------------ the cache
    def access(self, h: int) -> None:
        self.freq.add(h)
        if h in self.win:
            self.win.move_to_end(h)
            return
        if h in self.prot:
            self.prot.move_to_end(h)
            return
        if h in self.prob:
            del self.prob[h]
            self._protect(h)
            return
        self.gw.pop(h, None)
        self.gm.pop(h, None)
        self.win[h] = None
        if len(self) > self.capacity:
            self._evict()
        elif len(self.win) > self.target:
            self.prob[self.win.popitem(last=False)[0]] = None

    def _protect(self, h: int) -> None:
        self.prot[h] = None
        cap = int(self.PROTECTED * (self.capacity - int(self.target)))
        while len(self.prot) > cap:
            self.prob[self.prot.popitem(last=False)[0]] = None

    def _evict(self) -> None:
        """One id leaves: the window's oldest duels main's victim while the window is over its
        target, else main's victim goes (the window's oldest when main is empty)."""
        main = self.prob or self.prot
        if len(self.win) > self.target and main:
            cand = next(iter(self.win))
            victim = next(iter(main))
            del self.win[cand]
            if self.freq.get(cand) > self.freq.get(victim):
                del main[victim]
                self.prob[cand] = None
                self._ghost(self.gm, victim)
            else:
                self._ghost(self.gw, cand)
            return
        if main:
            self._ghost(self.gm, main.popitem(last=False)[0])
        else:
            self._ghost(self.gw, self.win.popitem(last=False)[0])

    def _ghost(self, g: OrderedDict, h: int) -> None:
        g[h] = None
        if len(g) > self.ghost_cap:
            g.popitem(last=False)

    def check_invariants(self) -> None:
        segs = (self.win, self.prob, self.prot)
        cached = set().union(*segs)
        if len(cached) != sum(map(len, segs)) or len(cached) > self.capacity:
            raise AssertionError("segments overlap or overflow the capacity")
        if len(self.prot) > self.PROTECTED * self.capacity:
            raise AssertionError("protected segment above its share")
        for g in (self.gw, self.gm):
            if len(g) > self.ghost_cap or cached & set(g):
                raise AssertionError("a ghost list overflows or holds a cached id")
        if not 1 <= self.target <= self.capacity:
            raise AssertionError(f"window target {self.target} out of range")

    def __contains__(self, h: int) -> bool:
        return h in self.win or h in self.prob or h in self.prot

    def __len__(self) -> int:
        return len(self.win) + len(self.prob) + len(self.prot)

