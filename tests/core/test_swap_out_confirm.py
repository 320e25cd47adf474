"""core/swap.py NOTE(swap-out-confirm): a swapped-out table's host blocks are told to the
observer (CPU BlockStored) only by ``swap.confirm_out``, once the runtime's copy completed;
a table never confirmed (its copy failed, or it came back first) is told nothing, neither
stored nor removed, and leaves another table's published hash alone."""

from __future__ import annotations

from kvpool.config import CacheConfig
from kvpool.core import BlockSpaceManager, Device

HOST = Device.HOST


class Heard:
    def __init__(self) -> None:
        self.log: list[tuple[str, list[bytes]]] = []  # CPU events in order

    def stored(self, device, hashes, parent, tokens=None, *, salt=None) -> None:
        if device is HOST:
            self.log.append(("stored", list(hashes)))

    def removed(self, device, hashes) -> None:
        if device is HOST:
            self.log.append(("removed", list(hashes)))

    def cleared(self, device) -> None:
        pass


def setup() -> tuple[BlockSpaceManager, Heard, list[bytes]]:
    heard = Heard()
    mgr = BlockSpaceManager(CacheConfig(num_device_blocks=16, num_host_blocks=16, block_size=4,
                                        watermark=0.0, enable_prefix_caching=True),
                            observer=heard)
    toks = list(range(10, 19))  # two full blocks and a partial one
    for s in (1, 2):
        mgr.allocate([s], toks)
        mgr.mark_computed(s)
    return mgr, heard, mgr.hasher.hash_blocks(toks)


def test_an_unconfirmed_swap_out_is_told_nothing_then_freed_or_swapped_in():
    mgr, heard, _ = setup()
    assert mgr.swap.swap_out([1]) is not None and mgr.swap.swap_out([2]) is not None
    mgr.free(1)  # its copy failed: the request is aborted
    assert mgr.swap.swap_in([2]) is not None  # back before anything confirmed it
    mgr.swap.confirm_out([1, 2])  # too late: gone, or on the device again
    assert heard.log == []
    mgr.free(2)
    mgr.check_invariants()


def test_a_failed_copy_leaves_a_published_hash_of_another_table_alone():
    mgr, heard, hashes = setup()
    assert mgr.swap.swap_out([1]) is not None
    mgr.swap.confirm_out([1])
    assert heard.log == [("stored", hashes)]
    assert mgr.swap.swap_out([2]) is not None  # the same hashes: its copy fails
    mgr.free(2)
    assert heard.log == [("stored", hashes)]  # still held, written, by 1's host blocks
    mgr.swap.confirm_out([1])  # confirmed once only
    mgr.free(1)
    assert heard.log == [("stored", hashes), ("removed", hashes)]
    mgr.check_invariants()
