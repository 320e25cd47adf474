"""Defrag plans are checked against the very tables and plan they were made with
(defrag.py NOTE(defrag-aba), NOTE(own-plan)), loans are checked before anything is given back
or adopted (lending.py NOTE(lent-first)), and a fork of a swapped-out sequence is one more
holder of its host hashes (swap.py NOTE(host-fork))."""

from __future__ import annotations

import pytest

from kvpool.config import CacheConfig
from kvpool.core import BlockSpaceManager, Device
from kvpool.errors import InvalidBlockError, InvariantError


def nocache(blocks: int, bs: int) -> BlockSpaceManager:
    return BlockSpaceManager(CacheConfig(num_device_blocks=blocks, block_size=bs, watermark=0.0,
                                         enable_prefix_caching=False))


# ---------------------------------------------------------------- defrag
def test_a_move_is_retried_when_a_reused_seq_id_holds_the_block_in_a_new_table():
    m = nocache(4, 4)
    kv: dict[int, tuple] = {}  # the runtime's KV tensor: block -> the tokens written there

    def prefill(seq, toks):
        m.allocate([seq], toks)
        for i, b in enumerate(m.get_block_table(seq)):
            kv[b] = tuple(toks[i * 4:(i + 1) * 4])
        m.mark_computed(seq)

    for s, toks in ((1, [1, 2, 3, 4]), (2, [5, 6, 7, 8]), (3, [9, 10, 11, 12])):
        prefill(s, toks)
    m.free(1)  # a hole at block 0
    plan = m.defrag.plan()
    assert plan.moves == ((2, 0),)  # seq 3's block moves down
    for src, dst in plan.moves:
        kv[dst] = kv[src]  # the copy engine runs the plan's copies
    m.free(3)  # seq 3 finishes; a new request reuses its id and gets block 2 back
    prefill(3, [90, 91, 92, 93])
    assert m.get_block_table(3) == [2]
    res = m.defrag.commit(plan)
    assert res.committed == [] and res.retried == [(2, 0)]
    assert kv[m.get_block_table(3)[0]] == (90, 91, 92, 93)
    assert m.stats().defrag_retries == 1
    m.check_invariants()


def _holey(n: int) -> BlockSpaceManager:
    m = nocache(n, 2)
    for s in range(n):
        m.allocate([s], [1, 2])
        m.mark_computed(s)
    for s in range(0, n - 1, 2):
        m.free(s)
    return m


def test_another_managers_plan_is_not_in_flight_here():
    m1, m2 = _holey(6), _holey(10)
    p1, p2 = m1.defrag.plan(), m2.defrag.plan()
    assert p1.plan_id == p2.plan_id == 1
    tables = {s: m1.get_block_table(s) for s in m1.seq_ids()}
    for call in (m1.defrag.commit, m1.defrag.abort):
        with pytest.raises(InvalidBlockError):
            call(p2)
        m1.check_invariants()
        assert {s: m1.get_block_table(s) for s in m1.seq_ids()} == tables
        assert m1.defrag.reserved_blocks() == [dst for _, dst in p1.moves]
    assert m1.defrag.commit(p1).committed == list(p1.moves)
    m2.defrag.abort(p2)
    m1.check_invariants()
    m2.check_invariants()


# ---------------------------------------------------------------- loans
def lender_manager() -> BlockSpaceManager:
    return BlockSpaceManager(CacheConfig(num_device_blocks=8, num_host_blocks=4, block_size=2,
                                         watermark=0.0))


def test_adopt_prefix_with_a_block_not_lent_changes_nothing():
    m = lender_manager()
    m.allocate([1], [1, 2, 3])  # seq 1 holds blocks 0 and 1
    (lent,) = m.lender.lend(Device.DEVICE, 1)
    with pytest.raises(InvariantError):
        m.lender.adopt_prefix([lent, 0], [b"h1" * 16, b"h2" * 16], 0)
    assert m.device_pool.block(0).block_hash is None  # seq 1's block is under no hash
    assert m.device_pool.index.lookup(b"h1" * 16) is None
    assert m.lender.lent(Device.DEVICE) == {lent: 1}
    m.check_invariants()
    assert m.lender.adopt_prefix([lent], [b"h1" * 16], 0) == 1  # the loan still adopts
    m.check_invariants()


@pytest.mark.parametrize("extra", [[7], "twice"])
def test_give_back_of_a_block_not_lent_keeps_every_loan(extra):
    m = lender_manager()
    ids = m.lender.lend(Device.DEVICE, 2)
    back = ids + ([ids[0]] if extra == "twice" else extra)
    with pytest.raises(InvariantError):
        m.lender.give_back(Device.DEVICE, back)
    assert m.lender.lent(Device.DEVICE) == dict.fromkeys(ids, 1)
    m.check_invariants()
    m.lender.give_back(Device.DEVICE, ids)
    assert m.stats().device.num_free == 8
    m.check_invariants()


# ---------------------------------------------------------------- fork on the host
class HostLog:
    """The pools' observer: the host tier's events, in order."""

    def __init__(self) -> None:
        self.log: list[tuple[str, list[bytes]]] = []

    def stored(self, device, hashes, parent, tokens=None, *, salt=None) -> None:
        if device is Device.HOST:
            self.log.append(("stored", list(hashes)))

    def removed(self, device, hashes) -> None:
        if device is Device.HOST:
            self.log.append(("removed", list(hashes)))

    def cleared(self, device) -> None:
        pass


def _swapped_fork():
    """(the host events heard, a manager, the prompt's hashes) once sequence 1 was swapped out
    (confirmed) and forked on the host into sequence 2: both share its host blocks."""
    heard = HostLog()
    m = BlockSpaceManager(CacheConfig(num_device_blocks=8, num_host_blocks=8, block_size=4,
                                      watermark=0.0), observer=heard)
    m.allocate([1], list(range(9)))
    m.mark_computed(1)
    hashes = m.hasher.hash_blocks(list(range(9)))
    assert m.swap.swap_out([1]) is not None
    m.swap.confirm_out([1])
    m.fork(1, 2)
    return heard, m, hashes


@pytest.mark.parametrize("first", ["child", "parent"])
def test_a_swapped_fork_holds_the_host_hashes_until_the_last_holder_goes(first):
    heard, m, hashes = _swapped_fork()
    m.free(2 if first == "child" else 1)
    assert heard.log == [("stored", hashes)]  # the other one still holds them
    m.free(1 if first == "child" else 2)
    assert heard.log == [("stored", hashes), ("removed", hashes)]
    m.check_invariants()


def test_a_fork_swapped_back_in_and_out_is_told_once():
    heard, m, hashes = _swapped_fork()
    assert m.swap.swap_in([2]) is not None  # the child leaves the host: the parent holds
    assert heard.log == [("stored", hashes)]
    m.free(1)
    assert heard.log == [("stored", hashes), ("removed", hashes)]
    m.free(2)
    assert heard.log == [("stored", hashes), ("removed", hashes)]
    m.check_invariants()
