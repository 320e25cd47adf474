"""Helpers shared by the eviction-policy tests."""

from __future__ import annotations

from kvpool.core.eviction import ClassLRUPolicy, DoorARCPolicy, EvictionPolicy, make_policy


def key(i: int) -> bytes:
    return i.to_bytes(8, "little")


def small(name: str, capacity: int) -> EvictionPolicy:
    """A policy sized for tests (small sketches, so invariants stay cheap)."""
    if name == "classlru":
        return ClassLRUPolicy(capacity, sketch_min_bits=8)
    if name == "doorarc":
        return DoorARCPolicy(capacity, sketch_min_bits=8)
    return make_policy(name, capacity)
