"""The fix an OOM reply's log line names (``diagnose.FaultLog``), worded on the memory
settings the server reported; kept apart from ``oom.py``, which imports ``diagnose``."""

from __future__ import annotations


def oom_fix(memory: tuple[str, int] | None) -> str:
    """The fix of an OOM reply under ``memory``, the (maxmemory-policy, maxmemory) the last
    ``INFO`` said (None: not read). NOTE(oom-fix): the warning said "give it maxmemory-policy
    allkeys-lru" whatever the policy, also to a server running allkeys-lru. Under an allkeys-*
    policy an OOM means Redis found nothing more to evict below maxmemory (what it holds
    besides the keys, client buffers and the like, fills it): the fix is a larger maxmemory."""
    policy, most = memory or ("", 0)
    if policy.startswith("allkeys-"):
        bound = f"maxmemory {most / 2**20:.0f} MiB" if most else "its maxmemory"
        return (f"it already evicts (maxmemory-policy {policy}), yet {bound} is too small "
                "for the tier's values besides what Redis itself holds (INFO memory: "
                "used_memory against maxmemory); raise maxmemory")
    if policy.startswith("volatile-"):
        return (f"maxmemory-policy {policy} evicts only keys with a TTL and kvpool's have "
                "none: set maxmemory-policy allkeys-lru so it evicts old blocks")
    return ("give it maxmemory-policy allkeys-lru so it evicts old blocks (under an allkeys-* "
            "policy already, raise maxmemory)" if policy != "noeviction" else
            "maxmemory-policy noeviction evicts nothing: give it maxmemory-policy allkeys-lru "
            "so it evicts old blocks")
