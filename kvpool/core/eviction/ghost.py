"""GhostTable: which content was evicted recently, in three bytes per pool block.

ARC and S3-FIFO remember the ids of the last ``capacity`` evictions (their "ghosts"): content
that comes back while its ghost is remembered was evicted too early. An exact list of hashes
costs ~90 bytes per entry in Python (docs/eviction.md "The ghost table"); this table keeps a
24-bit fingerprint per entry instead, split in a tag byte and a 16-bit rest::

    c = crc32(hash)                       the caller's, as FrequencySketch's
    bucket = c % buckets                  ``buckets = ceil(capacity / SLOTS)``
    x = (c * GOLDEN32) mod 2**32          Fibonacci hashing mixes in the bucket's bits
    tag = x >> 24, or 1 when that is 0    (tag 0 marks a free slot)
    rest = (x >> 9) mod 2**15             stored shifted left by one, beside ...
    side = 1 if evicted from the window   ... the low bit (NOTE(side))

Each bucket is a ring of ``slots`` entries (SLOTS, or fewer so that the table holds about
``capacity``): a new ghost overwrites the slot after the bucket's newest, which holds its
oldest ghost (or the hole a taken one left). A lookup finds the tag with ``bytearray.find``
(memchr, in C) and compares the rest, about ``slots / 255`` times per lookup.

NOTE(batch): ``add`` comes with every eviction in every configuration (the filter needs its
ghost warm when the tuner picks it), and one Python write cost ~0.7 us of a ~2.5 us evict. Adds
wait in ``pending`` and are written together (numpy) once ``batch`` of them are waiting, or
before anything reads the table; a batch is written exactly as the adds one at a time would.
Batches hold at most ``slots`` adds, so no two of a batch land in one slot.

NOTE(slots): a ghost survives until ``slots`` more evictions land in its bucket, so the edge
of "the last capacity evictions" is soft where ARC's is sharp, and the filter wants it sharp.
At 1000 blocks (agent@1, fewshot_lora@1 in bench.heldout) the ghost filter got 0.1497 /
0.5033 with 64-slot buckets of 16-bit fingerprints, 0.1617 / 0.5061 with 512 slots, 0.1640 /
0.5065 with one 1000-slot ring, against 0.1663 / 0.5061 for an exact ghost. With 1024 slots a
ghost evicted 0.9 capacities ago survives with probability ~0.999, one evicted 1.1 ago
~0.001. A lookup matches a stranger with probability ~``slots`` / 2**23.

NOTE(side): each ghost keeps the side it was evicted from, the admission window or main, in
the low bit of its rest, and the table counts its ghosts of each side: ARC's two ghost lists
(B1, B2) in one table. The ghost filter moves its window's share by which side a returning
ghost left from and by the ratio of the two counts (NOTE(arc) in admit_tuner.py). The bit
came from the fingerprint, which had 24 bits: 23 match a stranger twice as often, still once
in ~8000 lookups at 1024 slots.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from collections.abc import Iterator

import numpy as np

from kvpool.core.eviction.sketch import GOLDEN32
from kvpool.errors import InvariantError

SLOTS = 1024  # entries per bucket, at most
BATCH = 256  # NOTE(batch): adds written together, at most
SMALL = 24  # a batch smaller than this is written by plain Python (numpy's calls cost more)


def fingerprint(c: int) -> tuple[int, int]:
    """CRC ``c``'s (tag, rest): a tag byte that is never 0 and a 15-bit rest shifted left by
    one (the low bit is the ghost's side, NOTE(side))."""
    x = (c * GOLDEN32) & 0xFFFFFFFF
    return (x >> 24) or 1, (x >> 8) & 0xFFFE


class GhostTable:
    """Invariant: ``len(tags) == len(rests) == buckets * slots``, ``len(ring) == buckets``
    and ``capacity <= buckets * slots < capacity + buckets``; ``ring[b] < slots`` is the slot
    of bucket ``b`` its next ghost overwrites; a zero tag marks a free slot; ``held`` counts
    the slots with a tag and ``windowed`` those whose side bit is set (NOTE(side)): written
    ghosts only, so read them after a ``take_side`` or ``flush``.
    An approximate set of the CRCs of the last ~``capacity`` evicted blocks: ``add`` when one
    is evicted, ``take`` when new content arrives (True when it was a ghost, which is then
    forgotten: the content is held again)."""

    __slots__ = ("capacity", "buckets", "slots", "tags", "rests", "ring", "max_slots",
                 "pending", "batch", "held", "windowed")

    def __init__(self, capacity: int, max_slots: int = SLOTS, batch: int = BATCH) -> None:
        self.capacity = max(1, capacity)
        self.max_slots = max_slots  # SLOTS; tests use small buckets
        self.buckets = -(-self.capacity // max_slots)
        self.slots = -(-self.capacity // self.buckets)  # per bucket, at most max_slots
        n = self.buckets * self.slots
        self.tags = bytearray(n)  # per slot: the tag, 0 = free
        self.rests = array("H", bytes(2 * n))  # per slot: the rest of the fingerprint
        self.ring = array("H", bytes(2 * self.buckets))  # per bucket: the slot to overwrite
        self.pending: list[int] = []  # NOTE(batch): adds not yet written (crc << 1 | side)
        self.batch = max(1, min(batch, self.slots))  # written once this many wait
        self.held = 0  # ghosts in the table (slots with a tag)
        self.windowed = 0  # ... of them evicted from the window (NOTE(side))

    def add(self, c: int, window: bool = False) -> None:
        """The content with CRC ``c`` was just evicted (from the window if ``window``): it
        becomes a ghost in its bucket's next slot (NOTE(batch): once the batch is written)."""
        p = self.pending
        p.append(c << 1 | window)
        if len(p) >= self.batch:
            self.flush()

    def flush(self) -> None:
        """NOTE(batch): write the pending adds, in order."""
        p = self.pending
        if len(p) < SMALL:
            for e in p:
                self._put(e >> 1, e & 1)
        else:
            self._put_many(np.array(p, dtype=np.uint64))
        p.clear()

    def _put_many(self, es: np.ndarray) -> None:
        """``_put`` for each ``crc << 1 | side`` of ``es`` in order, at most ``slots`` of
        them: the k-th of a bucket's lands ``k`` slots past its cursor."""
        n = self.slots
        cs, sides = es >> 1, (es & 1).astype(np.uint16)
        bs = (cs % self.buckets).astype(np.int64)
        order = np.argsort(bs, kind="stable")
        cs, bs, sides = cs[order], bs[order], sides[order]
        starts = np.flatnonzero(np.r_[True, bs[1:] != bs[:-1]])
        counts = np.diff(np.r_[starts, len(bs)])
        ring = np.frombuffer(self.ring, dtype=np.uint16)
        firsts = bs[starts]
        rank = np.arange(len(bs)) - np.repeat(starts, counts)
        idx = bs * n + (ring[firsts].astype(np.int64).repeat(counts) + rank) % n
        x = (cs * GOLDEN32) & 0xFFFFFFFF
        tags = (x >> 24).astype(np.uint8)
        tags[tags == 0] = 1
        all_tags = np.frombuffer(self.tags, dtype=np.uint8)
        all_rests = np.frombuffer(self.rests, dtype=np.uint16)
        was = all_tags[idx] != 0  # overwritten ghosts: uncounted
        self.held += len(idx) - int(np.count_nonzero(was))
        self.windowed += int(sides.sum()) - int((all_rests[idx][was] & 1).sum())
        all_tags[idx] = tags
        all_rests[idx] = ((x >> 8) & 0xFFFE).astype(np.uint16) | sides
        ring[firsts] = (ring[firsts] + counts) % n

    def _put(self, c: int, side: int) -> None:
        """Write one ghost: CRC ``c`` (evicted from the window if ``side``) in its bucket's
        next slot."""
        b = c % self.buckets
        r = self.ring[b]
        n = self.slots
        i = b * n + r
        if self.tags[i]:  # its oldest ghost is overwritten
            self.held -= 1
            self.windowed -= self.rests[i] & 1
        x = (c * GOLDEN32) & 0xFFFFFFFF
        self.tags[i] = (x >> 24) or 1
        self.rests[i] = (x >> 8) & 0xFFFE | side
        self.held += 1
        self.windowed += side
        self.ring[b] = r + 1 if r + 1 < n else 0

    def _find(self, c: int) -> int:
        """The slot holding ``c``'s fingerprint in its bucket, or -1."""
        if self.pending:
            self.flush()
        start = (c % self.buckets) * self.slots
        end = start + self.slots
        tag, rest = fingerprint(c)
        tags, rests = self.tags, self.rests
        i = tags.find(tag, start, end)
        while i >= 0 and rests[i] & 0xFFFE != rest:
            i = tags.find(tag, i + 1, end)
        return i

    def take(self, c: int) -> bool:
        """Whether the content with CRC ``c`` is a ghost; if so it is forgotten."""
        return self.take_side(c) >= 0

    def take_side(self, c: int) -> int:
        """The side the content with CRC ``c`` was evicted from as a ghost (1: the window,
        0: main; the newest copy's where it was a ghost twice), -1 if it is none. Every copy
        is forgotten: the content is held again."""
        if self.pending:
            self.flush()
        n = self.slots
        start = (c % self.buckets) * n
        end = start + n
        newest = start + self.ring[c % self.buckets] + n - 1  # the slot written last, + n
        tag, rest = fingerprint(c)
        tags, rests = self.tags, self.rests
        side, age = -1, n
        i = tags.find(tag, start, end)
        while i >= 0:
            if rests[i] & 0xFFFE == rest:
                tags[i] = 0
                self.held -= 1
                self.windowed -= rests[i] & 1
                if (newest - i) % n < age:  # written more recently than the copies before
                    side, age = rests[i] & 1, (newest - i) % n
            i = tags.find(tag, i + 1, end)
        return side

    def __contains__(self, c: int) -> bool:
        return self._find(c) >= 0

    def __len__(self) -> int:
        """Ghosts remembered (slots with a tag)."""
        self.flush()
        return self.held

    def check_invariants(self) -> None:
        self.flush()
        n, b = self.slots, self.buckets
        if not len(self.tags) == len(self.rests) == b * n or len(self.ring) != b:
            raise InvariantError("ghost table sized unlike its bucket count")
        if n > self.max_slots or not self.capacity <= b * n < self.capacity + b:
            raise InvariantError("ghost table holds far from its capacity")
        if any(r >= n for r in self.ring):
            raise InvariantError("ghost ring cursor outside its bucket")
        used = np.frombuffer(self.tags, dtype=np.uint8) != 0
        sides = np.frombuffer(self.rests, dtype=np.uint16)[used] & 1
        if self.held != int(used.sum()) or self.windowed != int(sides.sum()):
            raise InvariantError("ghost counts differ from the table")


class ExactGhost:
    """Invariant: at most ``capacity`` CRCs, the most recently evicted, oldest first, each with
    its side (True: the window); ``windowed`` counts those.

    GhostTable's protocol over an exact OrderedDict: ARC's ghost. The tuner's miniatures keep
    one (at most 2048 CRCs each); research policies in bench/ keep one per pool to measure
    what the compact table gives up."""

    __slots__ = ("ghost", "capacity", "windowed")

    def __init__(self, capacity: int) -> None:
        self.ghost: OrderedDict[int, bool] = OrderedDict()
        self.capacity = max(1, capacity)
        self.windowed = 0

    @property
    def held(self) -> int:
        return len(self.ghost)

    def add(self, c: int, window: bool = False) -> None:
        """``c`` was just evicted (from the window if ``window``): the newest ghost (again,
        if it was one); the oldest beyond ``capacity`` are forgotten."""
        ghost = self.ghost
        self.windowed += window - ghost.pop(c, False)
        ghost[c] = window
        if len(ghost) > self.capacity:
            self.windowed -= ghost.popitem(last=False)[1]

    def take(self, c: int) -> bool:
        """Whether ``c`` is a ghost; if so it is forgotten."""
        return self.take_side(c) >= 0

    def take_side(self, c: int) -> int:
        """GhostTable.take_side: 1 for a ghost of the window, 0 of main, -1 for none."""
        side = self.ghost.pop(c, None)
        if side is None:
            return -1
        self.windowed -= side
        return int(side)

    def __contains__(self, c: int) -> bool:
        return c in self.ghost

    def __iter__(self) -> Iterator[int]:
        return iter(self.ghost)

    def __len__(self) -> int:
        return len(self.ghost)

    def check_invariants(self) -> None:
        if len(self.ghost) > self.capacity or self.windowed != sum(self.ghost.values()):
            raise InvariantError("ghost over capacity or its sides miscounted")
