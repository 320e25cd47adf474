"""The router's aiohttp app: ask every healthy replica, choose, stream the answer through.

Per POST /v1/completions or /v1/chat/completions::

    body = read once, checked to be a JSON object (else 400 OpenAI error JSON)
    fan out POST /v1/kvpool/lookup with the same body to every healthy replica, in parallel,
        each bounded by lookup_timeout (a late or failed replica scores hit 0, and its load is
        the requests this router has in flight to it)
    choose(hits, loads) (scoring.py) -> first replica; the others follow, least loaded first
    proxy: connect error, or a 5xx status before any body byte  -> next replica (reason retry)
           otherwise: copy status and body through chunk by chunk (SSE as it comes); after the
           first byte there is no retry (the client has seen part of an answer)
    no replica could take it -> 502 OpenAI error JSON

NOTE(agreement): the router neither renders chat templates nor tokenizes: each replica's lookup
parses the body with the parser its generation route uses and hashes with its own spec and salt,
so predicted and served prefixes agree by construction.
NOTE(cancel): served with handler_cancellation, a client that disconnects cancels the handler;
leaving the upstream ``async with`` closes that connection, which cancels the replica's handler,
which aborts the request there (its blocks go back to its pool).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from kvpool.router.replicas import Replica, ReplicaSet
from kvpool.router.scoring import DEFAULT_GUARD, REASONS, LoadGuard, choose

__all__ = ["POLICIES", "ROUTER_KEY", "Router", "error_json"]

log = logging.getLogger("kvpool.router")
LOOKUP_PATH = "/v1/kvpool/lookup"
GENERATE_PATHS = ("/v1/completions", "/v1/chat/completions")
_PASS_HEADERS = ("Content-Type", "Authorization")  # request headers forwarded upstream
_COPY_HEADERS = ("Content-Type", "Cache-Control", "Retry-After")  # response headers copied back
_USAGE_SCAN_BYTES = 1 << 20  # bodies are scanned for usage only up to this size
# "prefix": lookups + choose(); "round_robin": request i -> healthy replica i mod n, no lookups
# (the baseline bench/route_live.py measures prefix routing against)
POLICIES = ("prefix", "round_robin")


def error_json(status: int, message: str, code: str, param: str | None = None) -> web.Response:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return web.json_response({"error": {"message": message, "type": kind, "param": param,
                                        "code": code}}, status=status)


class _Metrics:
    """The router's /metrics, on a private registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.decisions = Counter("kvpool_router_decisions", "Routing decisions by reason.",
                                 ["reason"], registry=self.registry)
        for r in REASONS:
            self.decisions.labels(r)
        self.predicted = Counter("kvpool_router_predicted_hit_tokens",
                                 "Prefix hit tokens the chosen replica's lookup reported.",
                                 registry=self.registry)
        self.actual = Counter("kvpool_router_cached_tokens",
                              "usage.prompt_tokens_details.cached_tokens of proxied answers.",
                              registry=self.registry)
        self.healthy = Gauge("kvpool_router_healthy_replicas", "Replicas passing /health.",
                             registry=self.registry)


