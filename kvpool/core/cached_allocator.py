"""The prefix-caching allocator: content hashes, sharing by ref count, lazy eviction.

Beyond the uncached pool's API (allocator.py) it adds, inside ``with pool.writing():``::

    acquire_block(b, k)                    k references on cached block b (revives evictable)
    acquire_blocks(ids, k)                 acquire_block for each of ids, in order
    register_run(blocks, hashes, lo, hi)   register_block for a table's blocks lo..hi-1
    register_block(b, h, depth, tokens)    index used, computed block b under hash h

and, lock-free: ``lookup``, ``prefix_hits``, ``leading_hits``, ``verify_hits``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from itertools import islice, takewhile
from operator import is_not, length_hint

from kvpool.core.allocator import UncachedBlockAllocator
from kvpool.core.block import Device
from kvpool.core.eviction import EvictionPolicy, make_policy
from kvpool.errors import DoubleFreeError, InvalidBlockError, InvariantError

_NOT_NONE = partial(is_not, None)  # a C-level predicate: b is not None


class CachedBlockAllocator(UncachedBlockAllocator):
    """A device pool whose full, computed blocks are indexed by content hash.

    Invariant (beyond the uncached pool's): ``_cached[h] == b`` iff ``_hash[b] == h``; every
    block with ref 0 is either on the free list (no hash) or in ``policy`` (hash, "evictable");
    a block holding a hash is ``computed`` (hashes are registered only after the write). Evictable blocks count as allocatable: a block is only
    evicted (its hash dropped) when an allocation finds the free list empty (lazy eviction).

    Block states and transitions::

        FREE --take--> USED   --ref 0, hashed--> EVICTABLE --policy.evict--> (reused) USED
          ^               |  ^                       |
          +--ref 0, no hash  +----prefix hit (revive)+
    """

    caching = True

    def __init__(
        self,
        device: Device,
        num_blocks: int,
        block_size: int = 16,
        policy: EvictionPolicy | str = "lru",
        verify_hits: bool = False,
    ) -> None:
        super().__init__(device, num_blocks, block_size)
        self.policy = make_policy(policy, num_blocks) if isinstance(policy, str) else policy
        self._cached: dict[bytes, int] = {}
        # lookup(h) -> the block caching ``h`` (no reference taken) or None: the dict's own
        # C-level get, lock-free, no Python frame (admission asks it once per prompt block);
        # _cached is never rebound. lookup_verified also checks the block's token ids.
        self.lookup: Callable[[bytes], int | None] = self._cached.get
        # NOTE(evict-hook): called as hook(block, hash) under the lock just before an evicted
        # block loses its hash and is handed out again: the remote write-back path snapshots
        # the bytes there (its copy is queued before any forward can overwrite the block).
        self.on_evict: Callable[[int, bytes], None] | None = None
        # NOTE(verify): token ids per cached block, only when hit verification is on.
        self._tokens: dict[int, tuple[int, ...]] | None = {} if verify_hits else None

    # ---------------------------------------------------------------- capacity
    @property
    def num_free_blocks(self) -> int:
        return len(self._free) + len(self._fast) + len(self.policy)

    @property
    def num_evictable(self) -> int:
        return len(self.policy)

    @property
    def num_cached(self) -> int:
        return len(self._cached)

    # ---------------------------------------------------------------- overrides (lock held)
    def _take(self, n: int) -> list[int] | None:
        nf = len(self._free)
        if n > nf and self._fast:
            self._drain_fast()
            nf = len(self._free)
        if n <= nf:
            return super()._take(n)
        if n > nf + len(self.policy):
            return None
        ids = super()._take(nf) if nf else []
        evict = self.policy.evict
        append = ids.append
        hook = self.on_evict  # remote write_back: sees (block, hash) before the hash goes
        if self._tokens is None and hook is None:  # NOTE(speed): _drop_hash inlined, a prefill
            cached, hashes = self._cached, self._hash  # evicts ~100s of blocks
            for _ in range(n - nf):
                b = evict()
                del cached[hashes[b]]
                hashes[b] = None
                append(b)
        else:
            for _ in range(n - nf):
                b = evict()
                if hook is not None:
                    hook(b, self._hash[b])
                self._drop_hash(b)
                append(b)
        self._evictions += n - nf
        return ids

    def _evict_one(self) -> int | None:
        if not len(self.policy):
            return None
        b = self.policy.evict()
        if self.on_evict is not None:
            self.on_evict(b, self._hash[b])
        self._drop_hash(b)
        self._evictions += 1
        return b

    def _drop_hash(self, b: int) -> None:
        del self._cached[self._hash[b]]
        self._hash[b] = None
        if self._tokens is not None:
            self._tokens.pop(b, None)

    @property
    def verify_hits(self) -> bool:
        """Whether hits are checked against the token ids kept per cached block."""
        return self._tokens is not None

    def release(self, block_ids: Sequence[int], now: float = 0.0) -> int:
        if not self._cached:  # nothing is hashed: the plain free-list release applies
            return super().release(block_ids, now)
        if type(block_ids) is not list and type(block_ids) is not tuple:
            block_ids = list(block_ids)  # the iterator below must know how far it got
        r = self._ref
        hashes = self._hash
        free = self._free
        push = free.append
        insert = self.policy.insert
        depth = self._depth
        last = self._last
        n0 = len(free)  # released = free-list growth plus the blocks handed to the policy
        kept = 0
        it = iter(block_ids)
        for b in it:
            c = r[b] - 1
            if c:
                if c < 0:
                    self._undo_release(block_ids[:len(block_ids) - length_hint(it) - 1])
                    raise DoubleFreeError(f"block {b} on {self.device.value} freed twice")
            else:
                h = hashes[b]
                if h is None:
                    push(b)
                else:  # cached content stays findable until evicted (lazy eviction)
                    last[b] = now
                    insert(b, h, depth[b], now)
                    kept += 1
            r[b] = c
        return len(free) - n0 + kept

    def _unrelease(self, b: int) -> None:
        if self._hash[b] is None:
            self._free.remove(b)
        else:
            self.policy.discard(b)

    # ---------------------------------------------------------------- cache primitives
    def lookup_verified(self, h: bytes, tokens: Sequence[int]) -> int | None:
        """``lookup(h)``, and with verify_hits the block's token ids must equal ``tokens``."""
        b = self._cached.get(h)
        if b is not None and self._tokens is not None:
            if self._tokens.get(b) != tuple(tokens):
                return None  # a hash collision (or a forged hash): a miss, never wrong bytes
        return b

    def leading_hits(self, hashes: Sequence[bytes], limit: int,
                     token_ids: Sequence[int] | None = None) -> list[int]:
        """Blocks caching the leading run of ``hashes[:limit]`` (no reference taken). With
        verify_hits and ``token_ids`` (the whole prompt), every hit is checked against them."""
        if self._tokens is None or token_ids is None:  # NOTE(speed): the common case, C-level
            return list(takewhile(_NOT_NONE, map(self._cached.get, islice(hashes, limit))))
        out: list[int] = []
        bs = self.block_size
        for i in range(limit):
            b = self.lookup_verified(hashes[i], token_ids[i * bs:(i + 1) * bs])
            if b is None:
                break
            out.append(b)
        return out

    def acquire_block(self, b: int, k: int = 1) -> None:
        """Take ``k`` references on cached block ``b`` (reviving it if evictable)."""
        r = self._ref[b]
        if r == 0:
            self.policy.remove(b)
        self._ref[b] = r + k
        self.policy.on_hit(self._hash[b])

    def acquire_blocks(self, block_ids: Sequence[int], k: int = 1) -> None:
        """``acquire_block(b, k)`` for each listed block (a prompt's prefix hits), in order."""
        r = self._ref
        hashes = self._hash
        remove, on_hit = self.policy.remove, self.policy.on_hit
        for b in block_ids:
            c = r[b]
            if c == 0:
                remove(b)
            r[b] = c + k
            on_hit(hashes[b])

    def register_block(self, b: int, h: bytes, depth: int,
                       tokens: Sequence[int] | None = None) -> int:
        """Index used block ``b`` (full, computed) under ``h``. If another block already caches
        ``h`` that one is returned and ``b`` stays unhashed (a duplicate; it is freed plainly)."""
        existing = self._cached.get(h)
        if existing is not None:
            return existing
        if self._hash[b] is not None:
            raise InvalidBlockError(f"block {b} is already cached under another hash")
        self._cached[h] = b
        self._hash[b] = h
        self._depth[b] = depth
        if self._tokens is not None and tokens is not None:
            self._tokens[b] = tuple(tokens)
        return b

    def register_run(self, blocks: Sequence[int], hashes: Sequence[bytes], lo: int,
                     hi: int) -> None:
        """``register_block(blocks[i], hashes[i], i)`` for ``lo <= i < hi`` (a table's newly
        computed full blocks; depth is the index in the chain), without kept token ids."""
        cached, hash_of, depth = self._cached, self._hash, self._depth
        for i in range(lo, hi):
            h = hashes[i]
            if h in cached:
                continue  # another block caches it: this one stays unhashed (a duplicate)
            b = blocks[i]
            if hash_of[b] is not None:
                raise InvalidBlockError(f"block {b} is already cached under another hash")
            cached[h] = b
            hash_of[b] = h
            depth[b] = i

    def move(self, src: int, dst: int) -> None:
        """Defrag commit: ``dst`` (reserved, ref 1) takes over ``src``'s identity. Lock held."""
        r = self._ref
        h = self._hash[src]
        if r[src] == 0:  # evictable source: move it inside the policy too
            self.policy.discard(src)
            r[dst] = 0
        else:
            r[dst] = r[src]
            r[src] = 0
        if h is not None:
            self._cached[h] = dst
            self._hash[dst], self._hash[src] = h, None
            self._depth[dst] = self._depth[src]
            if self._tokens is not None and src in self._tokens:
                self._tokens[dst] = self._tokens.pop(src)
        self._last[dst] = self._last[src]
        self._push_free(src)
        self._num_reserved -= 1
        if r[dst] == 0:
            self.policy.insert(dst, h, self._depth[dst], self._last[dst])

    # ---------------------------------------------------------------- self-locking API
    def prefix_hits(self, hashes: Sequence[bytes]) -> int:
        """Length of the leading run of ``hashes`` that are cached (no reference taken)."""
        return len(list(takewhile(self._cached.__contains__, hashes)))  # C-level scan

    def acquire(self, h: bytes) -> int | None:
        """A prefix hit: one reference on the block caching ``h``, or None on a miss."""
        with self._writer:
            b = self.lookup(h)
            if b is not None:
                self.acquire_block(b)
            return b

    def register(self, block_id: int, h: bytes, depth: int = 0) -> int:
        """Make a used, computed block findable by ``h``; returns the canonical block id."""
        with self._writer:
            if self._ref[block_id] <= 0:
                raise InvalidBlockError(f"block {block_id} is not in use; only used blocks "
                                        "can be registered")
            return self.register_block(block_id, h, depth)

    def reset_prefix_cache(self) -> int:
        """Drop every evictable cached block back to the free list; returns how many."""
        with self._writer:
            n = 0
            while len(self.policy):
                b = self.policy.evict()
                self._drop_hash(b)
                self._push_free(b)
                n += 1
            return n

    def _check_cache_invariants(self, free: set[int]) -> None:
        for h, b in self._cached.items():
            if self._hash[b] != h:
                raise InvariantError(f"hash map says block {b} caches a hash it does not hold")
        hashed = sum(1 for h in self._hash if h is not None)
        if hashed != len(self._cached):
            raise InvariantError(f"{hashed} blocks hold a hash but the map has "
                                 f"{len(self._cached)}")
        evictable = [b for b in range(self.num_blocks) if self._ref[b] == 0 and b not in free]
        if len(evictable) != len(self.policy):
            raise InvariantError(f"{len(evictable)} ref-0 cached blocks but the policy holds "
                                 f"{len(self.policy)}")
        for b in evictable:
            if b not in self.policy or self._hash[b] is None:
                raise InvariantError(f"ref-0 block {b} is neither free nor evictable")
        self.policy.check_invariants()
