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

NOTE(padded): the list always names N + 1 endpoints: with fewer healthy replicas (or fewer
the subset hint names) than N + 1, its entries are repeated in order (A,B,A,B for two
replicas and N = 3), as NOTE(pinned) repeats the holder. The proxy makes as many attempts as
the list is long (NOTE(retry-check) in retries.py); past a shorter list its retries went to
its fallback policy's round robin over the whole cluster, reaching replicas the picker did
not choose (unhealthy ones, ones outside the subset hint) when every listed one refused.

NOTE(responses): a replica keeps its Responses API responses in its own process, so a request
naming one (POST /v1/responses with ``previous_response_id``, anything under
``/v1/responses/{id}``) goes to the replica holding it, found as the router finds it: its
``ResponseAffinity`` (kvpool/router/affinity.py) and ``Router.response_order``, the same map and
search (GET /v1/responses/{id} to the healthy replicas with the caller's headers), the map
also filled from the creations' answers (NOTE(learn-answer)). The map only chooses
the endpoint; the client gets the replica's answer (its tenant check, its 404: the NOTE(tenant)
of affinity.py holds here as in the router). A POST /v1/responses body is checked as the
router checks it (not a JSON object: 400 from the picker). A new response (no usable
``previous_response_id``) is placed by load as the router places it (the same
``Router.response_order``: round robin unless the loads are imbalanced); every other path
(/v1/models, /tokenize, ...) is placed the same way, by ``Router.by_load`` as the router's
``passthrough`` places it, with NOTE(fallbacks)'s list in that order.

