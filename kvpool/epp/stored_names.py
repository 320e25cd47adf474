"""The model name a client asked for, kept per response id it created through a rewrite, so
that the stored response read back names it as the creation's answer did (docs/epp.md,
"Model rewrite and traffic splitting").

NOTE(stored-names): a replica stores a response with the model it served, the rewrite's
target (rewrite.py NOTE(model-rewrite)). The creation's answer names the client's model again
(restore.py NOTE(model-restore)), but a later ``GET /v1/responses/{id}`` (or a cancel, whose
answer is the response too) is no rewritten request, so it named the target: a client saw
another model for the same response. When the picker learns a creation's id from its answer
(picker.py NOTE(learn-answer)) and that creation was rewritten, it keeps (the client's model,
the target) for the id and the caller's tenant (kvpool/router/affinity.py NOTE(tenant)), and
the answer to any request of that tenant under ``/v1/responses/{id}`` is restored as the
creation's was: its model (or an event's ``response.model``) put back where it is the
target, nothing else touched. Bounded like the affinity map, at most its ``max_ids`` ids
(kvpool/core/fair_lru.py NOTE(fair-lru): the least recently used id of the tenant holding
the most goes), and a name of at most MAX_NAME_CHARS characters (a longer one is not kept:
its reads name the target). An id not learnt so (made elsewhere, before the picker started,
evicted, with a name too long) reads as the replica stored it.
"""

from __future__ import annotations

from kvpool.core.fair_lru import FairLru

__all__ = ["MAX_NAME_CHARS", "StoredNames"]

MAX_NAME_CHARS = 256  # a client's model name kept (a generic rule matches any name)


class StoredNames:
    """NOTE(stored-names): (tenant, response id) -> (the client's model, the target)."""

    def __init__(self, max_ids: int) -> None:
        self.names: FairLru[tuple[str, str]] = FairLru(max_ids)

    def __len__(self) -> int:
        return len(self.names)

    def keep(self, tenant: str | None, response_id: str, renamed: tuple[str, str]) -> None:
        """``tenant``'s ``response_id`` was created by a request rewritten as ``renamed``
        (None: a tenant the replicas refuse, never kept)."""
        if tenant is not None and len(renamed[0]) <= MAX_NAME_CHARS:
            self.names.put(tenant, response_id, renamed)

    def of(self, tenant: str | None, response_id: str | None) -> tuple[str, str] | None:
        """What to put back in ``tenant``'s reads of ``response_id`` (None: nothing)."""
        if tenant is None or response_id is None:
            return None
        return self.names.get(tenant, response_id)
