"""PrefixIndex: the prefix cache of one device pool (docs/architecture.md#the-pool-kvpoolcore).

A component the BlockPool owns when prefix caching is on: content hash -> block, the
evictable set (an EvictionPolicy), and the per-block metadata only cached blocks have. The
pool keeps ref counts and the free list and asks the index at three moments: a block's last
reference goes (``park``: hashed blocks stay findable, as evictable), the free list runs short
(``evict``), a prompt hits cached blocks (``hit``: evictable hits are revived).

Struct-of-arrays, next to the pool's (pool.py)::

    _hash      list         8 B   content hash per block, None = not cached
    _last      array('d')   8 B   last time released to the evictable set, -1.0 = never
    _depth     array('i')   4 B   index in its prefix chain when hashed
    _cached    dict         -     hash -> block, one entry per hashed block

Locking: the index has no lock of its own. Its mutators run inside the owning pool's writer
section (``with pool.writing():``); ``lookup``, ``hash_of``, ``prefix_hits`` and
``leading_hits`` are lock-free reads (single C-level calls under the GIL).

A block holds a hash only once its bytes are written (the manager registers it after the
step that wrote it ran), so a hit never returns unwritten bytes.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from functools import partial
from itertools import islice, takewhile
from operator import is_not

from kvpool.core.block import Device, PoolObserver
from kvpool.core.eviction import EvictionPolicy, make_policy
from kvpool.errors import InvalidBlockError, InvariantError

_NOT_NONE = partial(is_not, None)  # a C-level predicate: b is not None

EvictHook = Callable[[int, bytes], None]


class PrefixIndex:
    """The content-hash index and evictable set of a pool of ``num_blocks`` blocks.

    Invariant: ``_cached[h] == b`` iff ``_hash[b] == h``; the policy holds exactly the hashed
    blocks the pool released to ref 0 and has not handed out again (``check_invariants``).

    Block states (the pool's ref count and this index together)::

        FREE --take--> USED   --ref 0, hashed--> EVICTABLE --evict--> (reused) USED
          ^               |  ^                       |
          +--ref 0, no hash  +----prefix hit (revive)+
    """

    def __init__(self, num_blocks: int, block_size: int,
                 policy: EvictionPolicy | str = "lru", verify_hits: bool = False, *,
                 observer: PoolObserver | None = None, device: Device = Device.DEVICE) -> None:
        """``observer`` hears every hash registered, evicted or reset on ``device``'s pool
        (kvpool.events publishes it): under the pool lock, so it only queues."""
        self.block_size = block_size
        self._observer = observer
        self._device = device
        self.policy = make_policy(policy, num_blocks) if isinstance(policy, str) else policy
        # NOTE(speed): a policy that keeps the default no-op on_hit (LRU) is not called per hit
        self._counts_hits = type(self.policy).on_hit is not EvictionPolicy.on_hit
        self._cached: dict[bytes, int] = {}
        # lookup(h) -> the block caching ``h`` (no reference taken) or None: the dict's own
        # C-level get, lock-free, no Python frame (admission asks it once per prompt block);
        # _cached is never rebound. hash_of(b) likewise reads _hash, which is never rebound.
        self.lookup: Callable[[bytes], int | None] = self._cached.get
        self._hash: list[bytes | None] = [None] * num_blocks
        self.hash_of: Callable[[int], bytes | None] = self._hash.__getitem__
        self._last = array("d", [-1.0]) * num_blocks
        self._depth = array("i", bytes(4 * num_blocks))
        # NOTE(verify): token ids per cached block, only when hit verification is on.
        self._tokens: dict[int, tuple[int, ...]] | None = {} if verify_hits else None
        self._on_evict: EvictHook | None = None

    def set_evict_hook(self, hook: EvictHook | None) -> None:
        """``hook(block, hash)`` runs under the pool lock just before an evicted block loses
        its hash and is handed out again (the remote write-back path snapshots the bytes there:
        its copy is queued before any forward can overwrite the block); None removes it."""
        self._on_evict = hook

    # ---------------------------------------------------------------- readers (no lock)
    @property
    def num_cached(self) -> int:
        return len(self._cached)

    @property
    def num_evictable(self) -> int:
        return len(self.policy)

    @property
    def verify_hits(self) -> bool:
        """Whether hits are checked against the token ids kept per cached block."""
        return self._tokens is not None

    @property
    def wants_tokens(self) -> bool:
        """Whether registration needs the blocks' token ids: hit verification keeps them per
        block, an observer publishes them (NOTE(event-tokens)); else nobody reads them."""
        return self._tokens is not None or self._observer is not None

    def entry(self, b: int) -> tuple[bytes | None, int, float]:
        """Block ``b``'s ``(hash, depth, last release time)``."""
        return self._hash[b], self._depth[b], self._last[b]

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

    def prefix_hits(self, hashes: Sequence[bytes]) -> int:
        """Length of the leading run of ``hashes`` that are cached (no reference taken)."""
        return len(list(takewhile(self._cached.__contains__, hashes)))  # C-level scan

    # ---------------------------------------------------------------- registration (pool lock)
    def register_block(self, b: int, h: bytes, depth: int,
                       tokens: Sequence[int] | None = None, parent: bytes | None = None,
                       keep: bool = True, salt: str | None = None) -> int:
        """Index used block ``b`` (full, computed) under ``h`` (``parent``: the chain's hash
        before it, for the observer). If another block already caches ``h`` that one is
        returned and ``b`` stays unhashed (a duplicate; it is freed plainly). ``tokens``
        (its token ids) go to the observer, and with ``keep`` to hit verification; ``salt``
        (the chain's, NOTE(event-salt)) goes to it with a chain's first block."""
        existing = self._cached.get(h)
        if existing is not None:
            return existing
        if self._hash[b] is not None:
            raise InvalidBlockError(f"block {b} is already cached under another hash")
        self._cached[h] = b
        self._hash[b] = h
        self._depth[b] = depth
        if self._tokens is not None and tokens is not None and keep:
            self._tokens[b] = tuple(tokens)
        if self._observer is not None:
            self._tell([h], parent, tokens, salt)
        return b

    def register_run(self, blocks: Sequence[int], hashes: Sequence[bytes], lo: int,
                     hi: int, tokens: Sequence[int] | None = None,
                     salt: str | None = None) -> None:
        """``register_block(blocks[i], hashes[i], i)`` for ``lo <= i < hi`` (a table's newly
        computed full blocks; depth is the index in the chain), without kept token ids.
        ``tokens``: the table's token ids from its first block on, ``salt`` its chain's salt
        (NOTE(event-salt)), for the observer."""
        cached, hash_of, depth = self._cached, self._hash, self._depth
        run = lo  # the observer hears each unbroken run of new hashes as one chain
        for i in range(lo, hi):
            h = hashes[i]
            if h in cached:
                if self._observer is not None:
                    self._tell_run(hashes, run, i, tokens, salt)
                run = i + 1
                continue  # another block caches it: this one stays unhashed (a duplicate)
            b = blocks[i]
            if hash_of[b] is not None:
                raise InvalidBlockError(f"block {b} is already cached under another hash")
            cached[h] = b
            hash_of[b] = h
            depth[b] = i
        if self._observer is not None:
            self._tell_run(hashes, run, hi, tokens, salt)

    def _tell_run(self, hashes: Sequence[bytes], lo: int, hi: int,
                  tokens: Sequence[int] | None, salt: str | None) -> None:
        if lo < hi:
            bs = self.block_size
            self._tell(hashes[lo:hi], hashes[lo - 1] if lo else None,
                       None if tokens is None else tokens[lo * bs:hi * bs], salt)

    def _tell(self, hashes: Sequence[bytes], parent: bytes | None,
              tokens: Sequence[int] | None, salt: str | None) -> None:
        """The observer's ``stored`` on this pool's device; NOTE(event-salt): the salt only
        with a chain's first block (no parent)."""
        self._observer.stored(self._device, hashes, parent, tokens,  # type: ignore[union-attr]
                              salt=salt if parent is None else None)

    # ---------------------------------------------------------------- the pool's calls (lock)
    def park(self, block_ids: list[int], now: float) -> list[int]:
        """Blocks whose last reference went: hashed ones become evictable (released at
        ``now``, still findable: lazy eviction); returns the unhashed ones, for the free list."""
        if not self._cached:
            return block_ids  # NOTE(speed): nothing is hashed (caching on, no hits yet)
        hashes, insert, depth, last = self._hash, self.policy.insert, self._depth, self._last
        free: list[int] = []
        push = free.append
        for b in block_ids:
            h = hashes[b]
            if h is None:
                push(b)
            else:
                last[b] = now
                insert(b, h, depth[b], now)
        return free

    def hit(self, block_ids: Sequence[int], revived: Sequence[int]) -> None:
        """Prefix hits on ``block_ids``; ``revived`` (those of them that were evictable) leave
        the evictable set. The policy counts one use per hit."""
        remove = self.policy.remove
        for b in revived:
            remove(b)
        if self._counts_hits:
            on_hit, hashes = self.policy.on_hit, self._hash
            for b in block_ids:
                on_hit(hashes[b])

    def evict(self, n: int) -> list[int]:
        """``n`` victims chosen by the policy (the caller checked ``num_evictable``), their
        hashes dropped after the evict hook saw them; for the pool to hand out again."""
        hook = self._on_evict
        if self._tokens is None and hook is None and self._observer is None:
            # NOTE(speed): _drop_hash inlined, a prefill evicts ~100s of blocks
            cached, hashes = self._cached, self._hash
            out = self.policy.evict_many(n)
            for b in out:
                del cached[hashes[b]]
                hashes[b] = None
            return out
        evict = self.policy.evict
        out, gone = [], []
        for _ in range(n):
            b = evict()
            h = self._hash[b]
            if hook is not None and h is not None:
                hook(b, h)
            gone.append(h)
            self._drop_hash(b)
            out.append(b)
        if self._observer is not None:
            self._observer.removed(self._device, gone)
        return out

    def evict_all(self) -> list[int]:
        """Every evictable block, hashes dropped without the hook (a cache reset); the observer
        hears them removed, or the whole cache cleared when nothing stays hashed."""
        out, gone = [], []
        while len(self.policy):
            b = self.policy.evict()
            gone.append(self._hash[b])
            self._drop_hash(b)
            out.append(b)
        if self._observer is not None:
            if self._cached:
                self._observer.removed(self._device, gone)
            else:
                self._observer.cleared(self._device)
        return out

    def _drop_hash(self, b: int) -> None:
        h = self._hash[b]
        if h is not None:
            del self._cached[h]
        self._hash[b] = None
        if self._tokens is not None:
            self._tokens.pop(b, None)

    def move(self, src: int, dst: int, evictable: bool) -> None:
        """Defrag commit: ``dst`` takes over ``src``'s hash, depth and release time (and its
        place in the evictable set when ``evictable``)."""
        self._last[dst] = self._last[src]
        h = self._hash[src]
        if h is None:
            return  # a used block without a hash: nothing of it is indexed
        if evictable:
            self.policy.discard(src)
        self._cached[h] = dst
        self._hash[dst], self._hash[src] = h, None
        self._depth[dst] = self._depth[src]
        if self._tokens is not None and src in self._tokens:
            self._tokens[dst] = self._tokens.pop(src)
        if evictable:
            self.policy.insert(dst, h, self._depth[dst], self._last[dst])

    def check_invariants(self, evictable: Sequence[int], free: Sequence[int]) -> None:
        """Raise InvariantError unless ``evictable`` (the pool's ref-0 blocks off its free
        list) is exactly the policy's set, every one hashed, and no ``free`` block is hashed."""
        for h, b in self._cached.items():
            if self._hash[b] != h:
                raise InvariantError(f"hash map says block {b} caches a hash it does not hold")
        hashed = sum(1 for h in self._hash if h is not None)
        if hashed != len(self._cached):
            raise InvariantError(f"{hashed} blocks hold a hash but the map has "
                                 f"{len(self._cached)}")
        if any(self._hash[b] is not None for b in free):
            raise InvariantError("a free block holds a content hash")
        if len(evictable) != len(self.policy):
            raise InvariantError(f"{len(evictable)} ref-0 cached blocks but the policy holds "
                                 f"{len(self.policy)}")
        for b in evictable:
            if b not in self.policy or self._hash[b] is None:
                raise InvariantError(f"ref-0 block {b} is neither free nor evictable")
        self.policy.check_invariants()
