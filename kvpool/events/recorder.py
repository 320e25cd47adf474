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
(llm-d's indexer: a hash over the parent's key and the block's tokens) indexes them. Empty
only for host (``CPU``) blocks, as vLLM's offloading connector's default events are.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvpool.core.block import Device
from kvpool.events.publisher import EventPublisher
from kvpool.events.wire import (MEDIUM_CPU, MEDIUM_GPU, AllBlocksCleared, BlockRemoved,
                                BlockStored)

__all__ = ["KVEventRecorder"]

_MEDIUM = {Device.DEVICE: MEDIUM_GPU, Device.HOST: MEDIUM_CPU}


class KVEventRecorder:
    """The observer given to the block manager; publishes through ``publisher``."""

    def __init__(self, publisher: EventPublisher, block_size: int) -> None:
        self.publisher = publisher
        self.block_size = block_size
        self._submit = publisher.submit

    def stored(self, device: Device, hashes: Sequence[bytes], parent: bytes | None,
               tokens: Sequence[int] | None = None) -> None:
        if hashes:
            self._submit(BlockStored(list(hashes), parent, list(tokens or ()),
                                     self.block_size, None, _MEDIUM[device], None))

    def removed(self, device: Device, hashes: Sequence[bytes]) -> None:
        if hashes:
            self._submit(BlockRemoved(list(hashes), _MEDIUM[device]))

    def cleared(self, device: Device) -> None:
        self._submit(AllBlocksCleared())
