"""The manager's side of vLLM's rule (tests/sched/test_offered_once_computed.py has the whole
loop): ``append_slots`` / ``slots.append_decodes`` take the token whose KV the *next* step
writes, so a block that token fills is hashed but neither findable nor published (no
BlockStored) until the next append says that step ran, or ``mark_computed`` covers it."""

from __future__ import annotations

import pytest

from kvpool.config import CacheConfig
from kvpool.core import BlockSpaceManager, Device


class Stored:
    """The pools' observer: hashes published per tier, in order."""

    def __init__(self) -> None:
        self.hashes: dict[Device, list[bytes]] = {Device.DEVICE: [], Device.HOST: []}

    def stored(self, device, hashes, parent, tokens=None, *, salt=None) -> None:
        self.hashes[device] += hashes

    def removed(self, device, hashes) -> None:
        pass

    def cleared(self, device) -> None:
        pass


def manager(bs: int) -> tuple[BlockSpaceManager, Stored]:
    heard = Stored()
    mgr = BlockSpaceManager(CacheConfig(num_device_blocks=16, num_host_blocks=8, block_size=bs,
                                        watermark=0.0, enable_prefix_caching=True),
                            observer=heard)
    return mgr, heard


def append(mgr: BlockSpaceManager, how: str, tok: int) -> None:
    if how == "append_slots":
        assert mgr.append_slots(1, [tok]) is not None
    else:  # the scheduler's batched decode append
        mgr.slots.append_decodes([1], [tok])


@pytest.mark.parametrize("how", ["append_slots", "append_decodes"])
@pytest.mark.parametrize("bs", [1, 4])
def test_a_block_filled_by_an_appended_token_is_offered_only_after_its_step(bs, how):
    mgr, heard = manager(bs)
    toks = [5, 6, 7, 8, 9, 10][:bs + bs // 2 + 1]  # block 0 full, block 1 partial
    assert mgr.allocate([1], toks) == 0
    mgr.mark_computed(1)  # the prefill step ran
    done = len(toks) // bs  # full blocks, all computed
    while len(toks) % bs or len(toks) // bs == done:
        toks.append(20 + len(toks))
        append(mgr, how, toks[-1])  # its KV is written by the next step
    hashes = mgr.hasher.hash_blocks(toks)
    last = hashes[-1]  # the block the last appended token filled
    assert mgr.prompts.prefix_hits(hashes) == len(hashes) - 1
    assert last not in heard.hashes[Device.DEVICE]
    mgr.mark_computed(1, len(toks) - 1)  # a step that did not compute it: still not offered
    assert mgr.prompts.prefix_hits(hashes) == len(hashes) - 1
    append(mgr, how, 99)  # the next step's token: the one before it was computed
    assert mgr.prompts.prefix_hits(hashes) == len(hashes)
    assert heard.hashes[Device.DEVICE][-1] == last
    mgr.free(1)
    mgr.check_invariants()


def test_a_swap_out_between_steps_publishes_only_computed_blocks():
    """The scheduler swaps a sequence out between steps (before its pending token is
    appended): the CPU BlockStored covers its full blocks, all computed, and no more."""
    mgr, heard = manager(4)
    toks = [5, 6, 7, 8, 9, 10, 11]
    mgr.allocate([1], toks)
    mgr.mark_computed(1)
    assert mgr.swap.swap_out([1]) is not None
    assert heard.hashes[Device.HOST] == []  # not before the copy ran (NOTE(swap-out-confirm))
    mgr.swap.confirm_out([1])
    assert heard.hashes[Device.HOST] == mgr.hasher.hash_blocks(toks)[:1]
    mgr.free(1)
    mgr.check_invariants()
