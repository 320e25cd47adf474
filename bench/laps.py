"""bench/laps.py: ``adaptive``'s configurations held fixed, with and without laps in main
(research; docs/benchmarks.md "`twice`").

    python -m bench.laps [--cells call_center@1@16000 ...] [--scale 1] [--json FILE]

bench/s3fifo_parts.py found much of S3-FIFO's lead at 16000 blocks in its main queue, a FIFO
in which an id used while there gets another lap per use (up to three). ``LapsPolicy`` is
``adaptive`` held at one configuration whose main keeps that count: a block revived from
main earns a lap (at most MAX_LAPS; new content and a block revived from the window start
with none), and when main's victim has a lap it goes to its queue's tail instead, one lap
spent, and the victim is chosen again. Main's order stays by release (plus the classes'
bonus), so this is S3-FIFO's count on LRU's order, not its FIFO. Per cell it replays LRU
and, for each configuration (LRU, the ghost filter, bonus 1), the policy without and with
laps: hit rates minus LRU's, deterministic, one run. Not a tuner candidate yet: a lap
helps some shapes at 16000 blocks (permits_office@2: bonus 1 with laps +0.0244, S3-FIFO
+0.0243) and costs others (bank_kyc@2@4000: -0.0299).
"""

from __future__ import annotations

from bench.cells import cell_trace
from bench.s3fifo_parts import report
from kvpool.core.eviction import AdaptivePolicy, make_policy
from kvpool.core.eviction.admit_tuner import GHOST_FILTER, LRU, WIN, Cfg
from kvpool.core.eviction.base import PENDING
from kvpool.errors import InvariantError
from kvpool.replay.loop import simulate

CONFIGS: dict[str, Cfg] = {"lru": LRU, "ghost": GHOST_FILTER, "bonus1": (1.0, 1.0, False)}
CELLS = ("call_center@1@16000", "telecom_noc@2@16000", "permits_office@2@16000",
         "bank_kyc@2@4000")
MAX_LAPS = 3  # S3-FIFO's 2-bit count


class LapsPolicy(AdaptivePolicy):
    """Invariant: ``_laps[b] <= MAX_LAPS`` for every block id; the rest is AdaptivePolicy's
    (held at ``cfg``: no tuner)."""

    name = "laps"

    def __init__(self, capacity: int, cfg: Cfg) -> None:
        self._laps = bytearray(capacity)  # block -> laps earned while in main
        super().__init__(capacity, cfg=cfg)

    def _grow(self, block_id: int) -> None:
        super()._grow(block_id)
        self._laps.extend(bytes(len(self._where) - len(self._laps)))

    def insert(self, block_id: int, block_hash: bytes, depth: int, now: float) -> None:
        where = self._where
        revival = (0 <= block_id < len(where) and where[block_id] == PENDING
                   and self._hash[block_id] == block_hash)
        super().insert(block_id, block_hash, depth, now)
        if not revival:  # new content (or a defrag move's new place): no lap
            self._laps[block_id] = 0

    def remove(self, block_id: int) -> None:
        in_main = 0 <= block_id < len(self._where) and self._where[block_id] < WIN
        super().remove(block_id)
        self._laps[block_id] = min(self._laps[block_id] + 1, MAX_LAPS) if in_main else 0

    def _pop(self, q: int) -> int:
        """Main's victim in queue ``q`` with a lap goes to the tail, one lap spent, and the
        victim is chosen again; then AdaptivePolicy's pop."""
        while q < WIN:
            b = self._next[q] - self.K
            if not self._laps[b]:
                break
            self._laps[b] -= 1
            self._unlink(b)
            self._stamp_at_tail(b, self._hash[b], q)
            q = self._victim()
        return super()._pop(q)

    def check_invariants(self) -> None:
        super().check_invariants()
        if len(self._laps) != len(self._where) or max(self._laps, default=0) > MAX_LAPS:
            raise InvariantError("laps out of range")


def cell(key: str, scale: float = 1.0) -> dict[str, float]:
    """``key`` = shape@seed@capacity: LRU's hit rate (``lru_hit_rate``), and each
    configuration's minus LRU's without and with laps (``<name>``, ``<name>+laps``)."""
    reqs, c = cell_trace(key, scale)
    n = sum(map(len, reqs))
    lru = simulate(reqs, make_policy("lru", c), c)[0] / n
    out = {"lru_hit_rate": lru}
    for k, cfg in CONFIGS.items():
        out[k] = simulate(reqs, AdaptivePolicy(c, cfg=cfg), c)[0] / n - lru
        out[k + "+laps"] = simulate(reqs, LapsPolicy(c, cfg), c)[0] / n - lru
    return out


def main(argv: list[str] | None = None) -> dict:
    return report("laps", __doc__, cell, CELLS, argv)


if __name__ == "__main__":
    main()
