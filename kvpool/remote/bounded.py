"""A get's reads, bounded on the server: a value longer than any the codec writes is never sent
whole (docs/architecture.md#scale-out).

NOTE(bounded-get): the probe drops a string longer than the codec's largest value
(NOTE(probe)), but one written between the probe and the get was read whole by the get's MGET
(tens of MB on the serving path, past its deadline: a timeout that opens a breaker). Each key
is now read as ``GETRANGE key 0 most``: atomic per key, it sends at most ``most + 1`` bytes
whatever the key holds, so a reply longer than ``most`` names a value too long, dropped (a
miss), counted ``corrupt`` (what the codec calls trailing bytes) and deleted. A part's
GETRANGEs go as one pipeline: the same round trips as one MGET per part (one command per key: a
reply each to parse, ~0.35 ms more per 64 values of 1 KiB on a loaded 2-core box, none seen at
1 MiB), and Redis copies each value into its reply once, as for MGET. A Lua script returning
the values under the bound (the other atomic check) passes each value into Lua and back out:
about 4x MGET's server time per byte here (commandstats, 16 values of 2 MiB), on the one thread
every replica's calls share. GETRANGE answers "" for a missing key: a miss (the probe drops an
empty string, so none stays counted present). A key of another type answers WRONGTYPE:
``foreign``, deleted.

A Redis user whose ACL lacks GETRANGE (the ACL line before it) gets NOPERM: the part is read
again with MGET, and if that works the tier reads with MGET, unbounded as before, logging the
fix once (on a cluster, once per refusing master: NOTE(getrange-nodes)), and tries GETRANGE
again every ``RETRY_S``. On a cluster ACLs are per node, and so is this fallback (the node
serving a part's slot, as its breaker: NOTE(node-breaker)): one master refusing GETRANGE
switched every master's reads to MGET, so a value grown after the probe on a master that
grants it was read whole (32 MiB in tests/remote/test_bounded_get_cluster.py). If MGET is
refused too, its NOPERM pauses the tier as any other (NOTE(pause)). With no bound (the
codec's block size open) the read is a plain MGET.

NOTE(getrange-nodes): the fix was said once for the whole tier, naming the first master that
refused: with every master refusing, the others were never named, and fixing the named one
left them unbounded, unsaid. Each refusing master is now named once, when its first read is
refused (what the others allow is learnt from their own reads; asking them at once would send
calls outside their breakers), and each line lists the masters refusing so far, "all N
masters" once every one has.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from redis.exceptions import NoPermissionError, ResponseError

from kvpool.remote.diagnose import FaultLog
from kvpool.remote.node_breakers import Breakers
from kvpool.remote.tier import Read

RETRY_S = 60.0  # while GETRANGE is refused, try it again after this long (the ACL may change)


class BoundedReads:
    """The tier's reads of one part's keys (NOTE(bounded-get)). Use from one loop."""

    __slots__ = ("redis", "most", "faults", "breakers", "retry_s", "_mget_until",
                 "_refused_by")

    def __init__(self, redis: Any, most: int | None, faults: FaultLog,
                 breakers: Breakers | None = None, retry_s: float = RETRY_S) -> None:
        self.redis = redis
        self.most = most  # the largest value the codec writes; None: no bound
        self.faults = faults
        self.retry_s = retry_s
        self.breakers = breakers  # the tier's: a cluster's node of a key (None: one server)
        # node -> time.monotonic() before which GETRANGE is not tried there
        self._mget_until: dict[str | None, float] = {}
        self._refused_by: set[str] = set()  # the cluster nodes that refused GETRANGE

    def node_of(self, key: str) -> str | None:
        """The name of the cluster node serving ``key`` (None: one server, no slot map)."""
        b = self.breakers
        return None if b is None else b.node(b.of_key(key))

    def bounded(self, key: str) -> bool:
        """Are reads of ``key``'s node bounded now (False: no bound, or GETRANGE refused
        there lately)?"""
        return self.most is not None and (
            time.monotonic() >= self._mget_until.get(self.node_of(key), 0.0))

    async def read(self, keys: list[str]) -> Read:
        """``keys``' raw values (None: missing or dropped) and the keys to delete, by kind;
        one round trip (two, once, when GETRANGE is refused). ``keys`` share one node."""
        if not self.bounded(keys[0]):
            return self._sorted(keys, await self.redis.mget(keys))
        pipe = self.redis.pipeline(transaction=False)
        for k in keys:
            pipe.getrange(k, 0, self.most)
        replies = await pipe.execute(raise_on_error=False)
        denied = next((r for r in replies if isinstance(r, NoPermissionError)), None)
        if denied is None:
            return self._sorted(keys, replies)
        raw = await self.redis.mget(keys)  # refused too: raised, and the tier pauses
        node = self.node_of(keys[0])
        self._mget_until[node] = time.monotonic() + self.retry_s
        self._say_refused(node, denied)
        return self._sorted(keys, raw)

    def _say_refused(self, node: str | None, denied: Exception) -> None:
        """The fix, once per refusing node (NOTE(getrange-nodes)): on a cluster each line
        names its master and every master refusing GETRANGE so far."""
        on = ""
        if node is not None:
            self._refused_by.add(node)
            masters = sorted(n.name for n in self.redis.get_primaries())
            nodes = sorted(self._refused_by)
            which = (f"all {len(masters)} masters" if set(masters) <= self._refused_by
                     else f"{len(nodes)} of {len(masters)} masters")
            on = (f" on {node} (ACLs are per node; refused so far by {which}: "
                  f"{', '.join(nodes)})")
        self.faults.once("getrange" if node is None else f"getrange {node}",
                         f"the Redis user may not run GETRANGE{on} ({denied}): values are "
                         "read with MGET, whose size is not bounded, so a value grown past "
                         "the codec's size after the probe is read whole; give it GETRANGE"
                         f"{'' if node is None else ' on each master named'}: "
                         "ACL SETUSER USER +getrange")

    def _sorted(self, keys: Sequence[str], replies: Sequence[Any]) -> Read:
        """Values with the unusable ones None and listed by kind; an error reply other than
        WRONGTYPE raised (what the tier classifies, as MGET's own)."""
        out: list[bytes | None] = []
        bad: list[tuple[str, str]] = []
        most = self.most
        for key, r in zip(keys, replies):
            if isinstance(r, ResponseError):
                if not str(r).startswith("WRONGTYPE"):
                    raise r
                bad.append((key, "foreign"))
                r = None
            elif r is not None and most is not None and len(r) > most:
                bad.append((key, "corrupt"))
                r = None
            out.append(r or None)  # b"": GETRANGE of a missing key
        return out, bad
