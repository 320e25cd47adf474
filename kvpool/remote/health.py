"""The trial the tier's health check runs while its breaker is open (``breaker.py``): a PING
after an outage, and the tier's own commands after a READONLY or NOPERM reply, which a PING
would not notice (NOTE(pause)).
"""

from __future__ import annotations

import asyncio
from typing import Any

from redis.crc import key_slot
from redis.exceptions import ClusterDownError, RedisError

from kvpool.remote.breaker import DOWN_KINDS, PAUSE_KINDS
from kvpool.remote.diagnose import classify
from kvpool.remote.keys import segment_of
from kvpool.remote.replies import pong


async def trial(redis: Any, cluster: bool, cause: str | None, script: Any, key: str) -> None:
    """Raise unless the server serves the tier again (the caller bounds it with a deadline).

    ``cluster``: refresh the slot map first (a failure may have asked for one). After a
    pause (``cause`` in PAUSE_KINDS) every command the tier sends runs once on ``key``, a key
    of the tier's namespace no block has (the zero hash): the probe script (TYPE, TOUCH;
    SCRIPT LOAD when not cached), MGET, SET XX and DEL, writes that change nothing when the
    key is absent yet a replica refuses (READONLY) and an ACL checks (NOPERM), and TOUCH."""
    if cluster:
        await redis.initialize()
    await pong(redis)  # NOTE(reply-shape)
    if cluster and cause in DOWN_KINDS:
        serving(await redis.cluster_info())
    if cause not in PAUSE_KINDS:
        return
    await script(keys=[key], args=[0])
    await redis.mget([key])
    await redis.set(key, b"", xx=True)
    await redis.delete(key)
    await redis.touch(key)


def pauses(exc: BaseException) -> bool:
    """Is ``exc`` (an error reply, or one of a pipeline's) of a kind that pauses the tier?"""
    return classify(exc) in PAUSE_KINDS


def opens(exc: BaseException) -> bool:
    """Does the error reply ``exc`` open the breaker (NOTE(pause), NOTE(clusterdown))? So
    does the cluster client's "cannot be connected" when a seed is no Redis (the protocol
    kind, NOTE(cluster-seed)), as that failure does behind a plain URL."""
    return classify(exc) in PAUSE_KINDS | DOWN_KINDS | {"protocol"}


def serving(info: dict) -> None:
    """Raise unless a node's CLUSTER INFO says cluster_state:ok (NOTE(clusterdown))."""
    if info.get("cluster_state") != "ok":
        raise ClusterDownError(f"cluster_state:{info.get('cluster_state')}")


def paused_raised(results: list[Any]) -> list[Any]:
    """A pipeline's replies, or the first READONLY / NOPERM among them raised: a put whose
    SETs a replica or an ACL refused fails as a whole and pauses the tier (NOTE(pause))."""
    paused = next((e for e in results if isinstance(e, Exception) and pauses(e)), None)
    if paused is not None:
        raise paused
    return results


async def node_trial(redis: Any, name: str, cause: str | None, script: Any, key: str,
                     ping_s: float) -> None:
    """The trial of one cluster node's breaker (NOTE(node-breaker)): raise unless the node
    ``name`` answers (within ``ping_s``; after a CLUSTERDOWN, with cluster_state:ok:
    NOTE(clusterdown)) or serves no slot any more. When it does not answer, the slot map is
    read again, so a replica promoted in its place or its slots given to another node end
    the trial: calls for those keys go to the node named now, under its own breaker. PING
    first: a hung node must not hold the map's reread. After a pause the tier's commands run
    too, as in :func:`trial`, on a key of a slot this node serves (:func:`node_key`)."""
    manager = redis.nodes_manager
    node = manager.get_node(node_name=name)
    try:
        if node is None:
            raise ClusterDownError(f"{name} is not in the slot map")
        async with asyncio.timeout(ping_s):
            await pong(node)  # NOTE(reply-shape)
            if cause in DOWN_KINDS:
                serving(await node.execute_command("CLUSTER INFO"))
    except (RedisError, OSError, TimeoutError):
        await manager.initialize()
        if any(owners and owners[0].name == name for owners in manager.slots_cache.values()):
            raise
        return
    if cause in PAUSE_KINDS and (own := node_key(key, manager.slots_cache, name)) is not None:
        await trial(redis, False, cause, script, own)


def node_key(key: str, slots_cache: dict, name: str) -> str | None:
    """``key`` with its hash tag replaced by one of a slot the node ``name`` serves in the
    slot map ``slots_cache`` (slot -> its nodes, the master first); None when it serves no
    slot. NOTE(node-probe): the pause trial of a node's breaker ran on the tier's one check
    key, whose slot is most likely another node's: a node still refusing (NOPERM, READONLY)
    passed the trial when the key's own node served, and its breaker closed to reopen on the
    next call (or, the other way round, a mended node stayed paused while another one
    refused). The first tag ``{check:I}`` that hashes into the node's slots (1 try in 3 on
    3 masters) makes the trial's commands go to that node."""
    own = {slot for slot, nodes in slots_cache.items() if nodes and nodes[0].name == name}
    if not own:
        return None
    tag = segment_of(key)
    for i in range(1 << 20):  # a slot's tag is found within ~16384 tries when it has one
        candidate = key.replace(tag, f"{{check:{i}}}", 1)
        if key_slot(candidate.encode()) in own:
            return candidate
    return key
