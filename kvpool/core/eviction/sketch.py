"""FrequencySketch: how often each content hash was used recently, in a fixed byte table.

Keyed by the CRC-32 of the content hash, not by block id, so a count survives eviction and block
reuse. CRC-32 runs in C and is deterministic (Python's ``hash()`` is salted per process); the
caller computes it once per call and may use its other bits (ClassLRUPolicy samples by them)::

    c = crc32(hash)                         32 bits; SHA-256 digests or small test ints alike
    i = c & (2**b - 1)                      probe 1 (b = log2 of the table size)
    j = (c * GOLDEN32 mod 2**32) >> (32-b)  probe 2 (Fibonacci hashing of c)
"""

from __future__ import annotations

from kvpool.errors import ConfigError, InvariantError

GOLDEN32 = 0x9E3779B1  # 2**32 / golden ratio, odd
SATURATE = 15  # counters stop here: "used 5+ times" is the top class anyway
_HALVE = bytes(i >> 1 for i in range(256))
_LEGAL = bytes(range(SATURATE + 1))


class FrequencySketch:
    """Invariant: every counter <= SATURATE; ``0 < left <= period``; the table has ``2**bits``
    counters and at most ``period`` <= 1/4 of that many additions land between halvings.

    A count-min sketch with two probes into one byte table and conservative update (only the
    probes at the minimum grow), halved in place every ``period`` additions so that old
    popularity fades. Between halvings an estimate never under-counts (up to SATURATE).
    ``max_period`` > 0 caps the period.
    """

    __slots__ = ("table", "bits", "period", "left", "halvings", "_mask", "_shift")

    def __init__(self, capacity: int, min_bits: int = 20, max_period: int = 0) -> None:
        if not 4 <= min_bits <= 30:
            raise ConfigError(f"sketch min_bits={min_bits} must be within 4..30")
        # NOTE(sizing): 8 counters per pool block, but at least 2**min_bits: reuse distances
        # are trace properties, not pool properties, so a small pool still needs a long memory.
        bits = min(30, max(min_bits, (8 * max(capacity, 1) - 1).bit_length()))
        self.table = bytearray(1 << bits)  # the counters (owned here; halved in place)
        self.bits = bits  # log2 of the table size
        # additions between halvings: load <= 1/4; ``max_period`` > 0 shortens the memory
        # (AdaptivePolicy's NOTE(age)) but keeps the table: a smaller one, loaded to 1/4,
        # overcounted enough to break the duel's ties on a loop (docs/benchmarks.md)
        full = 1 << (bits - 2)
        self.period = min(full, max_period) if max_period > 0 else full
        self.left = self.period  # additions until the next halving
        self.halvings = 0  # how many times the table was halved
        self._mask = (1 << bits) - 1  # probe 1 = c & mask
        self._shift = 32 - bits  # probe 2 = (c * GOLDEN32 mod 2**32) >> shift

    def add(self, c: int) -> int:
        """Count one use of the hash whose CRC-32 is ``c``; returns its new estimate."""
        i = c & self._mask
        j = ((c * GOLDEN32) & 0xFFFFFFFF) >> self._shift
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

    def estimate(self, c: int) -> int:
        """The recent uses of the hash whose CRC-32 is ``c`` (no use is counted)."""
        t = self.table
        a = t[c & self._mask]
        b = t[((c * GOLDEN32) & 0xFFFFFFFF) >> self._shift]
        return a if a < b else b

    def halve(self) -> None:
        self.table[:] = self.table.translate(_HALVE)
        self.left = self.period
        self.halvings += 1

    def check_invariants(self) -> None:
        # NOTE(cost): translate drops the legal counter values in C; whatever remains is over
        # SATURATE (max() over a 4 MB table cost ~100 ms per check).
        if self.table.translate(None, _LEGAL) or not 0 < self.left <= self.period:
            raise InvariantError("frequency sketch counter or period out of range")
