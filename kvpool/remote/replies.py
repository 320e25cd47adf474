"""The tier's replies checked for their shape where redis-py parses them: a server answering
well-formed RESP of the wrong shape (``+OK``, ``:7`` or an array to every command) is "not
Redis" (``InvalidResponse``, the ``protocol`` kind), as at the handshake (NOTE(handshake-reply)).

NOTE(reply-shape): under ``?protocol=2`` redis-py sends no HELLO, so the handshake of such a
server succeeds and its reply reaches the first real command: INFO's parser raised a bare
AttributeError (``kvpool serve`` exited 1 at warm-up), an ``+OK`` INFO parsed into a mapping
of nothing ("reachable: Redis ?"), the probe's ``int(b'OK')`` raised ValueError and PING's
``False`` passed the health check's trial (also a cluster node's), and a ``redis+cluster://``
seed's CLUSTER SLOTS raised a TypeError in redis-py's slot map parser. Each is checked here,
at the call that parses it; an error of a reply's type raised anywhere else stays a bug."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from redis.exceptions import InvalidResponse, NoPermissionError

INFO_KEY = "maxmemory_policy"  # in INFO's default sections and in INFO memory
NO_INFO = ("the Redis user may not run INFO ({detail}): the tier serves with the server's "
           "memory settings unchecked (no noeviction or maxmemory warning, an OOM said "
           "without them); to have them checked, grant it: ACL SETUSER USER +info")


async def info_of(redis: Any, *section: str) -> Mapping[str, Any] | NoPermissionError:
    """INFO (``section``), or the NOPERM of a user without ``+info``: the INFO is advisory
    (NOTE(info-advisory)), its refusal no fault of the server. InvalidResponse when the
    reply is no INFO."""
    try:
        info = await redis.info(*section)
    except AttributeError as exc:  # parse_info's .splitlines() on an int or an array
        raise InvalidResponse(f"INFO's reply is no Redis INFO ({exc})") from exc
    except NoPermissionError as exc:
        return exc
    if not isinstance(info, Mapping) or INFO_KEY not in info:  # +OK parses to a mapping
        raise InvalidResponse(f"INFO's reply is no Redis INFO (no {INFO_KEY})")
    return info


async def pong(redis: Any) -> None:
    """PING, raising unless its reply is PONG (redis-py turns any other into False);
    ``redis`` a client or one cluster node (a ``ClusterNode``, which has no ``ping``)."""
    if await redis.execute_command("PING") is not True:
        raise InvalidResponse("PING's reply is no PONG")


def runs_of(replies: Sequence[Any]) -> list[int]:
    """The probe script's replies, each an integer (a run of keys found)."""
    if not all(type(r) is int for r in replies):
        raise InvalidResponse(f"the probe script's reply is no integer ({replies[:2]!r})")
    return list(replies)


def slots_of(reply: Any, **_: Any) -> Any:
    """CLUSTER SLOTS' reply as redis-py's slot map parser reads it, raising unless it is one:
    a list of ``[first, last, node, ...]``, each node a ``[host, port, ...]`` (the cluster
    client's response callback of CLUSTER SLOTS, so its InvalidResponse is a seed's error)."""
    if not isinstance(reply, list) or not all(
            isinstance(r, list) and len(r) >= 3 and all(type(v) is int for v in r[:2])
            and all(isinstance(n, list) and len(n) >= 2 for n in r[2:]) for r in reply):
        raise InvalidResponse(f"CLUSTER SLOTS' reply is no slot map ({str(reply)[:60]})")
    return reply
