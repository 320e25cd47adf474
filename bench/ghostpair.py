"""bench/ghostpair.py: a research eviction policy (not in the product). bench.policies and
bench.heldout report it as ``ghostpair``.

GhostPair: ``ghostbig`` (bench/ghostbig.py) whose tuner can choose either filter. One filter
asks the FrequencySketch whether content was seen before (``admitbig``'s, long memory). The
other asks a ghost of the last C evictions (``ghostbig``'s, one pool's worth of memory).

Why: how far back "seen before" should reach depends on the workload. With the filter fixed,
at 1000 blocks the ghost won where content comes back within about a turnover or not at all:
fewshot_lora@1 0.511 against the sketch's 0.472, prompt_rollout@1 0.575 against 0.526. The
sketch won where documents come back after longer gaps: doc_fanout@1 0.4411 against the
ghost's 0.4299 (ARC 0.4408). ``ghostbig`` lost doc_fanout at 1000 by 0.009 to ``admitbig``
and went below LRU at @1 (docs/benchmarks.md "ghostbig"). Rather than fix a memory length,
the tuner gets both filters as candidates: its miniatures measure which one the workload
rewards.

The configuration ``(0.0, 0.1, None)``, a duel field of None, is the ghost filter. It sits
in the grid right after the sketch filter ``(0.0, 0.1, False)``, so the tuner's
nearest-first rule sees them as neighbours. Everything else is ``ghostbig``'s: the grid,
the bars, the size rule, and the ghost fed by every eviction in every configuration.
"""

from __future__ import annotations

from bench.admitlru import AdmitTuner, Cfg
from bench.ghostbig import GhostBigPolicy, GhostTuner, MiniGhost, to_window

GHOST_FILTER: Cfg = (0.0, 0.1, None)  # type: ignore[assignment]  # duel None: ask the ghost
GRID = AdmitTuner.GRID[:8] + (GHOST_FILTER,) + AdmitTuner.GRID[8:]


def pair_to_window(ghost, key, k: int, duel: bool | None) -> bool:
    """The window rule of the configuration's filter: the ghost's when ``duel`` is None,
    else admitlru's (all under the duel, under the sketch filter class 0)."""
    if duel is None:
        return to_window(ghost, key, False)
    return duel or k == 0


class MiniPair(MiniGhost):
    """Invariant: MiniGhost's; only the ghost filter's miniature feeds its ghost."""

    __slots__ = ()

    def _to_window(self, c: int, k: int) -> bool:
        return pair_to_window(self.ghost, c, k, self.duel)

    def feeds_ghost(self) -> bool:
        return self.share < 1.0 and self.duel is None


class PairTuner(GhostTuner):
    """Invariant: GhostTuner's, over GRID (both filters) with MiniPair miniatures."""

    GRID = GRID
    MINI = MiniPair


class GhostPairPolicy(GhostBigPolicy):
    """Invariant: GhostBigPolicy's, with a PairTuner."""

    name = "ghostpair"
    TUNER = PairTuner

    def _to_window(self, block_hash: bytes, k: int) -> bool:
        return pair_to_window(self._ghost, block_hash, k, self.duel)
