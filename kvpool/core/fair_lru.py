"""FairLru: per-tenant least-recently-used maps, at most ``max_entries`` entries in all. The
router's response id map (kvpool/router/affinity.py) and the server's Responses store
(kvpool/server/response_store.py NOTE(fair-evict), which adds a byte bound) are both one.

NOTE(fair-lru): past the bound, the entry that goes is the least recently used one (a lookup
counts as a use) of the tenant holding the most entries. A tenant that makes a flood of
entries makes room from its own once it holds the most, and a tenant holding no more than its
share (``max_entries`` divided by the tenants holding any) never loses one: were it the
largest holder, all together would be within the bound. With one tenant this is plain
least-recently-used order. Which of two equal largest holders gives one up is left open.

Each tenant's entries are an OrderedDict (its LRU order); a tenant holding none is dropped,
so memory follows the entries held. The largest holder is found in O(1): ``_holders`` maps a
count to the tenants holding that many, and a count only ever moves by one.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

__all__ = ["FairLru"]

V = TypeVar("V")


class FairLru(Generic[V]):
    """Bounded per-tenant LRU maps of key -> value (NOTE(fair-lru)); ``max_entries`` 0 holds
    nothing."""

    def __init__(self, max_entries: int) -> None:
        if max_entries < 0:
            raise ValueError(f"max_entries={max_entries!r}: use 0 or more")
        self.max_entries = max_entries
        self._shelves: dict[str, OrderedDict[str, V]] = {}
        self._holders: dict[int, dict[str, None]] = {}  # count -> tenants (insertion order)
        self._top = 0  # the largest count held
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def held(self, tenant: str) -> int:
        """How many entries ``tenant`` holds."""
        shelf = self._shelves.get(tenant)
        return 0 if shelf is None else len(shelf)

    def tenants(self) -> int:
        """How many tenants hold an entry."""
        return len(self._shelves)

    def keys(self, tenant: str) -> list[str]:
        """``tenant``'s keys, least recently used first (not a use)."""
        return list(self._shelves.get(tenant, ()))

    def get(self, tenant: str, key: str) -> V | None:
        """``tenant``'s value for ``key`` (a use: it becomes the tenant's newest)."""
        shelf = self._shelves.get(tenant)
        value = None if shelf is None else shelf.get(key)
        if value is not None:
            shelf.move_to_end(key)  # type: ignore[union-attr]
        return value

    def put(self, tenant: str, key: str, value: V) -> list[tuple[str, str, V]]:
        """``tenant``'s ``key`` is ``value`` now (its newest); the (tenant, key, value)
        entries evicted to stay within the bound (NOTE(fair-lru)), oldest first."""
        shelf = self._shelves.get(tenant)
        if shelf is None:
            shelf = self._shelves[tenant] = OrderedDict()
        if key in shelf:
            shelf[key] = value
            shelf.move_to_end(key)
            return []
        shelf[key] = value
        self._size += 1
        self._moved(tenant, len(shelf) - 1, len(shelf))
        return self.trim()

    def trim(self) -> list[tuple[str, str, V]]:
        """Evict down to ``max_entries`` (it may have been lowered); what went, oldest first."""
        gone = []
        while self._size > self.max_entries:
            tenant = next(iter(self._holders[self._top]))
            gone.append((tenant, *self.pop_oldest(tenant)))
        return gone

    def pop(self, tenant: str, key: str) -> V | None:
        """Remove ``tenant``'s ``key``; its value, None when not held."""
        shelf = self._shelves.get(tenant)
        if shelf is None or key not in shelf:
            return None
        value = shelf.pop(key)
        self._removed(tenant, shelf)
        return value

    def pop_oldest(self, tenant: str) -> tuple[str, V]:
        """Remove ``tenant``'s least recently used entry (it holds one); its (key, value)."""
        shelf = self._shelves[tenant]
        key, value = shelf.popitem(last=False)
        self._removed(tenant, shelf)
        return key, value

    def _removed(self, tenant: str, shelf: OrderedDict[str, V]) -> None:
        self._size -= 1
        self._moved(tenant, len(shelf) + 1, len(shelf))
        if not shelf:
            del self._shelves[tenant]

    def _moved(self, tenant: str, old: int, new: int) -> None:
        """``tenant`` went from holding ``old`` entries to ``new`` (one more or one fewer)."""
        if old:
            bucket = self._holders[old]
            del bucket[tenant]
            if not bucket:
                del self._holders[old]
        if new:
            self._holders.setdefault(new, {})[tenant] = None
        if new > self._top or old not in self._holders and old == self._top:
            self._top = new  # a count moves by one: the next largest is ``new``
