"""The tier's circuit breakers: one for a single server or a Sentinel-managed master, and on
a Redis Cluster one per master node besides it.

NOTE(node-breaker): with one breaker for a whole cluster, one dead or hung master (its calls
time out, or are refused) opened it for the keys of every node: losing 1 master of 3 cost
every remote hit instead of a third, until it answered again. On a cluster each call is cut
by the node that serves its keys' slots (the client's slot map, ``node_of``) and runs under
that node's breaker: the other nodes' keys keep hitting, the dead node's keys are misses with
no network, and that node's own health check probes it and closes its breaker once it answers
or no longer serves any slot (a replica promoted, its slots reassigned: the slot map names
another node then). ``main`` stays the breaker of the calls no node can be named for (a slot
map not read yet: the warm-up, a seed node's answer) and of the whole tier's checks (INFO).

NOTE(node-prune): a node's breaker was kept for every node name the tier ever called, so a
cluster whose masters come and go (failovers, resharding, nodes replaced on new addresses)
grew it for as long as the process lived. Each topology refresh (redis-py's
``NodesManager.initialize``: the warm-up, a node's trial, a CLUSTERDOWN's refresh, redis-py's
own after MOVED or a connection error) puts a new ``slots_cache`` in place; the first use of
the breakers after it drops the breakers of the nodes its ``nodes_cache`` no longer lists.
A dropped breaker still names its node for the calls and the health check that hold it (an
open one's trial ends at once: the node serves no slot) until a later refresh finds it
closed; its openings stay counted (``opens``: a counter never goes back). ``HealthChecks``
keeps a breaker's state while in use: a trial loop's entry goes when the loop ends, and the
sets of calls in flight that are empty are swept whenever their number has doubled.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from redis.exceptions import RedisClusterException

from kvpool.remote.breaker import PAUSE_KINDS, BreakerState, CircuitBreaker

log = logging.getLogger("kvpool.remote")

_MIN_SWEEP = 16  # breakers with calls in flight below which HealthChecks never sweeps


class Breakers:
    """``main`` and, with a cluster ``client``, a breaker per node name (``host:port``), made
    from ``main``'s settings when a call first goes to that node."""

    def __init__(self, main: CircuitBreaker, client: Any = None) -> None:
        self.main = main
        self._client = client  # the RedisCluster, or None: ``main`` serves every call
        self._by_node: dict[str, CircuitBreaker] = {}
        # each node breaker -> its node's name: those of _by_node, and the ones dropped at the
        # last refresh or still open then (NOTE(node-prune))
        self._node_of: dict[CircuitBreaker, str] = {}
        self._map: object = None  # the slot map (slots_cache) last pruned against
        self._dropped_opens = 0  # openings of the breakers no longer held

    def of_key(self, key: str) -> CircuitBreaker:
        """The breaker of the node serving ``key``'s slot (``main`` without a slot map)."""
        if self._client is None:
            return self.main
        self._prune()
        try:
            node = self._client.get_node_from_key(key)
        except (RedisClusterException, KeyError, IndexError, TypeError):
            return self.main  # no slot map yet (or a slot no node serves)
        if node is None:
            return self.main
        b = self._by_node.get(node.name)
        if b is None:
            b = self._by_node[node.name] = self.main.twin()
            self._node_of[b] = node.name
        return b

    def _prune(self) -> None:
        """After a topology refresh, drop the breakers of the nodes the client no longer
        lists (NOTE(node-prune))."""
        if self._client is None or self._client.nodes_manager.slots_cache is self._map:
            return
        manager = self._client.nodes_manager
        self._map = manager.slots_cache
        held = set(self._by_node.values())
        for b in [b for b in self._node_of if b not in held and b.state is BreakerState.CLOSED]:
            self._dropped_opens += b.opens
            del self._node_of[b]
        for name in [n for n in self._by_node if n not in manager.nodes_cache]:
            del self._by_node[name]  # its _node_of entry waits for the next refresh

    def node(self, breaker: CircuitBreaker) -> str | None:
        """The node name of a node's breaker; None for ``main``."""
        return self._node_of.get(breaker)

    def group(self, items: Sequence[Any], key: Callable[[Any], str]
              ) -> list[tuple[CircuitBreaker, list[int]]]:
        """The indices of ``items`` by the breaker of each one's ``key``, in first-seen
        order (one group of all without a cluster)."""
        if self._client is None:
            return [(self.main, list(range(len(items))))]
        out: dict[int, tuple[CircuitBreaker, list[int]]] = {}
        for i, item in enumerate(items):
            b = self.of_key(key(item))
            out.setdefault(id(b), (b, []))[1].append(i)
        return list(out.values())

    def serves(self, name: str | None) -> bool:
        """Does the node ``name`` serve a slot in the client's slot map (None: the tier's
        own breaker, True)?"""
        if name is None or self._client is None:
            return True
        slots = self._client.nodes_manager.slots_cache.values()
        return any(owners and owners[0].name == name for owners in slots)

    def all(self) -> list[CircuitBreaker]:
        """``main`` and the breakers of the nodes the client lists now."""
        self._prune()
        return [self.main, *self._by_node.values()]

    def worst(self) -> BreakerState:
        """The most open state of any breaker (``kvpool_remote_breaker_state``)."""
        return max(b.state for b in self.all())

    def opens(self) -> int:
        """Openings of every breaker ever made (``kvpool_remote_breaker_opens_total``)."""
        self._prune()  # first: a breaker dropped now is counted once, by _dropped_opens
        return self.main.opens + sum(b.opens for b in self._node_of) + self._dropped_opens

    def not_closed(self) -> int:
        """Breakers not closed now (``kvpool_remote_breakers_open``)."""
        return sum(b.state is not BreakerState.CLOSED for b in self.all())


