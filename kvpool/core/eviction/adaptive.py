"""AdaptivePolicy: classlru's frequency classes behind an admission window, tuned online.

What it does (docs/eviction.md): main is classlru (kvpool/core/eviction/classlru.py): five FIFO
queues by how often content was used recently, evicting the head whose ``release stamp +
class * bonus`` is smallest. In front of main sits an optional window queue holding at most
``share`` of the blocks; while it is over its share, ``evict`` takes the window's oldest block
instead. Which new content enters the window is the configuration's ``duel``
(kvpool/core/eviction/admit_tuner.py):

- True (W-TinyLFU-like): all of it; the window's oldest block duels main's victim and the one
  whose content the FrequencySketch counts more often stays (the tie keeps the incumbent,
  which is what freezes part of a loop longer than the pool in the pool);
- False (S3-FIFO-like filter): content the sketch has never counted; the rest goes to main;
- None (the same filter with ARC's memory): content not evicted recently (a GhostTable of
  about one pool's worth of evictions, fed by every eviction in every configuration, so it
  is warm when the tuner chooses it).

An AdmitTuner simulates every configuration on miniatures and moves off the current one only
on significant evidence, starting as LRU ``(0.0, 1.0, False)``.

Why: each classic wins some workloads (docs/benchmarks.md "Eviction candidates and held-out
shapes"): frequency admission keeps part of a loop and the popular prefixes under one-off
scans; quick demotion of one-off content wins when reuse comes within a turnover; LRU keeps
the new turns of returning conversations. One window and a tuner span them.

Why chains stay intact: a request's blocks are released tail first, so in each queue a child
sits ahead of its parent, and the sketch counts a child at most as often as its parent.
"""

from __future__ import annotations

from math import inf
from zlib import crc32

from kvpool.core.eviction.admit_tuner import (CLASSES, LRU, WIN, AdmitTuner, Cfg, returned,
                                              to_window)
from kvpool.core.eviction.base import PENDING, StampedQueuesPolicy
from kvpool.core.eviction.classlru import CLASS_OF_COUNT
from kvpool.core.eviction.ghost import GhostTable
from kvpool.core.eviction.sketch import FrequencySketch
from kvpool.core.eviction.tuner import NO_MISS, ReleaseRuns
from kvpool.errors import InvalidBlockError, InvariantError

# NOTE(cold)'s states: no rule (or no more); no hit and no eviction yet; on COLD since the
# pool filled without a hit, no hit yet
COLD_OFF, COLD_ARMED, COLD_ON = 0, 1, 2


