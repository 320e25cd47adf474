"""``ResponseStore``: the recent Responses API results, kept in memory for
``previous_response_id`` and ``GET /v1/responses/{id}``.

Entries are keyed by (tenant, response id): a tenant never reads another tenant's response,
even with its id in hand (the lookup misses, as for an id never issued). The store is bounded
by count and by bytes, all tenants together, so its memory is bounded whatever clients send; a
response evicted is one OpenAI's API would have kept, and a continuation naming it gets the
same 404 as an unknown id. Nothing survives a restart. docs/architecture.md, "The Responses
store", has the bounds as an operator sees them.

NOTE(response-bytes): each response is sized once, when it is made (``StoredResponse.nbytes``),
by what it really holds: its body is kept as the JSON bytes GET answers (a logprob entry held
as a dict of Python objects costs about 4.6x its JSON, tracemalloc), counted by their length,
as are a streamed background run's events, kept as one bytes object; its messages, which a
continuation extends and so stay Python objects, count ``sys.getsizeof`` of every dict, list
and string in them (one pass, as cheap as the JSON). Shared objects count each time they
appear: a continuation's messages repeat its predecessor's, objects the two share in memory,
so a conversation stored turn by turn counts more than once and the budget errs high. A
fixed per-entry cost (the key, this object, the LRU's slot: about 250 bytes, tracemalloc)
is left out: the count bound bounds it. A response larger than the whole budget is not
stored at all (the request that made it still succeeds; a continuation naming it gets the
usual 404), and evicts nothing.
docs/architecture.md, "The Responses store", has the measured figures.

NOTE(fair-evict): when a bound is passed, the entry that goes is the least recently used (a
lookup counts as a use) of the tenant holding the most of what is over: the most entries when
the count is over, the most bytes when the bytes are. So a busy tenant (a batch job, where
``store`` is OpenAI's default true) makes room from its own responses once it holds the most,
and never evicts a tenant that holds less; one that sends a few huge responses loses its own
before another's many small ones. Each bound picks by its own measure, so many tiny responses
cannot make a tenant with a few large ones pay for the count, nor the reverse. A tenant that
holds no more than its share of both bounds (each divided by the number of tenants holding any)
never loses an entry: were it the largest holder, all together would be within the bound. With
one tenant this is plain least-recently-used order.

The lock: lookups run where the request body is parsed, which is a worker thread for a large
body (json_body.py), while results are put from the event loop.
"""

from __future__ import annotations

import json
import sys
import threading
from dataclasses import InitVar, dataclass, field
from typing import Any

from kvpool.core.fair_lru import FairLru

__all__ = ["DEFAULT_MAX_STORED_RESPONSES", "DEFAULT_MAX_STORED_RESPONSE_BYTES", "ResponseStore",
           "StoredResponse"]

DEFAULT_MAX_STORED_RESPONSES = 1024
DEFAULT_MAX_STORED_RESPONSE_BYTES = 256 << 20  # 256 MiB


def _held(messages: tuple[dict[str, Any], ...]) -> int:
    """``sys.getsizeof`` of every dict, list and string in ``messages`` (and what else they
    hold), shared ones each time; a stack, not recursion, however deep a client nests."""
    size, todo = 0, list(messages)
    while todo:
        obj = todo.pop()
        size += sys.getsizeof(obj)
        if isinstance(obj, dict):
            todo += obj.keys()
            todo += obj.values()
        elif isinstance(obj, (list, tuple)):
            todo += obj
    return size


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """One finished response: its body, kept as the JSON GET answers (``raw``; NOTE(response-
    bytes)), and the conversation a continuation starts from (the chat messages of its input
    and output; not its instructions, which OpenAI does not carry over). ``nbytes`` is its
    NOTE(response-bytes) size, computed once here. ``encoded``: ``json.dumps(body).encode()``
    when the caller has written it already (in slices, and answered with the very bytes:
    responses_api.py NOTE(store-slices)); else it is written here, whole."""

    body: InitVar[dict[str, Any]]
    messages: tuple[dict[str, Any], ...]
    events: bytes = b""  # a streamed background run's SSE events (GET replays)
    encoded: InitVar[bytes | None] = None
    raw: bytes = field(init=False, compare=False)
    nbytes: int = field(init=False, compare=False)

    def __post_init__(self, body: dict[str, Any], encoded: bytes | None) -> None:
        # json.dumps' defaults, as aiohttp's json_response writes it: ASCII, a lone surrogate
        # escaped (no UTF-8 of it to fail on)
        raw = encoded if encoded is not None else json.dumps(body).encode("ascii")
        object.__setattr__(self, "raw", raw)
        object.__setattr__(self, "nbytes",
                           len(self.raw) + len(self.events) + _held(self.messages))


