"""Helpers shared by the eviction-policy tests."""

from __future__ import annotations

from kvpool.core.eviction import ClassLRUPolicy, EvictionPolicy, make_policy
from kvpool.core.eviction_guarded import GuardedPolicy
from kvpool.core.eviction_session import SessionPolicy


def key(i: int) -> bytes:
    return i.to_bytes(8, "little")


def small(name: str, capacity: int) -> EvictionPolicy:
    """A policy sized for tests (ClassLRU with a small sketch, so invariants stay cheap)."""
    if name == "classlru":
        return ClassLRUPolicy(capacity, sketch_min_bits=8)
    if name == "session":
        return SessionPolicy(capacity, sketch_min_bits=8)
    if name == "guarded":
        return GuardedPolicy(capacity, sketch_min_bits=8)
    return make_policy(name, capacity)