NOTE(pinned): a follow-up whose holder the map or the search knows is sent to it alone, never
with fallbacks: no other replica holds that response, so a fallback could only answer 404 for
a response that exists (a client takes that for gone for good). The list names the holder
N + 1 times, so that the proxy's retries (as many as the list is long, NOTE(retry-check) in
retries.py) go to it too, never past the list to its fallback policy's round robin. When
Envoy cannot reach the holder, or the map's holder fails its health checks, the client gets
the router's ``HolderDown``, 503 ``response_unavailable`` with Retry-After, saying so
(kvpool/router/affinity.py NOTE(holder-down): ``Router.response_order`` cuts the order to the
holder and raises it; answers.py; docs/epp.md, "Responses API follow-ups"); a POST the holder
took and dropped unanswered (it may have run) gets the router's 502 ``replica_failed``
instead, one it took and went silent on (Envoy's timeout) its 504 ``replica_unresponsive``.
A follow-up no replica is known to hold is placed as before, with fallbacks.

NOTE(learn-answer): a POST /v1/responses pick (a new response or a follow-up: either creates
one) wants its answer (service.py NOTE(answer-phase)): a 200's response id, read from the
first bytes of the answer as Envoy streams it (answer_ids.py: a JSON answer's first
SCAN_BYTES, an SSE stream's first events up to ``response.created``), is learnt for the
caller's tenant (``ResponseAffinity.learner``, the router's NOTE(tenant) in affinity.py) with
the replica that answered: the listed one, or with NOTE(fallbacks)'s list the one Envoy's
``x-envoy-attempt-count`` names (attempt k went to the list's k-th, NOTE(padded)); without that
header a list naming several replicas teaches nothing. The request asks for the answer
uncompressed (``accept-encoding: identity``, service.py ``routed``), as the router's does
(kvpool/router/relayed.py NOTE(identity-encoding)): a gzip answer hid the id. So a follow-up
through the picker is placed with no search, as through the router. The call ends once the id
is read (or given up); Envoy sends the rest on by itself. A rewritten creation's names are kept
with its id, for its reads (stored_names.py NOTE(stored-names)). Not in full-duplex answer
mode (every byte would pass through the picker); other picks still end at the decision.

NOTE(methods): only a POST to a generation path (GENERATE_PATHS) is checked and scored; any
other method there (GET, PUT, DELETE, an OPTIONS preflight) goes to a replica by load, as
every other route does, as ``kvpool router`` sends it (its generation routes take POST alone,
the rest falls to its ``passthrough``). The replica answers it as vLLM's server does: 405 with
``Allow: POST``, a preflight its CORS answer. Before, the picker read such a request's body
(none) as a generation's: 400 ``invalid_json``, counted as a malformed body, and no browser
page could call through the gateway, its preflight refused.

NOTE(decisions): the router counts each generation request's choice on its registry
(kvpool_router_decisions_total by reason, kvpool_router_predicted_hit_tokens_total: the chosen
replica's reported hit) as it relays the request; the picker relays nothing, so ``pick_body`` counts
the same two at the pick, on the same counters, whatever the replica then answers (Envoy sends
the request and the picker never learns the outcome, so there is no "retry" here; Envoy's own
retries down a --fallbacks list are counted apart, kvpool_epp_failovers_total: retries.py
NOTE(failovers)).
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections import Counter
from collections.abc import Callable, Sequence
from typing import NamedTuple
from urllib.parse import unquote

from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from kvpool.epp.encoded import coding_of, decoded, encoded
from kvpool.epp.retries import RetryCheck
from kvpool.epp.rewrite import ModelRewrites, request_seed
from kvpool.epp.stored_names import StoredNames
from kvpool.epp.subset import Subset, host_port
from kvpool.router.affinity import PREVIOUS, RESPONSES_PATH
from kvpool.router.proxy import Router
from kvpool.router.scored_body import GENERATE_PATHS, scored_body
from kvpool.router.relayed import request_headers
from kvpool.router.replicas import Replica

__all__ = ["ERROR_STATUSES", "NO_ENDPOINT", "Pick", "Picker", "endpoint_of", "path_id",
           "routed_path"]

ERROR_STATUSES = (400, 413, 502, 503, 504)  # the statuses the picker answers Envoy with itself
NO_ENDPOINT = ("no_replica", "subset_down", "subset_unknown")  # refusals.py NOTE(no-endpoint)


class Pick(NamedTuple):
    """A pick: where the request goes and what its answer phase wants (answers.py)."""

    endpoint: str | None  # NOTE(fallbacks)'s list; None: no replica to send it to
    body: bytes  # what the replica gets (NOTE(model-rewrite))
    # (the client's model, the target) when a rule rewrote it (restore.py NOTE(model-restore)),
    # or the creation of the stored response it reads (stored_names.py NOTE(stored-names))
    renamed: tuple[str, str] | None = None
    pinned: str | None = None  # the response id a pinned follow-up names (NOTE(pinned))
    # a creation's: learns (its response id, Envoy's attempt count) (NOTE(learn-answer))
    learn: Callable[[str, str | None], None] | None = None
    # the body field that named ``pinned`` (previous_response_id); None: the path named it,
    # which is no field (the param of kvpool/router/affinity.py NOTE(holder-down)'s error)
    param: str | None = None


def endpoint_of(url: str) -> str:
    """``host:port`` of a replica base URL (the scheme's default port when none is given)."""
    host, port = host_port(url)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def answered_by(listed: Sequence[Replica], attempts: str | None) -> Replica | None:
    """The replica of ``listed`` that Envoy's attempt number ``attempts`` went to (the k-th
    attempt to the k-th: NOTE(padded)); None when it cannot be told."""
    if all(r is listed[0] for r in listed):
        return listed[0]
    try:
        k = int(attempts or "")
    except ValueError:
        return None
    return listed[k - 1] if 1 <= k <= len(listed) else None


def path_id(route: str) -> str | None:
    """The response id a route under /v1/responses/ names: its first segment, as the router
    reads it (None: another route)."""
    if not route.startswith(RESPONSES_PATH + "/"):
        return None
    return unquote(route[len(RESPONSES_PATH) + 1:].split("/", 1)[0])


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
        # the client's names of responses created through a rewrite (NOTE(stored-names))
        self.names = StoredNames(router.affinity.max_ids)
        self.runner: web.AppRunner | None = None
        self.picks = 0  # requests given an endpoint (monotonic; tests and logs read it)
        self.full_duplex = 0  # bodies Envoy streamed in full duplex (service.py; monotonic)
        # the picker's own error answers (ImmediateResponse) by HTTP status (service.py)
        self.errors: Counter[int] = Counter(dict.fromkeys(ERROR_STATUSES, 0))
        # of the 503s, those that found no endpoint, by why (refusals.py NOTE(no-endpoint))
        self.no_endpoint: Counter[str] = Counter(dict.fromkeys(NO_ENDPOINT, 0))
        # Envoy's retries held against ``fallbacks``, failovers counted (NOTE(retry-check))
        self.retries = RetryCheck(fallbacks) if fallbacks else None

    async def start(self) -> None:
        self.runner = web.AppRunner(self.router.app())
        await self.runner.setup()  # the router's lifetime: session, first poll, beats

    async def close(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    async def pick_body(self, path: str, raw: bytes, headers: Sequence[tuple[str, str]],
                        method: str = "POST", subset: Subset | None = None) -> Pick:
        """The ``Pick`` for a ``method`` request to ``path`` (its endpoint None: no healthy
        replica, or none that ``subset``, the proxy's hint, names: kvpool/epp/subset.py).
        Generation requests are checked (RequestError: not a JSON object), their model
        rewritten (NOTE(model-rewrite) in rewrite.py: the lookup and the replica see the
        target) and planned like the router plans them, among the replicas ``subset`` names;
        Responses API requests go to their response's replica (NOTE(responses), NOTE(pinned):
        kvpool/router/affinity.py's HolderDown when it is known down); others are placed by
        load (``Router.by_load``)."""
        route = routed_path(path)
        plain = request_headers(CIMultiDict(headers))
        among = None if subset is None else (lambda r: subset.allows(r.url))
        new_response = route == RESPONSES_PATH and method == "POST"
        generation = route in GENERATE_PATHS and method == "POST"  # NOTE(methods)
        body, renamed, text = None, None, raw
        if generation or new_response:
            raw, text, body, renamed = await self.generation_body(raw, CIMultiDict(headers),
                                                                  plain)
        if generation:  # NOTE(messages-scored)
            order, pinned = await self.planned(*scored_body(route, text, body), plain,
                                               among), None
        elif new_response:
            named = None if body is None else body.get(PREVIOUS)  # anything
            order, pinned = await self.router.response_order(named, plain, new=True,
                                                             among=among)
        else:  # a stored response read back names the client's model (NOTE(stored-names))
            order, pinned = await self.by_response(route, plain, among)
            renamed = self.names.of(self.router.affinity.tenant(plain), path_id(route))
        if not order:
            return Pick(None, raw)
        self.picks += 1
        # NOTE(pinned): every retry goes to the holder too; NOTE(padded): none past the list
        chosen = order[:1] if pinned else order[:1 + self.fallbacks]
        listed = [chosen[i % len(chosen)] for i in range(1 + self.fallbacks)]
        learn, param = (self.learner(plain, listed, renamed, body), PREVIOUS) if new_response \
            else (None, None)
        return Pick(",".join(endpoint_of(r.url) for r in listed), raw, renamed, pinned, learn,
                    param)

    async def generation_body(self, raw: bytes, headers: CIMultiDict, plain: list
                              ) -> tuple[bytes, bytes, dict | None, tuple[str, str] | None]:
        """(the bytes that go upstream, the body as the picker reads it, its object (None:
        too large to check here, or not decoded), the rewrite (``rewrite``)); RequestError:
        the router's 400. NOTE(encoded-body) in encoded.py: a compressed body is decoded to
        be read, and compressed again when a rewrite changed it."""
        coding = coding_of(headers)
        text = raw if coding is None else await asyncio.to_thread(
            decoded, raw, coding, self.router.max_body_bytes)
        if text is None:  # not read here: placed as a body too large to check, the
            return raw, raw, None, None  # replica judges it
        body = await self.router.bodies.check(text)
        new, body, renamed = await self.rewrite(text, body, plain)
        if renamed is not None:
            raw = new if coding is None else encoded(new, coding)
        return raw, new, body, renamed

    async def planned(self, raw: bytes, body: dict | None, headers: list,
                      among: Callable[[Replica], bool] | None) -> list[Replica]:
        """A generation request's order, planned as the router plans it (NOTE(decisions))."""
        order, predicted, reason = await self.router.plan(raw, body, headers, among)
        if order:
            self.router.metrics.by_reason[reason].inc()
            self.router.metrics.predicted.inc(predicted)
        return order

    def learner(self, headers: list, listed: list[Replica],
                renamed: tuple[str, str] | None = None,
                body: object = None) -> Callable[[str, str | None], None]:
        """NOTE(learn-answer): learns a creation's response id for the caller's tenant with
        the replica of ``listed`` Envoy's attempt count names, and the names of its rewrite
        (``renamed``: NOTE(stored-names) in stored_names.py); a creation ``body`` with
        ``"store": false`` teaches no id (NOTE(unstored) in kvpool/router/affinity.py)."""
        learn = self.router.affinity.learner(headers, body)
        tenant = self.router.affinity.tenant(headers)

        def learnt(rid: str, attempts: str | None) -> None:
            if renamed is not None:
                self.names.keep(tenant, rid, renamed)
            if (replica := answered_by(listed, attempts)) is not None:
                learn(rid, replica)
        return learnt

    async def rewrite(self, raw: bytes, body: dict | None, headers: list
                      ) -> tuple[bytes, dict | None, tuple[str, str] | None]:
        """``raw`` and ``body`` with the model a rule sends it to (NOTE(model-rewrite)), and
        (the model the client asked for, that target); None: as they are, no rule matched. A
        body too large to check here is decoded off the loop for its model, and encoded again
        off the loop."""
        if self.rewrites is None:
            return raw, body, None
        decoded, large = body, body is None
        if large:
            try:
                decoded = await asyncio.to_thread(json.loads, raw)
            except (ValueError, RecursionError):  # the replica judges such a body
                return raw, body, None
        model = decoded.get("model") if isinstance(decoded, dict) else None
        target = self.rewrites.target(model, request_seed(headers)) \
            if isinstance(model, str) else None
        if target is None or target == model:
            return raw, body, None  # as checked: a large body stays undecoded for the plan
        body = {**decoded, "model": target}
        encode = functools.partial(json.dumps, body, ensure_ascii=False, separators=(",", ":"))
        try:  # a lone surrogate escape in a body too large to check: not UTF-8 encodable
            raw = (await asyncio.to_thread(encode) if large else encode()).encode()
        except UnicodeEncodeError:  # NOTE(rewrite-surrogate): the replica judges it, a 400
            return raw, None, None  # (it crashed the call: Envoy's 503 and a traceback)
        return raw, body, (model, target)

    async def by_response(self, route: str, headers: list,
                          among: Callable[[Replica], bool] | None = None
                          ) -> tuple[list[Replica], str | None]:
        """The healthy replicas ``among`` takes, the one holding the response ``route`` names
        (if any) alone with its id (NOTE(responses), NOTE(pinned)); the search asks none
        outside ``among`` (kvpool/router/affinity.py NOTE(search-among)). Another route: by load, as
        the router places it (``Router.by_load``)."""
        if (named := path_id(route)) is not None:
            return await self.router.response_order(named, headers, new=False, among=among)
        return self.router.by_load(
            [r for r in self.router.replicas.healthy() if among is None or among(r)]), None
