"""GhostTable (kvpool/core/eviction/ghost.py): an approximate set of the last ~capacity evicted
CRCs, checked against an exact model (the last evictions, in order) under random operations,
and for the sharp edge that the ghost filter needs (docs/eviction.md)."""

from __future__ import annotations

import copy
import pickle
import random
from zlib import crc32

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from kvpool.core.eviction.ghost import SLOTS, GhostTable, fingerprint
from kvpool.errors import InvariantError


def crcs(n: int, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [crc32(rng.randbytes(32)) for _ in range(n)]


def test_a_fresh_ghost_is_found_once_then_forgotten():
    g = GhostTable(1000)
    c = crcs(1)[0]
    assert c not in g and not g.take(c) and len(g) == 0
    g.add(c)
    assert c in g and len(g) == 1
    assert g.take(c) and c not in g and not g.take(c) and len(g) == 0
    g.check_invariants()


def test_the_table_holds_three_bytes_per_block():
    g = GhostTable(1 << 16)
    assert g.buckets * g.slots == 1 << 16 and g.slots == SLOTS
    assert len(g.tags) + g.rests.itemsize * len(g.rests) == 3 * (1 << 16)
    small = GhostTable(100)  # fewer slots per bucket, so a small pool's ghost stays small
    assert small.buckets == 1 and small.slots == 100 and len(small.tags) == 100
    odd = GhostTable(5000)  # five buckets of 1000, not of 1024
    assert odd.buckets == 5 and odd.slots == 1000


def kept_by_age(g: GhostTable, cap: int) -> tuple[float, float]:
    """The shares of ghosts kept among those evicted 0.7-0.9 and 1.1-1.4 capacities ago."""
    stream = crcs(3 * cap, seed=cap)
    for c in stream:
        g.add(c)

    def kept(newest: float, oldest: float) -> float:
        ages = stream[len(stream) - int(oldest * cap):len(stream) - int(newest * cap)]
        return sum(c in g for c in ages) / len(ages)

    return kept(0.7, 0.9), kept(1.1, 1.4)


@pytest.mark.parametrize("cap", [1000, 16000, 40000])
def test_the_edge_is_sharp_around_one_capacity(cap):
    """NOTE(slots) in ghost.py: with 64-slot buckets, ~8 % of the ghosts evicted 0.7 to 0.9
    capacities ago were gone and ~4 % of those evicted 1.1 to 1.4 ago were kept; the ghost
    filter lost up to 0.0165 to an exact ghost (agent@1 at 1000 blocks). With SLOTS = 1024 it
    keeps > 97 % and < 3 %."""
    young, old = kept_by_age(GhostTable(cap), cap)
    assert young > 0.97 and old < 0.03, (young, old)
    soft_young, soft_old = kept_by_age(GhostTable(cap, max_slots=64), cap)
    assert soft_young < young or soft_old > old  # the edge 64-slot buckets give


def test_strangers_rarely_match():
    g = GhostTable(4000)
    for c in crcs(4000, seed=1):
        g.add(c)
    strangers = crcs(20000, seed=2)
    assert sum(c in g for c in strangers) < 0.005 * len(strangers)


def test_a_tag_is_never_the_free_mark():
    assert all(fingerprint(c)[0] != 0 for c in range(0, 1 << 32, 4093))
    zero = next(c for c in range(1 << 20) if ((c * 0x9E3779B1) & 0xFFFFFFFF) >> 24 == 0)
    assert fingerprint(zero)[0] == 1


def test_a_copy_is_independent_and_equal():
    g = GhostTable(200)
    for c in crcs(150):
        g.add(c)
    twin = copy.deepcopy(g)
    assert twin.tags == g.tags and twin.rests == g.rests and twin.ring == g.ring
    c = crcs(1)[0]
    assert twin.take(c) and c in g  # taking from the copy leaves the original
    assert pickle.loads(pickle.dumps(g)).tags == g.tags


def test_check_invariants_catches_a_cursor_outside_its_bucket():
    g = GhostTable(100)
    g.ring[0] = g.slots
    with pytest.raises(InvariantError):
        g.check_invariants()


class GhostMachine(RuleBasedStateMachine):
    """The table against an exact model: a ghost added fewer than ``slots`` adds ago in its
    own bucket, and not taken since, is found; a taken one is not (until added again)."""

    def __init__(self) -> None:
        super().__init__()
        self.g = GhostTable(12, max_slots=4)  # three rings of four slots
        self.history: list[int] = []  # adds, oldest first
        self.taken: set[int] = set()

    @rule(c=st.integers(0, 400))
    def add(self, c: int) -> None:
        self.g.add(c)
        self.history.append(c)
        self.taken.discard(c)

    @rule(c=st.integers(0, 400))
    def take(self, c: int) -> None:
        expect = self._young(c)
        got = self.g.take(c)
        if expect:
            assert got
        if got:
            self.taken.add(c)

    def _young(self, c: int) -> bool:
        """``c`` was added, not taken since, and fewer than ``slots`` adds landed in its bucket
        after its last add (so its slot was not overwritten)."""
        if c in self.taken or c not in self.history:
            return False
        last = len(self.history) - 1 - self.history[::-1].index(c)
        later = [x for x in self.history[last + 1:] if x % self.g.buckets == c % self.g.buckets]
        return len(later) < self.g.slots

    @invariant()
    def young_ghosts_are_found(self) -> None:
        for c in set(self.history[-50:]):
            if self._young(c):
                assert c in self.g
        b = self.g.buckets
        for c in self.taken:  # forgotten, unless a stranger shares its bucket and fingerprint
            assert c not in self.g or any(fingerprint(c) == fingerprint(x) and x % b == c % b
                                          for x in set(self.history) - {c})
        assert len(self.g) <= self.g.buckets * self.g.slots
        self.g.check_invariants()


TestGhostMachine = GhostMachine.TestCase
TestGhostMachine.settings = settings(max_examples=60, stateful_step_count=60, deadline=None)


@given(st.lists(st.integers(0, (1 << 32) - 1), max_size=300), st.integers(1, 500),
       st.integers(1, 64))
@settings(max_examples=60, deadline=None)
def test_no_more_ghosts_than_slots(adds, cap, max_slots):
    g = GhostTable(cap, max_slots)
    for c in adds:
        g.add(c)
    assert len(g) <= min(len(adds), cap + g.buckets - 1)
    assert g.buckets * g.slots >= cap
    g.check_invariants()


@given(st.lists(st.tuples(st.integers(0, (1 << 32) - 1), st.integers(0, 30)), min_size=300, max_size=900),
       st.integers(1, 5000), st.sampled_from([32, 64, 1024]), st.integers(1, 300))
@settings(max_examples=80, deadline=None)
def test_a_batch_is_written_as_one_add_at_a_time(ops, cap, max_slots, batch):
    """NOTE(batch) in ghost.py: pending adds, written together (by numpy once SMALL or more
    wait), leave the table as writing each at once does, and a take sees every add before
    it. ``x == 0`` makes an op a take of its CRC; CRCs repeat so buckets fill past a ring."""
    g, one = GhostTable(cap, max_slots, batch), GhostTable(cap, max_slots, batch=1)
    for c, x in ops:
        c %= 1 << (8 + x)  # small CRCs too: many share a bucket
        if x == 0:
            assert g.take(c) == one.take(c)
        else:
            g.add(c)
            one.add(c)
    assert len(g) == len(one)
    assert (g.tags, g.rests, g.ring) == (one.tags, one.rests, one.ring)
    g.check_invariants()
