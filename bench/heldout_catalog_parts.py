"""bench.heldout's ``catalog_backfill`` shape, its world: a retail catalog of product records
(departments in catalog order, each record in sections: identity, offer, attributes,
description, specs), their versions as feeds and people edit them (prices and stock, data
fixes, launches, retirements), the shoppers' clock, and the generator's base that sends
requests. See bench/heldout_catalog_backfill.py's docstring for the numbers."""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable
from dataclasses import dataclass

from bench.heldout_fewshot import ClockedState, Segment, clipped_length
from bench.heldout_legal_parts import Versioned
from bench.heldout_meeting_parts import poisson

HOUR, DAY, MINUTE = 3600.0, 86400.0, 60.0
CATALOG = 10000  # records at scale 1.0 (x 0.85..1.15 by seed, at least 40)
DEPARTMENTS = 16  # Zipf(0.8) sizes by a random rank
POPULARITY = 0.9  # Zipf exponent of how often shoppers and jobs look an item up
# a record's sections, in the order the PIM export writes them
IDENTITY, OFFER, ATTRIBUTES, DESCRIPTION, SPECS = range(5)
LENGTHS = ((34, 0.35, 18, 90), (24, 0.3, 12, 60), (110, 0.6, 30, 600), (200, 0.7, 40, 2500),
           (160, 0.8, 30, 1500))  # (median, sigma, lo, hi) tokens of each section
SPECS_SHARE = 0.65  # records with a specs section
# shoppers by the store's local hour (the clock's 0 is midnight, store time): lunch and evening
HOURS = (0.15, 0.08, 0.05, 0.04, 0.04, 0.06, 0.12, 0.25, 0.4, 0.55, 0.65, 0.75, 0.85, 0.8,
         0.75, 0.75, 0.8, 0.85, 0.9, 1.0, 1.0, 0.9, 0.6, 0.3)
NIGHT_PRICES = (0.01, 0.03)  # share of items the ERP's nightly feed reprices
PROMO = ((1, 2), (0.1, 0.3))  # 06:00: departments going on promotion, share of their items
FLASH = (0.05, 0.15)  # 18:00..20:00: one department's flash sale, share of its items
STOCK = 0.02  # items whose stock line changes in a day (popular ones likelier), by shoppers
FIXES = 0.005  # items whose attributes or specs a data steward fixes in a day, 09..18
LAUNCHES = (0.005, 0.012)  # share of the catalog launched at 10:00..16:00 (one batch)
RETIRED = 0.003  # items discontinued in a day, 09..18


@dataclass
class Item:
    """A product record: its department, its sections' versions, when it was launched
    (-inf for the starting catalog) and discontinued (inf while live)."""

    dept: int
    text: Versioned
    added: float = float("-inf")
    removed: float = float("inf")

    def live(self, t: float) -> bool:
        return self.added <= t < self.removed

    def edit(self, t: float, section: int, seg: Segment) -> None:
        """A new version at ``t`` with ``section`` replaced by ``seg``."""
        secs = list(self.text.current)
        secs[section] = seg
        self.text.versions.append((t, secs))


def make_item(rng: random.Random, new: Callable, dept: int, mult: float, t: float) -> Item:
    """A record of department ``dept`` whose long sections are ``mult`` x their lengths."""
    secs = []
    for s, (median, sigma, lo, hi) in enumerate(LENGTHS):
        if s == SPECS and rng.random() >= SPECS_SHARE:
            break
        m = median * (mult if s >= ATTRIBUTES else 1.0)
        secs.append(new(clipped_length(rng, m, sigma, lo, hi)))
    return Item(dept, Versioned([(-1e18 if t < 0 else t, secs)]), t)


def resized(rng: random.Random, new: Callable, seg: Segment, lo: float, hi: float) -> Segment:
    """New content about as long as ``seg`` (x lo..hi, at least 8 tokens)."""
    return new(max(8, round(seg[1] * rng.uniform(lo, hi))))


@dataclass
class Catalog:
    """The catalog: every item ever (index = item id), each department's items in catalog
    order, each department's length multiplier, and the cumulative popularity by item id."""

    items: list[Item]
    depts: list[list[int]]
    mults: list[float]
    cum: list[float]

    def order(self, t: float) -> list[int]:
        """The live items in catalog order (department by department) at ``t``."""
        return [k for d in self.depts for k in d if self.items[k].live(t)]

    def record(self, k: int, t: float) -> list[Segment]:
        return self.items[k].text.at(t)

    def popular(self, rng: random.Random, t: float) -> int:
        """A live item by popularity."""
        while True:
            k = bisect.bisect_left(self.cum, rng.random() * self.cum[-1])
            if self.items[k].live(t):
                return k

    def near(self, rng: random.Random, k: int, n: int, t: float) -> list[int]:
        """Up to ``n`` live items of ``k``'s department within 30 places of it, in a random
        order."""
        d = self.depts[self.items[k].dept]
        at = d.index(k)
        pool = [j for j in d[max(0, at - 30):at + 31] if j != k and self.items[j].live(t)]
        return rng.sample(pool, min(n, len(pool)))

    def add(self, rng: random.Random, item: Item) -> int:
        """Launch ``item`` at a random place in its department; its popularity is that of a
        random rank. Its id."""
        k = len(self.items)
        self.items.append(item)
        d = self.depts[item.dept]
        d.insert(rng.randint(0, len(d)), k)
        self.cum.append(self.cum[-1] + rng.randint(1, k) ** -POPULARITY)
        return k


