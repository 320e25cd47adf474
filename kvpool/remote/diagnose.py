"""What went wrong with the Redis tier, said once per kind, with the fix.

Every tier failure is a miss (the replica recomputes), so a misconfigured tier used to look
like a cold one: a wrong password, an untrusted certificate or a cluster node served with no
log line at all. :func:`classify` names a failure's kind (also its ``errors_total`` label),
:class:`FaultLog` logs the first failure of each kind once with what to change, and
:func:`check_info` reads ``INFO`` (needs no CONFIG permission) for what would hurt later: a
``noeviction`` policy, no ``maxmemory``, a cluster node addressed as a standalone server.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from redis.asyncio.sentinel import MasterNotFoundError
from redis.exceptions import (AuthenticationError, ClusterCrossSlotError, ClusterDownError,
                              ClusterError, InvalidResponse, MovedError, NoPermissionError,
                              OutOfMemoryError, ReadOnlyError, RedisClusterException)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from kvpool.remote.breaker import DOWN_KINDS, PAUSE_KINDS
from kvpool.remote.clients import (MasterDownError, SentinelAuthError, SentinelsDownError,
                                   SlotDownError, SlotMigratingError)
from kvpool.remote.oom_fix import oom_fix

log = logging.getLogger("kvpool.remote")

CLUSTER_FIX = ("this server is a cluster node: list the cluster's nodes as "
               "--remote-url redis+cluster://HOST:PORT[,HOST:PORT...]")
REPLICA_WARNING = "this server is a replica of"
_SIGNING = {
    "forged": "values under this tier's keys fail the MAC of --remote-secret-file: someone "
              "writes them (copied from other keys, or with another secret); give every "
              "replica the same secret file, and limit who may write to Redis (ACLs) (each "
              "such value is a miss, deleted)",
    "unsigned": "values under this tier's keys carry no MAC, and this replica signs "
                "(--remote-secret-file): someone wrote them without it; give every replica "
                "the same secret file, and limit who may write to Redis (ACLs) (each such "
                "value is a miss, deleted)"}
# NOTE(refused-at-start): error replies that say no call of the tier will ever work there;
# met at startup, the tier refuses the server (every call a miss, none sent), as it refuses a
# cluster node behind a plain URL. A redis:// URL at a Sentinel's port (SCRIPT is unknown
# there) drew a raw error, "the fix is logged above" with none logged, and every request
# went on calling it (45 failed calls in two requests).
REFUSED_AT_START = {"unknowncmd": "unknown command", "dbindex": "DB index is out of range"}
_FIXES = {
    "auth": "Redis rejected the password, or wants one ({detail}): put it in the URL as "
            "redis://:PASSWORD@host:port (redis://USER:PASSWORD@host:port for an ACL user)",
    "tls": "the TLS handshake failed ({detail}): for a private CA pass it as "
           "rediss://host:port?ssl_ca_certs=/path/ca.pem",
    "tlsplain": "the TLS handshake got no TLS answer ({detail}): if that port speaks plain "
                "Redis, use redis://host:port (a TLS port is tls-port in redis.conf); else is "
                "Redis hung or far away?",
    "refused": "nothing accepts connections there ({detail}): start Redis or fix --remote-url",
    # NOTE(sentinel-refused): the refused kind's text under a sentinel URL, which names only
    # sentinels: the master they named last refused (killed, or failing over), and "fix
    # --remote-url" sent the operator of a failover that the tier rides out to the wrong place
    "sentinelrefused": "the master the sentinels name refuses connections ({detail}): down "
                       "or failing over; --remote-url needs no fix: each connection asks the "
                       "sentinels for the master, so the tier follows the replica they promote "
                       "(down-after-milliseconds, quorum; with no replica, restart the "
                       "master). Should it last, the address they name (SENTINEL "
                       "GET-MASTER-ADDR-BY-NAME SERVICE) is not reachable from here "
                       "(replica-announce-ip). The tier retries",
    "closed": "the server dropped the connection ({detail}): if that port speaks TLS, use "
              "rediss://host:port; if another service listens there (one that closes on what "
              "it cannot parse, e.g. an HTTP server), check --remote-url's host and port",
    "connection": "cannot talk to Redis ({detail}): check --remote-url and the network",
    "protocol": "the server there does not speak Redis ({detail}): check --remote-url's host "
                "and port (another service, e.g. HTTP, listens there)",
    "timeout": "Redis did not answer within the tier's deadline ({detail}): is it hung, "
               "overloaded or far away?",
    "unknowncmd": "the server there does not know a command the tier needs ({detail}): a "
                  "Redis Sentinel answers so on its port (26379 by default): use "
                  "redis+sentinel://HOST:PORT/SERVICE (SENTINEL MASTERS lists the names); "
                  "else a proxy or redis.conf's rename-command hides it (the tier needs "
                  "SCRIPT, EVALSHA, GETRANGE, SET, TOUCH, DEL and INFO)",
    "dbindex": "Redis has no such database ({detail}): use a DB index below redis.conf's "
               "databases (16 by default), e.g. redis://HOST:PORT/0",
    "crossslot": "Redis answered CROSSSLOT ({detail}): " + CLUSTER_FIX,
    "moved": "Redis answered MOVED ({detail}): " + CLUSTER_FIX,
    "clusterdown": "Redis answered CLUSTERDOWN ({detail}): " + CLUSTER_FIX,
    "sentinel": "the sentinels name no master for that service ({detail}): put the name of "
                "redis.conf's 'sentinel monitor NAME ...' (SENTINEL MASTERS lists them) in "
                "redis+sentinel://HOST:PORT/NAME; if those ports are not sentinels (26379), "
                "use redis://HOST:PORT",
    "sentinelsdown": "no sentinel answered ({detail}): start the sentinels, or fix the "
                     "HOST:PORT list in redis+sentinel://HOST:PORT[,HOST:PORT...]/SERVICE "
                     "(a sentinel's port is redis.conf's port under --sentinel, 26379 by "
                     "default; sentinels that speak TLS only need ?sentinel_ssl=true); the "
                     "tier retries",
    "sentinelauth": "the sentinels want a password, or refused the one given ({detail}): "
                    "add ?sentinel_password=PASSWORD (&sentinel_username=USER for an ACL "
                    "user) to the redis+sentinel:// URL; the URL's own password is the data "
                    "nodes'",
    "masterdown": "no master to use ({detail}): the sentinels promote a replica once they "
                  "agree it is down (down-after-milliseconds, quorum); with no replica, "
                  "restart the master. The tier retries",
    "tryagain": "a slot is being migrated between cluster nodes (TRYAGAIN: {detail}): "
                "lookups of its keys miss until the migration ends; nothing to fix",
    "slotdown": "a cluster node answered CLUSTERDOWN ({detail}): it serves none of those "
                "keys' slots (a master down with no replica to take over, or a node reset: "
                "CLUSTER INFO / CLUSTER NODES show which, cluster_state:fail when the whole "
                "cluster stopped): lookups of its slots miss until it says cluster_state:ok "
                "or they are served elsewhere",
    "redirectloop": "a slot is changing owner between cluster nodes ({detail}: the nodes "
                    "sent the call back and forth with MOVED/ASK until the cluster client gave "
                    "up): a migration or a CLUSTER SETSLOT ... NODE in progress, transient; "
                    "lookups of that slot's keys miss until every node agrees; nothing to fix",
    "notcluster": "the redis+cluster:// seed nodes are no cluster nodes ({detail}): for one "
                  "server use --remote-url redis://HOST:PORT, for a Sentinel-managed master "
                  "redis+sentinel://HOST:PORT/SERVICE",
    "clusterclient": "the cluster client refused the call ({detail}): the cluster has no "
                     "master for a slot (a failover in progress?) or the keys are not of "
                     "this key spec",
    "oom": "Redis is out of memory ({detail}): {oomfix}; puts pause for a while after each "
           "OOM",
    "readonly": "the server is a read-only replica ({detail}): point --remote-url at the "
                "master, or use redis+sentinel://HOST:PORT/SERVICE to follow failovers",
    # NOTE(acl-line): pasted as given the line must work on the user it diagnosed; without
    # resetkeys Redis 7 refuses ~kvp:* on a user holding ~* (allkeys) with "Try 'resetkeys'"
    "noperm": "the Redis user lacks a permission ({detail}): give it the tier's commands "
              "(TYPE, STRLEN and TOUCH run inside the probe script): ACL SETUSER USER "
              "resetkeys ~kvp:* +getrange +mget +set +del +touch +type +strlen +evalsha "
              "+script|load +ping +info (resetkeys drops its other key patterns, ~* among "
              "them, which Redis allows no pattern beside; add back any it needs: ACL GETUSER "
              "USER lists them)",
    "response": "Redis answered an error ({detail})",
}
# NOTE(startup-line): the fault kinds of an outage (Redis down or out of reach). A warm-up
# that failed with any other kind reached a server that cannot serve the tier (a refused
# password or command, not Redis, a TLS or URL mismatch): no retry mends that, only a fix.
OUTAGES = frozenset({"refused", "timeout", "closed", "connection", "sentinelsdown",
                     "masterdown"})
# A cluster node's call that failed with one of these (a node killed: its connections closed,
# then refused) says that node is down, not a TLS or URL mismatch: said once per node.
NODE_DOWN_KINDS = frozenset({"refused", "timeout", "closed", "connection"})
# NOTE(episode): an outage, a pause (READONLY, NOPERM) or a CLUSTERDOWN ends when the health
# check closes the breaker it opened (the tier's, or a cluster node's). Said once per process,
# a second Redis restart, READONLY spell or kill of the same node added no line while
# breaker_opens_total counted it, and a node's recovery was never said: its log read "down"
# since the first kill. These kinds are said once per episode: a breaker's close forgets the
# ones said since it last closed, so the next occurrence is said again (one line an episode,
# never one a call), and a node's close is said as the tier's own is ("is reachable"). Other
# kinds (a password, TLS, a URL) stay said once: they do not end on their own.
EPISODE_KINDS = OUTAGES | PAUSE_KINDS | DOWN_KINDS
# NOTE(one-startup-line): a warm-up that met an outage said it twice, as WARNINGs one after
# the other: the kind's line with its fix ("did not answer within the tier's deadline ...: is
# it hung") and the startup line ("did not answer in time at startup (timeout) ... it
# retries"). While the warm-up runs (``held`` a list) an outage's fix is held, counted as said
# for its episode, and the startup line ends with it: one line with both (startup.py).
_NODE_DOWN = ("cluster node {node} is unreachable ({kind}: {detail}): an outage, no setting "
              "to fix: lookups of the slots it serves miss, at once while its breaker is open "
              "(NOTE(node-breaker)), until it or a replica promoted in its place answers; the "
              "other nodes' keys are served, and the tier retries it")


# a fault kind -> its errors_total kind (the connection kinds first, then error replies)
_ERROR_KINDS = {"timeout": "timeout", "auth": "auth", "tls": "tls", "refused": "connection",
                "closed": "connection", "connection": "connection", "protocol": "connection",
                "sentinel": "connection", "sentinelsdown": "connection", "sentinelauth": "auth",
                "masterdown": "connection",
                "oom": "oom",
                "crossslot": "cluster", "moved": "cluster", "clusterdown": "cluster",
                "clusterclient": "cluster", "notcluster": "cluster", "tryagain": "cluster",
                "slotdown": "cluster", "redirectloop": "cluster",
                "noperm": "noperm", "readonly": "readonly"}


def error_kind(fault: str) -> str:
    """The ``errors_total`` kind a fault kind is counted under."""
    return _ERROR_KINDS.get(fault, "response")


# NOTE(order): first match wins; redis-py's cluster errors subclass RedisClusterException,
# so the specific ones come before it.
_KIND_BY_TYPE = (
    ((TimeoutError, RedisTimeoutError), "timeout"),
    (AuthenticationError, "auth"),
    (SentinelAuthError, "sentinelauth"),
    (SentinelsDownError, "sentinelsdown"),
    (MasterDownError, "masterdown"),
    (MasterNotFoundError, "sentinel"),
    (InvalidResponse, "protocol"),
    (OutOfMemoryError, "oom"),
    (ReadOnlyError, "readonly"),
    (SlotMigratingError, "tryagain"),
    (SlotDownError, "slotdown"),
    (ClusterCrossSlotError, "crossslot"),
    (MovedError, "moved"),
    (ClusterDownError, "clusterdown"),
    (RedisClusterException, "clusterclient"),
    (NoPermissionError, "noperm"),
)


def classify(exc: BaseException) -> str:
    """The fault kind of one failed call (a key of the fix table). Timeouts and the
    connection kinds (timeout, auth, tls, refused, closed, connection, protocol) mean Redis
    did not serve the call; the others are error replies from a live Redis."""
    kind = next((k for types, k in _KIND_BY_TYPE if isinstance(exc, types)), None)
    if isinstance(exc, ClusterError) and "TTL exhausted" in str(exc):  # redirects ran out
        return "redirectloop"
    chain = list(_chain(exc))
    if kind == "clusterclient":  # what a seed node answered CLUSTER SLOTS, when it did
        if any("cluster support disabled" in str(e) for e in chain):
            return "notcluster"
        return next((classify(e) for e in chain[1:] if not isinstance(
            e, RedisClusterException)), kind)
    if kind is not None:
        return kind
    if any(isinstance(e, ssl.SSLError) for e in chain):
        return "tls"
    if any(isinstance(e, ConnectionRefusedError) for e in chain):
        return "refused"
    if any(isinstance(e, ConnectionResetError) or "closed by server" in str(e) for e in chain):
        return "closed"
    if isinstance(exc, (OSError, RedisConnectionError)):
        return "connection"
    if "user executing the script can't run" in str(exc):  # a script's NOPERM is an ERR
        return "noperm"
    return next((k for k, text in REFUSED_AT_START.items() if text in str(exc)), "response")


def _plain_port(kind: str, detail: str) -> bool:
    """Under a TLS URL: does the failure look like a port that speaks plain Redis? A plain
    Redis reads a ClientHello as an unfinished inline command and never answers (a connect
    timeout), or answers an error that is no TLS record (wrong version number)."""
    return (kind == "timeout" and "connecting" in detail.lower()) or (
        kind == "tls" and "wrong version number" in detail.lower())


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and its causes/contexts (redis-py raises its own errors inside ``except``)."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


class FaultLog:
    """Logs the first failure of each kind once (a fault repeats on every call: one line says
    it), an outage's once per episode (NOTE(episode)). ``seen`` holds the kinds logged so
    far and not forgotten since."""

    __slots__ = ("where", "seen", "last", "memory", "held", "_episodes")

    def __init__(self, where: str) -> None:
        self.where = where  # scheme://host:port, never the password
        self.seen: set[str] = set()
        self.last: str | None = None  # the kind of the latest failure noted
        self.memory: tuple[str, int] | None = None  # (policy, maxmemory): the last INFO's
        self.held: list[str] | None = None  # while a warm-up holds outage lines: theirs
        # a cluster node's name (None: the tier's breaker) -> its episode's kinds said
        self._episodes: dict[str | None, set[str]] = {}

    def note(self, kind: str, exc: BaseException | str, node: str | None = None) -> bool:
        """Log a failure of ``kind`` with its fix if the kind is new; True when logged.
        ``node``: the cluster node the call went to, whose outage is said as one."""
        detail = (str(exc) or type(exc).__name__) if isinstance(exc, BaseException) else exc
        if node is not None and kind in NODE_DOWN_KINDS:
            self.last = kind
            return self.once(f"nodedown {node}", _NODE_DOWN.format(
                node=node, kind=kind, detail=detail[:200]), node)
        if self.where.startswith("rediss") and _plain_port(kind, detail):
            kind = "tlsplain"
        if kind == "sentinel":  # "No master found for 'x' : <the sentinels' client repr>"
            detail = detail.partition(" : ")[0]
        self.last = kind
        said = "sentinelrefused" if kind == "refused" and "+sentinel://" in self.where else kind
        fix = _FIXES.get(said, _FIXES["response"]).format(detail=detail[:200],
                                                          oomfix=oom_fix(self.memory))
        then = ("the tier pauses its calls (misses: requests recompute) and tries its "
                "commands again periodically, resuming once they work"
                if kind in PAUSE_KINDS | DOWN_KINDS
                else "each failure is a miss: requests recompute")
        return self.once(kind, fix if self._holds(kind, node) else f"{fix} ({then})", node)

    def values_failed(self, bad: Sequence[tuple[str, str]]) -> list[str]:
        """The kinds of the (key, kind) values a read found unusable. NOTE(secret-mismatch):
        a value failing the signature check was most often replicas given different
        --remote-secret-file secrets, deleting each other's values while only a counter
        moved. With keyed names (keys.py NOTE(keyed-names)) those share no key, so such a
        value was written under this secret's key by someone (a value copied from another
        key, a hand-made writer). Said once per kind, with the fix."""
        kinds = [kind for _, kind in bad]
        for kind in _SIGNING.keys() & set(kinds):
            self.once(kind, _SIGNING[kind])
        return kinds

    def once(self, key: str, text: str, node: str | None = None) -> bool:
        """Log ``text`` as a warning unless ``key`` was logged before (during the episode of
        ``node``'s breaker, None: the tier's, for the kinds of NOTE(episode))."""
        if key in self.seen:
            return False
        self.seen.add(key)
        if key in EPISODE_KINDS or key.startswith("nodedown "):
            self._episodes.setdefault(node, set()).add(key)
        if self._holds(key, node):
            self.held.append(text)
        else:
            log.warning("remote tier %s: %s", self.where, text)
        return True

    def _holds(self, key: str, node: str | None) -> bool:
        """Is a line of ``key`` held for the startup line (NOTE(one-startup-line))?"""
        return self.held is not None and key in OUTAGES and node is None

    def release(self) -> list[str]:
        """Stop holding outage lines; the fixes held (NOTE(one-startup-line))."""
        held, self.held = self.held or [], None
        return held

    def recovered(self, node: str | None = None, serves: bool = True) -> None:
        """The health check closed the breaker of ``node`` (None: the tier's): its episode's
        kinds may be said again (NOTE(episode)). A node's recovery is said here (``serves``:
        it still serves slots), the tier's by :meth:`inspected` once it read INFO."""
        self.seen -= self._episodes.pop(node, set())
        if node is None:
            return
        log.info("remote tier %s: cluster node %s %s", self.where, node,
                 "answers again: lookups of the slots it serves hit again" if serves else
                 "serves no slot any more (a replica took over, or its slots moved): its "
                 "keys are looked up on the nodes serving them now")

    def memory_read(self, info: Mapping[str, Any]) -> None:
        """Keep the (maxmemory-policy, maxmemory) an ``INFO`` reply says: an OOM's fix."""
        self.memory = (str(info.get("maxmemory_policy", "")),
                       int(info.get("maxmemory", 0) or 0))

    def inspected(self, info: Mapping[str, Any], cluster: bool = False) -> str | None:
        """Log what one ``INFO`` reply says (a refusal as an error, each warning once, else
        that the tier is reachable); the refusal, or None when the server is usable.
        ``cluster``: the tier talks through the cluster client (a node is expected)."""
        refusal, warnings = check_info(info, cluster)
        self.memory_read(info)
        if refusal is not None:
            log.error("remote tier %s refused: %s; serving without the tier (requests "
                      "recompute)", self.where, refusal)
            return refusal
        for w in warnings:  # a replica's warning is the READONLY fix, said once for both
            self.once("readonly" if w.startswith(REPLICA_WARNING) else w, w)
        log.info("remote tier %s is reachable: %s", self.where, describe(info))
        return None


