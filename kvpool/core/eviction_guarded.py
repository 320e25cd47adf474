"""``guarded``: the session policy with finer classes, kept from doing worse than LRU.

Four changes to SessionPolicy (eviction_session.py), each measured with ``python -m
bench.policies`` (figures in the commit messages and the module's tests):

- A session seen for the first time is classed by the length of its run (its request):
  ``[1, 4)``, ``[4, 16)``, ``[16, 64)`` or ``64+`` blocks (log-4 spaced buckets, not fitted to a
  trace). Whether a conversation comes back depends on how it started, and first turns are
  most of what a pool holds; sessions seen before keep SessionPolicy's mean-gap classes::

      session class  0..3  new, run length 1-3 / 4-15 / 16-63 / 64+ blocks
                     4..6  back, mean gap <= 1 / <= 4 / > 4 pool turnovers

- Six block levels instead of five: 0 the run's tail, then content used 1, 2, 3-4, 5-8 or 9+
  times (FrequencySketch): use count separates shared and long-lived content further.

- The sketch has at least 2**22 counters (4 MB; SessionPolicy: 2**20): levels are use counts,
  and every halving of the sketch moves all content down a level at once, which the planner's
  per-level statistics then have to relearn. A bigger table halves 4x less often.

- A PlanGuard (eviction_guard.py) simulates LRU and the planned retentions on a
  hash-sampled slice of the releases and lets the policy use the plan only once the plan wins
  there significantly; otherwise every retention is 0, which is exactly LRU. The guard costs
  hit rate while it waits for evidence (the conversation trace at 16000 blocks: 0.286 without
  it, 0.2815 with it; at 64000 it never switches, so the policy stays LRU there) and buys
  robustness where classes carry no information: without it the policy was below LRU on
  multiturn at 1000/4000/16000 and uniform at 16000 (by 0.0002-0.0013), with it nowhere in
  bench.policies' traces.

Everything else (run grouping, retention planning, chain order, O(1) amortized calls) is
SessionPolicy's.
"""

from __future__ import annotations

from kvpool.core.eviction_guard import PlanGuard
from kvpool.core.eviction_session import SessionPolicy

# Level of a non-tail block by its use count estimate: 1, 2, 3-4, 5-8, 9+ -> 1..5.
_LEVEL6 = bytes(1 if c <= 1 else min((c - 1).bit_length(), 4) + 1 for c in range(256))
_NEW = bytes(min(n.bit_length() - 1, 6) // 2 if n else 0 for n in range(128))  # 1-3,4-15,..


class GuardedPolicy(SessionPolicy):
    """Invariant: SessionPolicy's, with NS = 7 session classes and NL = 6 levels; the
    retentions in force are the planner's while the guard prefers the plan, else all 0.

    See the module docstring.
    """

    name = "guarded"
    NS = 7
    NL = 6
    K = NS * NL + 1
    LEVEL = _LEVEL6

    def __init__(self, capacity: int = 0, sketch_min_bits: int = 22, sample: int = 4096,
                 period: int | None = None, guard: bool = True) -> None:
        super().__init__(capacity, sketch_min_bits, sample, period)
        if guard:
            g = self._guard = PlanGuard(self._scale, self._planner)
            self._gthr = min(g.threshold, self._thr)

    @property
    def uses_plan(self) -> bool:
        """Whether the planned retentions are in force (False: the policy is LRU now)."""
        return self._guard is None or self._guard.use_plan

    def session_class(self, key: bytes) -> int:
        """Count a turn of the session named ``key``; its class: 0..3 by the run's length if
        the session is new, else 4..6 by its mean gap (see the module docstring)."""
        mg = self.session_turn(key)
        if mg is not None:
            cap = self._scale
            return 4 if mg <= cap else (5 if mg <= 4 * cap else 6)
        n = self._rlen
        return _NEW[n if n < 128 else 127]