class AdaptivePolicy(StampedQueuesPolicy):
    """Invariant: queues 0..4 hold main's blocks by class, queue 5 the window, each in
    non-decreasing stamp order; ``_nw`` counts the window; ``_w[k] == k * bonus * capacity``;
    ``cfg`` is the tuner's choice when tuned. O(1) per call, amortized (a sampled insert also
    feeds the miniatures)."""

    name = "adaptive"
    K = CLASSES + 1
    TUNER: type[AdmitTuner] = AdmitTuner  # research variants (bench/) swap the grid or rules
    # NOTE(age): the duel compares counts that halve at least every DUEL_AGE pool turnovers
    # (W-TinyLFU resets its counts every 10). The classes' sketch keeps a long memory on
    # small pools (NOTE(sizing) in sketch.py: 262 turnovers at 1000 blocks), and there a
    # main filled by a bonus held content with old, high counts that won every duel until
    # the next halving: code_edit@1 at 1000 blocks sat on the 1 % duel at 0.25-0.29 per
    # segment for half the trace where the duel fixed from the start had 0.33-0.37
    # (docs/benchmarks.md "The duel's memory"). Where the classes' sketch halves less often
    # (pools below ~8700 blocks; 0: the research steps in bench/), a second sketch of the
    # same table size and a shorter period counts the same uses for the duel.
    DUEL_AGE: int = 30
    # NOTE(admit): under the duel, new content that takes the window over its share pushes the
    # window's oldest block into main with no duel, as W-TinyLFU admits freely while main has
    # room. Before, a fresh pool filled the window with every block it held and drained it
    # two blocks per eviction, dueling all the way, so main took tens of thousands of
    # evictions to fill: the duel held fixed from the start read 0.060 on uniform@3 at 16000
    # blocks where W-TinyLFU reads 0.135 (0.132 now; docs/benchmarks.md "The duel's fill").
    # The tuned pool fills as LRU and gains little; the miniatures keep the old fill (made
    # faithful, they led the tuner into the duel where it loses live, same section).
    # NOTE(drain): after the tuner leaves a window configuration for one without a window,
    # the window's blocks (up to its old share) are evicted in release order with main's, as
    # class 0. Before, a window within its share of 1.0 was never evicted while main held a
    # block, so up to a fifth of the pool stayed pinned until hits took its blocks back:
    # mooncake@1@4000 lost 0.005 to it. The miniatures never switch, so they had no such
    # window; this makes the pool what they measured (docs/eviction.md "Leaving a window").
    # False: the research steps in bench/, which came before it.
    DRAIN: bool = True
    # NOTE(cold): a pool that fills without a single hit has seen no reuse, so LRU's order has
    # nothing to go on. At the first eviction, if no hit came before it, the policy takes COLD
    # (the 1 % duel: a tie keeps the incumbent, so the pool keeps what it holds and tries new
    # content in a small window), W-TinyLFU's answer to a scan or a loop longer than the
    # pool, and holds it whatever the tuner chooses until the first shallow hit: a revival
    # LRU would have had too (of a block released within the last len(pool) releases). Then
    # the pool takes the tuner's choice, LRU where the tuner is still on COLD (the start it
    # would have had). A deeper hit is one the duel won: content LRU would have evicted.
    # Started as LRU, the tuned pool lost a loop's second pass before any miniature had
    # evidence; ended by the first hit of any depth, the loop's third (0.082 / 0.078 at 1000
    # blocks, W-TinyLFU 0.090 / 0.088); following the tuner while on, the detours its
    # miniatures took in their first turnovers (0.338 / 0.342 at 4000, W-TinyLFU 0.376 /
    # 0.356): 0.093 / 0.089 and 0.378 / 0.360 now. Staying on the duel whatever the hit went
    # below LRU by up to 0.017 on a scan, a re-read of part of it and then chats: the
    # re-read's hits are deep, the chats' first is shallow (docs/eviction.md "A cold start").
    # A hit before the first eviction leaves the policy as it was; a hit on a block in use
    # says nothing of depth and leaves the rule on; None turns the rule off (the research
    # steps in bench/).
    COLD: Cfg | None = (0.0, 0.01, True)
    # NOTE(cold)'s depth test and hold; False: any hit ends the rule (SHALLOW) and the pool
    # follows the tuner while the rule is on (HOLD), the research steps in bench/ before them
    SHALLOW: bool = True
    HOLD: bool = True
    # NOTE(cold-long): a block released at a depth of the pool's capacity or more (its chain is
    # longer than the pool) ends NOTE(cold), or keeps it from starting. Such a request
    # releases more than a pool of its own blocks between its lookup and its head's release,
    # so none of its revivals is shallow, and under the duel its head (released last, new or
    # tied with the incumbents) never reaches main, while its next turn needs the head
    # first: the pool kept the oldest tails and nothing a lookup reaches. A fill by one such
    # request says nothing of reuse across requests. On swe_agent@1@1000 (written blind after
    # d7675f4; 99.6 % of its requests longer than the pool) the rule held the duel to the
    # end: 0.1063 against LRU's 0.4057 (docs/benchmarks.md "`swe_agent` and
    # `companion_chat`"). False: the research steps in bench/, which came before it.
    LONG_CHAIN: bool = True
    # NOTE(arc) in admit_tuner.py: the ghost filter moves its share as ARC moves its target
    # (``_p`` blocks while it runs); False: the research steps in bench/, which came before.
    MOVE_SPLIT: bool = True
    # NOTE(bursts) in admit_tuner.py: the tuner also passes a candidate on the long window's
    # evidence alone; False: the research steps in bench/, which came before.
    BURSTS: bool = True

    def __init__(self, capacity: int = 0, sketch_min_bits: int = 20,
                 cfg: Cfg | None = None) -> None:
        super().__init__(capacity, sketch_min_bits)
        self._nw = 0  # blocks in the window
        self._ghost = self._new_ghost(self._scale)
        age = self.DUEL_AGE * self._scale
        self._duel = (FrequencySketch(self._scale, sketch_min_bits, age)  # NOTE(age)
                      if self.DUEL_AGE and self._sketch.period > age else self._sketch)
        # one use counted in every sketch there is; returns the classes' count
        self._count = self._sketch.add if self._duel is self._sketch else self._count_both
        self._tuner = (self.TUNER(self._scale, self._sketch.estimate, self._duel.estimate,
                                  self.MOVE_SPLIT, self.BURSTS) if cfg is None else None)
        self._p = 0.0  # NOTE(arc): the ghost filter's target in blocks, while it runs
        self._sample = self._tuner.threshold if self._tuner is not None else 0
        self._runs = ReleaseRuns(self._tuner)  # NOTE(runs) in tuner.py: what it is fed
        self._set_cfg(LRU if cfg is None else cfg)
        self._cold = (COLD_ARMED if self._tuner is not None and self.COLD is not None
                      else COLD_OFF)  # NOTE(cold)

    @staticmethod
    def _new_ghost(capacity: int) -> GhostTable:
        """The ghost of about ``capacity`` evictions (bench/ghostpair.py keeps an exact one)."""
        return GhostTable(capacity)

    def _set_cfg(self, cfg: Cfg) -> None:
        self.cfg = cfg
        bonus, self.share, self.duel = cfg
        self._w = [k * bonus * self._scale for k in range(CLASSES)]
        if self._moves():  # NOTE(arc): from the split the miniature measured
            if self._tuner is not None:
                self.share = self._tuner.ghost_share()
            self._p = self.share * self._scale
            self.share = self._p / self._scale

    def _moves(self) -> bool:
        """NOTE(arc): the configuration is the ghost filter, and its share moves."""
        return self.MOVE_SPLIT and self.duel is None and self.cfg[1] < 1.0

    def insert(self, block_id: int, block_hash: bytes, depth: int, now: float) -> None:
        where = self._where
        if self._memo is None and 0 <= block_id < len(where):
            w = where[block_id]  # NOTE(speed): _insert_start's common case, inlined
            if w < self.K:
                raise InvalidBlockError(f"block {block_id} is already evictable")
        else:
            w, memo = self._insert_start(block_id, block_hash)
            if memo is not None:
                self._nw += self._insert_moved(block_id, block_hash, memo) == WIN
                return
        c = crc32(block_hash)
        n = 0  # uses counted by this insert's sketch.add (0: a revival)
        if w == PENDING and self._hash[block_id] == block_hash:
            k = q = CLASS_OF_COUNT[self._sketch.estimate(c)]  # a revival: on_hit counted it
        else:
            n = self._count(c)
            k = q = CLASS_OF_COUNT[n]
            if self.share < 1.0:  # one test on the no-window path (NOTE(speed))
                if self.duel:  # to_window's answer under the duel, inlined
                    self._nw += 1
                    q = WIN
                else:
                    q = self._admit(c, k)
        self._stamp_at_tail(block_id, block_hash, q)
        if q == WIN and self.duel and self._nw > self.share * self._len + 1:
            self._win_to_main()  # NOTE(admit)
        if self._cold and depth >= self._scale and self.LONG_CHAIN:  # NOTE(cold-long)
            self._long_chain()
        runs = self._runs
        if runs.run or (c >> 12) < self._sample:
            self._sampled(c, k, depth, n)
        elif not depth or n == 1:  # NOTE(speed): _sampled's net effect, no run, no sample
            runs.miss = depth or NO_MISS

    def _admit(self, c: int, k: int) -> int:
        """Where new content (CRC ``c``, class ``k``) goes while there is a window: WIN
        (counted) or ``k``, by the configuration's ``duel`` (``to_window``); a ghost that
        returns under NOTE(arc) moves the share."""
        if self.duel is None and self.MOVE_SPLIT:
            side = self._ghost.take_side(c)
            if side >= 0:
                self._p = returned(self._p, self._scale, side, self._ghost)
                self.share = self._p / self._scale
                return k
        elif not to_window(self.duel, k, self._ghost.take, c):
            return k
        self._nw += 1
        return WIN

    def _sampled(self, c: int, k: int, depth: int, n: int) -> None:
        """After an insert (content CRC ``c``, class ``k``, ``n`` uses counted, 0 on a
        revival) that is sampled or finds a run collected (insert does the rest): a sampled
        block joins its release run; the chain's head ends the run (a call only when there is
        a run or a miss to end)."""
        runs = self._runs
        if n == 1:  # first seen: no cache held it, so no lookup reaches deeper
            runs.miss = depth
        if (c >> 12) < self._sample and runs.add(c, k, depth):
            self._follow()
        if not depth and (runs.run or runs.miss != NO_MISS) and runs.head():
            self._follow()

    def _follow(self) -> None:
        """The tuner's choice changed: the pool takes it, unless NOTE(cold) holds the duel."""
        if self._cold != COLD_ON or not self.HOLD:
            self._set_cfg(self._tuner.bonus)

    def _count_both(self, c: int) -> int:
        """NOTE(age): a use counted in the duel's sketch too; the classes' count."""
        self._duel.add(c)
        return self._sketch.add(c)

    def on_hit(self, block_hash: bytes) -> None:
        if self._cold:  # NOTE(cold)
            self._cold_hit()
        self._count(crc32(block_hash))

    def _cold_hit(self) -> None:
        """NOTE(cold): a hit before the first eviction turns the rule off; once it is on, a
        hit ends it here only without SHALLOW (remove ends it at a shallow revival)."""
        if self._cold == COLD_ARMED:
            self._cold = COLD_OFF
        elif not self.SHALLOW:
            self._warm()

    def remove(self, block_id: int) -> None:
        if self._cold == COLD_ON and self._shallow(block_id):  # NOTE(cold)
            self._warm()
        self._nw -= self._unlink(block_id) == WIN
        self._where[block_id] = PENDING  # keep the hash: a re-insert is a revival, not a use

    def _shallow(self, block_id: int) -> bool:
        """NOTE(cold): reviving evictable ``block_id`` is a hit LRU would have had too: it
        was released within the last ``len(self)`` releases."""
        return (0 <= block_id < len(self._where) and self._where[block_id] < self.K
                and self._clock - self._stamp[block_id] <= self._len)

    def _long_chain(self) -> None:
        """NOTE(cold-long): a release deeper than the pool: NOTE(cold) never starts, or ends."""
        if self._cold == COLD_ARMED:
            self._cold = COLD_OFF
        else:
            self._warm()

    def _warm(self) -> None:
        """NOTE(cold): the rule ends; the pool takes the tuner's choice, LRU where the
        tuner is still on COLD."""
        if self._tuner.bonus == self.COLD:
            self._tuner.start_at(LRU)
        self._cold = COLD_OFF
        self._set_cfg(self._tuner.bonus)

    def discard(self, block_id: int) -> None:
        q = self._where[block_id] if 0 <= block_id < len(self._where) else PENDING
        super().discard(block_id)
        self._nw -= q == WIN

    def _victim(self) -> int:
        """Main's queue whose head has the smallest key (classlru's choice), or -1."""
        nxt, stamp, kk = self._next, self._stamp, self.K
        best, key, q = -1, inf, 0
        for wq in self._w:  # ties go to the lower class
            n = nxt[q]
            if n != q:
                s = stamp[n - kk] + wq
                if s < key:
                    best, key = q, s
            q += 1
        return best

    def _window_older(self, v: int) -> bool:
        """NOTE(drain): the window's oldest block goes before main's victim (queue ``v``)
        by LRU's key, its release stamp (class 0: no bonus)."""
        nxt, stamp, kk = self._next, self._stamp, self.K
        return stamp[nxt[WIN] - kk] < stamp[nxt[v] - kk] + self._w[v]

    def _win_to_main(self) -> None:
        """The window's oldest block moves to the tail of its class queue, restamped
        (NOTE(speed): unlinked and linked inline, on every duel's path)."""
        nxt, prv = self._next, self._prev
        node = nxt[WIN]
        succ = nxt[node]
        nxt[WIN] = succ
        prv[succ] = WIN
        b = node - self.K
        q = CLASS_OF_COUNT[self._sketch.estimate(crc32(self._hash[b]))]
        last = prv[q]
        prv[node] = last
        nxt[node] = q
        nxt[last] = node
        prv[q] = node
        self._stamp[b] = self._clock
        self._where[b] = q
        self._nw -= 1

    def _pop(self, q: int) -> int:
        """Evict queue ``q``'s head; its content becomes a ghost (of the window's side or
        main's, NOTE(side) in ghost.py)."""
        self._ghost.add(crc32(self._hash[self._next[q] - self.K]), q == WIN)
        return self._unlink_head(q)

    def evict(self) -> int:
        if self._cold == COLD_ARMED:  # NOTE(cold): the first eviction, and no hit before it
            self._cold = COLD_ON
            self._tuner.start_at(self.COLD)
            self._set_cfg(self.COLD)
        if not self._nw and self._len:  # NOTE(speed): no window, so main's victim
            return self._pop(self._victim())
        if not self._len:
            raise IndexError("evict from an empty AdaptivePolicy")
        target = self.share * self._len
        for _ in range(2 if self.duel else 0):  # NOTE(fill): a window over its share (the
            if self._nw <= target + 1:  # share just went down, or blocks left main) hands its
                break  # oldest blocks to main, two per call, without a spike
            self._win_to_main()
        v = self._victim()
        if v >= 0 and (not self._nw or self._nw < target):
            if self.share >= 1.0 and self.DRAIN and self._window_older(v):  # NOTE(drain)
                self._nw -= 1
                return self._pop(WIN)
            return self._pop(v)
        if v >= 0 and self.duel:  # the window's overflow duel; the tie keeps the incumbent
            est, kk = self._duel.estimate, self.K  # NOTE(age)
            cand = self._hash[self._next[WIN] - kk]
            if est(crc32(cand)) > est(crc32(self._hash[self._next[v] - kk])):
                self._win_to_main()
                return self._pop(v)
        self._nw -= 1
        return self._pop(WIN)

    def check_invariants(self) -> None:
        super().check_invariants()
        if len(self.queue(WIN)) != self._nw:
            raise InvariantError(f"window holds {len(self.queue(WIN))}, count {self._nw}")
        if self._w != [k * self.cfg[0] * self._scale for k in range(CLASSES)]:
            raise InvariantError("eviction-key bonuses do not match the configuration")
        if self.share != (self._p / self._scale if self._moves() else self.cfg[1]):
            raise InvariantError("window share differs from the configuration's")
        if self._cold not in (COLD_OFF, COLD_ARMED, COLD_ON) or (
                self._cold and self._tuner is None):
            raise InvariantError(f"cold-start state {self._cold} with no tuner or unknown")
        if self._tuner is not None:
            held = self.HOLD and self._cold == COLD_ON and self.cfg == self.COLD  # NOTE(cold)
            if self.cfg != self._tuner.bonus and not held:
                raise InvariantError("the configuration in use is not the tuner's choice")
            self._tuner.check_invariants()
        self._runs.check_invariants()
        self._sketch.check_invariants()
        if self._duel is not self._sketch:
            self._duel.check_invariants()
        self._ghost.check_invariants()
