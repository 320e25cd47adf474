"""``InMemoryTier``: the RemoteTier protocol over an ordered dict, FOR UNIT TESTS ONLY.

It lets tests of code above the tier (and the tier contract itself) run without a Redis:
same leading-run probe, SET NX, LRU refresh on probe/get/touch, same value check and counters.
It is not shared between processes and has no faults; production uses ``RedisTier``.
Invariant: ``_used == sum(len(v) for v in _data.values()) <= max_bytes`` (when bounded).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from kvpool.errors import InvariantError
from kvpool.remote.codec import ValueCodec
from kvpool.remote.tier import RemoteStats, check_values


class InMemoryTier:
    def __init__(self, codec: ValueCodec, max_bytes: int | None = None) -> None:
        self.codec = codec
        self.max_bytes = max_bytes  # evict least recently used values above this (allkeys-lru)
        self._data: OrderedDict[str, bytes] = OrderedDict()  # oldest first
        self._used = 0
        self._stats = RemoteStats()
        self._g = codec.namespace.blocks_per_object

    async def probe(self, keys: Sequence[str], refresh: Sequence[str] = (),
                    purpose: str = "read") -> int:
        if not keys:
            return 0
        for k in refresh:
            if k in self._data:
                self._data.move_to_end(k)
        n = 0
        for k in keys:
            if k not in self._data:
                break
            self._data.move_to_end(k)
            n += 1
        return self._stats.count_probe(purpose, n, len(keys), self._g)

    async def get_many(self, keys: Sequence[str], parts: int | None = None
                       ) -> list[bytes | None]:
        raw = [self._data.get(k) for k in keys]
        for k, v in zip(keys, raw):
            if v is not None:
                self._data.move_to_end(k)
        values, bad = check_values(self.codec, keys, raw)
        for k, kind in bad:
            self._stats.count_error(kind)
            self._remove(k)
            self._stats.deleted_invalid += 1
        self._stats.get_bytes += sum(len(v) for v in values if v is not None)
        self._stats.get_missing += sum(v is None for v in values)
        return values

    async def put_many(self, items: Sequence[tuple[str, bytes]]) -> int:
        stored = 0
        for k, v in items:
            if k in self._data:
                self._stats.puts_deduped += 1
                continue
            self.set_raw(k, v)
            stored += 1
            self._stats.put_bytes += len(v)
        self._stats.puts += stored
        return stored

    async def touch(self, keys: Sequence[str]) -> int:
        n = 0
        for k in keys:
            if k in self._data:
                self._data.move_to_end(k)
                n += 1
        return n

    async def warm_up(self, connections: int = 1) -> bool:
        return True  # nothing to open

    async def health(self) -> bool:
        return True

    def stats(self) -> RemoteStats:
        return self._stats.copy()

    def note(self, dropped: int = 0, read: str | None = None, fetched: int = 0) -> None:
        self._stats.note(dropped, read, fetched)

    async def aclose(self) -> None:
        self._data.clear()
        self._used = 0

    # -- test helpers ---------------------------------------------------------------------
    def set_raw(self, key: str, value: bytes) -> None:
        """Overwrite a value as given (tests plant corrupt or foreign values with it)."""
        self._remove(key)
        self._data[key] = bytes(value)
        self._used += len(value)
        while self.max_bytes is not None and self._used > self.max_bytes and self._data:
            _, old = self._data.popitem(last=False)
            self._used -= len(old)

    def __contains__(self, key: str) -> bool:
        return key in self._data

    def check_invariants(self) -> None:
        used = sum(len(v) for v in self._data.values())
        if used != self._used or (self.max_bytes is not None and used > self.max_bytes):
            raise InvariantError(f"memory tier holds {used} bytes, counted {self._used}, "
                                 f"bound {self.max_bytes}")

    def _remove(self, key: str) -> None:
        old = self._data.pop(key, None)
        if old is not None:
            self._used -= len(old)
