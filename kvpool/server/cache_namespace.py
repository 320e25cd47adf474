"""CacheNamespace: whose prefix cache a request reads and fills, one namespace per tenant or one
for all.

A prefix-cache hit is observable (``usage.prompt_tokens_details.cached_tokens``, the
``/v1/kvpool/lookup`` counts, and the latency), so a cache shared across tenants is an oracle:
tenant B learns whether tenant A sent a prompt by asking for it. So where the server knows who
sends (``--api-key`` or ``--tenant-header``: tenant.py), each tenant gets its own namespace by
default; ``--shared-prefix-cache`` opts back into one namespace for all::

    no identity configured            salt = cache_salt                    (one namespace)
    identity, --shared-prefix-cache   salt = cache_salt                    (one namespace)
    identity (the default)            salt = NS_MARK + json([tenant, cache_salt])

The salt is what ``BlockHasher.root`` mixes into every chain hash (kvpool/core/hashing.py), so
the device and host pools and the Redis tier's keys (kvpool/remote/keys.py: a key is a chain
hash) all follow from it. The encoding is injective in ``(tenant, cache_salt)``: two tenants
that send the same ``cache_salt`` still get different roots, and a tenant's own salts stay
apart. Client salts cannot contain NUL (protocol.py), so no client salt sent to a replica in
one-namespace mode spells a tenant's salt either.

Every use goes through ``salt``: the generation routes (request_gate.Ticket) and the lookup
route, so a lookup predicts exactly what the same tenant's next request reports as cached.
"""

from __future__ import annotations

import json
import logging

__all__ = ["NS_MARK", "CacheNamespace"]

log = logging.getLogger("kvpool.server")

NS_MARK = "\x00tenant\x00"  # no client salt holds NUL: this prefix is the server's alone


class CacheNamespace:
    """The prefix-cache salt of a request, from its tenant and its client ``cache_salt``."""

    def __init__(self, *, identity: bool, shared: bool = False) -> None:
        """``identity``: the server tells tenants apart (an API key or a tenant header is
        configured). ``shared``: the operator's ``--shared-prefix-cache``."""
        if shared and not identity:
            log.warning("--shared-prefix-cache has no effect: no tenant identity is "
                        "configured (--api-key or --tenant-header), so every request already "
                        "shares one prefix cache; drop the flag")
        self.per_tenant = identity and not shared

    def salt(self, tenant: str, cache_salt: str | None) -> str | None:
        """The salt the request's prefix hashes are made under."""
        if not self.per_tenant:
            return cache_salt
        # ASCII escapes: a header value may hold surrogate escapes that UTF-8 cannot encode
        return NS_MARK + json.dumps([tenant, cache_salt])
