"""FreeList: the ids of one pool's content-free blocks (docs/architecture.md#locking, layer 0).

Two containers, both of them free ids (ref 0, no hash)::

    bulk      array('i')   4 B per id, LIFO: ids start in descending order, so pop() yields
                           the lowest id first; released ids are pushed at the end
    magazine  deque        up to MAGAZINE ids moved out of bulk at once, for the pool's
                           lock-free single-block allocate(): deque.pop() is one C call,
                           atomic under the GIL, so it needs no lock

Only the pool's writer (lock held) moves ids between the two or out of bulk; lock-free
callers only pop the magazine, and a racing pop during ``drain`` or ``refill`` is fine: each
id leaves the deque exactly once. The pool keeps references to ``bulk`` and ``magazine``
(never rebound) for its hot paths; everything that walks or rearranges them lives here.

NOTE(quiescent-check): ``BlockPool.check_invariants`` is exact only while no allocate() runs.
The pool lock stops every other writer, but allocate() pops the magazine and then stores the
ref count, two steps outside the lock: a block between them is off the free list with ref 0,
as a leaked one is. Making the check exact would cost the lock-free path a store per call (a
record of the block in flight), or need magazine blocks charged with ref 1 while still free,
which would hide a double free (or share) of such a block from ``release``. Neither is worth
it for a check run on a quiet pool (tests, debugging), so the check needs quiescence, and says
so when it can see the race: with the lock held only allocate() moves the magazine or a ref
count, so ``watch`` notes both as a check starts and, on its error path, ``moved`` tells
whether either changed (waiting a little for a store in flight).

NOTE(drained): a writer that counts the free blocks and then takes them must drain the
magazine before it counts (``BlockPool.takeable``). Counted with the magazine in, a lock-free
allocate() could pop a counted id between the count and the take, and the take came up short
where its caller had checked it would not: ``append_decodes`` raised with a table's token count
already moved past its blocks. Drained, the magazine is empty until the writer leaves (only a
lock holder refills it), so a lock-free caller waits on the lock's slow path instead.
"""

from __future__ import annotations

import time
from array import array
from collections import deque
from collections.abc import Sequence

from kvpool.errors import InvalidBlockError

# NOTE(speed): ids moved to the magazine per refill. A refill is one locked section (two
# Python frames, a slice and a deque extend); at 32 it cost about as much per allocate() as
# the lock-free pop itself, at 256 it is an eighth of that (bench.pool decode.per_seq).
MAGAZINE = 256


class FreeList:
    """The free ids of a pool of ``num_blocks`` blocks: ``bulk`` plus ``magazine``."""

    MOVED = ("the pool changed during the check, as a concurrent allocate() changes it: "
             "check_invariants needs quiescence (NOTE(quiescent-check), free_list.py)")

    def __init__(self, num_blocks: int) -> None:
        self.bulk = array("i", range(num_blocks - 1, -1, -1))
        self.magazine: deque[int] = deque()
        self.refills = 0  # locked refills so far; none: allocate() never popped lock-free

    def __len__(self) -> int:
        return len(self.bulk) + len(self.magazine)

    def drain(self) -> None:
        """Move the magazine back to bulk (lock held; racing lock-free pops are fine)."""
        fast, push = self.magazine, self.bulk.append
        while True:
            try:
                push(fast.pop())
            except IndexError:
                return

    def refill(self) -> bool:
        """Move up to MAGAZINE ids, the lowest first, from bulk to the magazine; False when
        bulk is empty. Lock held."""
        bulk = self.bulk
        k = min(len(bulk), MAGAZINE)
        if not k:
            return False
        chunk = bulk[len(bulk) - k :]
        del bulk[len(bulk) - k :]
        self.magazine.extend(chunk)  # pop() then yields the lowest id first
        self.refills += 1
        return True

    def pull(self, block_ids: Sequence[int]) -> int:
        """Take the listed ids out (a defrag plan reserves them); returns how many distinct
        ids left. InvalidBlockError, and nothing taken, when one is not free. Lock held."""
        self.drain()
        taken = set(block_ids)
        kept = [b for b in self.bulk if b not in taken]
        if len(kept) != len(self.bulk) - len(taken):
            raise InvalidBlockError("reserve: a block id is not free")
        self.bulk[:] = array("i", kept)
        return len(taken)

    def ids(self) -> list[int]:
        """A copy of the free ids (bulk and magazine)."""
        return self.bulk.tolist() + list(self.magazine)

    def id_bytes(self) -> bytes:
        """The free ids as native int32 bytes (numpy reads them without a Python list)."""
        return self.bulk.tobytes() + array("i", self.magazine).tobytes()

    def watch(self, ref: list[int]) -> tuple[int, list[int]] | None:
        """What ``moved`` compares, as a check starts (lock held): the magazine's length and a
        copy of the pool's ref counts; None when the magazine never served a lock-free
        allocate(), so nothing can move (NOTE(quiescent-check))."""
        return (len(self.magazine), ref[:]) if self.refills else None

    def moved(self, since: tuple[int, list[int]] | None, ref: list[int]) -> bool:
        """Whether a lock-free allocate() moved the pool after ``watch``: a pop, or the ref
        store of a block it popped before; waits up to ~20 ms for such a store. Lock held."""
        if since is None:
            return False
        n, ref0 = since
        for _ in range(40):
            if len(self.magazine) != n or ref != ref0:
                return True
            time.sleep(0.0005)  # a thread between its pop and its store gets to run
        return False
