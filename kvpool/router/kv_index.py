"""BlockIndex: which prefix-cache blocks one replica holds, as its KV events told the router.

A bounded ordered set of block hashes (kvpool.core.hashing chains, medium "GPU": the replica's
device pool, the one its lookups count). ``stored`` adds (or refreshes) hashes, ``removed``
drops them, ``clear`` forgets everything (AllBlocksCleared, a restart, a gap the replay could
not fill). Past ``max_blocks`` the least recently stored hashes go first: a forgotten block
costs a missed hit, never a wrong one (the replica still serves what it has).

``hits(hashes)`` is the leading run of ``hashes`` present, what a lookup's device_hit_tokens
counts (the caller caps it like admission does): one C-level scan, no lock, no I/O.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from itertools import takewhile

__all__ = ["DEFAULT_MAX_BLOCKS", "BlockIndex"]

DEFAULT_MAX_BLOCKS = 1 << 20  # hashes kept per replica (~100 MB of 32-byte keys at most)


class BlockIndex:
    """One replica's cached block hashes (most recently stored last)."""

    def __init__(self, max_blocks: int = DEFAULT_MAX_BLOCKS) -> None:
        if max_blocks < 1:
            raise ValueError(f"max_blocks={max_blocks!r}: use a positive count")
        self.max_blocks = max_blocks
        self._blocks: OrderedDict[bytes | int, None] = OrderedDict()
        self.forgotten = 0  # hashes dropped to stay within max_blocks (monotonic)

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, h: bytes | int) -> bool:
        return h in self._blocks

    def stored(self, hashes: Iterable[bytes | int]) -> None:
        blocks = self._blocks
        for h in hashes:
            blocks[h] = None
            blocks.move_to_end(h)
        over = len(blocks) - self.max_blocks
        for _ in range(max(0, over)):
            blocks.popitem(last=False)
        self.forgotten += max(0, over)

    def removed(self, hashes: Iterable[bytes | int]) -> None:
        pop = self._blocks.pop
        for h in hashes:
            pop(h, None)

    def clear(self) -> None:
        self._blocks.clear()

    def hits(self, hashes: Sequence[bytes]) -> int:
        """Length of the leading run of ``hashes`` this replica holds."""
        return sum(1 for _ in takewhile(self._blocks.__contains__, hashes))
