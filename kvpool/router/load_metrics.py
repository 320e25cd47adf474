"""A replica's load: what its ``/health`` reports, else its Prometheus ``/metrics``.

NOTE(metrics-load): kvpool serve's 200 /health carries its running and waiting requests
(replicas.py NOTE(load)); vLLM's and SGLang's answer with an empty body, so behind the router
(or the ``kvpool epp`` picker) such a replica's load was only the requests this router sent it.
Their Prometheus /metrics has the same two figures, the gauges the Gateway API Inference
Extension's model server protocol names (and llm-d's scheduler reads)::

    vLLM    vllm:num_requests_running + vllm:num_requests_waiting
    SGLang  sglang:num_running_reqs   + sglang:num_queue_reqs

each summed over its series (one per model name, engine or rank label). A beat whose 200
/health reports no load (an empty, non-JSON body, or JSON without ``num_running`` /
``num_waiting``) starts a scrape of that replica's /metrics unless one is still in flight: at
most one per replica, never more often than its beats, and apart from them, so a slow /metrics
never delays a beat (liveness). A scrape is bounded like the replica's other answers
(NOTE(small-answers)): ``METRICS_TIMEOUT``, and ``MAX_METRICS_BYTES`` read; only the lines of
those four gauges reach the parser (prometheus_client's, the exposition format's reference
implementation), so a long /metrics costs one split, not a parse of every histogram bucket.
A /metrics that is absent (404 and the like), longer than the bound, not the text format, or
without either pair leaves the load at 0 (the router's own in-flight requests: the behaviour
before), logged once per replica with what to do. The KV cache usage gauges are not read: the
load guard compares requests (scoring.py).

NOTE(scrape-failed): a scrape that fails (no answer within ``METRICS_TIMEOUT``, a 5xx, a
connection refused or broken off) says nothing about the load, and a replica too busy to
answer is the one most likely loaded: its load stays the last one read (0 only if none was
ever read), never reset to 0, which would make it the least loaded replica for the load
guard. It is logged once when a replica's scrapes start failing, and once when they answer
again; a replica failing again is logged again.

NOTE(replica-churn): what was said of a replica (``logged``, ``failing``; its beats'
``beat_bugs``) is kept per URL so that it is said once, not once a beat; a router whose
replicas come and go (autoscaling, pod IPs that change) kept an entry for every URL it ever
had. One URL, one voice (``ReplicaSet``):

- ``forget`` drops a URL's entries and ends its scrapes in flight when the URL joins as a new
  member, and when a removed replica's beats end while no member has its URL. A URL that
  comes back is said again, as a new replica, also when it comes back before the replica
  removed from it has drained (a pod replaced on the same IP): nothing said of the old
  one is inherited.
- A removed replica is beaten while requests it runs are in flight (they end if it goes
  silent: replicas.py NOTE(liveness)), but while a member has its URL again it says nothing
  of its health (no "unhealthy"/"healthy" line, no ``mark_down`` line) and is not scraped
  (its load steers nothing): the member's beats speak for the URL, so one /health failure
  is said once, not once per Replica of that URL. While no member has its URL, a draining
  replica's beats say what they find, as a member's do.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from kvpool.router.scoring import whole_counts

if TYPE_CHECKING:
    from kvpool.router.replica import Replica

__all__ = ["ENGINE_GAUGES", "MAX_METRICS_BYTES", "METRICS_TIMEOUT", "MetricsLoad",
           "load_from_metrics", "load_of", "read_up_to", "reports_load"]

log = logging.getLogger("kvpool.router")
# seconds one scrape may take, read whole: apart from the beats (never delaying one), so it
# may take longer than a /health answer; vLLM renders /metrics per request, slower when busy
METRICS_TIMEOUT = 2.0

# (running, waiting) gauge names per engine, the first one a /metrics has wins
ENGINE_GAUGES = (("vllm:num_requests_running", "vllm:num_requests_waiting"),
                 ("sglang:num_running_reqs", "sglang:num_queue_reqs"))
# vLLM's /metrics is ~50-150 KB per engine (mostly histogram buckets): room for many engines
MAX_METRICS_BYTES = 1 << 20
_MAX_COUNT = 1 << 53
_NAMES = tuple(n for pair in ENGINE_GAUGES for n in pair)
_PREFIXES = tuple(n.encode() + end for n in _NAMES for end in (b"{", b" ", b"\t"))


def reports_load(health: object) -> bool:
    """Whether a decoded /health answer carries a load (kvpool serve's does, vLLM's and
    SGLang's empty body does not: NOTE(metrics-load))."""
    return isinstance(health, dict) and ("num_running" in health or "num_waiting" in health)


def load_of(health: object) -> int:
    """num_running + num_waiting of a decoded /health answer (0 when it reports none, or
    counts that are not whole: a string, a fraction, 1e999)."""
    counts = whole_counts(health, ("num_running", "num_waiting"), default=0)
    return sum(counts) if counts else 0


def load_from_metrics(body: bytes) -> int | None:
    """Running + waiting requests of a Prometheus text ``body`` (NOTE(metrics-load)), or
    None when it has neither engine's gauges, or they do not parse as counts."""
    lines = [ln for ln in body.split(b"\n") if ln.startswith(_PREFIXES)]
    sums: dict[str, float] = {}
    try:
        text = b"\n".join(lines).decode("utf-8") + "\n"
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in _NAMES:
                    sums[sample.name] = sums.get(sample.name, 0.0) + float(sample.value)
    except (ValueError, IndexError, TypeError):  # not UTF-8, not the exposition format
        return None
    for running, waiting in ENGINE_GAUGES:
        if running in sums or waiting in sums:
            total = sums.get(running, 0.0) + sums.get(waiting, 0.0)
            if not (math.isfinite(total) and 0 <= total <= _MAX_COUNT):
                return None
            return round(total)
    return None


async def read_up_to(readany: Callable[[], Awaitable[bytes]],
                     limit: int) -> tuple[bytes, bool]:
    """An answer's body up to ``limit`` bytes (or one read past it), by ``readany`` (its
    stream's: b"" at the end), and whether that is all of it."""
    parts: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = await readany()
        if not chunk:
            return b"".join(parts), True
        parts.append(chunk)
        size += len(chunk)
    return b"".join(parts), False


class _Failed(Exception):
    """A scrape that failed on the replica's side: a 5xx (NOTE(scrape-failed))."""


class MetricsLoad:
    """The scrapes in flight, one per replica at most, and what was logged about each."""

    def __init__(self, timeout: float = METRICS_TIMEOUT) -> None:
        self.timeout = timeout  # seconds one /metrics answer may take, read whole
        self.scrapes: dict[Replica, asyncio.Task] = {}
        self.logged: dict[str, set[str]] = {}  # replica URL -> what was said once of it
        self.failing: set[str] = set()  # replica URLs whose last scrape failed
        self.done = 0  # completed scrapes of all replicas (tests wait on it)
        self.failed = 0  # of them, the failed ones (NOTE(scrape-failed))

    def want(self, session: aiohttp.ClientSession, r: Replica) -> None:
        """Scrape ``r``'s /metrics into ``r.load`` unless a scrape of it is in flight."""
        if r in self.scrapes:
            return
        task = asyncio.create_task(self._scrape(session, r), name=f"router-metrics {r.url}")
        self.scrapes[r] = task
        task.add_done_callback(lambda _t: self.scrapes.pop(r, None))

    def forget(self, url: str) -> None:
        """Nothing said of ``url`` (NOTE(replica-churn)): end the scrapes in flight of every
        replica at it, drop what was said of it."""
        for r, task in list(self.scrapes.items()):
            if r.url == url:
                task.cancel()  # before it could mark the URL failing again
        self.logged.pop(url, None)
        self.failing.discard(url)

    async def close(self) -> None:
        tasks = list(self.scrapes.values())
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _scrape(self, session: aiohttp.ClientSession, r: Replica) -> None:
        try:
            load, why = await self._read(session, r)
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError, _Failed) as exc:
            self.done += 1
            self._failed(r, f"did not answer within {self.timeout:g} s"
                         if isinstance(exc, asyncio.TimeoutError) else
                         str(exc) if isinstance(exc, _Failed) else
                         f"failed ({type(exc).__name__})")
            return
        self.done += 1
        self._answers(r)
        r.load = 0 if load is None else load
        if load is None:
            self._once(r, why, logging.WARNING,
                       "replica %s: /health reports no load and its /metrics %s; the load "
                       "guard sees only this router's requests there. Serve vLLM's or "
                       "SGLang's Prometheus /metrics (SGLang: --enable-metrics)", r.url, why)
        else:
            self._once(r, "read", logging.INFO, "replica %s: load (running + waiting) read "
                       "from its /metrics, its /health reports none", r.url)

    async def _read(self, session: aiohttp.ClientSession, r: Replica
                    ) -> tuple[int | None, str]:
        """(the load, "") or (None, why the replica's /metrics has no usable load); _Failed,
        a timeout or a client error for a failed scrape (NOTE(scrape-failed))."""
        async with session.get(r.url + "/metrics", timeout=aiohttp.ClientTimeout(
                total=self.timeout)) as resp:
            r.hear()  # an answer: the replica is alive (replicas.py NOTE(liveness))
            if resp.status >= 500:
                raise _Failed(f"answered {resp.status}")
            if resp.status != 200:
                return None, f"answered {resp.status}"
            body, whole = await read_up_to(resp.content.readany, MAX_METRICS_BYTES)
        if not whole:
            return None, f"is longer than {MAX_METRICS_BYTES} bytes"
        load = load_from_metrics(body)
        if load is None:
            return None, "has neither engine's request gauges, or they do not parse"
        return load, ""

    def _failed(self, r: Replica, why: str) -> None:
        self.failed += 1
        if r.url not in self.failing:
            self.failing.add(r.url)
            log.warning("replica %s: its /metrics %s; its load stays %d, the last one read, "
                        "until a scrape answers (the load guard also counts this router's own "
                        "requests there). A replica too busy to answer /metrics in %g s is "
                        "likely overloaded or stalled: check its API server (time `curl "
                        "URL/metrics`); said again only after it answers and then fails",
                        r.url, why, r.load, self.timeout)

    def _answers(self, r: Replica) -> None:
        if r.url in self.failing:
            self.failing.discard(r.url)
            log.info("replica %s: its /metrics answers again", r.url)

    def _once(self, r: Replica, what: str, level: int, msg: str, *args: object) -> None:
        said = self.logged.setdefault(r.url, set())
        if what not in said:
            said.add(what)
            log.log(level, msg, *args)
