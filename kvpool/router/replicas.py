"""The replicas a router knows, and a heartbeat per replica that keeps their state current.

Each replica has its own beat task: ``GET /health`` every ``interval`` seconds, bounded by
``timeout``. What a beat finds::

    200                      -> healthy (new requests may go there), heard now
    another status, refused  -> not healthy (no new requests; its in-flight ones go on: a
                                draining replica refuses connections and /health but finishes
                                what it runs, and a killed one breaks its connections itself)
    no answer in ``timeout``  -> not healthy (no new requests) at once; the beat waits on for
                                its answer up to ``down_after`` seconds: an answer that
                                comes late is heard (the replica lives), but leaves the
                                replica unhealthy until a beat answers in time
    nothing heard for ``down_after`` seconds -> the replica is *silent* (stopped, hung,
                                partitioned): every request the router has in flight there
                                ends now (``lease``)
    no socket of the router's own -> nothing changes (connect_errors.py NOTE(local-exhaustion))

NOTE(liveness): a silent replica's open connections never fail by themselves, and a first-byte
timeout cannot tell it from a long prefill (many seconds before the first token on a real
model). What the replica sends is the signal: a request ends when its replica stops answering,
never because it is slow. *Heard* (``Replica.hear``) is any /health answer, however late or
whatever its status, a lookup or /metrics answer, and any byte of an answer in flight on the
proxied connections (wire.py NOTE(on-data)): a replica whose /health is slow or stuck (SGLang's
runs a generation; a busy API loop answers late) while it still streams its answers keeps
them. A TCP connect that succeeds is not heard: the kernel completes it for a stopped (SIGSTOP)
or hung process too. A replica whose API loop stalls longer than ``down_after`` with nothing in
flight sending bytes (a very long prompt tokenized or templated on the loop, large multimodal
inputs) is taken for silent: the default (5 s) leaves room for such stalls; raise
``--down-after`` where they last longer (docs/architecture.md, Router). The first beat of all
replicas (``poll_once``, before the router listens) waits only ``timeout``.

NOTE(load): a 200 /health also carries the replica's running and waiting requests: the load
guard's input when the router does not ask lookups (``--kv-events``) or never proxies at all
(``kvpool epp``: Envoy carries the traffic, the picker sees no request end), so a replica made
hot by traffic this router did not send is not chosen by its prefix hits forever. A replica
whose /health carries no load (vLLM, SGLang) has it read from its /metrics instead
(load_metrics.py NOTE(metrics-load); ``MetricsLoad``).

Invariant: ``healthy()`` lists, in the order they joined, the member replicas whose last
beat was a 200 within ``timeout`` (none in flight past it) and that have not failed a connect
since; ``mark_down`` (a connect refused or timed out while proxying) takes a replica out at
once, as a failed beat does, and only a beat brings it back.

NOTE(replica-series): the router's /metrics shows each member replica as the router sees it,
one series per gauge labelled ``replica`` = its name (the label the KV-event series use): the
NAME of ``--replica NAME=URL`` (or of a replicas-file line, or the admin API's ``name``), else
its URL's HOST:PORT (``default_name``), never its scheme, user part, path or query. /metrics
answers whoever reaches the router, while /health names the URLs only to its credentials
(proxy.py NOTE(health-view)): a name hides the internal host too. Names are unique (one series
per replica); a clash is refused (ValueError) where the replica comes in. Gauges:
``kvpool_router_replica_load`` (running + waiting its last /health or /metrics reported),
``kvpool_router_replica_healthy`` (1 while new requests may go there, else 0) and
``kvpool_router_replica_in_flight`` (this router's requests there now); a counter,
``kvpool_router_replica_ejections_total`` (outliers.py NOTE(outlier)). Read at each scrape
from the member list, so the label set is the membership: a removed replica's series go
with it (its draining requests are not shown).

Membership changes at runtime (membership.py: the admin API and the watched file):
``add`` starts a replica *not healthy* and beats it at once, so it takes traffic after its
first passing beat (well within 2 s); ``remove`` takes it out of ``healthy()`` at once, and its
beats go on while requests it runs are in flight (a draining replica that goes silent still has
them ended), then stop. A URL added back while the replica removed from it drains is a new
member, said again from scratch; the draining one then says nothing of its health (its
member's beats speak for the URL): load_metrics.py NOTE(replica-churn).
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import Iterator, Mapping

import aiohttp
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from kvpool.router.connect_errors import Shortage, local_cause, why_down
from kvpool.router.load_metrics import (METRICS_TIMEOUT, MetricsLoad, load_of, read_up_to,
                                        reports_load)
from kvpool.router.replica import Replica, default_name

__all__ = ["DEFAULT_DOWN_AFTER", "DEFAULT_INTERVAL", "MAX_ANSWER_BYTES", "MetricsLoad",
           "Replica", "ReplicaSet", "default_name", "read_json", "read_up_to"]

log = logging.getLogger("kvpool.router")
DEFAULT_INTERVAL = 0.5  # seconds between two beats of one replica
DEFAULT_HEALTH_TIMEOUT = 0.5  # seconds a /health answer may take before it counts as late
DEFAULT_DOWN_AFTER = 5.0  # seconds nothing heard (NOTE(liveness)) before in-flight requests end
_CLIENT_ERRORS = (aiohttp.ClientError, OSError)
# NOTE(small-answers): what the router reads of a replica's own answers to it (/health, a
# lookup, the kv_events info) is small JSON; each is read up to a bound, never whole, so a
# broken or hostile replica (or whatever else listens at its URL) answering without end costs
# the router that bound per answer, not all it sends within the answer's timeout
MAX_ANSWER_BYTES = 64 * 1024


async def read_json(resp: aiohttp.ClientResponse, limit: int = MAX_ANSWER_BYTES) -> object:
    """The JSON value of a replica's small answer (NOTE(small-answers)); None when it is not
    JSON or is longer than ``limit`` bytes (then not read further)."""
    body, whole = await read_up_to(resp.content.readany, limit)
    if not whole:
        return None
    try:
        return json.loads(body)
    except (ValueError, RecursionError):  # not UTF-8, not JSON, nested too deep
        return None


class ReplicaSet:
    """The replica list plus one beat task per replica (``run`` is the task body)."""

    def __init__(self, urls: list[str], *, interval: float = DEFAULT_INTERVAL,
                 timeout: float = DEFAULT_HEALTH_TIMEOUT, down_after: float = DEFAULT_DOWN_AFTER,
                 names: Mapping[str, str] | None = None,
                 metrics_timeout: float = METRICS_TIMEOUT,
                 tls: ssl.SSLContext | None = None) -> None:
        """``names``: URL -> its /metrics label, for those given one (NOTE(replica-series));
        ``tls``: the beats' and relays' context for https:// (replica_tls.py NOTE(replica-ca))."""
        if interval <= 0 or timeout <= 0 or down_after <= 0:
            raise ValueError("router: the health interval, timeout and down-after must be > 0 "
                             "seconds")
        self.replicas: list[Replica] = []
        for u in urls:
            r = Replica(u.rstrip("/"), (names or {}).get(u, ""))
            self._unique(r.name, r.url)
            self.replicas.append(r)
        self.interval = interval
        self.timeout = timeout  # seconds one /health answer may take
        self.down_after = down_after
        self.polls = 0  # completed beats of all replicas (tests wait on it)
        self.silenced = 0  # requests ended because their replica went silent (monotonic)
        self.session: aiohttp.ClientSession | None = None  # set by run(): add() beats with it
        self.beats: dict[Replica, asyncio.Task] = {}  # one per replica still beaten
        self.beat_bugs: set[str] = set()  # URLs whose beat raised (said once: _ended drops)
        self.scrapes = MetricsLoad(metrics_timeout)  # /metrics loads (NOTE(metrics-load))
        self.tls = tls
        self.shortage = Shortage("health beat(s)")  # connect_errors.py NOTE(local-exhaustion)

    def healthy(self) -> list[Replica]:
        return [r for r in self.replicas if r.healthy]

    def collect(self) -> Iterator[Metric]:
        """Each member's gauges for the router's /metrics (a prometheus_client collector;
        NOTE(replica-series))."""
        load = GaugeMetricFamily("kvpool_router_replica_load", "Running + waiting requests "
                                 "the replica last reported (/health or /metrics).",
                                 labels=["replica"])
        healthy = GaugeMetricFamily("kvpool_router_replica_healthy", "1 while the replica "
                                    "passes /health (new requests may go there), else 0.",
                                    labels=["replica"])
        in_flight = GaugeMetricFamily("kvpool_router_replica_in_flight", "Requests this "
                                      "router is proxying to the replica now.",
                                      labels=["replica"])
        ejections = CounterMetricFamily("kvpool_router_replica_ejections", "Times the "
                                        "replica was taken out of the picks for failing "
                                        "request after request (outliers.py).",
                                        labels=["replica"])
        for r in list(self.replicas):
            load.add_metric([r.name], r.load)
            healthy.add_metric([r.name], 1 if r.healthy else 0)
            in_flight.add_metric([r.name], r.in_flight)
            ejections.add_metric([r.name], r.outlier.total)
        yield from (load, healthy, in_flight, ejections)

    def find(self, url: str) -> Replica | None:
        url = url.rstrip("/")
        return next((r for r in self.replicas if r.url == url), None)

    def _unique(self, name: str, url: str) -> None:
        """ValueError when another member is called ``name`` (NOTE(replica-series))."""
        if any(r.name == name and r.url != url.rstrip("/") for r in self.replicas):
            raise ValueError(f"replica name {name!r} is another replica's: give each replica "
                             "its own (NAME=URL)")

    def add(self, url: str, name: str | None = None) -> Replica:
        """``url`` as a member (the one already there if it is, renamed when ``name`` is
        given); new ones start not healthy. ValueError when the name is another's."""
        found = self.find(url)
        self._unique(name or default_name(url), url)
        if found is not None:
            found.name = name or found.name
            return found
        return self._join(url, name)

    def assign(self, named: Mapping[str, str | None]) -> None:
        """Each URL of ``named`` a member labelled its name (None: HOST:PORT), all at once:
        the labels are checked as they will be after, so a swap or a chain of renames in one
        edit of the replicas file is taken whole (membership.py NOTE(snapshot)). ValueError,
        nothing changed, when two members would share a label."""
        after = {r.url: r.name for r in self.replicas}
        after.update({u.rstrip("/"): n or default_name(u) for u, n in named.items()})
        if len(set(after.values())) < len(after):
            raise ValueError("two replicas would share a name: give each replica its own "
                             "(NAME=URL)")
        for url, name in named.items():
            found = self.find(url)
            if found is None:
                self._join(url, name)
            else:  # NAME=URL or a bare URL: the file says the label, a bare one HOST:PORT
                found.name = name or default_name(found.url)

    def _join(self, url: str, name: str | None) -> Replica:
        r = Replica(url.rstrip("/"), name or "", healthy=False)
        self._forget(r.url)  # a new member: nothing said of its URL yet
        self.replicas.append(r)
        log.info("replica %s added: takes traffic after its first passing /health", r.url)
        if self.session is not None:
            self._start(r, first_wait=0.0)
        return r

    def remove(self, url: str) -> Replica | None:
        """Take ``url`` out of new choices; what it runs finishes (its beats go on till then)."""
        r = self.find(url)
        if r is not None:
            self.replicas.remove(r)
            log.info("replica %s removed: draining %d in-flight requests", r.url, r.in_flight)
            if r not in self.beats:  # not beaten (the router is not running): gone now
                self._ended(r)
        return r

    def mark_down(self, replica: Replica, why: str = "refused a connection") -> None:
        """Out of new choices until a beat passes, as after a failed beat."""
        # healthy or not yet said why not (NOTE(why-down)), and not a draining one whose URL
        # a member has again (load_metrics.py NOTE(replica-churn))
        if replica.down_why is None and self._speaks(replica):
            log.warning("replica %s %s: skipped until /health answers", replica.url, why)
            replica.down_why = why
        replica.healthy = False

    async def beat(self, session: aiohttp.ClientSession, r: Replica,
                   patient: bool = True) -> None:
        """One /health probe of ``r`` and what it means (module docstring); ``patient``:
        wait for a late answer up to ``down_after`` (NOTE(liveness))."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        late = loop.call_later(self.timeout, self._late, r)
        try:
            status, health, error = await self._health(
                session, r, max(self.timeout, self.down_after) if patient else self.timeout)
        finally:
            late.cancel()
        self.polls += 1  # (nothing below awaits: a test waiting on it sees all of this beat)
        if (local := local_cause(error)) is not None:  # the router's own shortage: r as it was
            self.shortage.report(local)
            return
        if status == 200 and reports_load(health):
            r.load = load_of(health)
        elif status == 200 and self._speaks(r):  # a draining one's load steers nothing
            self.scrapes.want(session, r)  # NOTE(metrics-load)
        self._judge(r, status == 200 and loop.time() - start < self.timeout, status, error)
        if status is not None:
            r.hear()
        elif loop.time() - r.heard >= self.down_after and r.leases:
            self.silenced += r.end_leases()
            log.warning("replica %s has sent nothing for %.1f s: ended its in-flight requests "
                        "(NOTE(liveness): raise --down-after if its API loop stalls that long)",
                        r.url, loop.time() - r.heard)

    def _judge(self, r: Replica, ok: bool, status: int | None,
               error: BaseException | None) -> None:
        """``r`` healthy or not after a beat; a turn to unhealthy logged once, with why."""
        said = self._speaks(r)
        if ok and not r.healthy and said:
            log.info("replica %s is healthy", r.url)
        elif not ok and r.down_why is None and said:  # connect_errors.py NOTE(why-down)
            r.down_why = (why_down(error, r.url.startswith("https:")) if error is not None
                          else f"/health answered {status}" if status != 200
                          else f"/health took over {self.timeout:g} s")
            log.warning("replica %s is unhealthy: %s", r.url, r.down_why)
        r.healthy, r.down_why = ok, None if ok else r.down_why

    async def _health(self, session: aiohttp.ClientSession, r: Replica, bound: float
                      ) -> tuple[int | None, object, BaseException | None]:
        """(status, its decoded JSON when 200, the error that ended it) of ``r``'s /health
        within ``bound`` seconds: status None when nothing came, 0 when the connect failed."""
        status, health = None, None
        try:
            async with session.get(r.url + "/health", ssl=self.tls or True,
                                   timeout=aiohttp.ClientTimeout(total=bound)) as resp:
                status = resp.status
                if status == 200:
                    health = await read_json(resp)
        except aiohttp.ClientConnectorError as exc:
            return 0, None, exc
        except (*_CLIENT_ERRORS, asyncio.TimeoutError) as exc:
            return status, health, exc
        return status, health, None

    def _late(self, r: Replica) -> None:
        """A beat's answer is later than ``timeout``: no new requests meanwhile."""
        if r.down_why is None and self._speaks(r):
            r.down_why = f"/health took over {self.timeout:g} s"
            log.info("replica %s is unhealthy: %s", r.url, r.down_why)
        r.healthy = False

    async def poll_once(self, session: aiohttp.ClientSession) -> None:
        await asyncio.gather(*(self.beat(session, r, patient=False) for r in self.replicas))

    async def run(self, session: aiohttp.ClientSession) -> None:
        """Beat every replica every ``interval`` seconds (the caller polled once already),
        and the ones ``add`` brings, until cancelled."""
        self.session = session
        for r in self.replicas:
            self._start(r, first_wait=self.interval)
        try:
            await asyncio.Event().wait()
        finally:
            self.session = None
            tasks = list(self.beats.values())
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.scrapes.close()

    def _start(self, r: Replica, first_wait: float) -> None:
        task = asyncio.create_task(self._beats(r, first_wait), name=f"router-health {r.url}")
        self.beats[r] = task
        task.add_done_callback(lambda _t: self._ended(r))

    def _speaks(self, r: Replica) -> bool:
        """Whether what ``r``'s beats find is said: a member's is, a removed one's only while
        no member has its URL (load_metrics.py NOTE(replica-churn))."""
        return r in self.replicas or self.find(r.url) is None

    def _ended(self, r: Replica) -> None:
        """``r``'s beats ended: unless a member has its URL (again: ``_join`` forgot it for
        the new one), what was said of it goes (load_metrics.py NOTE(replica-churn))."""
        self.beats.pop(r, None)
        if self.find(r.url) is None:
            self._forget(r.url)

    def _forget(self, url: str) -> None:
        """Nothing said of ``url`` any more (load_metrics.py NOTE(replica-churn))."""
        self.beat_bugs.discard(url)
        self.scrapes.forget(url)

    async def _beats(self, r: Replica, wait: float) -> None:
        # one beat in flight per replica: a silent one delays only its own beats; a removed
        # one is beaten until its last request ends
        while r in self.replicas or r.leases:
            await asyncio.sleep(wait)
            session = self.session
            if session is None:
                return
            try:
                await self.beat(session, r)
            except Exception:  # noqa: BLE001 - NOTE(beat): a failed beat never ends the beats
                if r.url not in self.beat_bugs:
                    self.beat_bugs.add(r.url)
                    log.exception("router: a /health beat of %s failed (its beats go on)",
                                  r.url)
            wait = self.interval
