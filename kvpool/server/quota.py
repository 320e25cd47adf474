"""Per-tenant KV block quota at the server edge (``kvpool serve --tenant-block-quota N``).

A tenant is the identity of ``tenant.py`` (a trusted header or the API key, never the
client-chosen ``cache_salt``: rotating salts must not buy a fresh quota). The quota caps
the device blocks the *in-flight* requests of one tenant may hold at once, so one tenant cannot
fill the pool: it cannot hold more than ``N`` blocks, nor push out (evict or preempt) more than
what ``N`` blocks of its own need at any instant.

Accounting is a reservation taken before the request reaches the engine and released when its
stream ends (finished, failed, aborted or closed)::

    need(request) = n * ceil((len(prompt) + max_tokens) / block_size)

    tenant reserved + need <= N   -> admitted (reserved += need)
    need > N                      -> 400 tenant_quota_exceeded (can never be admitted)
    otherwise                     -> 429 tenant_quota_exceeded + Retry-After (try again later)

``need`` is a sound upper bound on the blocks the request's block tables can reference: each of
its ``n`` sequences holds at most ``ceil(tokens / block_size)`` blocks, prefix hits and forks
only share blocks (fewer distinct ones), copy-on-write replaces a shared block rather than adding
one. So the blocks held by a tenant never exceed its reservations.

Limits (documented, by design): the bound is conservative (prefix sharing inside a tenant is not
credited; a chat request without ``max_tokens`` reserves up to the context length); a closed
stream releases its reservation at once while the engine frees an aborted request's blocks on
its next pass, so for up to one engine step a tenant can exceed ``N`` by the blocks of requests
it just abandoned; the cap covers blocks held, not cached blocks a tenant left behind (those are
evictable by everyone under the shared eviction policy). It lives at the edge because admission
belongs to the scheduler, which knows nothing of tenants.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from typing import Any

from kvpool.errors import RequestError
from kvpool.runtime.outputs import aclose_updates
from kvpool.server.middleware import APIError
from kvpool.server.tenant import current_tenant

__all__ = ["QuotaEngine", "TenantBlockQuota"]

QUOTA_CODE = "tenant_quota_exceeded"


class TenantBlockQuota:
    """Reservations of device blocks per tenant.

    Invariant: ``reserved[t]`` is the sum of ``need`` over the admitted, not yet released
    requests of tenant ``t``, and never exceeds ``limit``; tenants with nothing reserved are
    absent from the map.
    """

    def __init__(self, limit: int, block_size: int) -> None:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError(f"tenant block quota {limit!r}: use an int >= 1")
        self.limit = limit
        self.block_size = block_size
        self._reserved: dict[str, int] = {}
        self._lock = threading.Lock()  # release may run from any thread (stream finalizers)
        self.rejected = 0  # 429s handed out (monotonic)

    def need(self, prompt_len: int, n: int, max_tokens: int) -> int:
        """Worst-case blocks of a request (see the module docstring)."""
        return n * -(-(prompt_len + max_tokens) // self.block_size)

    def try_reserve(self, tenant: str, blocks: int) -> bool:
        with self._lock:
            held = self._reserved.get(tenant, 0)
            if held + blocks > self.limit:
                self.rejected += 1
                return False
            self._reserved[tenant] = held + blocks
            return True

    def release(self, tenant: str, blocks: int) -> None:
        with self._lock:
            left = self._reserved.get(tenant, 0) - blocks
            if left < 0:
                raise AssertionError(f"tenant {tenant!r} released more blocks than it reserved")
            if left:
                self._reserved[tenant] = left
            else:
                self._reserved.pop(tenant, None)

    def reserved(self, tenant: str | None = None) -> int:
        """Blocks reserved by ``tenant`` (its identity; None = the anonymous tenant)."""
        with self._lock:
            return self._reserved.get(tenant or "", 0)


class _QuotaStream:
    """Wraps an engine stream; gives the reservation back exactly once when it ends."""

    def __init__(self, inner: Any, quota: TenantBlockQuota, tenant: str, blocks: int) -> None:
        self._inner = inner
        self._quota = quota
        self._tenant = tenant
        self._blocks = blocks
        self._held = True
        self.request_id = getattr(inner, "request_id", None)

    def _release(self) -> None:
        if self._held:
            self._held = False
            self._quota.release(self._tenant, self._blocks)

    def __aiter__(self) -> _QuotaStream:
        return self

    async def __anext__(self) -> Any:
        try:
            out = await self._inner.__anext__()
        except BaseException:  # finished iterator, failure or cancellation: the request ended
            self._release()
            raise
        if out.finished:
            self._release()
        return out

    async def aclose(self) -> None:
        try:
            await aclose_updates(self._inner)
        finally:
            self._release()


class QuotaEngine:
    """The engine as the routes see it, with ``generate`` gated by a TenantBlockQuota; every
    other attribute is the engine's own."""

    def __init__(self, engine: Any, quota: TenantBlockQuota) -> None:
        self._engine = engine
        self.quota = quota

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def generate(self, request_id: str | None, prompt: Any, params: Any, *,
                 cache_salt: str | None = None, priority: int = 0) -> AsyncIterator[Any]:
        quota = self.quota
        tenant = current_tenant()
        length = len(prompt) if isinstance(prompt, list) else len(
            self._engine.encode_prompt(prompt))
        max_tokens = params.max_tokens or self._engine.max_model_len
        need = quota.need(length, params.n, max_tokens)
        if need > quota.limit:
            raise RequestError(
                f"this request may need {need} KV blocks (n={params.n}, {length} prompt + "
                f"{max_tokens} new tokens) but a tenant may hold at most {quota.limit}: lower "
                "max_tokens or n", "max_tokens", QUOTA_CODE)
        if not quota.try_reserve(tenant, need):
            raise APIError(429, f"this tenant's requests already hold up to "
                                f"{quota.reserved(tenant)} of its {quota.limit} KV blocks; retry "
                                "later", code=QUOTA_CODE, headers={"Retry-After": "1"})
        try:
            inner = self._engine.generate(request_id, prompt, params, cache_salt=cache_salt,
                                          priority=priority)
        except BaseException:
            quota.release(tenant, need)
            raise
        return _QuotaStream(inner, quota, tenant, need)
