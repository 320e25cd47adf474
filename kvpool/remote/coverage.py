"""A cluster that would stop serving every slot when one master is lost (said at startup).

NOTE(full-coverage): with ``cluster-require-full-coverage yes`` (Redis's default) a node
whose view of the cluster has a slot no live master serves says cluster_state:fail and
answers CLUSTERDOWN for every key, its own slots' too. A master lost with no replica to be
promoted in its place leaves its slots unserved, so the other masters stop serving as well:
the per-node breakers (NOTE(node-breaker)) then have no node left to keep hitting. The
warm-up reads ``CONFIG GET cluster-require-full-coverage`` on every node and ``CLUSTER
NODES`` from one, and warns once when a node requires full coverage while a master with
slots has no replica. A server that refuses CONFIG (an ACL without it, a renamed command)
or any other read is not judged: nothing is said.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from redis.exceptions import RedisClusterException, RedisError

SETTING = "cluster-require-full-coverage"


def unprotected(nodes: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The masters serving slots with no replica, from a parsed ``CLUSTER NODES`` reply
    (redis-py's dict: node address -> its flags, master_id, node_id, slots)."""
    covered = {n.get("master_id") for n in nodes.values()
               if "slave" in n.get("flags", "") and "fail" not in n.get("flags", "")}
    return sorted(addr for addr, n in nodes.items()
                  if "master" in n.get("flags", "") and "fail" not in n.get("flags", "")
                  and n.get("slots") and n.get("node_id") not in covered)


def _says_yes(reply: Any) -> bool:
    """Does a ``CONFIG GET`` reply (a dict, or a flat list) set the setting to yes?"""
    if isinstance(reply, list):
        reply = dict(zip(reply[::2], reply[1::2]))
    value = next(iter(reply.values()), b"") if isinstance(reply, dict) and reply else b""
    return (value.decode() if isinstance(value, bytes) else str(value)).lower() == "yes"


async def fragile(redis: Any, bound_s: float) -> tuple[list[str], list[str]] | None:
    """(the nodes requiring full coverage, the masters with no replica) when a lost master
    would stop the whole cluster (NOTE(full-coverage)); None when it would not, or when a
    read was refused or failed (not judged)."""
    try:
        async with asyncio.timeout(bound_s):
            nodes = redis.get_nodes()
            yes = [n.name for n in nodes
                   if _says_yes(await n.execute_command("CONFIG", "GET", SETTING))]
            alone = unprotected(await nodes[0].execute_command("CLUSTER NODES")) if yes else []
    except (RedisError, RedisClusterException, OSError, TimeoutError, IndexError):
        return None
    return (yes, alone) if yes and alone else None


def warning(yes: list[str], alone: list[str]) -> str:
    """The startup warning of :func:`fragile`'s answer, with the fix."""
    return (f"cluster nodes {', '.join(yes)} run with {SETTING} yes (the default) and masters "
            f"{', '.join(alone)} have no replica: if one of those masters is lost, every node "
            "stops serving every slot (CLUSTERDOWN) until it is back, so every remote lookup "
            f"misses, not only that master's slots; set {SETTING} no on every node (CONFIG "
            "SET and redis.conf) so the other masters keep serving, or give each master a "
            "replica to be promoted in its place (NOTE(full-coverage))")


async def warn_fragile(redis: Any, faults: Any, bound_s: float) -> None:
    """At the warm-up of a cluster tier: log :func:`warning` once through ``faults`` (a
    ``FaultLog``) when :func:`fragile` finds the cluster fragile."""
    found = await fragile(redis, bound_s)
    if found is not None:
        faults.once("full-coverage", warning(*found))
