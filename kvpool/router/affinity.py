"""Response affinity: which replica holds a Responses API response (docs/architecture.md,
Router).

A ``kvpool serve`` keeps its stored responses in its own process (per tenant), so a follow-up
naming one (``previous_response_id``, ``GET /v1/responses/{id}``) must reach the replica that
made it: any other answers 404. The router learns the owner of each response id from the
answers it relays (response_ids.py: the JSON body's ``id``, or the first SSE event carrying
``response.id``) and sends such a follow-up to that replica first.

The map holds ids and replica URLs only (nothing of a prompt or an answer), at most
``max_ids`` of them, least recently used out; an id learnt again (two replicas claim it, or
one answers it again) belongs to the latest.

An id the map does not hold (the router restarted, the id was evicted, the owner is not
healthy now) is looked for: ``GET /v1/responses/{id}`` to every healthy replica in parallel,
with the caller's own headers, each bounded by ``timeout``, at most ``max_lookups`` such
searches at once (past that the search is skipped); the first replica in the healthy order
that answers 200 is the owner (and learnt).

NOTE(owner-proof): a 200 counts only when its body is that response: the start of the answer
(response_ids.py's SCAN_BYTES) names the id searched for. A replica that answers 200 to any
path (a catch-all route, an HTML page from something else behind its URL, a bug) used to win
every search it was first in the healthy order for, and drew every follow-up it could not
serve (each a 404 there).

NOTE(tenant): the map is keyed by id alone, but only ever chooses where a request goes: what
the client gets is the answer of a replica, which checks the caller's tenant itself. Another
tenant's id reaches its owner and gets the owner's own 404, as an unknown id gets the 404 of
the replica it lands on; an owner that is down or fails is tried no harder than any replica,
and the next one's 404 is what the server says of a response it cannot reach. So the router
never answers by its map (no 403, no 404 of its own), its logs name no id, and its metrics
count ids learnt from 200 answers (the caller's own) and the map's size, nothing a request
for another tenant's id moves. What is left: a known id skips the search, so it answers one
parallel GET sooner; an id is 128 random bits, so only someone already holding it can ask.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Iterator
from urllib.parse import quote

import aiohttp
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from yarl import URL

from kvpool.router.replicas import Replica, ReplicaSet, read_up_to
from kvpool.router.response_ids import SCAN_BYTES, response_id_in, usable_id
from kvpool.router.upstream import SKIP_AUTO_HEADERS

__all__ = ["DEFAULT_MAX_RESPONSE_IDS", "RESPONSES_PATH", "ResponseAffinity"]

DEFAULT_MAX_RESPONSE_IDS = 100_000  # ~18 MB of kvpool serve ids, ~40 MB at MAX_ID_CHARS
DEFAULT_LOOKUP_TIMEOUT = 0.5  # seconds one replica may take to say whether it holds an id
DEFAULT_MAX_LOOKUPS = 32  # searches in flight at once (each one GET per healthy replica)
RESPONSES_PATH = "/v1/responses"
SOURCES = ("answer", "search")  # where an id was learnt: a relayed answer, or a search


class ResponseAffinity:
    """Response id -> the URL of the replica that answered it, bounded, plus the search."""

    def __init__(self, max_ids: int = DEFAULT_MAX_RESPONSE_IDS, *,
                 timeout: float = DEFAULT_LOOKUP_TIMEOUT,
                 max_lookups: int = DEFAULT_MAX_LOOKUPS) -> None:
        if max_ids < 1 or timeout <= 0 or max_lookups < 0:
            raise ValueError("response affinity: use max_ids >= 1, timeout > 0 seconds and "
                             "max_lookups >= 0")
        self.max_ids = max_ids
        self.timeout = timeout
        self.max_lookups = max_lookups
        self._owners: OrderedDict[str, str] = OrderedDict()
        self.searching = 0  # searches in flight
        self.searches = 0  # searches started (not a metric: NOTE(tenant); tests read it)
        self.learnt = dict.fromkeys(SOURCES, 0)  # ids learnt, by SOURCES

    def __len__(self) -> int:
        return len(self._owners)

    def learn(self, response_id: str, replica: Replica, source: str = "answer") -> None:
        """``replica`` holds ``response_id`` (the latest claim wins)."""
        self._owners[response_id] = replica.url
        self._owners.move_to_end(response_id)
        while len(self._owners) > self.max_ids:
            self._owners.popitem(last=False)
        self.learnt[source] += 1

    def owner_url(self, response_id: str) -> str | None:
        """The URL the map holds for ``response_id`` (a use: it moves to the newest end)."""
        url = self._owners.get(response_id)
        if url is not None:
            self._owners.move_to_end(response_id)
        return url

    async def owner(self, response_id: object, replicas: ReplicaSet,
                    session: aiohttp.ClientSession, headers: list) -> Replica | None:
        """The healthy replica to try first for a request naming ``response_id`` (what a
        client sent: anything), None when the map and the search know none."""
        rid = usable_id(response_id)
        if rid is None:
            return None
        url = self.owner_url(rid)
        known = replicas.find(url) if url is not None else None
        if known is not None and known.healthy:
            return known
        if self.searching >= self.max_lookups:
            return None
        self.searching += 1
        self.searches += 1
        try:
            return await self._search(rid, replicas.healthy(), session, headers)
        finally:
            self.searching -= 1

    async def _search(self, rid: str, cands: list[Replica], session: aiohttp.ClientSession,
                      headers: list) -> Replica | None:
        held = await asyncio.gather(*(self._holds(r, rid, session, headers) for r in cands))
        found = next((r for r, yes in zip(cands, held) if yes), None)
        if found is not None:
            self.learn(rid, found, "search")
        return found

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
        ids.add_metric([], len(self._owners))
        learnt = CounterMetricFamily("kvpool_router_response_ids_learnt",
                                     "Response ids learnt from 200 answers, by source "
                                     "(a relayed answer, or a search of the replicas).",
                                     labels=["source"])
        for source, n in self.learnt.items():
            learnt.add_metric([source], n)
        yield from (ids, learnt)
