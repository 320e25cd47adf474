"""Per-tenant KV block quota at the server edge (``kvpool serve --tenant-block-quota N``).

A tenant is the identity of ``tenant.py`` (a trusted header or the API key, never the
client-chosen ``cache_salt``: rotating salts must not buy a fresh quota). The quota caps
the device blocks the *in-flight* requests of one tenant may hold at once, so one tenant cannot
fill the pool: it cannot hold more than ``N`` blocks, nor push out (evict or preempt) more than
what ``N`` blocks of its own need at any instant.

Accounting is a reservation the request gate (request_gate.py) takes before the request
reaches the engine, released per prompt when its stream ends (finished, failed, aborted or
closed)::

    need(request) = sum over its prompts of the pool's own count (RequestChecker,
                    ``blocks_held``: the prompt's full blocks once, each of the ``n``
                    sequences' other blocks apart, the last token never stored; where
                    they run as child requests (groups of forks), which surely share
                    nothing, one group's count for each that can run at once, at most the
                    pool: NOTE(apart) in kvpool/sched/request_checker.py)

    tenant reserved + need <= N   -> admitted (reserved += need)
    need > N                      -> 400 tenant_quota_exceeded (can never be admitted)
    otherwise                     -> 429 tenant_quota_exceeded + Retry-After (try again later)

``need`` is a sound upper bound on the blocks the request's block tables can reference: it is
the count the pool's admission rule charges an empty pool, prefix hits and forks only share
blocks (fewer distinct ones), copy-on-write replaces a shared block rather than adding one.
So the blocks held by a tenant never exceed its reservations.

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

__all__ = ["QUOTA_CODE", "TenantBlockQuota"]

QUOTA_CODE = "tenant_quota_exceeded"


class TenantBlockQuota:
    """Reservations of device blocks per tenant.

    Invariant: ``reserved[t]`` is the sum of ``need`` over the admitted, not yet released
    requests of tenant ``t``, and never exceeds ``limit``; tenants with nothing reserved are
    absent from the map.
    """

    def __init__(self, limit: int) -> None:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError(f"tenant block quota {limit!r}: use an int >= 1")
        self.limit = limit
        self._reserved: dict[str, int] = {}
        self._lock = threading.Lock()  # release may run from any thread (stream finalizers)
        self.rejected = 0  # 429s handed out (monotonic)

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

