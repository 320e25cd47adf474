"""Eviction policies: which evictable cached block the prefix cache gives up first.

``POLICIES`` / ``make_policy`` name the choices of ``--eviction-policy`` and ``kvpool replay
--policy``:

- ``lru`` (LRUPolicy, lru.py): the block released longest ago; vLLM's order.
- ``classlru`` (ClassLRUPolicy, classlru.py): frequency classes with a recency bonus tuned
  online by shadow caches (tuner.py), counting uses in one FrequencySketch (sketch.py). It
  starts as exactly LRU and departs from it only on significant evidence.
- ``doorarc`` (DoorARCPolicy, doorarc.py): ARC's ghost-adapted split between recency and
  frequency, kept as biases on release time (0 is exactly LRU), a TinyLFU doorkeeper for
  content seen before, and frequency classes within the frequency side; ghosts in a
  GhostFilter (ghosts.py). Not the default: see README for the cells it loses.

The protocol the PrefixIndex drives (EvictionPolicy) and the queue storage the two
share are in base.py; ``simulate`` (replay.py) replays a trace through one policy alone.
"""

from __future__ import annotations

from kvpool.core.eviction.base import EvictionPolicy, LinkedQueuesPolicy
from kvpool.core.eviction.classlru import ClassLRUPolicy
from kvpool.core.eviction.doorarc import DoorARCPolicy
from kvpool.core.eviction.lru import LRUPolicy
from kvpool.core.eviction.replay import simulate
from kvpool.core.eviction.sketch import FrequencySketch
from kvpool.errors import ConfigError

POLICIES: dict[str, type[EvictionPolicy]] = {p.name: p for p in (LRUPolicy, ClassLRUPolicy, DoorARCPolicy)}


def make_policy(name: str, capacity: int) -> EvictionPolicy:
    """A new policy by name for a pool of ``capacity`` blocks. ConfigError (a ValueError) names
    the valid choices when ``name`` is unknown."""
    cls = POLICIES.get(name) if isinstance(name, str) else None
    if cls is None:
        raise ConfigError(f"eviction policy {name!r} is unknown: use one of "
                          f"{', '.join(sorted(POLICIES))}")
    return cls(capacity)


__all__ = ["POLICIES", "ClassLRUPolicy", "DoorARCPolicy", "EvictionPolicy", "FrequencySketch",
           "LRUPolicy", "LinkedQueuesPolicy", "make_policy", "simulate"]
