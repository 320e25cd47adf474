"""``--remote-url`` -> the redis.asyncio client the tier talks through: one server, a Redis
Cluster (or Valkey cluster), or a Sentinel-managed master.

    redis://[USER:PASSWORD@]HOST:PORT[/DB][?options]      one server (rediss:// TLS, unix://)
    redis+cluster://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...][?options]     seed nodes
    redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/SERVICE[?options]

``rediss+cluster://`` and ``rediss+sentinel://`` speak TLS to the data nodes (options such as
``ssl_ca_certs`` as for ``rediss://``). The user and password are the data nodes'.

NOTE(sentinel-auth): sentinels are asked without credentials and in plain text unless the URL
says otherwise: ``?sentinel_password=P`` (``&sentinel_username=U`` for an ACL user) for
sentinels with ``requirepass``, ``?sentinel_ssl=true`` for sentinels that speak TLS only (with
the URL's ``ssl_*`` options). Sentinels that refuse the tier's credentials are said as such
(``SentinelAuthError``); before, they were "unreachable" ("start the sentinels"), retried
forever, and a hardened Sentinel could not be used at all.

Slot routing, MOVED/ASK redirects, topology refresh after a failover, master discovery: all
redis-py's (``redis.asyncio.cluster.RedisCluster``, ``redis.asyncio.sentinel.Sentinel``), a
well-kept library rather than slot routing written here. The tier's fault settings apply to
them as to one server (no retries, connect deadline, no socket timeout: ``connections.py``
NOTE(pool)), and the nodes' connections are kvpool's buffered ones (``READ_BUFFER``), reopened
when a node closed them while idle, as one server's pool does (NOTE(idle-close)).

Redirects the client followed are counted per kind (``moved``, ``ask``) in
:attr:`TierClient.redirects`: each one read from a node's reply by the connection class.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import Connection, SSLConnection
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import (MasterNotFoundError, Sentinel, SentinelManagedConnection,
                                    SentinelManagedSSLConnection)
from redis.backoff import NoBackoff
from redis.exceptions import (AskError, AuthenticationError, ClusterDownError, MovedError,
                              InvalidResponse, RedisClusterException, RedisError, ResponseError,
                              TryAgainError)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from kvpool.remote.connections import (READ_BUFFER, BufferedConnection,
                                       BufferedTLSConnection, CheckedHandshake, driver_info,
                                       pool_from_url)
from kvpool.remote.replies import slots_of
from kvpool.remote.url_forms import check_url, split_url

_DEFAULT_PORT = {"cluster": 6379, "sentinel": 26379}


@dataclass(slots=True)
class TierClient:
    """The client of one ``--remote-url`` and what the tier needs to know about it."""

    redis: Any  # redis.asyncio.Redis or RedisCluster
    kind: str  # "server", "cluster" or "sentinel"
    pool: Any = None  # the one connection pool (server, sentinel); None for a cluster
    redirects: Counter = field(default_factory=Counter)  # kind -> MOVED/ASK replies followed
    connection_class: type = BufferedConnection
    refresh: Any = None  # a cluster's SlotMapRefresh

    async def open(self, n: int, script: str) -> None:
        """Open ``n`` pooled connections (a cluster: its slot map), load ``script``."""
        if self.pool is None:
            await self.redis.initialize()
        else:
            conns = []  # held until all are open, so each get opens a new one
            try:
                for _ in range(n):
                    conns.append(await self.pool.get_connection())
            finally:  # back to the pool, also on failure or a deadline
                for c in conns:
                    await self.pool.release(c)
        await self.redis.script_load(script)  # on every master: the first EVALSHA hits

    async def aclose(self) -> None:
        if self.refresh is not None:
            await self.refresh.aclose()
        await self.redis.aclose()
        if self.pool is not None:
            await self.pool.aclose()


def client_from_url(url: str, *, max_connections: int, connect_timeout: float) -> TierClient:
    """The client for ``url`` (ConfigError naming the accepted forms on a bad one)."""
    kind = check_url(url)
    if kind == "server":
        pool = pool_from_url(url, max_connections=max_connections,
                             connect_timeout=connect_timeout)
        return TierClient(Redis(connection_pool=pool), "server", pool,
                          connection_class=pool.connection_class)
    base = url.partition("+")[0].lower()
    nodes, path, options = split_url(url, base, kind)
    options.update(socket_connect_timeout=connect_timeout, socket_timeout=None,
                   health_check_interval=0, driver_info=driver_info())
    if kind == "cluster":
        return _cluster(nodes, options, max_connections)
    return _sentinel(nodes, path.strip("/"), options, max_connections, connect_timeout)


def _cluster(nodes: list[tuple[str, int]], options: dict, max_connections: int
             ) -> TierClient:
    """A RedisCluster on the seed ``nodes``.

    NOTE(cluster-class): RedisCluster takes no connection_class; it builds every node from
    its ``connection_kwargs`` (the startup nodes at once, the discovered nodes at each topology
    refresh), so the class is set there and on the startup nodes before the first call."""
    tls = options.pop("connection_class", Connection) is SSLConnection
    redirects: Counter = Counter()
    refresh = SlotMapRefresh()
    cls = _counting(BufferedTLSConnection if tls else BufferedConnection, redirects, refresh)
    client = RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in nodes], ssl=tls,
                          max_connections=max_connections, retry=Retry(NoBackoff(), 0),
                          require_full_coverage=False, **options)
    client.connection_kwargs["connection_class"] = cls
    for node in client.startup_nodes:
        node.connection_class = cls
    # NOTE(cluster-seed): every node shares this mapping; a seed that is no Redis fails
    # initialize() with "cannot be connected" from InvalidResponse (CLUSTER SLOTS' shape
    # here, HELLO's at the handshake): the protocol kind, a breaker failure (health.opens).
    # It raised a TypeError under ?protocol=2, else was "Redis answered an error" with the
    # breaker closed, every call trying the seed again and no health check.
    client.set_response_callback("CLUSTER SLOTS", slots_of)
    refresh.client = client
    return TierClient(client, "cluster", None, redirects, cls, refresh)


def _sentinel(nodes: list[tuple[str, int]], service: str, options: dict,
              max_connections: int, connect_timeout: float) -> TierClient:
    """The master of ``service`` as the sentinels at ``nodes`` name it, now and after a
    failover (redis-py's SentinelManagedConnection asks them on each connect, and drops a
    connection whose server turned replica)."""
    tls = options.pop("connection_class", Connection) is SSLConnection
    cls = _buffered_sentinel(tls)
    asked = {"socket_connect_timeout": connect_timeout, "socket_timeout": connect_timeout,
             "retry": Retry(NoBackoff(), 0), **_sentinel_auth(options, tls)}
    sentinel = _Sentinels(nodes, sentinel_kwargs=asked, retry=Retry(NoBackoff(), 0),
                          **options)
    client = sentinel.master_for(service, connection_class=cls,
                                 max_connections=max_connections)
    return TierClient(client, "sentinel", client.connection_pool, connection_class=cls)


def _sentinel_auth(options: dict, tls: bool) -> dict:
    """The sentinels' own credentials and TLS, taken out of the URL's ``options`` (the ssl_*
    options stay the data nodes' too when ``tls``: NOTE(sentinel-auth))."""
    out = {k.removeprefix("sentinel_"): options.pop(k) for k in
           ("sentinel_password", "sentinel_username") if options.get(k)}
    if str(options.pop("sentinel_ssl", "")).lower() in ("1", "true", "yes"):
        ssl = [k for k in options if k.startswith("ssl_")]
        out.update({k: options[k] if tls else options.pop(k) for k in ssl}, ssl=True)
    return out


class SentinelAuthError(MasterNotFoundError):
    """The sentinels refused the tier's credentials (NOTE(sentinel-auth))."""


class SentinelsDownError(MasterNotFoundError):
    """No sentinel of the URL answered (refused, timed out): an outage, not a wrong name."""


class MasterDownError(MasterNotFoundError):
    """A sentinel knows the service but says its master is down (a failover pending)."""


class _AskedSentinel(Redis):
    """One sentinel's client, telling its ``_Sentinels`` when it could not be reached (an
    error reply, e.g. a plain server's unknown command, is an answer)."""

    def __init__(self, owner: _Sentinels, pool: Any) -> None:
        super().__init__(connection_pool=pool)
        self.owner = owner

    async def sentinel_masters(self):
        try:
            return await super().sentinel_masters()
        except AuthenticationError:
            self.owner.refused += 1
            raise
        except (RedisConnectionError, RedisTimeoutError, OSError):
            self.owner.unreachable += 1
            raise
        except (AttributeError, TypeError) as exc:  # NOTE(reply-shape): a plain Connection's
            self.owner.wrong += 1  # handshake (HELLO's .get) or SENTINEL MASTERS' parser
            raise RedisConnectionError(f"no Redis reply ({exc})") from exc  # the next one


class _Sentinels(Sentinel):
    """redis-py's Sentinel whose MasterNotFoundError says why no master was found
    (NOTE(sentinel-why)): no sentinel answered, the service's master is down, or (the error
    as before) no sentinel that answered names a master for that service."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.sentinels = [_AskedSentinel(self, s.connection_pool) for s in self.sentinels]
        self.unreachable = 0  # sentinels not reached during the current discovery
        self.refused = 0  # sentinels that refused the credentials (NOTE(sentinel-auth))
        self.wrong = 0  # sentinels that answered RESP of the wrong shape (not Redis)
        self.down = False  # a sentinel knew the service and said its master is down

    def check_master_state(self, state: dict, service_name: str) -> bool:
        ok = super().check_master_state(state, service_name)
        self.down = self.down or not ok
        return ok

    async def discover_master(self, service_name: str):
        self.unreachable, self.refused, self.down, self.wrong = 0, 0, False, 0
        try:
            return await super().discover_master(service_name)
        except MasterNotFoundError:
            if self.refused:
                raise SentinelAuthError(f"{self.refused} refused the credentials") from None
            if self.down:
                raise MasterDownError(f"the sentinels know {service_name!r} but report its "
                                      "master down") from None
            if self.wrong and self.wrong + self.unreachable >= len(self.sentinels):
                raise InvalidResponse(f"{self.wrong} sentinel(s) answered no Redis reply")
            if self.unreachable >= len(self.sentinels):
                asked = ", ".join(f"{k.get('host')}:{k.get('port')}" for k in (
                    c.connection_pool.connection_kwargs for c in self.sentinels))
                raise SentinelsDownError(f"asked {asked}") from None
            raise


class SlotMigratingError(ResponseError):
    """A TRYAGAIN reply: a multi-key call's slot is being migrated and its keys are split
    between the two nodes (NOTE(tryagain))."""


class SlotDownError(ResponseError):
    """A CLUSTERDOWN reply from one node: it serves no slot of the call's keys (the cluster
    lost a master with no replica, or the node was reset) (NOTE(tryagain))."""


class SlotMapRefresh:
    """Refreshes a cluster client's slot map off any request after a CLUSTERDOWN reply
    (NOTE(tryagain)): one at a time, at most once per ``every`` seconds, bounded by
    NOTE(setup)'s 2 s. A node that lost its slots (a minority partition, a reset) answers
    CLUSTERDOWN where the majority may already serve them elsewhere."""

    def __init__(self, every: float = 1.0) -> None:
        self.client: Any = None  # the RedisCluster, set once built
        self.every = every
        self._task: asyncio.Task | None = None
        self._last = -every

    def __call__(self) -> None:
        now = time.monotonic()
        if self.client is None or now - self._last < self.every or (
                self._task is not None and not self._task.done()):
            return
        self._last = now
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        try:
            async with asyncio.timeout(2.0):
                await self.client.nodes_manager.initialize()
        except (RedisError, RedisClusterException, OSError, TimeoutError):
            pass  # the next CLUSTERDOWN asks again

    async def aclose(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass


class _ReopenedWhenClosed:
    """A cluster node's connection that checks, before each send, that the server has not
    closed it while it sat in the node's pool (NOTE(idle-close)).

    NOTE(idle-close): redis-py's cluster client hands out a node's free connection unchecked
    (``ClusterNode.acquire_connection``: its cluster-level ``Retry`` is what mends a dead one,
    and the tier runs with none). A node that closes idle clients (redis.conf's ``timeout``,
    an idle-timeout proxy or NAT) thus failed the next call on each pooled connection: a miss
    or a dropped put, a breaker failure, and "cluster node ... is unreachable" for healthy
    masters. The check is the one redis-py's ``ConnectionPool.ensure_connection`` makes when
    it hands out a connection (one server, Sentinel): ``can_read`` reads the stream's state,
    no round trip. A closed (EOF, reset) or dirty (unread bytes: a reply nobody read) one is
    dropped and the send reconnects, as on a first use; not during the connection's own
    handshake, which pipelines commands (their replies may be in already). A retry would cost
    a refused node a second attempt and redis-py's slot map refresh; ``health_check_interval``
    a PING round trip after each idle spell, and its failure would still fail the call. As on
    one server, a close the loop has not read yet (it crosses the call, or lands while the
    loop is busy) still fails that one call."""

    _opening = False  # inside the handshake (redis-py's on_connect)

    async def on_connect_check_health(self, check_health: bool = True) -> None:
        self._opening = True
        try:
            await super().on_connect_check_health(check_health)
        finally:
            self._opening = False

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if self.is_connected and not self._opening:
            try:
                stale = await self.can_read()
            except RedisConnectionError:
                stale = True
            if stale:
                await self.disconnect(nowait=True)
        await super().send_packed_command(command, check_health)


def _counting(base: type, redirects: Counter, refresh: SlotMapRefresh) -> type:
    """``base`` counting each MOVED/ASK reply it reads into ``redirects`` (the cluster client
    follows them; the count says how often its slot map was stale), reopened when the node
    closed it while idle (NOTE(idle-close)).

    NOTE(tryagain): redis-py's cluster client retries a TRYAGAIN reply up to 16 times, the
    later ones after 50 ms sleeps, and a slot migration lasts far longer: every probe or MGET
    of a migrating slot's keys ran out the tier's deadline, a timeout that opened the breaker
    for every node. Raised as another error reply here it is one call's miss, as the
    migration makes it. So is CLUSTERDOWN, which redis-py answers with a 0.25 s sleep (the
    whole op deadline) and a topology refresh: a node reset or a lost master's slots timed
    out every call to them and opened the breaker for the keys of every other node."""

    class CountingConnection(_ReopenedWhenClosed, base):
        async def read_response(self, *args, **kwargs):
            try:
                return await super().read_response(*args, **kwargs)
            except MovedError:
                redirects["moved"] += 1
                raise
            except AskError:
                redirects["ask"] += 1
                raise
            except TryAgainError as exc:  # NOTE(tryagain)
                raise SlotMigratingError(str(exc)) from None
            except ClusterDownError as exc:  # NOTE(tryagain)
                refresh()
                raise SlotDownError(str(exc)) from None

    CountingConnection.__qualname__ = f"Counting{base.__name__}"
    return CountingConnection


class BufferedSentinelConnection(CheckedHandshake, SentinelManagedConnection):
    """A sentinel-managed connection with the tier's large read buffer (and the handshake's
    check: NOTE(handshake-reply))."""

    def _connection_arguments(self):  # redis-py's hook for asyncio.open_connection's kwargs
        return {**super()._connection_arguments(), "limit": READ_BUFFER}


class BufferedSentinelTLSConnection(BufferedSentinelConnection, SentinelManagedSSLConnection):
    """The same under TLS (``rediss+sentinel://``)."""


def _buffered_sentinel(tls: bool) -> type:
    return BufferedSentinelTLSConnection if tls else BufferedSentinelConnection

