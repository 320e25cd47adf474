"""KVEventRecorder: the block pools' observer, turning their calls into vLLM-format events.

The pools call it under their lock, on whatever thread mutates them (the step thread, the event
loop for remote imports), so each call builds one small event and hands it to the publisher's
bounded queue (``EventPublisher.submit``: never waits, drops counted)::

    stored(device, hashes, parent, tokens) -> BlockStored  (a chain of newly findable blocks)
    removed(device, hashes)                -> BlockRemoved (evicted / reset blocks)
    cleared(device)                        -> AllBlocksCleared (nothing cached any more)

``device`` is a kvpool.core Device: DEVICE -> medium "GPU", HOST -> "CPU" (wire.py
NOTE(medium)). ``token_ids`` carries the blocks' tokens, ``block_size`` of them a block, as
vLLM's BlockStored does: with events on a sequence's table keeps its token ids whether hit
verification is on or off (NOTE(event-tokens)), so a consumer that keys blocks on their tokens
(llm-d's indexer: a hash over the parent's key and the block's tokens) indexes them; host
(``CPU``) blocks carry theirs too (core/swap.py NOTE(host-tokens)). ``extra_keys`` carries a
salted chain's published salt with its first block, on either medium (NOTE(event-salt)).
``group_idx`` is 0 on both kinds, as vLLM's (wire.py NOTE(group-idx)).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from kvpool.core.block import Device
from kvpool.events.publisher import EventPublisher
from kvpool.events.wire import (KV_GROUP, MEDIUM_CPU, MEDIUM_GPU, AllBlocksCleared,
                                BlockRemoved, BlockStored)

__all__ = ["KVEventRecorder"]

log = logging.getLogger("kvpool.events")

_MEDIUM = {Device.DEVICE: MEDIUM_GPU, Device.HOST: MEDIUM_CPU}


def _none(salt: str) -> str | None:
    return None


class KVEventRecorder:
    """The observer given to the block manager; publishes through ``publisher``."""

    def __init__(self, publisher: EventPublisher, block_size: int,
                 public_salt: Callable[[str], str | None] = _none) -> None:
        """``public_salt``: what of a chain's salt may be published (the server's: the client's
        cache_salt, a named tenant's as a keyed digest: salt_key.py NOTE(tenant-salt)); by
        default nothing."""
        self.publisher = publisher
        self.block_size = block_size
        self.public_salt = public_salt
        self._submit = publisher.submit
        self._warned = False  # NOTE(never-raise) said once

    def stored(self, device: Device, hashes: Sequence[bytes], parent: bytes | None,
               tokens: Sequence[int] | None = None, *, salt: str | None = None) -> None:
        """NOTE(never-raise): the pools call this on the step thread, so an event that cannot
        be built is dropped as a full queue drops one (counted, an AllBlocksCleared after
        it), said once in the log, and the step goes on: a salt the server's function could
        not read once stopped the engine for every tenant."""
        if not hashes:
            return
        try:
            extra = self._extra_keys(len(hashes), parent, salt)
        except Exception:
            self.publisher.drop()
            if not self._warned:
                self._warned = True
                log.exception("a KV event could not be built and was dropped (counted in "
                              "kvpool_kv_events_dropped_total); this is a bug, please report it")
            return
        self._submit(BlockStored(list(hashes), parent, list(tokens or ()), self.block_size,
                                 None, _MEDIUM[device], None, extra, KV_GROUP))

    def _extra_keys(self, n: int, parent: bytes | None,
                    salt: str | None) -> list[list[str] | None] | None:
        """NOTE(event-salt): vLLM puts a request's cache_salt into its first block's hash and
        publishes it, bare, as that block's extra keys; llm-d's indexer folds it into its key
        for the block, as its scorer does a request's. A salted chain's first block (GPU or
        CPU: both carry tokens, so both are keyed alike) carries the published form of the
        salt so; nothing else carries any."""
        if salt is None or parent is not None:
            return None
        public = self.public_salt(salt)
        if not public:  # vLLM adds none for an empty cache_salt either
            return None
        return [[public], *([None] * (n - 1))]

    def removed(self, device: Device, hashes: Sequence[bytes]) -> None:
        if hashes:
            self._submit(BlockRemoved(list(hashes), _MEDIUM[device], KV_GROUP))

    def cleared(self, device: Device) -> None:
        self._submit(AllBlocksCleared())