class Router:
    """Routes generation requests over a ReplicaSet; ``app()`` builds the aiohttp app."""

    def __init__(self, replicas: ReplicaSet, *, guard: LoadGuard = DEFAULT_GUARD,
                 lookup_timeout: float = 0.05, connect_timeout: float = 1.0,
                 policy: str = "prefix") -> None:
        if policy not in POLICIES:
            raise ValueError(f"router policy {policy!r}: choose one of {', '.join(POLICIES)}")
        self.replicas = replicas
        self.policy = policy
        self.guard = guard
        self.lookup_timeout = lookup_timeout  # seconds a lookup answer may take
        self.connect_timeout = connect_timeout
        self.metrics = _Metrics()
        self.rr = 0  # round-robin counter for requests no replica has a hit for
        self.session: aiohttp.ClientSession | None = None  # opened with the app

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app[ROUTER_KEY] = self
        for path in GENERATE_PATHS:
            app.router.add_post(path, self.generate)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.render_metrics)
        app.router.add_route("*", "/{tail:.*}", self.passthrough)
        app.cleanup_ctx.append(self._lifetime)
        return app

    async def _lifetime(self, app: web.Application) -> AsyncIterator[None]:
        self.session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout),
            auto_decompress=False)
        await self.replicas.poll_once(self.session)  # know who is up before the first request
        poller = asyncio.create_task(self.replicas.run(self.session), name="router-health")
        try:
            yield
        finally:
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller
            await self.session.close()

    # ---------------------------------------------------------------- decision
    async def _lookup(self, r: Replica, raw: bytes, headers: dict) -> dict | None:
        assert self.session is not None
        try:
            async with self.session.post(r.url + LOOKUP_PATH, data=raw, headers=headers,
                                         timeout=aiohttp.ClientTimeout(
                                             total=self.lookup_timeout)) as resp:
                if resp.status != 200:
                    return None
                out = await resp.json()
                r.replica_id = out.get("replica_id", r.replica_id)
                return out
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError, KeyError):
            return None  # late, down or confused: scores hit 0, the choice goes on

    async def plan(self, raw: bytes, headers: dict) -> tuple[list[Replica], int, str]:
        """(replicas in the order to try, predicted hit tokens of the first, reason)."""
        cands = self.replicas.healthy()
        if not cands:
            return [], 0, "only"
        if self.policy == "round_robin":
            idx = self.rr % len(cands)
            self.rr += 1
            return cands[idx:] + cands[:idx], 0, "round_robin"
        answers = await asyncio.gather(*(self._lookup(r, raw, headers) for r in cands))
        hits = [int(a["device_hit_tokens"]) + int(a["host_hit_tokens"]) if a else 0
                for a in answers]
        loads = [int(a["num_running"]) + int(a["num_waiting"]) if a else r.in_flight
                 for a, r in zip(answers, cands)]
        idx, reason = choose(hits, loads, self.guard, self.rr)
        if reason == "round_robin":
            self.rr += 1
        rest = sorted((i for i in range(len(cands)) if i != idx), key=lambda i: (loads[i], i))
        return [cands[i] for i in (idx, *rest)], hits[idx], reason

    # ---------------------------------------------------------------- routes
    async def generate(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError as exc:
            return error_json(400, f"request body is not valid JSON: {exc}", "invalid_json")
        if not isinstance(body, dict):
            return error_json(400, "request body must be a JSON object", "invalid_json")
        headers = {h: request.headers[h] for h in _PASS_HEADERS if h in request.headers}
        order, predicted, reason = await self.plan(raw, headers)
        for attempt, replica in enumerate(order):
            self.metrics.decisions.labels(reason if attempt == 0 else "retry").inc()
            resp = await self._forward(request, replica, raw, headers)
            if resp is not None:
                if attempt == 0:
                    self.metrics.predicted.inc(predicted)
                return resp
        return error_json(502, "no replica could take the request" if order else
                          "no healthy replica", "no_replica")

    async def _forward(self, request: web.Request, replica: Replica, raw: bytes,
                       headers: dict) -> web.StreamResponse | None:
        """Proxy to ``replica``; None when it failed before the first byte (try another)."""
        assert self.session is not None
        replica.in_flight += 1
        try:
            try:
                upstream = await self.session.request(
                    request.method, replica.url + request.rel_url.path_qs, data=raw,
                    headers=headers)
            except (aiohttp.ClientConnectionError, asyncio.TimeoutError, OSError):
                self.replicas.mark_down(replica)
                return None
            async with upstream:
                if upstream.status >= 500:
                    with contextlib.suppress(aiohttp.ClientError):
                        await upstream.read()
                    log.info("replica %s answered %d before the body: retrying elsewhere",
                             replica.url, upstream.status)
                    return None
                resp = web.StreamResponse(status=upstream.status, headers={
                    h: upstream.headers[h] for h in _COPY_HEADERS if h in upstream.headers})
                await resp.prepare(request)
                usage = _UsageScanner()
                try:
                    async for chunk in upstream.content.iter_any():
                        usage.feed(chunk)
                        await resp.write(chunk)
                except aiohttp.ClientError as exc:  # replica died mid-answer: no retry now
                    log.warning("replica %s broke off an answer: %s", replica.url, exc)
                    return resp
                await resp.write_eof()
                if (cached := usage.cached_tokens()) is not None:
                    self.metrics.actual.inc(cached)
                return resp
        finally:
            replica.in_flight -= 1

    async def passthrough(self, request: web.Request) -> web.StreamResponse:
        """Every other route (/v1/models, ...): the first healthy replica answers."""
        raw = await request.read()
        headers = {h: request.headers[h] for h in _PASS_HEADERS if h in request.headers}
        for replica in self.replicas.healthy():
            resp = await self._forward(request, replica, raw, headers)
            if resp is not None:
                return resp
        return error_json(502, "no healthy replica", "no_replica")

    async def health(self, request: web.Request) -> web.Response:
        up = [r.url for r in self.replicas.healthy()]
        return web.json_response({"status": "ok" if up else "unavailable", "healthy": up},
                                 status=200 if up else 503)

    async def render_metrics(self, request: web.Request) -> web.Response:
        self.metrics.healthy.set(len(self.replicas.healthy()))
        return web.Response(body=generate_latest(self.metrics.registry),
                            headers={"Content-Type": "text/plain; version=0.0.4"})


class _UsageScanner:
    """Finds usage.prompt_tokens_details.cached_tokens in a JSON body or an SSE stream."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.seen = 0
        self.found: int | None = None

    def feed(self, chunk: bytes) -> None:
        self.seen += len(chunk)
        if self.seen > _USAGE_SCAN_BYTES:
            self.buf.clear()
            return
        self.buf += chunk
        while (nl := self.buf.find(b"\n")) >= 0:  # SSE: one event line at a time
            line, self.buf = bytes(self.buf[:nl]), self.buf[nl + 1:]
            if line.startswith(b"data: {") and b'"usage"' in line:
                self._take(line[6:])

    def cached_tokens(self) -> int | None:
        if self.found is None and self.buf.startswith(b"{"):  # a plain JSON answer
            self._take(bytes(self.buf))
        return self.found

    def _take(self, text: bytes) -> None:
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            usage: Any = json.loads(text).get("usage") or {}
            cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
            if isinstance(cached, int):
                self.found = cached


ROUTER_KEY = web.AppKey("kvpool_router", Router)
