"""Reading a server's /metrics: one parsed scrape, and the figures the stress report needs.

``kvpool_free_blocks{tier}`` counts content-free blocks only; evictable prefix-cached blocks (ref
0, content kept) are neither free nor in use. Blocks *in use* (ref >= 1) are what a leak leaves
behind, so the leak figure is ``kvpool_cache_usage_ratio{tier} * kvpool_blocks{tier}`` (the pool's
``num_used / num_blocks``), cross-checked against ``blocks - free - cached >= 0``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

__all__ = ["ENGINE_SERIES", "MetricsScrape", "scrape", "wait_drained"]

# NOTE(absent): the series the leak, drain and invariant verdicts read. ``get`` reads an absent
# sample as 0, so a /metrics without them (a router, a proxy, another server) would pass every
# must-be-zero check without saying anything: the verdict counts them missing instead.
ENGINE_SERIES = ("kvpool_blocks", "kvpool_free_blocks", "kvpool_cache_usage_ratio",
                 "kvpool_requests", "kvpool_requests_in_flight",
                 "kvpool_invariant_violations_total")


@dataclass(frozen=True, slots=True)
class MetricsScrape:
    """sample name -> {sorted label items: value}; plus the time it was taken."""

    samples: dict[str, dict[tuple, float]]
    at: float

    @classmethod
    def parse(cls, text: str) -> MetricsScrape:
        out: dict[str, dict[tuple, float]] = {}
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
        return cls(out, time.monotonic())

    def missing(self, names: tuple[str, ...] = ENGINE_SERIES) -> list[str]:
        """The ``names`` this scrape holds no sample of (NOTE(absent))."""
        return [n for n in names if not self.samples.get(n)]

    def get(self, name: str, **labels: str) -> float:
        """One sample (0.0 when absent)."""
        return self.samples.get(name, {}).get(tuple(sorted(labels.items())), 0.0)

    def total(self, name: str) -> float:
        """Sum over every label set of ``name``."""
        return sum(self.samples.get(name, {}).values())

    def by_label(self, name: str, label: str) -> dict[str, float]:
        return {dict(k).get(label, ""): v for k, v in self.samples.get(name, {}).items()}

    def delta_by_label(self, earlier: MetricsScrape, name: str, label: str) -> dict[str, int]:
        """Per value of ``label``: how much counter ``name`` grew since ``earlier``."""
        before = earlier.by_label(name, label)
        return {k: int(v - before.get(k, 0)) for k, v in self.by_label(name, label).items()}

    # ---------------------------------------------------------------- figures
    def used_blocks(self, tier: str) -> int:
        return round(self.get("kvpool_cache_usage_ratio", tier=tier)
                     * self.get("kvpool_blocks", tier=tier))

    def usage(self, tier: str) -> float:
        return self.get("kvpool_cache_usage_ratio", tier=tier)

    def requests_in_flight(self) -> int:
        return int(self.total("kvpool_requests"))

    def queue_slots(self) -> int:
        """``kvpool_requests_in_flight``: what --max-queue counts (admitted, unfinished by
        the engine) -- a stream nobody reads must not keep its slot once the engine is done."""
        return int(self.get("kvpool_requests_in_flight"))

    def invariant_violations(self) -> int:
        return int(self.get("kvpool_invariant_violations_total"))

    def pool_figures(self) -> dict[str, int]:
        out = {}
        for tier in ("device", "host"):
            out[f"{tier}_blocks"] = int(self.get("kvpool_blocks", tier=tier))
            out[f"{tier}_free_blocks"] = int(self.get("kvpool_free_blocks", tier=tier))
            out[f"{tier}_cached_blocks"] = int(self.get("kvpool_cached_blocks", tier=tier))
            out[f"{tier}_used_blocks"] = self.used_blocks(tier)
        return out


async def scrape(session: aiohttp.ClientSession, url: str,
                 timeout: float = 10.0) -> MetricsScrape:
    async with session.get(url + "/metrics",
                           timeout=aiohttp.ClientTimeout(total=timeout)) as r:
        if r.status != 200:
            raise RuntimeError(f"/metrics answered {r.status}")
        return MetricsScrape.parse(await r.text())


async def wait_drained(session: aiohttp.ClientSession, url: str,
                       timeout: float = 30.0) -> tuple[MetricsScrape, float]:
    """Poll /metrics until no request is in flight and no block is in use in either pool (or
    ``timeout`` passes); returns the last scrape and the seconds waited."""
    t0 = time.monotonic()
    while True:
        m = await scrape(session, url)
        idle = (m.requests_in_flight() == 0 and m.queue_slots() == 0
                and m.used_blocks("device") == 0
                and m.used_blocks("host") == 0)
        waited = time.monotonic() - t0
        if idle or waited >= timeout:
            return m, waited
        await asyncio.sleep(0.1)
