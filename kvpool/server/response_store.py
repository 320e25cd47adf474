"""``ResponseStore``: the recent Responses API results, kept in memory for
``previous_response_id`` and ``GET /v1/responses/{id}``.

Entries are keyed by (tenant, response id): a tenant never reads another tenant's response,
even with its id in hand (the lookup misses, as for an id never issued). The store is bounded
by count, all tenants together, so its memory is bounded whatever clients send; a response
evicted is one OpenAI's API would have kept, and a continuation naming it gets the same 404 as
an unknown id. Nothing survives a restart.

NOTE(fair-evict): when full, the entry that goes is the least recently used (a lookup counts as
a use) of the tenant holding the most entries. So a busy tenant (a batch job, where ``store``
is OpenAI's default true) makes room from its own responses once it holds the most, and never
evicts a tenant that holds fewer: it used to push every other tenant's conversations out
within ``max_entries`` requests. With one tenant this is plain least-recently-used order.

The lock: lookups run where the request body is parsed, which is a worker thread for a large
body (json_body.py), while results are put from the event loop.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_MAX_STORED_RESPONSES", "ResponseStore", "StoredResponse"]

DEFAULT_MAX_STORED_RESPONSES = 1024


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """One finished response: its body and the conversation a continuation starts from (the
    chat messages of its input and output; not its instructions, which OpenAI does not carry
    over)."""

    body: dict[str, Any]
    messages: tuple[dict[str, str], ...]


class ResponseStore:
    """At most ``max_entries`` responses (all tenants together); NOTE(fair-evict) picks the
    one that goes."""

    def __init__(self, max_entries: int = DEFAULT_MAX_STORED_RESPONSES) -> None:
        if max_entries < 0:
            raise ValueError(f"max_entries={max_entries!r}: use 0 (store nothing) or more")
        self.max_entries = max_entries
        # tenant -> its responses, least recently used first
        self._tenants: dict[str, OrderedDict[str, StoredResponse]] = {}
        self._count = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self._count

    def held(self, tenant: str) -> int:
        """How many responses ``tenant`` has stored."""
        with self._lock:
            return len(self._tenants.get(tenant, ()))

    def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        with self._lock:
            entries = self._tenants.get(tenant)
            entry = entries.get(response_id) if entries is not None else None
            if entry is not None:
                entries.move_to_end(response_id)
            return entry

    def put(self, tenant: str, response_id: str, entry: StoredResponse) -> None:
        with self._lock:
            entries = self._tenants.setdefault(tenant, OrderedDict())
            self._count += response_id not in entries
            entries[response_id] = entry
            entries.move_to_end(response_id)
            while self._count > self.max_entries:
                self._evict_one()

    def _evict_one(self) -> None:
        """NOTE(fair-evict): the oldest entry of the largest holder (the lock is held)."""
        tenant, entries = max(self._tenants.items(), key=lambda kv: len(kv[1]))
        entries.popitem(last=False)
        self._count -= 1
        if not entries:
            del self._tenants[tenant]
