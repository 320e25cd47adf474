"""Random operation sequences for the research eviction policies in bench/, and the two ways
their tests apply them: alike to several policies (``drive``: compare victims), or to one
while tracking its evictable members (``evict_members``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from hypothesis import strategies as st

from kvpool.core.eviction import EvictionPolicy, LRUPolicy
from tests.core.policy_helpers import key

# (op, block, content): 0 = release new content, 1 = revive (hit + re-release), 2 = evict
OPS = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 15), st.integers(0, 40)),
               max_size=120)


def drive(ops, policies, before_evict=None) -> Iterator[list[int]]:
    """Apply ``ops`` to every policy in ``policies`` alike; yields each evict's victims."""
    content: dict[int, bytes] = {}
    for op, b, h in ops:
        first = policies[0]
        if op == 0 and b not in first:
            if b in content:  # the block's old content was evicted: it is free again
                content.pop(b)
            content[b] = key(h)
            for p in policies:
                p.insert(b, key(h), 0, 0.0)
        elif op == 1 and b in first:
            for p in policies:
                p.on_hit(content[b])
                p.remove(b)
                p.insert(b, content[b], 0, 0.0)
        elif op == 2 and len(first):
            if before_evict is not None:
                before_evict()
            yield [p.evict() for p in policies]


def evict_members(p: EvictionPolicy, ops, check: Callable[[EvictionPolicy, set[int]], bool],
                  hit: bool = True) -> None:
    """Apply ``ops`` to ``p`` alone, tracking its evictable blocks: a revival removes and
    re-inserts (new content; after an on_hit when ``hit``); an evict returns a member, which
    then is gone. ``check(p, members)`` holds after every op; the policy's own invariants at
    the end."""
    members: set[int] = set()
    for op, b, h in ops:
        if op == 0 and b not in p:
            p.insert(b, key(h), 0, 0.0)
            members.add(b)
        elif op == 1 and b in p:
            if hit:
                p.on_hit(key(h))
            p.remove(b)
            assert b not in p and len(p) == len(members) - 1
            p.insert(b, key(h), 0, 0.0)
        elif op == 2 and members:
            v = p.evict()
            assert v in members and v not in p
            members.discard(v)
        assert check(p, members)
    p.check_invariants()


def evicts_like_lru(p: EvictionPolicy, ops, before_evict=None) -> None:
    """``p`` picks LRU's victim at every evict of ``ops``, and ends as large, consistent."""
    lru = LRUPolicy(16)  # OPS's blocks are 0..15
    for got, want in drive(ops, [p, lru], before_evict):
        assert got == want
    p.check_invariants()
    assert len(p) == len(lru)


def revive_chain(p: EvictionPolicy, chain: list[int], rounds: int = 3) -> None:
    """Release ``chain`` (block i holds content 100 + i at depth i) tail first ``rounds``
    times, each time after a prefix hit on every block but the first time."""
    for rnd in range(rounds):
        for b in reversed(chain):
            if rnd:
                p.on_hit(key(100 + b))
                p.remove(b)
            p.insert(b, key(100 + b), b, 0.0)


def assert_chain_leaves_deepest_first(p: EvictionPolicy, capacity: int = 64) -> None:
    """A chain revived twice, released tail first, then new content floods ``p`` (a policy
    of ``capacity`` blocks): the chain's blocks leave deepest first, never orphaning a cached
    block."""
    chain = [0, 1, 2, 3]
    revive_chain(p, chain)
    for b in range(10, 80):
        p.insert(b, key(b), 0, 0.0)
        if len(p) > capacity:
            p.evict()
    order = [p.evict() for _ in range(len(p))]
    assert [b for b in order if b in chain] == [b for b in [3, 2, 1, 0] if b in order]


def same_hits(mini, reference, ids) -> None:
    """``mini`` (a tuner's miniature) hits exactly where ``reference`` (a bench/baselines.py
    cache of the same capacity) would, access by access, counts the same hits, and stays
    consistent."""
    hits = 0
    for h in ids:
        hit = h in reference
        assert mini.access(h) == hit
        hits += hit
        reference.access(h)
    assert mini.hits == hits
    mini.check_invariants()
