"""``RedisTier``: the shared prefix tier on Redis/Valkey through ``redis.asyncio`` (one server,
a cluster or a Sentinel-managed master: ``clients.py``).

Fault model (docs/architecture.md#scale-out):

- Own deadlines: connect ``connect_timeout`` (0.2 s); each call ``op_timeout`` (0.25 s) plus
  its bytes over ``bandwidth``. redis-py's defaults wait 3-5 s with Redis down and over 30 s
  with Redis hung (SIGSTOP); a kernel still accepts connections to a stopped process, so only
  a per-call deadline bounds the hung case.
- No retries: redis-py retries by default; a retry doubles the time a miss costs, and the
  caller's answer to a failure (recompute) is already cheap.
- A circuit breaker (``breaker.py``): a missed deadline or a refused connection opens it at
  once (other failures after a few in a row); the calls still in flight then are cut short
  (their deadlines fire now) and count as the same event. Once open, every call is a miss at
  once, no network, and the tier's own task PINGs Redis about every ``reset_s`` until one
  answers and closes it: no user request is ever the trial. A READONLY or NOPERM reply opens
  it too, and then the trial is the tier's own commands (NOTE(pause), ``health.py``).
- A value failing the codec's check is a miss, deleted, counted by kind; the probe drops a key
  of another type or a string longer than any value, a get never reads more (NOTE(bounded-get)).

One round trip of latency per call, whatever the number of blocks: the probe is one Lua script per
prefix segment (``segments.py``: walk the keys, stop at the first miss), ``put_many`` one pipeline
of SET NX (on a cluster one per node), ``get_many`` about ``GET_PARTS`` pipelines of GETRANGE (or
the caller's ``parts``, cut on segment borders), each sent at once on pooled connections that
buffer ``READ_BUFFER``. Each script and part stays in one slot, each call runs under its cluster
node's breaker (NOTE(node-breaker)); a part's check overlaps later reads.

Diagnosis (``diagnose.py``): each failure kind is logged once with its fix, an outage's once an
episode (NOTE(episode)); ``warm_up`` (``startup.py``) says if the tier is reachable, reads
``INFO`` (a cluster node behind a plain URL refused, noeviction or no maxmemory warned) and says
replicas of another secret (``secret_marker.py``), its work done once Redis answers if it did
not then (NOTE(warm-later)); an OOM pauses puts, said on the memory settings then (``oom.py``)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse, OutOfMemoryError, RedisClusterException, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from kvpool.remote.bounded import BoundedReads
from kvpool.remote.breaker import STRONG_KINDS, BreakerState, CircuitBreaker
from kvpool.remote.codec import ValueCodec
from kvpool.remote.clients import client_from_url
from kvpool.remote.connections import where
from kvpool.remote.diagnose import OUTAGES, FaultLog, classify, error_kind
from kvpool.remote.health import node_trial, opens, paused_raised, trial
from kvpool.remote.node_breakers import Breakers, HealthChecks
from kvpool.remote.oom import OomWatch
from kvpool.remote.replies import info_of, runs_of
from kvpool.remote.segments import (PROBE_LUA, all_at_once, leading_run, parts as split_parts,
                                    probe_plan)
from kvpool.remote.startup import FAILED, SETUP_S, Setup
from kvpool.remote.tier import RemoteStats, fetch_checked

log = logging.getLogger("kvpool.remote")

GET_PARTS = 4  # parts one get_many sends at once (O(1) round trips, checks overlap reads)

Observer = Callable[[str, float], None]


class RedisTier:
    """A :class:`~kvpool.remote.tier.RemoteTier` on one ``--remote-url``. Use from one loop."""

    def __init__(self, url: str, codec: ValueCodec, *, connect_timeout: float = 0.2,
                 op_timeout: float = 0.25, bandwidth: float = 256 * 2**20,
                 max_value_bytes: int = 4 * 2**20, max_connections: int = 32,
                 breaker: CircuitBreaker | None = None, observer: Observer | None = None,
                 oom_pause_s: float = 5.0) -> None:
        if connect_timeout <= 0 or op_timeout <= 0 or bandwidth <= 0:
            raise ValueError("connect_timeout, op_timeout and bandwidth must be > 0")
        self.codec = codec
        self.connect_timeout = connect_timeout
        self.op_timeout = op_timeout
        self.bandwidth = bandwidth  # bytes/s assumed when sizing a call's deadline
        self.max_value_bytes = max_value_bytes  # a GET's deadline assumes values this big
        self.breaker = breaker if breaker is not None else CircuitBreaker()
        self._observer = observer
        self._stats = RemoteStats()
        self._blocks_per_key = codec.namespace.blocks_per_object
        self._max_connections = max_connections
        self._client = client_from_url(url, max_connections=max_connections,
                                       connect_timeout=connect_timeout)
        self.kind = self._client.kind  # "server", "cluster" or "sentinel"
        self._by_slot = self.kind == "cluster"  # calls cut on hash-tag borders (segments.py)
        self.faults = FaultLog(where(url))  # each kind logged once (an outage's: an episode)
        self._redis = self._client.redis
        self._probe = self._redis.register_script(PROBE_LUA)
        self._check_key = codec.namespace.key(bytes(32))  # no block's: NOTE(pause)
        self.breakers = Breakers(self.breaker, self._redis if self._by_slot else None)
        self.reads = BoundedReads(self._redis, codec.max_value_nbytes(), self.faults, self.breakers)
        self._checks = HealthChecks(self._ping, self._closed, self._stats)
        self._met: dict[CircuitBreaker, str] = {}  # an open breaker's latest fault kind
        self._setup = Setup(self._call, self._client, self.faults, self.breaker, codec.namespace,
                            self._stats, connect_timeout + op_timeout)  # NOTE(warm-later)
        self._oom = OomWatch(oom_pause_s, self.faults, self._stats,  # NOTE(oom-reread)
                             lambda: info_of(self._redis, "memory"), SETUP_S)

    # -- the protocol ---------------------------------------------------------------------
    async def probe(self, keys: Sequence[str], refresh: Sequence[str] = (),
                    purpose: str = "read") -> int:
        if not keys:
            return 0
        plan = probe_plan(refresh, keys, self._by_slot)
        runs = await self._per_item("probe", plan, lambda seg: seg[0][0], lambda _: 0,
                                    self._probe_segments, lambda _: None)  # None: failed
        return self._stats.count_probe(purpose, leading_run(plan, runs), len(keys),
                                       self._blocks_per_key, None in runs)

    async def get_many(self, keys: Sequence[str], parts: int | None = None
                       ) -> list[bytes | None]:
        if not keys:
            return []
        if parts is not None and parts < 1:
            raise ValueError("parts must be >= 1 (or None: GET_PARTS)")
        keys = list(keys)
        parts = split_parts(keys, min(GET_PARTS if parts is None else parts,
                                      self._max_connections), self._by_slot)
        checked = await self._per_item(
            "get", parts, lambda p: p[0], lambda ps: sum(map(len, ps)) * self.max_value_bytes,
            self._fetch_parts, lambda p: ([None] * len(p), []))
        st = self._stats
        values: list[bytes | None] = []
        bad: list[tuple[str, str]] = []
        for part_values, part_bad in checked:
            values += part_values
            bad += part_bad
        if bad:
            for kind in self.faults.values_failed(bad):  # NOTE(secret-mismatch) there
                st.count_error(kind)
            await self._delete([k for k, _ in bad])
        st.get_bytes += sum(len(v) for v in values if v is not None)
        st.get_missing += sum(v is None for v in values)
        return values

    async def put_many(self, items: Sequence[tuple[str, bytes]]) -> int:
        if not items:
            return 0
        items, st = list(items), self._stats
        if self._oom.paused():  # NOTE(oom-pause)
            st.puts_paused += len(items)
            st.puts_dropped += len(items)
            return 0

        async def send(group: list[tuple[str, bytes]]) -> list[Any]:
            pipe = self._redis.pipeline(transaction=False)
            for k, v in group:
                pipe.set(k, v, nx=True)
            return paused_raised(await pipe.execute(raise_on_error=False))

        replies = await self._per_item("put", items, lambda it: it[0],
                                       lambda its: sum(len(v) for _, v in its), send,
                                       lambda _: FAILED)
        stored = 0
        for (_, v), ok in zip(items, replies):
            if ok is FAILED:
                st.puts_dropped += 1
            elif isinstance(ok, Exception):  # e.g. OOM with a noeviction policy
                self._reply_error(ok)
                st.puts_dropped += 1
            elif ok:
                stored += 1
                st.put_bytes += len(v)
            else:
                st.puts_deduped += 1
        st.puts += stored
        return stored

    async def touch(self, keys: Sequence[str]) -> int:
        if not keys:
            return 0
        keys = list(keys)
        done = await self._per_node("touch", keys, str, lambda _: 0,
                                    lambda ks: self._redis.touch(*ks))
        return sum(int(r) for _, r in done if r is not FAILED)

    async def health(self) -> bool:
        if self.breaker.state is not BreakerState.CLOSED or self._setup.refusal is not None:
            return False  # the background check owns the network while open
        return await self._call("health", 0, self._redis.ping) is not FAILED

    async def warm_up(self, connections: int = 1) -> bool:
        """Open ``connections`` pooled connections and load the probe script, once, when the
        replica starts: False (counted, breaker informed) if Redis is not reachable, and
        then done once it answers (NOTE(warm-later)).

        NOTE(warm-pool): a connection costs its socket connect and a handshake (CLIENT
        SETINFO...) of several writes and reads on the loop; opened inside a request's fetch
        they stalled the loop several ms. The pool keeps them (no idle timeout), so a serving
        replica pays this once; after a Redis restart they reconnect lazily."""
        return await self._setup.warm_up(max(1, min(self._max_connections, connections)))

    def stats(self) -> RemoteStats:
        s = self._stats.copy()
        s.breaker_state = int(self.breakers.worst())
        s.breaker_opens = self.breakers.opens()
        s.breakers_open = self.breakers.not_closed()
        s.redirects = dict(self._client.redirects)
        return s

    @property
    def connection_class(self) -> type:
        """The class the pool builds its connections with (a buffered one, TLS or not)."""
        return self._client.connection_class

    @property
    def redirects(self) -> dict[str, int]:
        """MOVED/ASK replies the cluster client followed, by kind (a copy)."""
        return dict(self._client.redirects)

    def note(self, dropped: int = 0, read: str | None = None, fetched: int = 0) -> None:
        """Count what the engine's paths decided without a call (``RemoteStats.note``)."""
        self._stats.note(dropped, read, fetched)

    async def aclose(self) -> None:
        await self._checks.aclose()
        await self._oom.aclose()
        await self._client.aclose()

    # -- internals ------------------------------------------------------------------------
    async def _probe_segments(self, plan: list[tuple[list[str], int]]) -> list[int]:
        """Each segment's run, all scripts at once; one failure fails the call."""
        most, probe = self.codec.max_value_nbytes() or 0, self._probe  # most: NOTE(probe)
        runs = await all_at_once([lambda s=seg, lead=lead: probe(keys=s, args=[lead, most])
                                  for seg, lead in plan])
        return runs_of(runs)  # NOTE(reply-shape)

    async def _fetch_parts(self, parts: list[list[str]]) -> list[tuple[list, list]]:
        """Read every part at once, each checked as it arrives (NOTE(get speed)); one failure
        fails the whole call (the siblings are cancelled) with that exception."""
        return await all_at_once([lambda p=p: fetch_checked(self.reads.read, self.codec, p)
                                  for p in parts])

    def _deadline(self, nbytes: int) -> float:
        return self.op_timeout + nbytes / self.bandwidth

    async def _delete(self, keys: list[str]) -> None:
        done = await self._per_node("delete", keys, str, lambda _: 0,
                                    lambda ks: self._redis.delete(*ks))
        self._stats.deleted_invalid += sum(int(r) for _, r in done if r is not FAILED)

    async def _per_node(self, op: str, items: list, key: Callable[[Any], str],
                        nbytes: Callable[[list], int], send: Callable[[list], Awaitable[Any]]
                        ) -> list[tuple[list[int], Any]]:
        """``send`` of ``items`` as one call per cluster node serving them, each under that
        node's breaker, all at once (one call, ``breaker``, elsewhere): NOTE(node-breaker).
        Each call's indices of ``items`` and its result (FAILED: failed or refused)."""
        groups = self.breakers.group(items, key)
        t0, one = time.perf_counter(), len(groups) == 1
        calls = []
        for b, idx in groups:
            sub = [items[i] for i in idx]
            calls.append(self._call(op, nbytes(sub), lambda sub=sub: send(sub), breaker=b,
                                    observe=one))
        results = await asyncio.gather(*calls)
        if not one and self._observer is not None and all(r is not FAILED for r in results):
            self._observer(op, time.perf_counter() - t0)
        return [(idx, r) for (_, idx), r in zip(groups, results)]

    async def _per_item(self, op: str, items: list, key: Callable[[Any], str],
                        nbytes: Callable[[list], int], send: Callable[[list], Awaitable[list]],
                        failed: Callable[[Any], Any]) -> list:
        """``_per_node`` for a ``send`` that answers one result per item: the results in
        order, ``failed(item)`` for the items of a failed call."""
        out = [None] * len(items)
        for idx, r in await self._per_node(op, items, key, nbytes, send):
            for j, i in enumerate(idx):
                out[i] = failed(items[i]) if r is FAILED else r[j]
        return out

    async def _call(self, op: str, nbytes: int, fn: Callable[[], Awaitable[Any]],
                    bound: float | None = None, breaker: CircuitBreaker | None = None,
                    observe: bool = True) -> Any:
        """Run one round trip under ``breaker`` (the tier's) and the deadline (``bound``
        instead of the op's, when given); FAILED on any failure."""
        breaker = self.breaker if breaker is None else breaker
        inflight = self._checks.inflight(breaker)
        epoch = breaker.admit()
        if epoch is None or self._setup.refusal is not None:
            self._stats.count_error("breaker_open" if epoch is None else "refused_server")
            return FAILED
        t0 = time.perf_counter()
        try:
            async with asyncio.timeout(bound or self._deadline(nbytes)) as deadline:
                inflight.add(deadline)
                try:
                    result = await fn()
                finally:
                    inflight.discard(deadline)
        except (TimeoutError, RedisTimeoutError, RedisConnectionError, OSError,
                InvalidResponse) as exc:  # InvalidResponse: not Redis there, no reply
            err: BaseException = exc
        except (RedisError, RedisClusterException) as exc:
            # Redis answered, or the cluster client refused the call unsent: alive, so no
            # breaker failure unless no retry mends it (NOTE(pause), NOTE(clusterdown))
            if not opens(exc):
                breaker.record_success(epoch)
                self._reply_error(exc)
                return FAILED
            err = exc
        else:
            breaker.record_success(epoch)
            if observe and self._observer is not None:
                self._observer(op, time.perf_counter() - t0)
            return result
        # NOTE(cancel): a CancelledError from the caller (a prefetch deadline) propagates and
        # reports nothing: it says nothing about Redis.
        self._failed(epoch, err, breaker)
        return FAILED

    def _failed(self, epoch: int, err: BaseException, breaker: CircuitBreaker) -> None:
        """Redis did not serve a call: tell the breaker, count and log (a new event only)."""
        fault = classify(err)
        opens = breaker.opens
        cause = fault if fault in STRONG_KINDS else "connection"
        if breaker.record_failure(epoch, cause):  # a new event, not one that joined an opening
            self._stats.count_error(error_kind(fault))
            self.faults.note(fault, err, self.breakers.node(breaker))
        else:
            self._stats.count_error("joined")
        if breaker.opens != opens:
            self._met[breaker] = fault  # NOTE(trial-fault)
            self._checks.opened(breaker)

    def _reply_error(self, exc: BaseException) -> None:
        """An error reply: counted by kind, logged once; an OOM pauses the puts."""
        fault = classify(exc)
        self._stats.count_error(error_kind(fault))
        if isinstance(exc, OutOfMemoryError):
            self._oom.replied(exc)  # said there, on the settings the server has now
        else:
            self.faults.note(fault, exc)

    async def _closed(self, breaker: CircuitBreaker) -> None:
        """A health check closed ``breaker``: its episode ends (NOTE(episode))."""
        self._met.pop(breaker, None)
        node = self.breakers.node(breaker)  # a node's close is said there, the tier's by INFO
        self.faults.recovered(node, self.breakers.serves(node))
        if node is None:
            await self._setup.answered()  # NOTE(warm-later)

    async def _ping(self, breaker: CircuitBreaker) -> bool:
        """The health check's trial (``health.py``; a cluster node's own when ``breaker``
        is that node's); False on any failure or error reply (NOTE(trial-fault))."""
        cluster, node = self._client.pool is None, self.breakers.node(breaker)
        try:
            async with asyncio.timeout(SETUP_S if cluster else
                                       self.connect_timeout + self.op_timeout):
                if node is not None:
                    await node_trial(self._redis, node, breaker.cause, self._probe,
                                     self._check_key, self.connect_timeout + self.op_timeout)
                else:
                    await trial(self._redis, cluster, breaker.cause, self._probe,
                                self._check_key)
        except (TimeoutError, RedisError, RedisClusterException, OSError) as exc:
            self._trial_failed(breaker, exc)
            return False
        return True

    def _trial_failed(self, breaker: CircuitBreaker, exc: BaseException) -> None:
        """NOTE(trial-fault): a trial's failure was never classified, so a Redis that came
        back from an outage wanting a password (or something else, e.g. HTTP, on its port)
        failed every trial with nothing counted or said: the log kept the outage's "start
        Redis or fix --remote-url". A kind the breaker's episode has not met last (its
        opening's, or the previous trial's) is counted and said (FaultLog: once, with its
        fix) as a call's failure is; an outage stays quiet, said by the episode's first line."""
        fault = classify(exc)
        if self._met.get(breaker) == fault:
            return
        self._met[breaker] = fault
        if fault not in OUTAGES:
            self._stats.count_error(error_kind(fault))
            self.faults.note(fault, exc, self.breakers.node(breaker))
