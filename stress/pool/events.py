"""``stress pool --kv-events``: a counting pool observer that checks every BlockStored.

The block manager calls it under its pool lock (kvpool.core.block.PoolObserver), as it calls
the KV-event recorder of ``kvpool serve``; with it attached every sequence's table keeps its
token ids (NOTE(event-tokens)) and the decode fast paths append to them. Each ``GPU``
BlockStored must carry ``block_size`` token ids per block (docs/kv_events.md "What is
published"), each block's hash must be the chain hash of its parent (null: a tenant's root)
and those tokens, and the parent must have been stored before. ``CPU`` ones (swap-outs) carry
their tokens too (kvpool/core/swap.py NOTE(host-tokens)), checked the same way; their parent is
a block of the host tier, so only its chain is checked.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from kvpool.core import Device
from kvpool.core.hashing import BlockHasher

__all__ = ["CheckingObserver"]

MAX_RECORDED = 20  # error messages kept verbatim (the count is exact)


class CheckingObserver:
    """Counts the pools' calls; ``errors`` counts BlockStored events that break the rules."""

    def __init__(self, hasher: BlockHasher, salts: Sequence[str | None]) -> None:
        self.hasher = hasher
        self.bs = hasher.block_size
        self.roots = {hasher.root(s) for s in salts}
        self.stored_events = 0
        self.stored_blocks = 0
        self.host_stored_blocks = 0
        self.removed_blocks = 0
        self.clears = 0
        self.errors = 0
        self.messages: list[str] = []
        self._seen: set[bytes] = set()  # 8-byte prefixes of every GPU hash stored so far
        self._lock = threading.Lock()  # the device and host pools have a lock each

    def _error(self, message: str) -> None:
        self.errors += 1
        if len(self.messages) < MAX_RECORDED:
            self.messages.append(message)

    def stored(self, device: Device, hashes: Sequence[bytes], parent: bytes | None,
               tokens: Sequence[int] | None = None, *, salt: str | None = None) -> None:
        with self._lock:
            if device is Device.HOST:
                self.host_stored_blocks += len(hashes)
                self._check(hashes, parent, tokens, host=True)
                return
            self.stored_events += 1
            self.stored_blocks += len(hashes)
            self._check(hashes, parent, tokens)

    def _check(self, hashes: Sequence[bytes], parent: bytes | None,
               tokens: Sequence[int] | None, *, host: bool = False) -> None:
        """A GPU event's parent must be a GPU hash stored before; a host one's (a block of
        the host tier) is not tracked, only its chain is checked."""
        bs, hb = self.bs, self.hasher.hash_block
        seen, medium = (set(), "CPU ") if host else (self._seen, "")
        n = 0 if tokens is None else len(tokens)
        if n != len(hashes) * bs:
            self._error(f"{medium}BlockStored of {len(hashes)} blocks carries {n} token ids "
                        f"(bs {bs})")
            seen.update(h[:8] for h in hashes)
            return
        if parent is not None and not host and parent[:8] not in seen:
            self._error(f"BlockStored parent {parent.hex()[:16]} was never stored")
        prev = parent
        for i, h in enumerate(hashes):
            chunk = tokens[i * bs:(i + 1) * bs]  # type: ignore[index]
            parents = self.roots if prev is None else (prev,)
            if not any(hb(p, chunk) == h for p in parents):
                self._error(f"BlockStored block {i} of {len(hashes)}: tokens {list(chunk)} "
                            "do not hash to its hash under its parent")
            seen.add(h[:8])
            prev = h

    def removed(self, device: Device, hashes: Sequence[bytes]) -> None:
        with self._lock:
            self.removed_blocks += len(hashes)

    def cleared(self, device: Device) -> None:
        with self._lock:
            self.clears += 1
