"""bench/doorarc_ghosts.py: the ghost store of the research policy doorarc (bench/doorarc.py).

GhostFilter: which content hashes were evicted recently, and from which queue, in flat tables.

ARC remembers the ids it evicted (its ghost lists B1 and B2, about one cache of ids) so that a
miss on one of them says "a larger share for that queue would have made this a hit". Lists of
ids cost ~100 bytes an entry in Python; this keeps one 32-bit slot per pool block (rounded up
to a power of two) indexed by the CRC-32 of the content hash::

    slot = table[c & mask]  =  tag (6 bits of c) << 26 | queue (2 bits) << 24 | serial (24 bits)

``serial`` counts evictions; a slot is a ghost while fewer than ``horizon`` evictions have
happened since (ARC's lists hold one cache of ids in all). A ring of one byte per horizon
position remembers which queue each of the last ``horizon`` evictions came from, so the ghost
counts per queue (ARC's ``|B1|`` and ``|B2|``) are exact up to slot collisions, which only
lose a ghost early (the newer eviction takes the slot).
"""

from __future__ import annotations

from array import array

from kvpool.errors import InvariantError

SERIAL = 0xFFFFFF  # 24-bit eviction serials, compared modulo 2**24
GONE = 3  # ring value: that eviction's ghost was hit (or never counted)


class GhostFilter:
    """Invariant: ``count[q]`` is the number of ring positions holding ``q`` (q in 0, 1, 2);
    ``0 < horizon <= 2**23``; every live slot's serial is within ``horizon`` of ``serial``."""

    __slots__ = ("table", "ring", "count", "serial", "horizon", "_mask")

    def __init__(self, capacity: int) -> None:
        size = 64
        while size < capacity:
            size <<= 1
        self.table = array("I", bytes(4 * size))  # slot per CRC; 0 = empty
        self.horizon = max(1, min(capacity, 1 << 23))  # evictions a ghost is remembered for
        self.ring = bytearray(b"\x03") * self.horizon  # eviction serial % horizon -> queue
        self.count = [0, 0, 0]  # live ghosts per queue
        self.serial = 0  # evictions so far (mod 2**24)
        self._mask = size - 1

    def add(self, c: int, q: int) -> None:
        """Content with CRC-32 ``c`` was evicted from queue ``q`` (0, 1 or 2)."""
        s = self.serial = (self.serial + 1) & SERIAL
        r = s % self.horizon
        ring = self.ring
        old = ring[r]
        if old != GONE:
            self.count[old] -= 1
        ring[r] = q
        self.count[q] += 1
        self.table[c & self._mask] = ((c >> 26) << 26) | (q << 24) | s

    def take(self, c: int) -> int:
        """The queue content ``c`` was evicted from if it is a ghost (forgetting it), else -1."""
        i = c & self._mask
        e = self.table[i]
        if not e or (e >> 26) != (c >> 26):
            return -1
        s = e & SERIAL
        if ((self.serial - s) & SERIAL) >= self.horizon:
            return -1
        self.table[i] = 0
        q = (e >> 24) & 3
        r = s % self.horizon
        if self.ring[r] == q:
            self.ring[r] = GONE
            self.count[q] -= 1
        return q

    def check_invariants(self) -> None:
        for q in (0, 1, 2):
            if self.ring.count(q) != self.count[q]:
                raise InvariantError(f"ghost count {q} is {self.count[q]}, ring holds "
                                     f"{self.ring.count(q)}")
        if not 0 < self.horizon <= 1 << 23:
            raise InvariantError(f"ghost horizon {self.horizon} out of range")
