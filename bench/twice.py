"""bench/twice.py: ``twice``, the ghost filter promoting at the second revival (research; not
adopted: docs/benchmarks.md "`twice`").

    python -m bench.twice [--json FILE] [--shapes permits_office ...] [--seeds 1 2]
                          [--capacities 1000 4000 16000] [--no-classics] [--scale 1]

S3-FIFO moves a block from its small queue to main only if it was used again more than once
while there (Yang et al., SOSP'23). ``adaptive``'s ghost filter promotes at the first
revival in its window. ``twice`` is ``adaptive`` with S3-FIFO's rule under the ghost
filter, in the pool and in the ghost filter's miniature alike: a window block revived for
the first time goes back to the window's tail; at its second revival there it goes to main.
The other configurations are unchanged. It was frozen (its product form, copy and hash
kept) before ``permits_office`` and ``course_grading`` were first replayed, with a rule for
adopting it written down; it met the rule on those two and failed it on the seen cells.

Per cell this replays LRU, the product, ``twice`` and the classics of bench/baselines.py
(the target: the best of them and LRU, minus 0.002), as bench/bursts.py does for its arms.
Hit rates are deterministic: one run. The default shapes are the two held out for it.
"""

from __future__ import annotations

from bench import bursts
from kvpool.core.eviction import AdaptivePolicy
from kvpool.core.eviction.admit_tuner import WIN, AdmitTuner, MiniAdmit
from kvpool.core.eviction.base import PENDING
from kvpool.core.eviction.tuner import run_hits
from kvpool.errors import InvariantError

BLIND = ("permits_office", "course_grading")
PROMOTE = 2  # S3-FIFO's "more than once"


class TwiceMini(MiniAdmit):
    """The ghost filter's miniature with the rule: ``revived`` counts each window crc's
    revivals there, and a revival before the PROMOTE-th is a hit in its own queue (the
    window: to its tail, restamped). Blocks are fed one at a time, so each decision reads
    the miniature as it is at that block."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.revived: dict[int, int] = {}

    def access_runs(self, runs) -> int:
        hits = 0
        for run, miss in runs:
            n = run_hits(run, self.where, miss)
            hits += n
            self.hits += n
            for c, k, d in run:
                super().access_runs((([(c, self._queue(c, k), d)], -1),))
        return hits

    def _queue(self, c: int, k: int) -> int:
        """Where crc ``c`` (class ``k``) goes if used now: the window while it has been
        revived there fewer than PROMOTE times; a crc outside the window has no count."""
        if self.where.get(c) != WIN:
            self.revived.pop(c, None)
            return k
        r = self.revived.pop(c, 0) + 1
        if r < PROMOTE:
            self.revived[c] = r
            return WIN
        return k

    def _evict(self) -> None:
        """MiniAdmit's eviction; the window's oldest crc, if it went, takes its count."""
        head = next(iter(self.qs[WIN]), None)
        super()._evict()
        if head is not None and head not in self.where:
            self.revived.pop(head, None)

    def check_invariants(self) -> None:
        super().check_invariants()
        if any(self.where.get(c) != WIN or not 0 < r < PROMOTE
               for c, r in self.revived.items()):
            raise InvariantError("revival count of a crc outside the window, or past PROMOTE")


class TwiceTuner(AdmitTuner):
    """AdmitTuner whose ghost filter's miniature is a TwiceMini."""

    def _miniatures(self, size: int, classes: int) -> list:
        minis = super()._miniatures(size, classes)
        return [TwiceMini(m.capacity, m.cfg, m.freq, self._duel_freq, self._moving)
                if m.duel is None and m.share < 1.0 else m for m in minis]


class TwicePolicy(AdaptivePolicy):
    """``adaptive`` with the rule in the pool: ``_wr`` counts a block's revivals in the
    window (set when it is revived, kept across a defrag move, cleared when new content
    enters); a revival before the PROMOTE-th sends it back to the window's tail while the
    ghost filter runs."""

    name = "twice"
    TUNER = TwiceTuner

    def __init__(self, capacity: int = 0, sketch_min_bits: int = 20, cfg=None) -> None:
        self._wr = bytearray(capacity)  # block -> its revivals in the window
        super().__init__(capacity, sketch_min_bits, cfg)

    def _grow(self, block_id: int) -> None:
        super()._grow(block_id)
        self._wr.extend(bytes(len(self._where) - len(self._wr)))

    def remove(self, block_id: int) -> None:
        in_win = 0 <= block_id < len(self._where) and self._where[block_id] == WIN
        super().remove(block_id)
        self._wr[block_id] = min(self._wr[block_id] + 1, PROMOTE) if in_win else 0

    def _stamp_at_tail(self, block_id: int, block_hash: bytes, q: int) -> None:
        """Before the link (``_where`` still says PENDING for a revival): a window block's
        early revival goes back to the window; new content starts with no revival."""
        if self._where[block_id] == PENDING and self._hash[block_id] == block_hash:
            if 0 < self._wr[block_id] < PROMOTE and self.duel is None and self.share < 1.0:
                q = WIN
                self._nw += 1
        else:
            self._wr[block_id] = 0
        super()._stamp_at_tail(block_id, block_hash, q)

    def _insert_moved(self, block_id: int, block_hash: bytes, memo: tuple) -> int:
        """NOTE(move): the block keeps its place and its count."""
        self._wr[block_id] = self._wr[memo[3]]
        return super()._insert_moved(block_id, block_hash, memo)

    def check_invariants(self) -> None:
        super().check_invariants()
        if len(self._wr) != len(self._where) or max(self._wr, default=0) > PROMOTE:
            raise InvariantError("revival counts out of range")


ARMS = (AdaptivePolicy, TwicePolicy)


def main(argv: list[str] | None = None) -> dict:
    return bursts.main(argv, "twice", __doc__, ARMS, BLIND)


if __name__ == "__main__":
    main()
