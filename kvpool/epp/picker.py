"""The decision half of the endpoint picker: the router's own membership, health and scoring,
without its proxy.

``Picker`` runs a ``Router`` (kvpool.router.proxy) set up but not listening: its app's lifetime
opens the client session, polls every replica's /health once and keeps the beats going, and
``Router.plan`` makes the choice exactly as ``kvpool router`` makes it (lookup fan-out, then
scoring.choose with the load guard; round robin when no replica has a hit). So the picker
and the router never disagree on where a request goes, and what changes in the router's
decision changes here too.

A pick answers ``host:port`` (the GIE protocol's ``<ip:port>``) of the chosen replica's base URL;
Envoy's ORIGINAL_DST cluster connects there, so the replicas must be named by IP address.

NOTE(fallbacks): with ``fallbacks`` N > 0 the answer is the protocol's ordered list
``ip:port,ip:port,...``: the chosen replica, then up to N more healthy ones in the order the
router would try them (its plan's order; only replicas the subset hint names), for a proxy
that goes down the list on a connect failure (deploy/envoy/envoy-fallback.yaml: Envoy's
override_host load balancing and a route retry policy; docs/epp.md, "Fallback endpoints").
An ORIGINAL_DST cluster reads one address, so the default is 0: the chosen replica alone.

NOTE(responses): a replica keeps its Responses API responses in its own process, so a request
naming one (POST /v1/responses with ``previous_response_id``, anything under
``/v1/responses/{id}``) goes to the replica holding it, found as the router finds it: its
``ResponseAffinity`` (kvpool/router/affinity.py) and ``Router.response_order``, the same map and
search (GET /v1/responses/{id} to the healthy replicas with the caller's headers). The map is
filled by searches only: Envoy does not send the picker the replicas' answers (the response
phases are skipped, deploy/envoy/envoy.yaml), so the ids the router learns from answers it
relays are not seen here, and a follow-up's first pick costs one search. The map only chooses
the endpoint; the client gets the replica's answer (its tenant check, its 404: the NOTE(tenant)
of affinity.py holds here as in the router). A POST /v1/responses body is checked as the
router checks it (not a JSON object: 400 from the picker). A new response (no usable
``previous_response_id``) is placed by load as the router places it (the same
``Router.response_order``: round robin unless the loads are imbalanced); every other path
(/v1/models, /tokenize, ...) is placed the same way, by ``Router.by_load`` as the router's
``passthrough`` places it, with NOTE(fallbacks)'s list in that order.

NOTE(decisions): the router counts each generation request's choice on its registry
(kvpool_router_decisions_total by reason, kvpool_router_predicted_hit_tokens_total: the chosen
replica's reported hit) as it relays the request; the picker relays nothing, so ``pick`` counts
the same two at the pick, on the same counters, whatever the replica then answers (Envoy sends
the request and the picker never learns the outcome, so there is no "retry" here).
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections import Counter
from collections.abc import Callable, Sequence
from urllib.parse import unquote

from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from kvpool.epp.rewrite import ModelRewrites, request_seed
from kvpool.epp.subset import Subset, host_port
from kvpool.router.affinity import RESPONSES_PATH
from kvpool.router.proxy import GENERATE_PATHS, Router
from kvpool.router.relayed import request_headers
from kvpool.router.replicas import Replica

__all__ = ["ERROR_STATUSES", "Picker", "endpoint_of", "routed_path"]

ERROR_STATUSES = (400, 413, 503)  # the statuses the picker answers Envoy with itself


def endpoint_of(url: str) -> str:
    """``host:port`` of a replica base URL (the scheme's default port when none is given)."""
    host, port = host_port(url)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def routed_path(path: str) -> str:
    """NOTE(path-as-routed): ``path`` (Envoy's ``:path``, its query dropped) as aiohttp routes
    it in the router and the replicas (yarl's ``path_safe``: percent-escapes decoded but %2F and
    %25), so a generation route spelled with escapes (``/v1/%63ompletions``, served as a
    completion by every replica) is scored like one, not sent to the first healthy replica
    past the prefix choice and the load guard."""
    raw = path.split("?", 1)[0]
    try:
        return URL.build(path=raw, encoded=True).path_safe
    except ValueError:  # not a path aiohttp would take either: matches no route below
        return raw


class Picker:
    """Chooses a replica for a buffered request; ``start``/``close`` bracket its life."""

    def __init__(self, router: Router, rewrites: ModelRewrites | None = None,
                 fallbacks: int = 0) -> None:
        if fallbacks < 0:
            raise ValueError(f"--fallbacks {fallbacks}: use 0 or more")
        self.router = router
        self.fallbacks = fallbacks  # replicas listed after the chosen one (NOTE(fallbacks))
        self.rewrites = rewrites  # --model-rewrites (NOTE(model-rewrite) in rewrite.py)
        self.runner: web.AppRunner | None = None
        self.picks = 0  # requests given an endpoint (monotonic; tests and logs read it)
        self.full_duplex = 0  # bodies Envoy streamed in full duplex (service.py; monotonic)
        # the picker's own error answers (ImmediateResponse) by HTTP status (service.py)
        self.errors: Counter[int] = Counter(dict.fromkeys(ERROR_STATUSES, 0))

    async def start(self) -> None:
        self.runner = web.AppRunner(self.router.app())
        await self.runner.setup()  # the router's lifetime: session, first poll, beats

    async def close(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    async def pick(self, path: str, raw: bytes, headers: Sequence[tuple[str, str]],
                   method: str = "POST", subset: Subset | None = None) -> str | None:
        """The endpoint for a ``method`` request to ``path`` (``pick_body``'s first half)."""
        return (await self.pick_body(path, raw, headers, method, subset))[0]

    async def pick_body(self, path: str, raw: bytes, headers: Sequence[tuple[str, str]],
                        method: str = "POST", subset: Subset | None = None
                        ) -> tuple[str | None, bytes]:
        """(the endpoint, or NOTE(fallbacks)'s list, and the body the replica gets) for a
        ``method`` request to ``path`` (None: no healthy replica, or none that ``subset``, the
        proxy's hint, names: kvpool/epp/subset.py). Generation requests are checked
        (RequestError: not a JSON object), their model rewritten (NOTE(model-rewrite) in
        rewrite.py: the lookup and the replica see the target) and planned like the router
        plans them, among the replicas ``subset`` names; Responses API requests go to their
        response's replica (NOTE(responses)); others are placed by load (``Router.by_load``)."""
        route = routed_path(path)
        plain = request_headers(CIMultiDict(headers))
        among = None if subset is None else (lambda r: subset.allows(r.url))
        new_response = route == RESPONSES_PATH and method == "POST"
        if route in GENERATE_PATHS or new_response:
            body = await self.router.bodies.check(raw)  # RequestError: the router's 400
            raw, body = await self.rewrite(raw, body, plain)
        if route in GENERATE_PATHS:
            order, predicted, reason = await self.router.plan(raw, body, plain, among)
            if order:  # NOTE(decisions)
                self.router.metrics.by_reason[reason].inc()
                self.router.metrics.predicted.inc(predicted)
        elif new_response:
            named = None if body is None else body.get("previous_response_id")  # anything
            order = await self.router.response_order(named, plain, new=True, among=among)
        else:
            order = await self.by_response(route, plain, among)
        if not order:
            return None, raw
        self.picks += 1
        return ",".join(endpoint_of(r.url) for r in order[:1 + self.fallbacks]), raw

    async def rewrite(self, raw: bytes, body: dict | None, headers: list
                      ) -> tuple[bytes, dict | None]:
        """``raw`` and ``body`` with the model a rule sends it to (NOTE(model-rewrite)); as
        they are when no rule matches. A body too large to check here is decoded off the
        loop for its model, and encoded again off the loop."""
        if self.rewrites is None:
            return raw, body
        decoded, large = body, body is None
        if large:
            try:
                decoded = await asyncio.to_thread(json.loads, raw)
            except (ValueError, RecursionError):  # the replica judges such a body
                return raw, body
        model = decoded.get("model") if isinstance(decoded, dict) else None
        target = self.rewrites.target(model, request_seed(headers)) \
            if isinstance(model, str) else None
        if target is None or target == model:
            return raw, body  # as checked: a large body stays undecoded for the plan
        body = {**decoded, "model": target}
        encode = functools.partial(json.dumps, body, ensure_ascii=False, separators=(",", ":"))
        return (await asyncio.to_thread(encode) if large else encode()).encode(), body

    async def by_response(self, route: str, headers: list,
                          among: Callable[[Replica], bool] | None = None) -> list[Replica]:
        """The healthy replicas ``among`` takes, the one holding the response ``route`` names
        (if any) first (NOTE(responses)); the search asks none outside ``among``
        (kvpool/router/affinity.py NOTE(search-among)). Another route: by load, as the router
        places it (``Router.by_load``)."""
        if route.startswith(RESPONSES_PATH + "/"):  # its first segment, as the router reads
            named = unquote(route[len(RESPONSES_PATH) + 1:].split("/", 1)[0])
            return await self.router.response_order(named, headers, new=False, among=among)
        return self.router.by_load(
            [r for r in self.router.replicas.healthy() if among is None or among(r)])