class HealthChecks:
    """Each breaker's calls in flight and, while it is open, its health check: a loop that
    runs ``trial(breaker)`` whenever one is due (``breaker.py``) and ``closed(breaker)``
    once one succeeded. ``stats`` counts the trials."""

    def __init__(self, trial: Callable[[CircuitBreaker], Awaitable[bool]],
                 closed: Callable[[CircuitBreaker], Awaitable[None]], stats: Any) -> None:
        self._trial = trial
        self._closed = closed
        self._stats = stats
        self._inflight: dict[CircuitBreaker, set[asyncio.Timeout]] = {}  # calls' ends
        self._sweep_at = _MIN_SWEEP  # len(_inflight) that drops its empty sets
        self._tasks: dict[CircuitBreaker, asyncio.Task] = {}  # each trial loop running
        self._raised_types: set[type] = set()  # what trials raised, logged (NOTE(trial-raised))

    def inflight(self, breaker: CircuitBreaker) -> set[asyncio.Timeout]:
        """The deadlines of ``breaker``'s calls in flight (a call adds and discards its own,
        with no await between this and its add)."""
        calls = self._inflight.get(breaker)
        if calls is None:
            if len(self._inflight) >= self._sweep_at:  # NOTE(node-prune): amortised O(1)
                self._inflight = {b: c for b, c in self._inflight.items() if c}
                self._sweep_at = max(_MIN_SWEEP, 2 * len(self._inflight))
            calls = self._inflight[breaker] = set()
        return calls

    def opened(self, breaker: CircuitBreaker) -> None:
        """``breaker`` just opened: cut its calls still in flight (they would each wait out
        their own deadline on a server already judged down; not after a pause:
        NOTE(pause)) and start its health check."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        cut = self.inflight(breaker) if breaker.cause not in PAUSE_KINDS else ()
        for deadline in list(cut):
            if not deadline.expired():
                deadline.reschedule(now)  # fires on the next loop turn: TimeoutError there
        task = self._tasks.get(breaker)
        if task is None or task.done():
            self._tasks[breaker] = loop.create_task(self._loop(breaker), name="redis-tier-health")

    async def _loop(self, breaker: CircuitBreaker) -> None:
        try:
            await self._trials(breaker)
        except Exception as exc:  # ``closed`` raised, the breaker closed: NOTE(trial-raised)
            self._raised(exc)
        finally:  # closed (or cancelled): no state kept for it (NOTE(node-prune))
            if self._tasks.get(breaker) is asyncio.current_task():
                del self._tasks[breaker]

    async def _trials(self, breaker: CircuitBreaker) -> None:
        st = self._stats
        while (wait := breaker.trial_wait()) is not None:
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            if not breaker.start_trial():
                continue
            st.health_checks += 1
            try:
                ok = await self._trial(breaker)
            except Exception as exc:  # NOTE(trial-raised)
                self._raised(exc)
                ok = False
            st.health_failed += not ok
            breaker.end_trial(ok)
            if ok:
                await self._closed(breaker)

    def _raised(self, exc: Exception) -> None:
        """A trial (or ``closed``) raised. NOTE(trial-raised): the tier's trial turns the
        failures a server can cause into False (``RedisTier._ping``); anything else that
        escaped it ended this task, unseen until the loop's shutdown, and the breaker stayed
        half open with nothing to run its next trial, so the tier was off until a restart (a
        wrong-typed handshake reply did so: NOTE(handshake-reply) in connections.py). The
        catch is broad on purpose: whatever raised, a failed trial is the safe reading (the
        next one is due ``reset_s`` later), and the one task that can close the breaker
        must outlive it. Each type is logged once, with its traceback, so a bug is seen and
        not repeated every ``reset_s``."""
        if type(exc) not in self._raised_types:
            self._raised_types.add(type(exc))
            log.error("remote tier health check: %s raised by a trial (counted as failed: the "
                      "checks go on) or by its close", type(exc).__name__, exc_info=exc)

    def __len__(self) -> int:
        """Breakers whose state this holds (calls in flight, a trial loop, a set not yet
        swept): bounded by the breakers in use, not by every one there was."""
        return len(self._inflight.keys() | self._tasks.keys())

    async def aclose(self) -> None:
        tasks, self._tasks = list(self._tasks.values()), {}
        for task in tasks:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