def catalog(rng: random.Random, new: Callable, scale: float) -> Catalog:
    """CATALOG x scale (x 0.85..1.15) records in DEPARTMENTS departments of Zipf sizes, each
    department with its own length multiplier (apparel short, electronics long)."""
    n = max(40, round(CATALOG * scale * rng.uniform(0.85, 1.15)))
    sizes = [r ** -0.8 for r in rng.sample(range(1, DEPARTMENTS + 1), DEPARTMENTS)]
    mults = [rng.lognormvariate(0.0, 0.35) for _ in range(DEPARTMENTS)]
    counts = [0] * DEPARTMENTS
    for d in rng.choices(range(DEPARTMENTS), sizes, k=n):
        counts[d] += 1
    items = [make_item(rng, new, d, mults[d], -1.0) for d in range(DEPARTMENTS)
             for _ in range(counts[d])]
    depts, at = [], 0
    for c in counts:
        depts.append(list(range(at, at + c)))
        at += c
    cum, total = [], 0.0
    for rank in rng.sample(range(1, n + 1), n):
        total += rank ** -POPULARITY
        cum.append(total)
    return Catalog(items, depts, mults, cum)


class World(ClockedState):
    """The catalog and the feeds that edit it, on the event clock; ``emit`` sends a request.
    bench.heldout_catalog_jobs.Store builds on it."""

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, 0, scale)
        self.catalog = catalog(rng, self.new, scale)
        self.edits: list[tuple[float, int, int, str]] = []  # (time, item, section, why)
        for day in (0.0, DAY):
            self.at(day + 6 * HOUR, "reprice", "promo")
            self.at(day + rng.uniform(18, 20) * HOUR, "reprice", "flash")
            self.at(day + rng.uniform(10, 16) * HOUR, "launch", None)
            self.at(day, "trickle", None)

    def edit(self, k: int, section: int, why: str, seg: Segment | None = None) -> None:
        """Item ``k``'s ``section`` becomes ``seg`` (new content about as long if None)."""
        item = self.catalog.items[k]
        old = item.text.current[section]
        item.edit(self.now, section, seg or resized(self.rng, self.new, old, 0.9, 1.1))
        self.edits.append((self.now, k, section, why))

    def _on_reprice(self, why: str) -> None:
        """The ERP's price feed: at night a few items across the catalog, in the morning a
        promotion over one or two departments, in the evening a flash sale in one."""
        rng, cat = self.rng, self.catalog
        live = cat.order(self.now)
        if why == "night":
            picked = rng.sample(live, round(len(live) * rng.uniform(*NIGHT_PRICES)))
        else:
            n = rng.randint(*PROMO[0]) if why == "promo" else 1
            depts = set(rng.choices(range(DEPARTMENTS), [len(d) for d in cat.depts], k=n))
            share = rng.uniform(*(PROMO[1] if why == "promo" else FLASH))
            picked = [k for k in live if cat.items[k].dept in depts and rng.random() < share]
        for k in picked:
            self.edit(k, OFFER, why)

    def _on_launch(self, _: object) -> None:
        """The PIM publishes a batch of new items into their departments."""
        rng, cat = self.rng, self.catalog
        for _ in range(round(len(cat.order(self.now)) * rng.uniform(*LAUNCHES))):
            d = rng.choices(range(DEPARTMENTS), [len(x) for x in cat.depts])[0]
            item = make_item(rng, self.new, d, cat.mults[d], self.now)
            self.edits.append((self.now, cat.add(rng, item), IDENTITY, "launch"))

    def _on_trickle(self, _: object) -> None:
        """Each hour: stock lines changing as shoppers buy (by the shoppers' clock and the
        items' popularity), data stewards' fixes and retirements in office hours."""
        rng, cat, t = self.rng, self.catalog, self.now
        self.at(t + HOUR, "trickle", None)
        h, n = int(t / HOUR) % 24, len(cat.items)
        for _ in range(poisson(rng, STOCK * n * HOURS[h] / sum(HOURS))):
            self.edit(cat.popular(rng, t), OFFER, "stock")
        if not 9 <= h < 18:
            return
        for _ in range(poisson(rng, FIXES * n / 9)):
            k = cat.popular(rng, t) if rng.random() < 0.3 else rng.randrange(n)
            has_specs = len(cat.items[k].text.current) > SPECS
            sec = SPECS if has_specs and rng.random() < 0.5 else ATTRIBUTES
            if cat.items[k].live(t):
                self.edit(k, sec, "fix")
        for _ in range(poisson(rng, RETIRED * n / 9)):
            k = rng.randrange(n)
            if cat.items[k].live(t):
                cat.items[k].removed = t + rng.uniform(0, HOUR)
