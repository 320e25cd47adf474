"""Helpers shared by the eviction-policy tests."""

from __future__ import annotations

from kvpool.core.eviction import ClassLRUPolicy, EvictionPolicy, make_policy


def key(i: int) -> bytes:
    return i.to_bytes(8, "little")


def small(name: str, capacity: int) -> EvictionPolicy:
    """A policy sized for tests (ClassLRU with a small sketch, so invariants stay cheap)."""
    if name == "classlru":
        return ClassLRUPolicy(capacity, sketch_min_bits=8)
    return make_policy(name, capacity)
