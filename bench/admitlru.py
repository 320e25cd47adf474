"""bench/admitlru.py: a research eviction policy (not in the product). bench.policies and
bench.heldout report it as ``admitlru``; it keeps the product's EvictionPolicy protocol, so
``simulate`` replays it.

History: admitlru was the first of the research steps (admitlru, admitrun, admitbig, ghostbig,
ghostpair) that became the product's ``adaptive`` policy (kvpool/core/eviction/adaptive.py).
Each step is now the product class with the later steps taken out, so the figures recorded
for it in docs/benchmarks.md still reproduce: admitlru is ``adaptive`` with neither filter
being a ghost (AdmitTuner.GRID here), no size rule (NOTE(big)), and miniatures fed block by
block instead of by release runs.

AdmitLRU: classlru (kvpool/core/eviction/classlru.py) plus an admission window, with the
tuner choosing among classlru's bonuses and two kinds of window.

Why: classlru's classes keep frequent content longer, but new content always enters the
pool, so a loop longer than the pool, or one-off scans over a stable hot set, flush it
(docs/benchmarks.md "Eviction candidates and held-out shapes": W-TinyLFU's admission and
S3-FIFO's quick demotion win those cells). Both are one mechanism here, a window queue in
front of the class queues (the "main" cache):

- ``filter`` (S3-FIFO-like): new content used once enters the window; content the sketch
  has seen before (a ghost, in S3-FIFO's terms) and revivals go straight to main. While the
  window holds more than ``share`` of the blocks, ``evict`` takes its oldest block.
- ``duel`` (W-TinyLFU-like): all new content enters the window; while the window is over its
  share, its oldest block (the candidate) duels main's victim and the one whose content the
  FrequencySketch counts more often stays; the tie keeps the incumbent, which is what freezes
  part of a loop in the pool. Run lazily, at the moment a block is needed.

A block that leaves the window for main is restamped (it is new to main, at its tail).
Main evicts exactly as classlru does (``release stamp + class * bonus``). A configuration
``(bonus, share, duel)`` with ``share == 1.0`` has no window: that is classlru with a fixed
bonus, and ``(0.0, 1.0, False)`` is LRU, the tuner's start.

The tuner (AdmitTuner) is classlru's BonusTuner over miniatures of this policy, with two
changes: a lower EFFECT bar (NOTE(effect)) and a window configuration must lead every
no-window one before it is chosen (NOTE(lead)).

Why chains stay intact: a request's blocks are released tail first, so in each queue a child
sits ahead of its parent, and the sketch counts a child at most as often as its parent.
"""

from __future__ import annotations

from bench.wintune import feed
from kvpool.core.eviction import admit_tuner
from kvpool.core.eviction.adaptive import AdaptivePolicy

# the product's grid without the ghost filter
GRID10 = tuple(g for g in admit_tuner.AdmitTuner.GRID if g != admit_tuner.GHOST_FILTER)


class AdmitTuner(admit_tuner.AdmitTuner):
    """Invariant: the product tuner's, over GRID10, with no size rule (MIN_BIG never
    reached) and no long-window guard (LONG 0)."""

    GRID = GRID10
    MIN_BIG = 1 << 62
    LONG = 0.0


class AdmitLRUPolicy(AdaptivePolicy):
    """Invariant: AdaptivePolicy's; the tuner is fed sampled blocks one at a time."""

    name = "admitlru"
    DUEL_AGE = 0  # the duel reads the classes' sketch (before NOTE(age))
    COLD = None  # a fresh pool starts as LRU whatever it sees (before NOTE(cold))
    DRAIN = False  # a window left by a switch waits while main has blocks (before NOTE(drain))
    MOVE_SPLIT = False  # the ghost filter's share is fixed (before NOTE(arc))
    BURSTS = False  # no pass on the long window alone (before NOTE(bursts))
    TUNER = AdmitTuner

    def _sampled(self, c: int, k: int, depth: int, n: int) -> None:
        """A sampled block feeds the miniatures at once, scored block by block."""
        if (c >> 12) < self._sample and feed(self._tuner, c, k):
            self._set_cfg(self._tuner.bonus)