class ResponseStore:
    """At most ``max_entries`` responses and ``max_bytes`` of them (all tenants together);
    NOTE(fair-evict) picks the one that goes. Either bound 0 stores nothing."""

    def __init__(self, max_entries: int = DEFAULT_MAX_STORED_RESPONSES,
                 max_bytes: int = DEFAULT_MAX_STORED_RESPONSE_BYTES) -> None:
        self._entries: FairLru[StoredResponse] = FairLru(0)  # the count bound's NOTE(fair-lru)
        self._tenant_bytes: dict[str, int] = {}  # by tenant holding any
        self._bytes = 0
        self._lock = threading.Lock()
        self.set_bounds(max_entries, max_bytes)

    def set_bounds(self, max_entries: int, max_bytes: int) -> None:
        """New bounds (ValueError for a negative one); what is over them goes now."""
        if max_entries < 0:
            raise ValueError(f"max_entries={max_entries!r}: use 0 (store nothing) or more")
        if max_bytes < 0:
            raise ValueError(f"max_bytes={max_bytes!r}: use 0 (store nothing) or more")
        with self._lock:
            self.max_entries = max_entries
            self.max_bytes = max_bytes
            self._forget(self._entries.trim())
            self._evict_bytes()

    @property
    def max_entries(self) -> int:
        """The count bound (the FairLru's own: a new one applies from the next put)."""
        return self._entries.max_entries

    @max_entries.setter
    def max_entries(self, max_entries: int) -> None:
        self._entries.max_entries = max_entries

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        """The NOTE(response-bytes) sizes of every response held, all tenants together."""
        return self._bytes

    def held(self, tenant: str) -> int:
        """How many responses ``tenant`` has stored."""
        with self._lock:
            return self._entries.held(tenant)

    def held_bytes(self, tenant: str) -> int:
        """The NOTE(response-bytes) size of what ``tenant`` has stored."""
        with self._lock:
            return self._tenant_bytes.get(tenant, 0)

    def held_ids(self, tenant: str) -> list[str]:
        """``tenant``'s response ids, least recently used first (not a use)."""
        with self._lock:
            return self._entries.keys(tenant)

    def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        with self._lock:
            return self._entries.get(tenant, response_id)

    def put(self, tenant: str, response_id: str, entry: StoredResponse) -> None:
        """Keep ``entry``, unless it alone is over ``max_bytes`` (NOTE(response-bytes))."""
        with self._lock:
            old = self._entries.pop(tenant, response_id)  # a put under a held id replaces it
            if old is not None:
                self._forget([(tenant, response_id, old)])
            if entry.nbytes > self.max_bytes:
                return
            self._tenant_bytes[tenant] = self._tenant_bytes.get(tenant, 0) + entry.nbytes
            self._bytes += entry.nbytes
            self._forget(self._entries.put(tenant, response_id, entry))
            self._evict_bytes()

    def delete(self, tenant: str, response_id: str) -> bool:
        """Drop ``tenant``'s ``response_id``; whether it was held."""
        with self._lock:
            old = self._entries.pop(tenant, response_id)
            if old is not None:
                self._forget([(tenant, response_id, old)])
            return old is not None

    def _forget(self, gone: list[tuple[str, str, StoredResponse]]) -> None:
        """Take the bytes of the ``gone`` entries off (the lock is held)."""
        for tenant, _, entry in gone:
            self._bytes -= entry.nbytes
            self._tenant_bytes[tenant] -= entry.nbytes
        for tenant, _, _ in gone:  # a tenant holding none is dropped, as FairLru drops it
            if not self._entries.held(tenant):
                self._tenant_bytes.pop(tenant, None)

    def _evict_bytes(self) -> None:
        """NOTE(fair-evict): while the bytes are over, the oldest entry of the tenant holding
        the most bytes goes (the count bound is FairLru's; the lock is held)."""
        while self._bytes > self.max_bytes:
            tenant = max(self._tenant_bytes, key=self._tenant_bytes.__getitem__)
            self._forget([(tenant, *self._entries.pop_oldest(tenant))])
