"""Response affinity: which replica holds a Responses API response (docs/architecture.md,
Router).

A ``kvpool serve`` keeps its stored responses in its own process (per tenant), so a follow-up
naming one (``previous_response_id``, ``GET /v1/responses/{id}``) must reach the replica that
made it: any other answers 404. The router learns the owner of each response id from the
answers it relays (response_ids.py: the JSON body's ``id``, or the first SSE event carrying
``response.id``) and sends such a follow-up to that replica first.

The map holds ids and replica URLs only (nothing of a prompt or an answer; an id and its tenant
as fixed-size digests, NOTE(id-digest)), at most ``max_ids`` of them (kvpool/core/fair_lru.py
NOTE(fair-lru): the least recently used id of the tenant holding the most goes); an id learnt
again (two replicas claim it, or one answers it again) belongs to the latest. The router knows
tenants when told the replicas' identity rule (``tenant_header``, ``keyed``: ``kvpool router
--tenant-header`` / ``--replica-api-key``, the replicas' middleware rule,
kvpool/server/tenant.py); then each tenant's ids are its own
and a follow-up looks only among its tenant's. Told nothing, every request is tenant "" and
the map is one least-recently-used map, as before, and NOTE(contested) holds.

An id the map does not hold (the router restarted, the id was evicted, the owner is not
healthy now) is looked for: ``GET /v1/responses/{id}`` to every healthy replica in parallel,
with the caller's own headers, each bounded by ``timeout``, at most ``max_lookups`` such
searches at once (NOTE(search-share)); the first replica in the healthy order that answers
200 is the owner (and learnt).

NOTE(search-share): a tenant may run at most ``max(1, max_lookups // T)`` searches at once, T
the tenants with a follow-up searching or waiting to, so a tenant that keeps every slot busy
leaves a slot to the next tenant that asks as soon as one of its searches ends. A follow-up
whose search cannot start waits for a slot at most ``timeout`` (what one search may take, so
a slot held by a search frees within it), then is placed without one as before: placed blind
at once, it went to a replica by load and, with several replicas, most likely drew a 404 for a
response that exists. The wait is bounded and holds no slot, so it cannot pile up searches;
``max_lookups`` 0 still means never search. Without tenants all follow-ups share tenant "",
whose share is every slot.

NOTE(search-among): a caller may narrow the replicas to ``among`` (the endpoint picker's
subset hint, kvpool/epp/subset.py): the map's owner counts only if ``among`` takes it, and the
search GETs only the healthy replicas it takes, so a replica outside is not contacted at all.
Before, the picker filtered the order after a search of every healthy replica.

NOTE(owner-proof): a 200 counts only when its body is that response: the start of the answer
(response_ids.py's SCAN_BYTES) names the id searched for. A replica that answers 200 to any
path (a catch-all route, an HTML page from something else behind its URL, a bug) used to win
every search it was first in the healthy order for, and drew every follow-up it could not
serve (each a 404 there).

NOTE(tenant): the map chooses where a request goes, and answers by itself only
NOTE(holder-down)'s 503: what the client gets otherwise is the answer of a replica, which
checks the caller's tenant itself. Told no tenants, the map is keyed by id alone: another
tenant's id reaches its owner and gets the owner's own 404, as an unknown id gets the 404 of
the replica it lands on. Told tenants, another tenant's id is not in the caller's part of the
map, so it is searched for like an unknown one (with the caller's headers: every replica says
404, nothing is learnt), and is never told its owner is down. So the router never answers
403 or a 404 of its own, its logs name no id, and its metrics count ids learnt from 200
answers (the caller's own) and the map's size, nothing a request for another tenant's id
moves. What is left without tenants: a known id skips the search, so it answers one parallel
GET sooner, and one whose owner is down gets the 503. A tenant's flood of ids or of searches
costs other tenants nothing within their share (NOTE(fair-lru), NOTE(search-share)).

NOTE(id-digest): the map keys each id, and each tenant, by a 16-byte keyed BLAKE2b digest
(hex), so what an entry costs does not depend on what a client names: bounded by count alone,
ids of 256 emoji (vLLM's client-chosen ``request_id``) and as long a tenant header made the map
3 to 8 times its stated size (119 MB, 262 MB at 100k ids). Capping ids in bytes would have cut
the memory too, but refused such ids: a client naming its responses so would lose affinity.
The key is this process's own random one, so no client can choose two ids sharing a digest
(one tenant's id taking another's entry); two ids share one with odds of 2**-128 a pair.
Measured with tracemalloc in-process at 100k ids: 17 MB for any ids (before: 18 MB for kvpool
serve's, 119 MB for 256 emoji), 30 MB told no tenants with every id contested (233 MB before),
58 MB with one id per tenant, the worst case (a shelf per tenant, kvpool/core/fair_lru.py),
whatever the ids and tenants (262 MB before).

NOTE(unstored): a response made with ``"store": false`` is kept by no replica: a follow-up
naming it draws a 404 wherever it goes, so its id teaches nothing and would only take a place
in the map (told no tenants, one client's stateless traffic pushing out every client's ids).
The answer does not say it (kvpool serve's response object, vLLM 0.33's, has no ``store``
member: kvpool/server/responses_view.py), so ``learner`` reads the creation's body its
caller passes, as the replica reads it (json_bool, NOTE(lax-bool)).

NOTE(contested): a client may name its response id (vLLM's ``request_id`` field), so two
tenants can hold the same id on two replicas. Told no tenants, the router cannot tell their
follow-ups apart: it gave the id to the latest claimant, so tenant b naming its response after
tenant a's sent a's follow-ups to b's replica, where they drew 404s. An id learnt from a
replica other than the map's is contested now: each follow-up naming it is searched for with
the caller's headers (each replica checks the caller's tenant), and of the replicas holding it
for the caller the latest claimant is chosen (one tenant that named two responses alike gets
its newer one, as the single process it replaced would answer). A contested id stays
contested while the map holds it.

NOTE(holder-down): a follow-up whose owner the map or the search knows goes to that replica
alone (``Router.response_order``; the endpoint picker lists it alone, kvpool/epp/picker.py
NOTE(pinned)): no other replica holds the response, so another one could only answer 404, and
a client takes that for a response gone for good. When the map's owner is a replica that
fails its health beats (``owner`` raises), or the request finds it down (refused, unreachable,
silent: upstream.py ``give_up``; Envoy's failure to reach it in the picker, answers.py), the
client gets ``HolderDown``: 503 ``response_unavailable`` with Retry-After, naming the response
(param ``previous_response_id``, null for a path) and saying to retry later; a replica that
restarted has lost what it stored, and then answers its own 404. An id no replica is known to
hold is placed as before, and a replica's 404 is the answer (docs/architecture.md, Router).
A holder that took the request and failed before answering (the connection lost after the
request went out: upstream.py's "failed"; Envoy's connection termination or reset) may have
run it: a GET (upstream.py SAFE_METHODS) may be sent again and gets the same 503, but a POST
gets the 502 ``replica_failed`` (upstream.py), no Retry-After, since retrying it could
make a second response; only a POST provably not started (no connection, a refused stream)
gets the 503. The picker answers by the same rule (kvpool/epp/retries.py ``not_started``).
A holder gone silent (replicas.py NOTE(liveness)) with the request sent has not answered in
time: a GET gets the 503 as above, but a POST, which may have run there, gets the router's
504 ``replica_unresponsive`` (upstream.py ``replica_unresponsive``), no Retry-After, where the
503 invited a blind second run. The picker answers the same when Envoy's timeout cuts the
silent holder off (its 504, answers.py; kvpool/epp/retries.py ``timed_out``). A GET gets the
503 because only the holder has the response: asking it again later is the client's one way
to it. Found silent, the holder fails its beats: what follows gets the 503.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from collections.abc import Callable, Iterator, Sequence
from urllib.parse import quote

import aiohttp
from multidict import CIMultiDict
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from yarl import URL

from kvpool.core.fair_lru import FairLru
from kvpool.router.replicas import Replica, ReplicaSet, read_up_to
from kvpool.router.response_ids import SCAN_BYTES, response_id_in, usable_id
from kvpool.router.upstream import RETRY_AFTER_SECONDS, SKIP_AUTO_HEADERS
from kvpool.server.json_body import json_bool
from kvpool.server.middleware import APIError
from kvpool.server.tenant import tenant_of_headers

__all__ = ["DEFAULT_MAX_RESPONSE_IDS", "HolderDown", "PREVIOUS", "RESPONSES_PATH",
           "ResponseAffinity"]

# NOTE(id-digest), tracemalloc: 17 MB whatever the ids (30 MB told no tenants with every id
# NOTE(contested)), 58 MB at the worst, one id per tenant (a shelf each: fair_lru.py)
DEFAULT_MAX_RESPONSE_IDS = 100_000
DEFAULT_LOOKUP_TIMEOUT = 0.5  # seconds one replica may take to say whether it holds an id
DEFAULT_MAX_LOOKUPS = 32  # searches in flight at once (each one GET per healthy replica)
RESPONSES_PATH = "/v1/responses"
SOURCES = ("answer", "search")  # where an id was learnt: a relayed answer, or a search
PREVIOUS = "previous_response_id"  # the field of a POST /v1/responses naming a response


class HolderDown(APIError):
    """NOTE(holder-down): the replica holding response ``response_id`` is down (``why``); the
    router's error answer, and the endpoint picker's (kvpool/epp/service.py)."""

    def __init__(self, response_id: str, param: str | None,
                 why: str = "is down (it fails its health checks)") -> None:
        super().__init__(503, f"the replica holding response '{response_id}' {why}; retry "
                         "later (a replica that restarted has lost the responses it stored)",
                         param=param, code="response_unavailable",
                         headers={"Retry-After": RETRY_AFTER_SECONDS})
        self.response_id = response_id


class ResponseAffinity:
    """Response id -> the URL of the replica that answered it, bounded, plus the search."""

    def __init__(self, max_ids: int = DEFAULT_MAX_RESPONSE_IDS, *,
                 timeout: float = DEFAULT_LOOKUP_TIMEOUT,
                 max_lookups: int = DEFAULT_MAX_LOOKUPS,
                 tenant_header: str | None = None, keyed: bool = False) -> None:
        """``tenant_header``, ``keyed``: the replicas' identity rule (module docstring;
        neither: the router knows no tenants)."""
        if max_ids < 1 or timeout <= 0 or max_lookups < 0:
            raise ValueError("response affinity: use max_ids >= 1, timeout > 0 seconds and "
                             "max_lookups >= 0")
        self.max_ids = max_ids
        self.timeout = timeout
        self.max_lookups = max_lookups
        self.tenant_header = tenant_header or None
        self.keyed = keyed
        self.blind = self.tenant_header is None and not keyed  # told no tenants
        self._ids: FairLru[str] = FairLru(max_ids)  # id -> URL, NOTE(fair-lru), NOTE(id-digest)
        self._contested: set[str] = set()  # NOTE(contested): ids the map holds, when blind
        self._salt = secrets.token_bytes(16)  # NOTE(id-digest): this process's digest key
        self.searching = 0  # searches in flight
        self.waiting = 0  # follow-ups waiting for a search slot (NOTE(search-share))
        self.searches = 0  # searches started (not a metric: NOTE(tenant); tests read it)
        self.learnt = dict.fromkeys(SOURCES, 0)  # ids learnt, by SOURCES
        self._flying: dict[str, int] = {}  # NOTE(search-share): searches in flight, by tenant
        self._asking: dict[str, int] = {}  # follow-ups searching or waiting to, by tenant
        self._freed = asyncio.Event()  # set (and replaced) whenever a search ends

    def __len__(self) -> int:
        return len(self._ids)

    def tenant(self, headers: Sequence[tuple[str, str]]) -> str | None:
        """The tenant of a request with the forwarded ``headers``: "" for all when the router
        knows none; None when the replicas refuse its identity (a tenant header repeated or
        too long: their 400), which is neither searched for nor learnt."""
        if self.blind:
            return ""
        try:
            return tenant_of_headers(CIMultiDict(headers), self.tenant_header,
                                     keyed=self.keyed)
        except APIError:
            return None

    def learner(self, headers: Sequence[tuple[str, str]],
                body: object = None) -> Callable[[str, Replica], None]:
        """``learn`` for the answers to a request with the forwarded ``headers`` and, for a
        creation, its decoded ``body``: one with ``"store": false`` teaches nothing
        (NOTE(unstored))."""
        unstored = isinstance(body, dict) and json_bool(body.get("store")) is False
        tenant = None if unstored else self.tenant(headers)
        return lambda rid, replica: self.learn(rid, replica, tenant=tenant)

    def learn(self, response_id: str, replica: Replica, source: str = "answer", *,
              tenant: str | None = "") -> None:
        """``tenant``'s ``replica`` holds ``response_id`` (the latest claim wins; told no
        tenants, a second replica's claim makes it NOTE(contested))."""
        if tenant is None:
            return
        tenant, key = self._keys(tenant, response_id)
        if self.blind and self._ids.get(tenant, key) not in (None, replica.url):
            self._contested.add(key)
        for _, gone, _ in self._ids.put(tenant, key, replica.url):
            self._contested.discard(gone)
        self.learnt[source] += 1

    def _keys(self, tenant: str, response_id: str) -> tuple[str, str]:
        """NOTE(id-digest): the map's keys of ``tenant`` and of its ``response_id``."""
        return self._digest(tenant), self._digest(response_id)

    def _digest(self, text: str) -> str:
        # surrogatepass: a lone surrogate (JSON "\ud800", a header's undecodable byte) is
        # digested, not an error
        return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16,
                               key=self._salt).hexdigest()

    def owner_url(self, response_id: str, tenant: str = "") -> str | None:
        """The URL the map holds for ``tenant``'s ``response_id`` (a use: it becomes the
        tenant's newest): None when it holds none, or a NOTE(contested) one."""
        tenant, key = self._keys(tenant, response_id)
        url = self._ids.get(tenant, key)
        return None if self.blind and key in self._contested else url

    async def owner(self, response_id: object, replicas: ReplicaSet,
                    session: aiohttp.ClientSession, headers: list,
                    among: Callable[[Replica], bool] | None = None,
                    param: str | None = None) -> Replica | None:
        """The healthy replica holding the response a request names (``response_id``, what a
        client sent: anything), None when the map and the search know none; HolderDown
        (``param``: the field that named it) when the map's is one ``among`` takes that fails
        its health beats (NOTE(holder-down)). ``among``: only the replicas it takes are
        answered or searched (NOTE(search-among))."""
        rid, tenant = usable_id(response_id), self.tenant(headers)
        cands = [r for r in replicas.healthy() if among is None or among(r)]
        if rid is None or tenant is None:
            return None
        url = self.owner_url(rid, tenant)
        known = replicas.find(url) if url is not None else None
        if known is not None and (among is None or among(known)):
            if not known.healthy:
                raise HolderDown(rid, param)
            return known
        if not cands:
            return None
        _count(self._asking, tenant, 1)
        try:
            if not await self._slot(tenant):
                return None
            try:
                self.searches += 1
                latest = self._ids.get(*self._keys(tenant, rid))  # NOTE(contested)'s latest
                found = await self._search(rid, cands, session, headers, latest)
            finally:
                self.searching -= 1
                _count(self._flying, tenant, -1)
            if found is not None:
                self.learn(rid, found, "search", tenant=tenant)
            return found
        finally:
            _count(self._asking, tenant, -1)
            self._wake()  # a slot, or a larger share, for those waiting

    def _wake(self) -> None:
        self._freed.set()
        self._freed = asyncio.Event()

    async def _slot(self, tenant: str) -> bool:
        """NOTE(search-share): a search slot taken for ``tenant``, waiting up to ``timeout``
        for one; False when none came. NOTE(slot-cancel): on Python 3.11 ``wait_for`` returns
        when its task is cancelled in the step its wait finished (CPython gh-86296): a
        follow-up whose client left as a slot freed searched and was relayed for nobody."""
        if self.max_lookups == 0:
            return False
        deadline = asyncio.get_running_loop().time() + self.timeout
        self.waiting += 1
        try:
            while (self.searching >= self.max_lookups or self._flying.get(tenant, 0)
                   >= max(1, self.max_lookups // len(self._asking))):
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0:
                    return False
                try:  # NOTE(slot-cancel): asyncio.timeout, not wait_for
                    async with asyncio.timeout(left):
                        await self._freed.wait()
                except TimeoutError:
                    return False
        finally:
            self.waiting -= 1
        self.searching += 1
        _count(self._flying, tenant, 1)
        return True

    async def _search(self, rid: str, cands: list[Replica], session: aiohttp.ClientSession,
                      headers: list, latest: str | None) -> Replica | None:
        """Of ``cands`` holding ``rid`` for the caller: the one at URL ``latest``, else the
        first."""
        held = await asyncio.gather(*(self._holds(r, rid, session, headers) for r in cands))
        holders = [r for r, yes in zip(cands, held) if yes]
        return next((r for r in holders if r.url == latest), holders[0] if holders else None)

    async def _holds(self, r: Replica, rid: str, session: aiohttp.ClientSession,
                     headers: list) -> bool:
        """Whether ``r`` answers the caller's GET of response ``rid`` with 200 and that
        response (NOTE(owner-proof); bounded)."""
        path = f"{RESPONSES_PATH}/{quote(rid, safe='')}"  # any id is one path segment
        try:
            async with r.lease(counted=False), session.get(
                    URL(r.url + path, encoded=True), headers=headers,
                    skip_auto_headers=SKIP_AUTO_HEADERS,
                    timeout=aiohttp.ClientTimeout(total=self.timeout)) as resp:
                if resp.status != 200:
                    return False
                head, _ = await read_up_to(resp.content.readany, SCAN_BYTES)
                return response_id_in(head) == rid
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError):
            return False  # late, down or confused: not the owner as far as this search goes

    def collect(self) -> Iterator[Metric]:
        """The map's figures for the router's /metrics (a prometheus_client collector)."""
        ids = GaugeMetricFamily("kvpool_router_response_ids",
                                "Response ids whose replica the router knows.")
        ids.add_metric([], len(self._ids))
        learnt = CounterMetricFamily("kvpool_router_response_ids_learnt",
                                     "Response ids learnt from 200 answers, by source "
                                     "(a relayed answer, or a search of the replicas).",
                                     labels=["source"])
        for source, n in self.learnt.items():
            learnt.add_metric([source], n)
        yield from (ids, learnt)


def _count(counts: dict[str, int], tenant: str, by: int) -> None:
    """Add ``by`` to ``tenant``'s count, dropping a tenant at 0 (memory follows requests)."""
    n = counts.get(tenant, 0) + by
    if n:
        counts[tenant] = n
    else:
        counts.pop(tenant, None)
