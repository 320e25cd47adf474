"""The router's aiohttp app: ask every healthy replica, choose, stream the answer through.

Per POST to a generation route (scored_body.py GENERATE_PATHS: completions, chat, batch chat,
/v1/messages, /invocations)::

    body = read once within --max-body-bytes, checked to be a JSON object (relayed.py; else
        400 / 413 OpenAI error JSON)
    headers = the client's end-to-end headers (relayed.py), for the lookups and the request
    fan out POST /v1/kvpool/lookup with the same body to every healthy replica not ejected
        (outliers.py NOTE(outlier)), in parallel, hits capped (scoring.py NOTE(hit-cap)),
        each bounded by lookup_timeout (a late, failed or silent replica scores hit 0, and its
        load is what its last /health reported or this router's requests there, the more;
        NOTE(own-load): an answering one's is its lookup's figure or this router's requests
        there, the more)
    choose(hits, loads) (scoring.py) -> first replica; the others follow, least loaded first
    relay (upstream.py): an attempt the replica cannot have started (down, full: upstream.py
        NOTE(retry)) -> next replica (reason retry), at most ``max_retries`` times; one it
        took (lost before or while answering; silent, but for a GET) is not retried; a
        replica's 5xx is the answer; after an SSE answer started a broken or silent replica
        ends it with an SSE error event; a run of 5xx or lost connections takes the replica
        out of the picks for a while (outliers.py NOTE(outlier))
    no replica could take it -> every one tried full or down: 503 + Retry-After (a full
        replica's own answer when there was one); a POST its replica went silent on: 504
        replica_unresponsive; otherwise 502. OpenAI error JSON either way

Every error the router itself gives is OpenAI error JSON (Anthropic's on /v1/messages): the
replica's error middleware and hook run here too (kvpool.server.middleware, anthropic_errors),
and cli.py listens through the replica's guarded listener (kvpool.server.connections).

NOTE(cors-own): CORS preflights go to a replica like any other request, and a replica's
answer keeps the Access-Control-* headers the replica gave it (upstream.RELAYED). The answers
the router makes itself (its 502 / 503 / 413 / 408 / 400, /health) get them from the router's
own policy (``cors``, the replica's four flags; kvpool.server.cors), so a page reading the
API through the router can read those errors too.

With ``kv_events`` (``kvpool router --kv-events``, kv_routing.py) the fan-out is replaced by the
replicas' KV event streams: the router hashes the prompt once and scores its own per-replica
indexes; only a request it cannot hash (kv_prompt.py) still asks the lookups.

The Responses API (affinity.py): POST /v1/responses has no prompt a lookup reads, so it is
placed by load alone (``choose`` with no hits: round robin unless the loads are imbalanced),
but one naming a ``previous_response_id``, and ``/v1/responses/{id}...``, go to the replica
holding that response alone, found down: 503 response_unavailable (affinity.py
NOTE(holder-down)); one no replica is known to hold is placed as before, and its 404 is the
server's own (NOTE(tenant)). Neither kind is counted in ``kvpool_router_decisions_total`` (it
counts prefix routing). Every other route (/v1/models, ...) is placed by load (``passthrough``),
but for the replicas' operator routes (operator_routes.py NOTE(operator-routes)).

NOTE(own-load): what a lookup answer claims is not checked against anything but the router's
own count: its hit tokens cannot be (only the replica holds its cache), but its load can. A
replica that claimed a long hit for every prompt and no load (a bug, or hostile) drew every
request while its queue grew; with the router's own in-flight requests there as the floor of
its load, the load guard (scoring.py) sends new requests elsewhere once it holds more than
``abs_threshold`` of this router's requests beyond the least loaded replica.
NOTE(health-view): GET /health answers every caller, unauthenticated (gateways and Kubernetes
probes read its status: 200 while at least one replica is healthy, else 503), but names the
healthy replicas' URLs (``{"status", "healthy": [URL, ...]}``) only to a request carrying the
router's credentials, ``Authorization: Bearer <T>`` for T the --admin-token-file token or the
--replica-api-key (``health_tokens``); anyone else gets ``{"status", "healthy_replicas": N}``,
so the internal topology stays with those who may call the replicas or the admin API (whose
GET lists the same URLs). A router started with neither key lists the URLs to everyone, as
before: nothing there is guarded, so it runs on a network trusted to reach it
(docs/architecture.md, Router).
NOTE(agreement): with lookups the router neither renders chat templates nor tokenizes: each
replica's lookup parses the body with the parser its generation route uses and hashes with its
own spec and salt, so predicted and served prefixes agree by construction.
NOTE(cancel): served with handler_cancellation, a client that disconnects cancels the handler;
leaving the upstream ``async with`` closes that connection, so the replica's handler is
cancelled and the request aborted there (its blocks go back to its pool).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator, Callable, Sequence

import aiohttp
from aiohttp import web
from prometheus_client import generate_latest

from kvpool.router.affinity import PREVIOUS, RESPONSES_PATH, HolderDown, ResponseAffinity
from kvpool.router.kv_routing import EventRouting
from kvpool.router.lookups import ask_lookup
from kvpool.router.membership import Membership, bearer, carries_token
from kvpool.router.operator_routes import is_operator_route
from kvpool.router.outliers import OutlierDetection
from kvpool.router.relayed import BodyReader, asking_identity, own_session, request_headers
from kvpool.router.replicas import Replica, ReplicaSet
from kvpool.router.router_metrics import RouterMetrics
from kvpool.router.scored_body import GENERATE_PATHS, scored_body
from kvpool.router.scoring import DEFAULT_GUARD, LoadGuard, choose, prompt_bound
from kvpool.router.response_ids import usable_id
from kvpool.router.upstream import RELAYED, SAFE_METHODS, Failure, Relay, give_up
from kvpool.router.wire import CONNECT_TIMEOUT, UpstreamPool
from kvpool.server.connections import DEFAULT_STREAM_WRITE_TIMEOUT
from kvpool.server.cors import CorsPolicy
from kvpool.server.expect import readable_expectations
from kvpool.server.json_body import DEFAULT_BODY_TIMEOUT, DEFAULT_MAX_BODY_BYTES
from kvpool.server.anthropic_errors import anthropic_errors
from kvpool.server.middleware import error_middleware, json_errors

__all__ = ["DEFAULT_MAX_RETRIES", "POLICIES", "ROUTER_KEY", "UPSTREAM_KEEPALIVE", "Router"]

log = logging.getLogger("kvpool.router")
# NOTE(retry) (upstream.py): retries of a request the replica cannot have started. Two ride
# out one replica found down and one full within a health beat (a rolling restart) while
# an overload reaching every replica costs at most three tries per request
DEFAULT_MAX_RETRIES = 2
# NOTE(session): one aiohttp session (beats, lookups, KV event info) and one UpstreamPool (the
# proxied requests, wire.py), their connections kept alive to every replica (no per-request
# connect); an idle one is not reused after ``upstream_keepalive`` seconds (wire.py NOTE(idle));
# no connection cap (a replica's own --max-num-seqs and queue are the back-pressure); no cookie
# jar: a proxy that stored a replica's Set-Cookie would send it on with every client's requests
# NOTE(idle) (wire.py): reuse stops before the shortest keep-alive of the replicas in use, or a
# request written as a replica closes the connection is a 502 (never resent: NOTE(retry)). vLLM
# serves with uvicorn, which closes idle connections after 5 s (--timeout-keep-alive); kvpool
# serve after 15 s (--keep-alive-timeout). 4 s stays under both (--upstream-keepalive)
UPSTREAM_KEEPALIVE = 4.0
# "prefix": lookups + choose(); "round_robin": request i -> healthy replica i mod n, no lookups
# (the baseline bench/route_live.py measures prefix routing against)
POLICIES = ("prefix", "round_robin")


def _check(policy: str, max_body_bytes: int, max_retries: int, upstream_keepalive: float) -> None:
    """A ValueError naming the first Router argument out of range."""
    if policy not in POLICIES:
        raise ValueError(f"router policy {policy!r}: choose one of {', '.join(POLICIES)}")
    if max_body_bytes < 1:
        raise ValueError(f"max_body_bytes={max_body_bytes!r}: use a positive byte count")
    if max_retries < 0:
        raise ValueError(f"max_retries={max_retries!r}: use 0 or more")
    if not 0 < upstream_keepalive < math.inf:  # NaN too
        raise ValueError(f"--upstream-keepalive {upstream_keepalive!r}: use a finite number of "
                         "seconds > 0")


class Router:
    """Routes generation requests over a ReplicaSet; ``app()`` builds the aiohttp app."""

    def __init__(self, replicas: ReplicaSet, *, guard: LoadGuard = DEFAULT_GUARD,
                 lookup_timeout: float = 0.05, connect_timeout: float = CONNECT_TIMEOUT,
                 policy: str = "prefix", max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
                 membership: Membership | None = None, kv_events: EventRouting | None = None,
                 affinity: ResponseAffinity | None = None, cors: CorsPolicy | None = None,
                 health_tokens: Sequence[str] = (), max_retries: int = DEFAULT_MAX_RETRIES,
                 upstream_keepalive: float = UPSTREAM_KEEPALIVE,
                 outliers: OutlierDetection | None = None,
                 body_timeout: float = DEFAULT_BODY_TIMEOUT) -> None:
        """``kv_events``: score prefix hits from the replicas' KV events (kv_routing.py),
        lookups only for requests it cannot score; ``affinity``: the Responses API's map
        (affinity.py; default: ``ResponseAffinity()``, 100k ids); ``cors``: the CORS policy
        of the router's own answers (NOTE(cors-own); default: vLLM's, no origin);
        ``health_tokens``: whose bearers see the replica URLs on /health (NOTE(health-view));
        ``max_retries``: upstream.py NOTE(retry); ``upstream_keepalive``: seconds an idle
        connection to a replica may be reused (wire.py NOTE(idle)); ``outliers``: the ejection
        of failing replicas (outliers.py NOTE(outlier); default: Envoy's values);
        ``body_timeout``: seconds every route's body may take (--body-timeout, NOTE(slow-body))."""
        _check(policy, max_body_bytes, max_retries, upstream_keepalive)
        self.max_retries, self.upstream_keepalive = max_retries, upstream_keepalive
        self.replicas, self.policy, self.guard = replicas, policy, guard
        self.lookup_timeout = lookup_timeout  # seconds a lookup answer may take
        self.connect_timeout = connect_timeout
        self.max_body_bytes = max_body_bytes  # larger bodies get 413
        self.metrics = RouterMetrics()
        self.rr = 0  # round-robin counter for requests no replica has a hit for
        self.bodies = BodyReader(body_timeout)
        self.stream_write_timeout = DEFAULT_STREAM_WRITE_TIMEOUT  # the replica's default
        self.session: aiohttp.ClientSession | None = None  # opened with the app
        self.pool: UpstreamPool | None = None  # the proxied requests' client (wire.py)
        self.membership = membership  # the admin API and watched file, when configured
        self.kv_events = kv_events
        self.affinity = affinity if affinity is not None else ResponseAffinity()
        self.cors = cors if cors is not None else CorsPolicy()
        self.health_auth = [bearer(t) for t in health_tokens]  # NOTE(health-view)
        self.outliers = outliers if outliers is not None else OutlierDetection()
        self.metrics.registry.register(self.affinity)
        self.metrics.registry.register(replicas)  # replicas.py NOTE(replica-series)
        if kv_events is not None:
            self.metrics.registry.register(kv_events)

    def app(self) -> web.Application:
        app = readable_expectations(web.Application(  # NOTE(expect-bound) in expect.py
            middlewares=[error_middleware], client_max_size=self.max_body_bytes))
        app[ROUTER_KEY] = self
        for path in GENERATE_PATHS:
            app.router.add_post(path, self.generate)
        app.router.add_post(RESPONSES_PATH, self.create_response)
        app.router.add_route("*", RESPONSES_PATH + "/{response_id}{tail:.*}", self.by_response)
        app.router.add_get("/health", self.health)
        # NOTE(metrics-path) in kvpool/server/handlers.py: vLLM's /metrics<anything>
        app.router.add_get("/metrics{path:.*}", self.render_metrics)
        if self.membership is not None:
            self.membership.install(app)
        app.router.add_route("*", "/{tail:.*}", self.passthrough)
        app.cleanup_ctx.append(self._lifetime)
        app.on_response_prepare.append(self._own_answer)
        return app

    async def _own_answer(self, request: web.Request, response: web.StreamResponse) -> None:
        """NOTE(cors-own): a replica's answer keeps its CORS headers, the router's get its own;
        its errors are OpenAI's JSON, on a Messages path Anthropic's (NOTE(anthropic-errors))."""
        if not response.get(RELAYED, False):
            await self.cors.on_response_prepare(request, response)
            await json_errors(request, response)  # NOTE(expect) in middleware.py
            await anthropic_errors(request, response)

    async def _lifetime(self, app: web.Application) -> AsyncIterator[None]:
        self.session = own_session(self.connect_timeout, self.upstream_keepalive,
                                   self.replicas.tls)  # replica_tls.py NOTE(replica-ca)
        self.pool = UpstreamPool(connect_timeout=self.connect_timeout,
                                 keepalive=self.upstream_keepalive)
        await self.replicas.poll_once(self.session)  # know who is up before the first request
        beats = asyncio.create_task(self.replicas.run(self.session), name="router-health")
        if self.kv_events is not None:
            await self.kv_events.start(self.session)
        try:
            yield
        finally:
            if self.kv_events is not None:
                await self.kv_events.close()
            beats.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beats
            await self.session.close()
            self.pool.close()
            self.bodies.close()

    # ---------------------------------------------------------------- decision
    async def plan(self, raw: bytes, body: dict | None, headers: list,
                   among: Callable[[Replica], bool] | None = None
                   ) -> tuple[list[Replica], int, str]:
        """(replicas in the order to try, predicted hit tokens of the first, reason);
        ``body``: ``raw`` decoded (relayed.BodyReader; None when too large to decode here);
        ``among``: only the healthy replicas it takes (the picker's subset hint)."""
        cands = [r for r in self.picks() if among is None or among(r)]
        if not cands:
            return [], 0, "only"
        if self.policy == "round_robin":
            idx = self.rr % len(cands)
            self.rr += 1
            return cands[idx:] + cands[:idx], 0, "round_robin"
        scored = (await self.kv_events.score(body, cands, headers, len(raw))
                  if self.kv_events is not None else None)
        if scored is not None:  # NOTE(kv-events): no round trip; loads from the beats
            hits = scored[0]
            loads = [r.busy() for r in cands]
        else:
            most = prompt_bound(len(raw))  # scoring.py NOTE(hit-cap)
            answers = await asyncio.gather(*(ask_lookup(
                self.session, r, raw, headers, self.lookup_timeout, most) for r in cands))
            hits = [a[0] if a else 0 for a in answers]
            # NOTE(own-load): a replica's word on its load, never below what this router sends
            loads = [max(a[1], r.in_flight) if a else r.busy() for a, r in zip(answers, cands)]
        order, idx, reason = self._ranked(cands, hits, loads)
        if scored is not None:
            self.kv_events.routed(order[0], scored[1])  # type: ignore[union-attr]
        return order, hits[idx], reason

    def picks(self) -> list[Replica]:
        """The healthy replicas new requests may go to (none ejected: NOTE(outlier))."""
        return self.outliers.picks(self.replicas.healthy())

    def _ranked(self, cands: list[Replica], hits: Sequence[int], loads: Sequence[int]
                ) -> tuple[list[Replica], int, str]:
        """(``cands`` in the order to try, the index of the first, reason): ``choose``'s
        pick, then the others least loaded first."""
        idx, reason = choose(hits, loads, self.guard, self.rr)
        if reason == "round_robin":
            self.rr += 1
        rest = sorted((i for i in range(len(cands)) if i != idx), key=lambda i: (loads[i], i))
        return [cands[i] for i in (idx, *rest)], idx, reason

    def by_load(self, order: list[Replica]) -> list[Replica]:
        """``order`` by load alone (``choose`` with no hits: round robin unless loads are uneven),
        the rest least loaded first: new Responses, other routes, the picker's (epp/picker.py)."""
        hits = [0] * len(order)
        return self._ranked(order, hits, [r.busy() for r in order])[0] if order else []

    async def response_order(self, named: object, headers: list, *, new: bool,
                             among: Callable[[Replica], bool] | None = None
                             ) -> tuple[list[Replica], str | None]:
        """The healthy replicas to try for a Responses API request (module docstring), and
        None; the replica holding response ``named`` (as the client sent it: anything) alone,
        and its id, when the map or the search knows it (affinity.py NOTE(holder-down):
        HolderDown when the map's is down). A ``new`` one is placed by load: ``choose`` with no
        hits (no prefix lookup can score it). ``among``: only the replicas it takes, searched
        or not (affinity.py NOTE(search-among))."""
        assert self.session is not None
        owner = await self.affinity.owner(named, self.replicas, self.session, headers, among,
                                          PREVIOUS if new else None)
        if owner is not None:
            return [owner], usable_id(named)
        order = [r for r in self.picks() if among is None or among(r)]
        return (self.by_load(order) if new else order), None

    # ---------------------------------------------------------------- routes
    async def generate(self, request: web.Request) -> web.StreamResponse:
        raw, body = await self.bodies.read(request)
        headers = request_headers(request.headers)
        order, predicted, reason = await self.plan(*scored_body(request.path, raw, body),
                                                   headers)  # NOTE(messages-scored)
        return await self._relay(request, raw, headers, order, reason, predicted)

    async def create_response(self, request: web.Request) -> web.StreamResponse:
        """POST /v1/responses (module docstring); a body too large to decode here is placed
        by load alone."""
        raw, body = await self.bodies.read(request)
        headers = asking_identity(request_headers(request.headers))  # its id is read
        named = None if body is None else body.get(PREVIOUS)
        return await self._follow_up(request, raw, headers, named, new=True, body=body)

    async def by_response(self, request: web.Request) -> web.StreamResponse:
        """GET /v1/responses/{id} and whatever else a replica serves under it."""
        raw = await self.bodies.raw(request)  # NOTE(slow-body)
        return await self._follow_up(request, raw, request_headers(request.headers),
                                     request.match_info["response_id"], new=False)

    async def _follow_up(self, request: web.Request, raw: bytes, headers: list,
                         named: object, new: bool, body: object = None) -> web.StreamResponse:
        """A Responses API request naming response ``named`` (anything; ``new``: a POST, maybe
        naming none, its decoded ``body``), relayed to its holder alone when that is known
        (NOTE(holder-down))."""
        order, held = await self.response_order(named, headers, new=new)
        down = None if held is None else HolderDown(held, PREVIOUS if new else None,
                                                    "cannot be reached now")
        return await self._relay(request, raw, headers, order, None, 0,
                                 self.affinity.learner(headers, body), down)

    async def passthrough(self, request: web.Request) -> web.StreamResponse:
        """Every other route (/v1/models, /tokenize, ...): ``by_load`` over the healthy
        replicas, the others following as retries."""
        if self.health_auth and is_operator_route(request.path) \
                and not carries_token(request, self.health_auth):
            raise web.HTTPNotFound()  # operator_routes.py NOTE(operator-routes)
        raw = await self.bodies.raw(request)  # NOTE(slow-body): 408 like the generation routes
        order = self.by_load(self.picks())
        return await self._relay(request, raw, request_headers(request.headers), order, None, 0)

    async def _relay(self, request: web.Request, raw: bytes, headers: list,
                     order: list[Replica], reason: str | None, predicted: int,
                     learn: Callable[[str, Replica], None] | None = None,
                     unreachable: HolderDown | None = None) -> web.StreamResponse:
        assert self.pool is not None
        relay = Relay(self.pool, self.replicas, request, raw, headers,
                      self.metrics.actual.inc, self.stream_write_timeout, learn)
        failures: list[Failure] = []
        safe = request.method in SAFE_METHODS
        for attempt, replica in enumerate(order):
            if reason is not None:
                self.metrics.by_reason[reason if attempt == 0 else "retry"].inc()
            out = await self._attempt(relay, replica)
            if not isinstance(out, Failure):
                if attempt == 0 and reason is not None:
                    self.metrics.predicted.inc(predicted)
                return out
            failures.append(out)
            if not out.retryable(safe) or attempt >= self.max_retries:  # NOTE(retry)
                break
        return give_up(failures, unreachable, safe)

    async def _attempt(self, relay: Relay, replica: Replica) -> web.StreamResponse | Failure:
        """One attempt, counted (NOTE(outlier)): an answer that started and then broke off
        or went silent counts as that failure, as Envoy counts an upstream reset."""
        try:
            out = await relay.attempt(replica)
        except asyncio.CancelledError:  # a large answer cut midway, or the client gone
            if relay.broken is not None:
                self.outliers.observe(replica, relay.broken, self.replicas.healthy)
            raise
        self.outliers.observe(replica, relay.broken or out, self.replicas.healthy)
        return out

    async def health(self, request: web.Request) -> web.Response:
        """200 while a replica is healthy, else 503, whoever asks; the replica URLs only to
        the holders of the router's credentials when it has any (NOTE(health-view))."""
        up = [r.url for r in self.replicas.healthy()]
        status = "ok" if up else "unavailable"
        if self.health_auth and not carries_token(request, self.health_auth):
            body: dict = {"status": status, "healthy_replicas": len(up)}
        else:
            body = {"status": status, "healthy": up}
        return web.json_response(body, status=200 if up else 503)

    async def render_metrics(self, request: web.Request) -> web.Response:
        self.metrics.healthy.set(len(self.replicas.healthy()))
        return web.Response(body=generate_latest(self.metrics.registry),
                            headers={"Content-Type": "text/plain; version=0.0.4"})


ROUTER_KEY = web.AppKey("kvpool_router", Router)
