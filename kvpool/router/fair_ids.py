"""FairIds: response id -> replica URL, per tenant, at most ``max_ids`` in all (affinity.py).

NOTE(fair-ids): past the bound, the id that goes is the least recently used one (a lookup
counts as a use) of the tenant holding the most ids, as the replica's own store evicts
(kvpool/server/response_store.py NOTE(fair-evict)). A tenant that makes a flood of responses
makes room from its own ids once it holds the most, and a tenant holding no more than its
share (``max_ids`` divided by the tenants holding any) never loses one: were it the largest
holder, all together would be within the bound. With one tenant (the router does not know
tenants: every request is tenant "") this is plain least-recently-used order, as before.

Each tenant's ids are an OrderedDict (its LRU order); a tenant holding none is dropped, so
memory follows the ids held. The largest holder is found in O(1): ``_holders`` maps a count
to the tenants holding that many, and a count only ever moves by one.
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["FairIds"]


class FairIds:
    """Bounded per-tenant LRU maps of id -> URL (NOTE(fair-ids))."""

    def __init__(self, max_ids: int) -> None:
        if max_ids < 1:
            raise ValueError(f"max_ids={max_ids!r}: use 1 or more")
        self.max_ids = max_ids
        self._shelves: dict[str, OrderedDict[str, str]] = {}
        self._holders: dict[int, dict[str, None]] = {}  # count -> tenants (insertion order)
        self._top = 0  # the largest count held
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def held(self, tenant: str) -> int:
        """How many ids ``tenant`` holds."""
        shelf = self._shelves.get(tenant)
        return 0 if shelf is None else len(shelf)

    def tenants(self) -> int:
        """How many tenants hold an id."""
        return len(self._shelves)

    def ids(self, tenant: str) -> list[str]:
        """``tenant``'s ids, least recently used first."""
        return list(self._shelves.get(tenant, ()))

    def get(self, tenant: str, key: str) -> str | None:
        """The URL of ``tenant``'s id ``key`` (a use: it becomes the tenant's newest)."""
        shelf = self._shelves.get(tenant)
        url = None if shelf is None else shelf.get(key)
        if url is not None:
            shelf.move_to_end(key)  # type: ignore[union-attr]
        return url

    def put(self, tenant: str, key: str, url: str) -> tuple[str, str] | None:
        """``tenant``'s id ``key`` is at ``url`` (the latest claim wins); the (tenant, id)
        evicted to stay within the bound, if one was."""
        shelf = self._shelves.get(tenant)
        if shelf is None:
            shelf = self._shelves[tenant] = OrderedDict()
        if key in shelf:
            shelf[key] = url
            shelf.move_to_end(key)
            return None
        shelf[key] = url
        self._size += 1
        self._moved(tenant, len(shelf) - 1, len(shelf))
        return self._evict() if self._size > self.max_ids else None

    def _evict(self) -> tuple[str, str]:
        """NOTE(fair-ids): the oldest id of the largest holder goes."""
        tenant = next(iter(self._holders[self._top]))
        shelf = self._shelves[tenant]
        key, _ = shelf.popitem(last=False)
        self._size -= 1
        self._moved(tenant, len(shelf) + 1, len(shelf))
        if not shelf:
            del self._shelves[tenant]
        return tenant, key

    def _moved(self, tenant: str, old: int, new: int) -> None:
        """``tenant`` went from holding ``old`` ids to ``new`` (one more or one fewer)."""
        if old:
            bucket = self._holders[old]
            del bucket[tenant]
            if not bucket:
                del self._holders[old]
        if new:
            self._holders.setdefault(new, {})[tenant] = None
        if new > self._top or old not in self._holders and old == self._top:
            self._top = new  # a count moves by one: the next largest is ``new``
