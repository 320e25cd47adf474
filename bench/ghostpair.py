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

ghostpair became the product's ``adaptive`` policy (kvpool/core/eviction/adaptive.py) with
the exact ghost replaced by a GhostTable of three bytes per block; ghostpair is ``adaptive`` with
the exact ghost, to measure what the compact table gives up.
"""

from __future__ import annotations

from kvpool.core.eviction.adaptive import AdaptivePolicy
from kvpool.core.eviction.ghost import ExactGhost


class GhostPairPolicy(AdaptivePolicy):
    """Invariant: AdaptivePolicy's, with an exact ghost."""

    name = "ghostpair"
    DUEL_AGE = 0  # the duel reads the classes' sketch (before NOTE(age))
    COLD = None  # a fresh pool starts as LRU whatever it sees (before NOTE(cold))
    DRAIN = False  # a window left by a switch waits while main has blocks (before NOTE(drain))
    MOVE_SPLIT = False  # the ghost filter's share is fixed (before NOTE(arc))
    BURSTS = False  # no pass on the long window alone (before NOTE(bursts))

    @staticmethod
    def _new_ghost(capacity: int) -> ExactGhost:
        return ExactGhost(capacity)
