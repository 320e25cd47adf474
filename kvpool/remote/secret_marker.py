"""Replicas of one namespace keyed by different secrets (or one by none), said once.

NOTE(secret-marker): with keyed names (keys.py NOTE(keyed-names)) replicas given different
``--remote-secret-file`` secrets, or one none, share no key: each one's lookups silently miss
the others' blocks. Before keyed names they read each other's values, which failed the MAC
and were said (diagnose.py NOTE(secret-mismatch)); now nothing was. So each replica, once
Redis answers (at the warm-up, and again when an outage episode ends), swaps its marker into
a fixed key of its namespace that no secret keys, ``kvp:2:<ns>:secret``, with one ``SET ...
GET`` (Redis >= 6.2; single-key, so any cluster slot or a Sentinel-managed master serves it):

    marker = b"plain"                                    (no secret)
           | b"keyed:" || hex(HMAC-SHA-256(name_key, b"kvpool secret check")[:8])

The fingerprint tells secrets apart without revealing the secret or ``name_key``. An old
marker that differs is said once, with the fix, and counted under ``errors_total`` as the
values of such replicas were before keyed names (``forged``: another secret, ``unsigned``:
none; a replica without a secret has no such kind). The marker is the last checker's (no
TTL, as every kvpool key; an evicted one is written again): a misconfigured replica is said
by itself when it starts after the others, and by the next one checking after it. Never on a
request's path, bounded by ``bound``; any failure (an old Redis, an ACL, an outage) skips the
check, and the tier's own calls say what is wrong.
"""

from __future__ import annotations

import asyncio
import hmac
from typing import Any

from redis.exceptions import RedisClusterException, RedisError

from kvpool.remote.diagnose import FaultLog
from kvpool.remote.keys import KEY_PREFIX, Namespace
from kvpool.remote.tier import RemoteStats

_LABEL = b"kvpool secret check"
PLAIN = b"plain"
_FIX = ("give every replica the same --remote-secret-file (if they have it already, the "
        "replica that wrote the marker {key} has stopped since: nothing to do)")


def marker_key(ns: Namespace) -> str:
    """The marker's key: in ``ns``'s namespace, the same with any secret or none."""
    return f"{KEY_PREFIX}{ns.ns}:secret"


def marker(ns: Namespace) -> bytes:
    """What ``ns``'s replicas write under :func:`marker_key`: how their names are keyed."""
    if ns.name_key is None:
        return PLAIN
    return b"keyed:" + hmac.digest(ns.name_key, _LABEL, "sha256")[:8].hex().encode()


def mismatch(ours: bytes, theirs: bytes) -> tuple[str, str | None]:
    """Who writes the namespace otherwise, in words, and the ``errors_total`` kind."""
    if theirs == PLAIN:
        return "without --remote-secret-file while this replica has one", "unsigned"
    if ours == PLAIN:
        return "with a --remote-secret-file while this replica has none", None
    return "with another --remote-secret-file than this replica's", "forged"


async def check_secret(redis: Any, ns: Namespace, faults: FaultLog, stats: RemoteStats,
                       bound: float) -> None:
    """Swap ``ns``'s marker in and say (once) an old one that differs (NOTE(secret-marker))."""
    key, ours = marker_key(ns), marker(ns)
    try:
        async with asyncio.timeout(bound):
            theirs = await redis.set(key, ours, get=True)
    except (TimeoutError, RedisError, RedisClusterException, OSError):
        return
    if theirs is None or bytes(theirs) == ours:
        return
    who, kind = mismatch(ours, bytes(theirs))
    said = faults.once("secret-marker", (
        f"another replica of this namespace writes it {who}: the replicas share no blocks "
        "(each one's lookups miss the others' values, keys.py NOTE(keyed-names)); "
        + _FIX.format(key=key)))
    if said and kind is not None:
        stats.count_error(kind)
