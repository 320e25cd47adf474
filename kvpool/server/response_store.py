"""``ResponseStore``: the recent Responses API results, kept in memory for
``previous_response_id`` and ``GET /v1/responses/{id}``.

Entries are keyed by (tenant, response id): a tenant never reads another tenant's response,
even with its id in hand (the lookup misses, as for an id never issued). The store is bounded
by count, least recently used first out (a lookup counts as a use), so its memory is bounded
whatever clients send; a response evicted is one OpenAI's API would have kept, and a
continuation naming it gets the same 404 as an unknown id. Nothing survives a restart.

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
    """At most ``max_entries`` responses (all tenants together), least recently used out."""

    def __init__(self, max_entries: int = DEFAULT_MAX_STORED_RESPONSES) -> None:
        if max_entries < 0:
            raise ValueError(f"max_entries={max_entries!r}: use 0 (store nothing) or more")
        self.max_entries = max_entries
        self._entries: OrderedDict[tuple[str, str], StoredResponse] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        key = (tenant, response_id)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            return entry

    def put(self, tenant: str, response_id: str, entry: StoredResponse) -> None:
        with self._lock:
            self._entries[(tenant, response_id)] = entry
            self._entries.move_to_end((tenant, response_id))
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