def check_info(info: Mapping[str, Any], cluster: bool = False
               ) -> tuple[str | None, list[str]]:
    """(a refusal, warnings) from one ``INFO`` reply: the refusal when the tier must not use
    this server at all (a cluster node behind a plain URL), the warnings for settings that
    make it useless over time."""
    if int(info.get("cluster_enabled", 0) or 0) == 1 and not cluster:
        return CLUSTER_FIX, []
    warnings = []
    if not cluster and info.get("role") == "slave":
        warnings.append(f"{REPLICA_WARNING} {info.get('master_host', '?')}:"
                        f"{info.get('master_port', '?')}: puts fail READONLY; point --remote-url "
                        "at the master, or use redis+sentinel://HOST:PORT/SERVICE")
    policy = str(info.get("maxmemory_policy", ""))
    if policy == "noeviction":
        warnings.append("maxmemory-policy is noeviction: once full, every put fails with OOM "
                        "and the tier keeps its oldest blocks forever; set maxmemory-policy "
                        "allkeys-lru")
    elif policy and not policy.startswith("allkeys-"):
        warnings.append(f"maxmemory-policy is {policy}: kvpool's keys have no TTL, so a "
                        "volatile-* policy never evicts them; set maxmemory-policy "
                        "allkeys-lru")
    if int(info.get("maxmemory", 0) or 0) == 0:
        warnings.append("maxmemory is 0 (unbounded): the tier grows until the host runs out "
                        "of memory; set maxmemory (e.g. 80% of the host's RAM)")
    return None, warnings


def describe(info: Mapping[str, Any]) -> str:
    """One startup line's worth of the server: version, bound and policy."""
    mm = int(info.get("maxmemory", 0) or 0)
    bound = f"maxmemory {mm / 2**20:.0f} MiB" if mm else "no maxmemory"
    return (f"Redis {info.get('redis_version', '?')}, {bound}, "
            f"policy {info.get('maxmemory_policy', '?')}")
