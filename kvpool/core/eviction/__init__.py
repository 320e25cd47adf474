"""Eviction policies: which evictable cached block the prefix cache gives up first.

``POLICIES`` / ``make_policy`` name the choices of ``--eviction-policy`` and ``kvpool replay
--policy``:

- ``lru`` (LRUPolicy, base.py): the block released longest ago; vLLM's order.
- ``classlru`` (ClassLRUPolicy, classlru.py): frequency classes with a recency bonus tuned
  online by shadow caches (tuner.py), counting uses in one FrequencySketch (sketch.py). It
  starts as exactly LRU and departs from it only on significant evidence.
- ``adaptive`` (AdaptivePolicy, adaptive.py): classlru's classes behind an admission window
  whose filling rule (W-TinyLFU's duel, a sketch filter, or a ghost filter over a GhostTable,
  ghost.py) the AdmitTuner (admit_tuner.py) chooses with classlru's statistical rule, starting
  as LRU (docs/eviction.md).

Research policies (``ghostwin``, ``doorarc``, ``follow``, the steps that led to ``adaptive``)
live in bench/, not here:
bench.policies and bench.heldout compare them with these.

The protocol the PrefixIndex drives (EvictionPolicy) and the queue storage the two
share are in base.py, beside LRU; ``simulate`` (kvpool/replay/loop.py) replays a trace
through one policy alone.
"""

from __future__ import annotations

from kvpool.core.eviction.adaptive import AdaptivePolicy
from kvpool.core.eviction.base import EvictionPolicy, LinkedQueuesPolicy, LRUPolicy
from kvpool.core.eviction.classlru import ClassLRUPolicy
from kvpool.core.eviction.sketch import FrequencySketch
from kvpool.errors import ConfigError

POLICIES: dict[str, type[EvictionPolicy]] = {
    p.name: p for p in (LRUPolicy, ClassLRUPolicy, AdaptivePolicy)}


def make_policy(name: str, capacity: int) -> EvictionPolicy:
    """A new policy by name for a pool of ``capacity`` blocks. ConfigError (a ValueError) names
    the valid choices when ``name`` is unknown."""
    cls = POLICIES.get(name) if isinstance(name, str) else None
    if cls is None:
        raise ConfigError(f"eviction policy {name!r} is unknown: use one of "
                          f"{', '.join(sorted(POLICIES))}")
    return cls(capacity)


__all__ = ["POLICIES", "AdaptivePolicy", "ClassLRUPolicy", "EvictionPolicy", "FrequencySketch",
           "LRUPolicy", "LinkedQueuesPolicy", "make_policy"]
