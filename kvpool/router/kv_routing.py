"""EventRouting: ``kvpool router --kv-events``, prefix hits from the replicas' KV events.

Instead of a lookup round trip to every replica per request, the router follows each
replica's event stream (kv_feed.py: one BlockIndex per replica) and scores a request itself::

    keys = PromptKeys(the replicas' hash spec).keys(body)   tokenize + hash, once (kv_prompt.py)
    hits[i] = min(leading run of keys in replica i's index, admission cap) * block_size
    loads[i] = requests this router has in flight to replica i, or what the replica's last
               /health reported when more (replicas.py NOTE(load))

then the same ``choose`` (scoring.py) the lookup policy uses; the chosen replica is expected to
hold the prompt's blocks for ``PENDING_TTL`` seconds (kv_index.py NOTE(pending)). A request
whose keys the router cannot compute (kv_prompt.py NOTE(agreement)) goes the lookup way; a
replica whose feed is not caught up (just connected, events off) scores 0 hits.

NOTE(specs): the keys follow each replica's own hash spec (its info's hash, block size,
tokenizer, template, tenant rule: ``spec_of``), one PromptKeys per spec the fleet has now, and
a request is hashed once per spec among its candidates. Before, the first spec seen was kept
for the router's life: after a rolling restart onto a new block size or model, or in a fleet
halfway through one, every replica of the other spec scored 0 hits, and nothing said so.

A replica whose PUB connects out to an external indexer (its route says
``"endpoint_mode": "connect"``, kvpool/events/publisher.py NOTE(pub-connect)) has no stream to
follow, nor has one whose kv_events info fails the router's checks (kv_prompt.info_problem, an
endpoint ZMQ refuses, one off the replica's own host: kv_endpoints.py NOTE(own-host)): a
request it may take goes the lookup way, every candidate asked.

Every ``refresh_interval`` seconds the feeds follow the replica set (replicas added or removed
at runtime get or lose theirs) and each replica's GET /v1/kvpool/kv_events is asked again, so
a replica restarted on new ports is followed (its index starts over); one on the same ports
is caught by its sequence numbers starting again at 0.

NOTE(hash-off-loop): the keys of a body larger than HASH_INLINE_BYTES are computed on one
worker thread, as a large body is decoded (relayed.py NOTE(gil)), and a chat's always are, on
the render worker within a time budget (kv_render.py NOTE(render-budget): the template is the
replica's program): a text prompt's tokenization or a chat's template rendering grows with the
prompt (~0.2 s for 600k characters, ~0.4 s for 20k messages on this 2-core box), and on the
event loop that was a stall of every stream and /health the router served. On the thread the
loop's longest wait was 7-8 ms for the same two (the GIL changes hands between them). The
bound is lower than the decoding's (64 KiB): 64 KiB of text took 26 ms to tokenize, of
messages 62 ms to render; 8 KiB is a few ms, kept inline.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import aiohttp
import zmq.asyncio
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from kvpool.router.kv_feed import FEED_COUNTS, ReplicaFeed
from kvpool.router.kv_index import DEFAULT_MAX_BLOCKS
from kvpool.router.kv_prompt import PromptKeys
from kvpool.router.kv_render import RENDER_BUDGET, SKIPPED, RenderGuard
from kvpool.router.replicas import Replica, ReplicaSet

__all__ = ["EventRouting"]

log = logging.getLogger("kvpool.router")
DEFAULT_REFRESH = 2.0  # seconds between two asks of a replica's kv_events route
PENDING_TTL = 2.0  # seconds a routed prompt's blocks count as held before an event confirms
HASH_INLINE_BYTES = 8 * 1024  # larger bodies are hashed on a worker thread (NOTE(hash-off-loop))
CATCH_UP_WAIT = 3.0  # seconds the router's start waits for the feeds' first replay
RELOAD_AFTER = 30.0  # seconds before a tokenizer that failed to load is tried again
_SPEC_KEYS = ("hash", "block_size", "tenant_namespaced", "tenant_header", "tokenizer",
              "model_names", "max_model_len", "chat_template")


def spec_of(info: dict[str, Any]) -> str:
    """NOTE(specs): what of a replica's kv_events info its prompt keys depend on, as one
    string (replicas that agree on it share one PromptKeys)."""
    return json.dumps([info.get(k) for k in _SPEC_KEYS], sort_keys=True, default=str)


class EventRouting:
    """The feeds of a ReplicaSet and the per-request scoring over their indexes."""

    def __init__(self, replicas: ReplicaSet, *, max_blocks: int = DEFAULT_MAX_BLOCKS,
                 refresh_interval: float = DEFAULT_REFRESH, api_key: str | None = None,
                 any_host: bool = False, render_budget: float = RENDER_BUDGET) -> None:
        """``api_key``: the replicas' --api-key, sent when asking where their events are;
        ``any_host``: follow event endpoints off a replica's own host (kv_endpoints.py
        NOTE(own-host)); ``render_budget``: seconds a chat render may take (kv_render.py
        NOTE(render-budget))."""
        self.any_host = any_host
        self.ctx = zmq.asyncio.Context()
        self.auth = {"Authorization": f"Bearer {api_key}"} if api_key else None
        self.replicas = replicas
        self.max_blocks = max_blocks
        self.feeds: dict[str, ReplicaFeed] = {}
        self._sync()
        self.refresh_interval = refresh_interval
        self.specs: dict[str, PromptKeys] = {}  # NOTE(specs): the fleet's, by spec_of
        self.keys: PromptKeys | None = None  # the newest spec's (a uniform fleet's only one)
        self.fallbacks = 0  # requests placed by lookups instead (monotonic)
        # NOTE(own-tasks): the refresh loop and the tokenizer loads running; a task leaves
        # when it ends (a failing load is tried again every RELOAD_AFTER for the router's life)
        self._tasks: set[asyncio.Task] = set()
        self._spec_at: dict[str, str] = {}  # replica URL -> spec_of its info, at the refresh
        self.off_loop = 0  # prompts hashed on the worker thread (NOTE(hash-off-loop))
        self._hashing = ThreadPoolExecutor(1, thread_name_prefix="router-hash")
        self.renders = RenderGuard(render_budget)  # chats' keys (NOTE(render-budget))

    async def start(self, session: aiohttp.ClientSession) -> None:
        """Follow every replica that publishes; wait (bounded) until their feeds caught up,
        so the first requests are scored on what the replicas already cache."""
        await self.refresh(session)
        loop = asyncio.get_running_loop()
        end = loop.time() + CATCH_UP_WAIT
        while loop.time() < end and not all(
                f.live for f in self.feeds.values() if f.info.get("enabled")):
            await asyncio.sleep(0.01)
        self._run(self._refreshing(session), "router-kv-events")

    def _run(self, coro: Any, name: str) -> None:
        """NOTE(own-tasks): ``coro`` as a task held until it ends."""
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _sync(self) -> None:
        """One feed per replica of the set now (replicas come and go: membership.py)."""
        now = {r.url: r for r in self.replicas.replicas}
        for url in [u for u in self.feeds if u not in now]:
            self.feeds.pop(url).close()
        for url, r in now.items():
            if url not in self.feeds:
                self.feeds[url] = ReplicaFeed(r, self.ctx, self.max_blocks,
                                              any_host=self.any_host)

    async def refresh(self, session: aiohttp.ClientSession) -> None:
        self._sync()
        await asyncio.gather(*(f.refresh(session, self.auth) for f in self.feeds.values()))
        self._spec_at = {url: spec_of(f.info) for url, f in self.feeds.items()
                         if f.info.get("enabled")}  # read per request by score
        now = {self._spec_at[url]: self.feeds[url].info for url in self._spec_at}
        for spec, info in now.items():  # NOTE(specs): a spec no replica has any more goes
            if spec not in self.specs:
                self.specs[spec] = self.keys = PromptKeys(info)
        for spec in [s for s in self.specs if s not in now]:
            del self.specs[spec]
        if self.keys not in self.specs.values():  # its replicas left: the newest left
            self.keys = next(reversed(self.specs.values()), None)

    async def _refreshing(self, session: aiohttp.ClientSession) -> None:
        logged = False
        while True:
            await asyncio.sleep(self.refresh_interval)
            try:
                await self.refresh(session)
            except Exception:  # noqa: BLE001 - a bug here must not stop every feed's refresh
                if not logged:
                    logged = True
                    log.exception("router: refreshing the KV event feeds failed (retrying)")

    async def score(self, body: dict | None, cands: Sequence[Replica],
                    headers: list[tuple[str, str]], size: int = 0
                    ) -> tuple[list[int], dict[str, list[bytes]]] | None:
        """(hit tokens per candidate, the prompt's block hashes per candidate URL under its
        spec), or None when this request needs the lookups. ``body``: the decoded request
        (None: too large to decode here); ``headers``: the forwarded ones (the tenant,
        kv_prompt.py); ``size``: the body's bytes (NOTE(hash-off-loop))."""
        feeds = [self.feeds.get(r.url) for r in cands]
        if any(f.unusable for f in feeds if f):  # events to an external indexer
            self.fallbacks += 1  # (NOTE(pub-connect)), or info unusable
            return None
        specs = [(self._spec_at.get(r.url) or spec_of(f.info)) if f is not None and f.live
                 else None for r, f in zip(cands, feeds)]
        got: dict[str, tuple[list[bytes], int]] = {}
        for spec in dict.fromkeys(s for s in specs if s is not None):
            keys = self.specs.get(spec)
            hashed = await self._keys(keys, spec, body, headers, size) if keys else None
            if hashed is SKIPPED:  # NOTE(render-budget): its replicas score 0 hits
                continue
            if hashed is None:
                self.fallbacks += 1
                if keys is not None:
                    self._load_later(keys)
                return None
            got[spec] = hashed
        if not got and self.keys is None:
            self.fallbacks += 1  # nobody publishes yet
            return None
        now, out, hashes = time.monotonic(), [], {}
        for r, f, spec in zip(cands, feeds, specs):
            if spec is None or spec not in got:
                out.append(0)
                continue
            keys, (chain, limit) = self.specs[spec], got[spec]
            out.append(min(f.index.hits(chain, now), limit) * keys.block_size)
            hashes[r.url] = chain
        return out, hashes

    def _load_later(self, keys: PromptKeys) -> None:
        """NOTE(lazy-tokenizer): the tokenizer (and the torch import its package brings,
        seconds of CPU) loads off the loop on the first text or chat prompt, never when every
        prompt comes as token ids; until then, lookups place them."""
        if keys.wants_parser and keys.parser is None and not keys.loading:
            keys.loading = True
            self._run(self._load(keys), "router-tokenizer")

    async def _load(self, keys: PromptKeys) -> None:
        """``keys.load_parser`` on a thread; NOTE(load-fails): a failure (a --chat-template
        file not where the router runs) is said once per spec, with the fix, and tried again
        after RELOAD_AFTER seconds; it used to go unsaid, every text and chat prompt placed by
        lookups for the router's life."""
        try:
            await asyncio.to_thread(keys.load_parser)
        except Exception as exc:  # noqa: BLE001 - any failure: lookups place the prompts
            if not keys.failure_said:
                keys.failure_said = True
                log.warning("router: the replicas' tokenizer or chat template cannot be loaded "
                            "here (%s): text and chat prompts are placed by lookups; make the "
                            "replicas' model directory and --chat-template readable where the "
                            "router runs (tried again every %.0f s)", exc, RELOAD_AFTER)
        if keys.parser is None:  # failed, or not readable here (load_parser said so): again later
            asyncio.get_running_loop().call_later(RELOAD_AFTER, _reload, keys)
        else:  # chats may come now: their render process ready before the first waits on it
            self.renders.warm()

    async def _keys(self, keys: PromptKeys, spec: str, body: dict | None,
                    headers: list[tuple[str, str]], size: int) -> Any:
        """``keys.keys(body, headers)``: a chat's on the render worker, within its budget
        (kv_render.py NOTE(render-budget): SKIPPED past it), another large body's on the
        hashing thread (NOTE(hash-off-loop))."""
        if keys.renders(body):
            urls = [url for url, s in self._spec_at.items() if s == spec]
            return await self.renders.keys(keys, body, headers, size, urls)  # type: ignore
        if size <= HASH_INLINE_BYTES:
            return keys.keys(body, headers)
        self.off_loop += 1
        return await asyncio.get_running_loop().run_in_executor(
            self._hashing, keys.keys, body, headers)

    def routed(self, replica: Replica, chains: dict[str, list[bytes]]) -> None:
        """``replica`` got a request whose block hashes under each candidate's spec are
        ``chains`` (score's): expect its own there for a while (kv_index.py NOTE(pending)),
        until its events confirm or remove them."""
        feed = self.feeds.get(replica.url)
        if feed is not None:
            feed.index.expect(chains.get(replica.url, ()), time.monotonic() + PENDING_TTL)

    def collect(self) -> Iterator[Metric]:
        """The feeds' figures for the router's /metrics (a prometheus_client collector)."""
        events = CounterMetricFamily("kvpool_router_kv_events",
                                     "KV event batches by what the router did with them.",
                                     labels=["replica", "kind"])
        blocks = GaugeMetricFamily("kvpool_router_kv_index_blocks",
                                   "Block hashes the router knows a replica caches.",
                                   labels=["replica"])
        for f in self.feeds.values():  # labelled as replicas.py NOTE(replica-series)
            for kind in FEED_COUNTS:
                events.add_metric([f.replica.name, kind], f.counts[kind])
            blocks.add_metric([f.replica.name], len(f.index))
        fallbacks = CounterMetricFamily("kvpool_router_lookup_fallbacks",
                                        "Requests placed by lookups: the router could not "
                                        "hash them itself, or a candidate's KV events "
                                        "cannot be followed (an external indexer, info "
                                        "the router cannot use).")
        fallbacks.add_metric([], self.fallbacks)
        yield from (events, blocks, fallbacks)

    async def close(self) -> None:
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        for f in self.feeds.values():
            f.close()
        self.ctx.destroy(linger=0)
        self._hashing.shutdown(wait=False, cancel_futures=True)
        self.renders.close()


def _reload(keys: PromptKeys) -> None:
    """NOTE(lazy-tokenizer): the next text or chat prompt tries ``keys``' load again."""
    keys.loading = False
