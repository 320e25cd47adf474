"""BlockIndex: which prefix-cache blocks one replica holds, as its KV events told the router.

A bounded ordered set of block hashes (kvpool.core.hashing chains, medium "GPU": the replica's
device pool, the one its lookups count). ``stored`` adds (or refreshes) hashes, ``removed``
drops them, ``clear`` forgets everything (AllBlocksCleared, a restart, a gap the replay could
not fill). Past ``max_blocks`` the least recently stored hashes go first: a forgotten block
costs a missed hit, never a wrong one (the replica still serves what it has).

``hits(hashes)`` is the leading run of ``hashes`` present, what a lookup's device_hit_tokens
counts (the caller caps it like admission does): one C-level scan, no lock, no I/O.

NOTE(pending): ``expect(hashes, until)`` marks blocks a request routed here will store once its
prefill ran; they count as held until ``until`` (or until an event removes them). A follow-up
that arrives while the first request is still prefilling (a conversation's next turn from
another client) then goes where its prefix is being computed and hits when admitted, where
a lookup (or the events alone) would see nothing yet and spread the pair over two replicas.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from itertools import takewhile

__all__ = ["DEFAULT_MAX_BLOCKS", "BlockIndex"]

DEFAULT_MAX_BLOCKS = 1 << 20  # hashes kept per replica (~100 MB of 32-byte keys; a hash
# is at most MAX_HASH_BYTES, decoding refuses longer: NOTE(hash-size) in events/wire.py)
PENDING_MAX = 1 << 16  # expected hashes kept per replica (NOTE(pending))


class BlockIndex:
    """One replica's cached block hashes (most recently stored last)."""

    def __init__(self, max_blocks: int = DEFAULT_MAX_BLOCKS) -> None:
        if max_blocks < 1:
            raise ValueError(f"max_blocks={max_blocks!r}: use a positive count")
        self.max_blocks = max_blocks
        self._blocks: OrderedDict[bytes | int, None] = OrderedDict()
        self._pending: OrderedDict[bytes, float] = OrderedDict()  # hash -> until (NOTE(pending))
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
        pop, unpend = self._blocks.pop, self._pending.pop
        for h in hashes:
            pop(h, None)
            unpend(h, None)  # type: ignore[call-overload]

    def clear(self) -> None:
        self._blocks.clear()
        self._pending.clear()

    def expect(self, hashes: Iterable[bytes], until: float) -> None:
        """``hashes`` count as held until ``until`` (NOTE(pending)); bounded like the rest."""
        pending = self._pending
        for h in hashes:
            pending[h] = until
            pending.move_to_end(h)
        while len(pending) > PENDING_MAX:
            pending.popitem(last=False)

    def hits(self, hashes: Sequence[bytes], now: float = 0.0) -> int:
        """Length of the leading run of ``hashes`` this replica holds (or is expected to hold
        after ``now``)."""
        blocks, pending = self._blocks, self._pending
        if not pending:  # NOTE(speed): the C-level scan
            return sum(1 for _ in takewhile(blocks.__contains__, hashes))
        n = 0
        for h in hashes:
            if h not in blocks and pending.get(h, 0.0) <= now:
                break
            n += 1
        return n
