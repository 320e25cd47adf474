"""bench/twice.py: ``twice`` (S3-FIFO's promotion at the second use under the ghost filter):
the pool and the ghost filter's miniature count revivals alike, a reused block id starts
with none, a defrag move keeps the count, the other window rules and the product promote at
the first revival, and main replays every arm per cell."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from bench.twice import ARMS, BLIND, TwiceMini, TwicePolicy, TwiceTuner, main
from kvpool.core.eviction import AdaptivePolicy
from kvpool.core.eviction.admit_tuner import GHOST_FILTER, WIN, MiniAdmit
from tests.core.policy_helpers import key

SKETCH_FILTER = (0.0, 0.1, False)
DUEL = (0.0, 0.2, True)


def revive(p: AdaptivePolicy, b: int, content: int) -> None:
    """A prefix hit on evictable block ``b`` (content ``content``), then its release."""
    p.remove(b)
    p.insert(b, key(content), 1, 0.0)


def filled(cls=TwicePolicy, cfg=GHOST_FILTER, n: int = 10) -> AdaptivePolicy:
    p = cls(100, sketch_min_bits=8, cfg=cfg)
    for b in range(n):
        p.insert(b, key(b), 0, 0.0)
    return p


def test_the_first_revival_keeps_a_block_in_the_window_and_the_second_promotes():
    p = filled()
    revive(p, 3, 3)
    assert p.queue(WIN)[-1] == 3  # back at the window's tail
    revive(p, 3, 3)
    assert 3 not in p.queue(WIN) and 3 in p
    p.check_invariants()
    product = filled(AdaptivePolicy)
    revive(product, 3, 3)
    assert 3 not in product.queue(WIN)  # the product: the first revival promotes


def test_the_other_window_rules_promote_at_the_first_revival():
    for cfg in (SKETCH_FILTER, DUEL):
        p = filled(cfg=cfg)
        b = p.queue(WIN)[-1]
        revive(p, b, b)
        assert b not in p.queue(WIN) and b in p
        p.check_invariants()


def test_a_reused_block_id_starts_with_no_revival():
    p = filled()
    revive(p, 3, 3)  # one revival counted, back in the window
    evicted = []
    while 3 not in evicted:
        evicted.append(p.evict())
    p.insert(3, key(500), 0, 0.0)  # new content in the same block: the window
    assert p.queue(WIN)[-1] == 3
    revive(p, 3, 500)  # its first revival: back to the window, not main
    assert p.queue(WIN)[-1] == 3
    p.check_invariants()


def test_a_defrag_move_keeps_the_place_and_the_count():
    p = filled()
    revive(p, 3, 3)
    p.discard(3)
    p.insert(60, key(3), 1, 0.0)  # the move: 3's place in the window, its count
    assert p.queue(WIN)[-1] == 60
    revive(p, 60, 3)  # the second revival: main
    assert 60 not in p.queue(WIN) and 60 in p
    p.check_invariants()


def test_the_miniature_counts_revivals_as_the_pool_does():
    m = TwiceMini(8, GHOST_FILTER, lambda c: 0)
    for c in range(4):
        m.access(c, 0)
    assert m.access(1, 0) and m.where[1] == WIN and m.revived == {1: 1}
    assert list(m.qs[WIN])[-1] == 1  # back at the window's tail
    assert m.access(1, 0) and m.where[1] == 0 and m.revived == {}
    assert m.hits == 2
    m.check_invariants()
    once = MiniAdmit(8, GHOST_FILTER, lambda c: 0)
    once.access(1, 0)
    once.access(1, 0)
    assert once.where[1] == 0


def test_a_window_crc_evicted_forgets_its_count():
    m = TwiceMini(4, GHOST_FILTER, lambda c: 0)
    for c in range(4):
        m.access(c, 0)
    m.access(0, 0)  # revived once: the window's tail
    for c in range(10, 14):  # new content pushes the window's crcs out
        m.access(c, 0)
    assert 0 not in m.where and 0 not in m.revived
    m.check_invariants()


def test_only_the_ghost_filters_miniature_counts_revivals():
    kinds = {s.cfg: type(s) for s in TwiceTuner(4000, lambda c: 0).shadows}
    assert kinds.pop(GHOST_FILTER) is TwiceMini and set(kinds.values()) == {MiniAdmit}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("irem"), st.integers(0, 15)), max_size=200))
def test_window_blocks_follow_a_model_of_their_revivals(ops):
    """Random inserts, revivals, evictions and defrag moves under the ghost filter: a
    revived block is in the window exactly when it was there and had not been revived there
    before (a model counting revivals per content life); invariants hold throughout."""
    p = TwicePolicy(16, sketch_min_bits=8, cfg=GHOST_FILTER)
    content, count = {}, {}  # block -> content; content -> revivals in the window
    nxt = 0
    for op, b in ops:
        if op == "i" and b not in p:
            nxt += 1
            content[b] = nxt
            p.insert(b, key(nxt), 0, 0.0)
            count[nxt] = 0
        elif op == "r" and b in p:
            in_win = b in p.queue(WIN)
            revive(p, b, content[b])
            c = content[b]
            count[c] = count[c] + 1 if in_win else 0
            assert (b in p.queue(WIN)) == (in_win and count[c] == 1)
        elif op == "e" and len(p):
            content.pop(p.evict())
        elif op == "m" and b in p and (b + 16) not in p:
            p.discard(b)
            p.insert(b + 16, key(content[b]), 1, 0.0)
            content[b + 16] = content.pop(b)
        p.check_invariants()


def test_main_reports_each_arm_per_cell(tmp_path, capsys):
    assert set(ARMS) == {AdaptivePolicy, TwicePolicy}
    out = tmp_path / "t.json"
    res = main(["--shapes", BLIND[0], "--seeds", "1", "--capacities", "2000", "--scale",
                "0.05", "--no-classics", "--json", str(out)])
    (cell,) = res["cells"].values()
    assert set(cell) == {"lru", "adaptive", "twice"} and all(0 < v < 1 for v in cell.values())
    assert json.loads(out.read_text())["cells"] == res["cells"]
    assert f"{BLIND[0]}@1@2000:" in capsys.readouterr().out
