"""Helpers shared by the eviction-policy tests."""

from __future__ import annotations

from bench.doorarc import DoorARCPolicy
from bench.arctune import ArcTunePolicy
from bench.follow import FollowPolicy
from bench.wintune import WinTunePolicy
from kvpool.core.eviction import (POLICIES, AdaptivePolicy, ClassLRUPolicy, EvictionPolicy,
                                  make_policy)


def key(i: int) -> bytes:
    return i.to_bytes(8, "little")


# Every policy the protocol tests drive: the product's, and the block-protocol research ones.
DRIVEN = sorted([*POLICIES, DoorARCPolicy.name, FollowPolicy.name, WinTunePolicy.name,
                 ArcTunePolicy.name])


def small(name: str, capacity: int) -> EvictionPolicy:
    """A policy sized for tests (small sketches, so invariants stay cheap)."""
    if name == "classlru":
        return ClassLRUPolicy(capacity, sketch_min_bits=8)
    if name == "adaptive":
        return AdaptivePolicy(capacity, sketch_min_bits=8)
    if name == "doorarc":
        return DoorARCPolicy(capacity, sketch_min_bits=8)
    if name == "arctune":
        return ArcTunePolicy(capacity, sketch_min_bits=8)
    if name == "wintune":
        return WinTunePolicy(capacity, sketch_min_bits=8)
    if name == "follow":
        return FollowPolicy(capacity)
    return make_policy(name, capacity)
