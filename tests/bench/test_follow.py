"""bench.follow (a research policy): the experts report what they evict, the live cache tracks
a fixed expert to within a block, the protocol invariants hold in both modes (the whole
stream simulated, or a sample with a separate live copy), and bench.policies reports it."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from bench.baselines import replay
from bench.follow import EXPERTS, FollowPolicy, Panel
from bench.policies import CANDIDATES
from bench.policy_traces import zipf_prefix
from kvpool.replay.loop import simulate
from tests.core.policy_helpers import key


def test_every_expert_reports_exactly_what_it_evicts():
    rng = random.Random(5)
    for name, cls in EXPERTS.items():
        e = cls(20)
        out: list[int] = []
        e.on_evict = out.append
        held: set[int] = set()
        for _ in range(3000):
            h = rng.randrange(60)
            out.clear()
            e.access(h)
            held = (held | {h}) - set(out)
            assert h not in out, name
            assert held == {x for x in range(60) if x in e}, name
            assert len(e) <= 20, name


def test_a_single_expert_is_followed_to_within_a_block():
    reqs = zipf_prefix(seed=1, requests=600)
    blocks = sum(map(len, reqs))
    for name in ("arc", "s3fifo1", "wtinylfu"):
        f = type("One", (FollowPolicy,), {"NAMES": (name,)})(300)
        live = simulate(reqs, f, 300)[0]
        assert abs(live - replay(reqs, EXPERTS[name](300))[0]) <= 0.002 * blocks, name
        assert f.panel.switches == 0


class Sampled(FollowPolicy):
    SHADOW = 8  # shadows of 8 ids: a separate live copy, rebuilt on a switch


# (op, block, content): 0 = release new content, 1 = revive (hit + re-release), 2 = evict,
# 3 = discard and re-insert elsewhere (a defrag move)
OPS = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 23), st.integers(0, 50),
                         st.integers(0, 3)), max_size=300)


@settings(max_examples=150, deadline=None)
@given(ops=OPS, sampled=st.booleans())
def test_protocol_invariants(ops, sampled):
    p = (Sampled if sampled else FollowPolicy)(24)
    p.panel.DECIDE = 1  # decide at every sampled access: switches happen
    members: dict[int, bytes] = {}
    for op, b, h, d in ops:
        if op == 0 and b not in members:
            members[b] = key(h + 100 * b)  # distinct content per block
            p.insert(b, members[b], d, 0.0)
        elif op == 1 and b in members:
            p.on_hit(members[b])
            p.remove(b)
            p.insert(b, members[b], d, 0.0)
        elif op == 2 and members:
            v = p.evict()
            assert v in members
            del members[v]
        elif op == 3 and b in members and b + 24 not in members:
            h_b = members.pop(b)
            p.discard(b)
            members[b + 24] = h_b
            p.insert(b + 24, h_b, d, 0.0)
        assert len(p) == len(members)
        assert all(m in p for m in members)
    p.check_invariants()
    while members:  # every evictable block can be evicted, each once
        del members[p.evict()]
    assert len(p) == 0


def test_panel_switches_to_a_clearly_better_expert():
    panel = Panel(50, ("lru", "wtinylfu"), 0.0)
    rng = random.Random(1)
    for i in range(20000):  # a hot set of 40 ids in a scan: frequency wins
        panel.access(key(rng.randrange(40)) if i % 2 else key(1000 + i))
        panel.end()
    assert panel.names[panel.cur] == "wtinylfu"


def test_follow_is_a_candidate():
    assert CANDIDATES["follow"] is FollowPolicy
