"""bench/fixedsplit.py: the product's ``adaptive`` before NOTE(arc) (kvpool/core/eviction/
admit_tuner.py), its ghost filter's window held at 10 % of the pool (and before NOTE(cold)'s
depth test and hold in adaptive.py, which came after). bench.policies,
bench.heldout and bench.policy_ceiling report it as ``fixedsplit`` beside the product, so
what the moving share wins and loses reproduces (docs/benchmarks.md "`arcsplit`: the ghost
filter's share moved as ARC's")."""

from __future__ import annotations

from kvpool.core.eviction.adaptive import AdaptivePolicy


class FixedSplitPolicy(AdaptivePolicy):
    """Invariant: AdaptivePolicy's, with the ghost filter's share fixed."""

    name = "fixedsplit"
    MOVE_SPLIT = False  # the ghost filter's share is fixed (before NOTE(arc))
    BURSTS = False  # no pass on the long window alone (before NOTE(bursts))
    SHALLOW = HOLD = False  # before NOTE(cold)'s depth test and hold
