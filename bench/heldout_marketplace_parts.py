"""The clock, the storefronts (locales), the catalog with its product pages, and product
popularity (Zipf ranks, home regions, flash-sale and viral boosts) of bench.heldout's
``marketplace`` shape; bench/heldout_marketplace.py's docstring states what each part models
and its parameters. bench/heldout_marketplace_chat.py builds the shoppers' conversations on
``Catalog`` here, and bench/heldout_marketplace_jobs.py the sellers' and nightly jobs."""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_vision_parts import Length, Profile

DAY, HOUR, MINUTE = 86400.0, 3600.0, 60.0
WEEKDAY = 2  # the clock's 0 is Wednesday 00:00 UTC
RATE = 50.0  # tokens a second a reply decodes at
# storefronts: (name, hours from UTC, share of shoppers, region)
LOCALES = (("en-US", -5.0, 0.31, 0), ("es-MX", -6.0, 0.07, 0), ("pt-BR", -3.0, 0.08, 0),
           ("en-GB", 0.0, 0.12, 1), ("de-DE", 1.0, 0.14, 1), ("fr-FR", 1.0, 0.10, 1),
           ("ja-JP", 9.0, 0.18, 2))
REGIONS = ("americas", "europe", "asia")
SHARES = tuple(s for _, _, s, _ in LOCALES)
REGION_SHARES = tuple(sum(s for _, _, s, r in LOCALES if r == g) for g in range(3))
# shoppers by local hour: a night trough, a lunch bump, the evening peak; weekends WEEKEND x
SHOPPING: Profile = (0.45, 0.25, 0.15, 0.1, 0.08, 0.1, 0.2, 0.4, 0.65, 0.85, 1.0, 1.1, 1.3,
                     1.25, 1.1, 1.05, 1.05, 1.15, 1.35, 1.6, 1.85, 1.9, 1.5, 0.9)
# sellers by local hour (uploads and bulk pastes): office hours and an evening tail
SELLING: Profile = (0.05, 0.03, 0.02, 0.02, 0.03, 0.05, 0.2, 0.6, 1.2, 1.6, 1.7, 1.6, 1.2,
                    1.5, 1.6, 1.5, 1.3, 1.0, 0.7, 0.5, 0.45, 0.4, 0.25, 0.1)
WEEKEND = 1.2
# the catalog (this replica's shard of it; tokens unless named)
CATALOG = 3000  # products at the start (scaled, at least 150)
ZIPF = 0.95  # popularity by rank
LISTED = (0.85, 0.25)  # chance a product is listed in a locale of its home region; elsewhere
HOME_PULL = 3.0  # a product's weight in its home region's locales, x
HEAD: Length = (220, 0.5, 60, 600)  # title, brand, bullet points
DESCRIPTION: Length = (800, 0.6, 150, 4000)  # description and specifications
OFFER = (25, 70)  # price, stock and delivery line
SUMMARY: Length = (250, 0.4, 100, 600)  # the reviews' summary at the end of the page
# mean time between changes of a product's offer line, and the share of products
REPRICE = ((5 * DAY, 0.55), (20 * HOUR, 0.33), (3 * HOUR, 0.12))
HORIZON = 9 * DAY  # planned ahead (the trace ends sooner)
ON_SALE = 30 * DAY  # the starting catalog went on sale this long before the clock's 0
LAUNCH_TOP = (0.04, 50)  # new products launched into the top ranks (chance, ranks)


def local(t: float, offset: float) -> float:
    """Local seconds since the Monday 00:00 before the clock's 0, at ``t`` in a zone."""
    return WEEKDAY * DAY + t + offset * HOUR


def hour(t: float, offset: float) -> float:
    """The local hour (0..24) at ``t``."""
    return local(t, offset) % DAY / HOUR


def weekday(t: float, offset: float) -> int:
    """The local weekday at ``t`` (0 is Monday)."""
    return int(local(t, offset) // DAY) % 7


def clock(day: int, at: float, offset: float) -> float:
    """The clock time of local hour ``at`` on local day ``day`` (0 is the first Wednesday)."""
    return day * DAY + (at - offset) * HOUR


def rate(profile: Profile, t: float, offset: float) -> float:
    """The relative activity of ``profile`` at ``t`` in a zone, weekends WEEKEND x."""
    return profile[int(hour(t, offset))] * (WEEKEND if weekday(t, offset) >= 5 else 1.0)


def shopper_rate(t: float, loc: int) -> float:
    """Shoppers' relative activity at ``t`` in storefront ``loc``."""
    return rate(SHOPPING, t, LOCALES[loc][1])


def thin(rng: random.Random, now: float, per_day: float, draw: Callable[[], int],
         activity: Callable[[float, int], float], profile: Profile) -> tuple[float, int]:
    """The next arrival after ``now`` of a stream of ``per_day`` a weekday (Poisson): a key
    from ``draw()``, kept when ``activity(t, key)`` (``profile``'s values) accepts it."""
    peak, mean = max(profile) * WEEKEND, sum(profile) / len(profile)
    top, t = per_day / DAY * peak / mean, now
    while True:
        t += rng.expovariate(top)
        key = draw()
        if rng.random() * peak < activity(t, key):
            return t, key


@dataclass
class Product:
    """A product: its home region, the storefronts it is listed in, its popularity weight,
    when it went on sale, when its offer line changed (sorted), and per storefront its head
    (title, bullets), description, offer lines (by version) and review summaries (from when)."""

    region: int
    locales: list[int]
    weight: float
    live: float
    changes: list[float]
    seller: int = -1
    heads: dict[int, Segment] = field(default_factory=dict)
    descriptions: dict[int, Segment] = field(default_factory=dict)
    offers: dict[tuple[int, int], Segment] = field(default_factory=dict)
    summaries: dict[int, list[tuple[float, Segment]]] = field(default_factory=dict)


@dataclass
class Boost:
    """A flash sale or a viral item: the share of product picks in ``locales`` that go to
    ``product``: ``peak`` from ``start`` to ``end`` (a flash sale), or rising over ``rise``
    seconds, then halving every ``half`` (viral)."""

    kind: str
    product: int
    locales: frozenset[int]
    start: float
    end: float
    peak: float
    rise: float = 0.0
    half: float = 0.0

    def share(self, t: float) -> float:
        """The share of picks the boost takes at ``t``."""
        if not self.start <= t < self.end:
            return 0.0
        if self.kind == "flash":
            return self.peak
        if t < self.start + self.rise:
            return self.peak * (t - self.start) / self.rise
        return self.peak * 0.5 ** ((t - self.start - self.rise) / self.half)


class Catalog:
    """The products (catalog order: their index), what each storefront's pages show now,
    and the storefronts' popularity samplers (live products only) with the boosts."""

    def __init__(self, rng: random.Random, new: Callable[[int], Segment], scale: float) -> None:
        self.rng, self.new = rng, new
        self.products: list[Product] = []
        self.boosts: list[Boost] = []
        self.ids: list[list[int]] = [[] for _ in LOCALES]  # per storefront: live products
        self.cum: list[list[float]] = [[] for _ in LOCALES]  # and their cumulative weights
        size = max(150, round(CATALOG * scale))
        ranks = list(range(1, size + 1))
        rng.shuffle(ranks)
        for r in ranks:
            p = self.add(self.region(), r ** -ZIPF, 0.0)
            for loc in self.products[p].locales:
                self.write(p, loc, clipped_length(rng, *HEAD), clipped_length(rng, *DESCRIPTION))
            self.products[p].live = -ON_SALE
            self.go_live(p)
        self.ranked = sorted(range(size), key=lambda p: -self.products[p].weight)

    def region(self) -> int:
        """A home region, by its storefronts' shares."""
        return self.rng.choices(range(len(REGIONS)), REGION_SHARES)[0]

    def add(self, region: int, weight: float, since: float, seller: int = -1,
            locales: list[int] | None = None) -> int:
        """A new product at the end of the catalog, not yet on sale, listed in ``locales``
        (none given: LISTED of the storefronts, at least one at home); its offer changes
        from ``since`` on are planned (REPRICE)."""
        rng = self.rng
        if locales is None:
            home = [i for i, loc in enumerate(LOCALES) if loc[3] == region]
            locales = [i for i, loc in enumerate(LOCALES)
                       if rng.random() < LISTED[loc[3] != region]]
            if not set(locales) & set(home):
                locales = sorted([*locales, rng.choice(home)])
        mean = rng.choices([m for m, _ in REPRICE], [w for _, w in REPRICE])[0]
        changes, t = [], since
        while (t := t + rng.expovariate(1 / mean)) < HORIZON:
            changes.append(t)
        self.products.append(Product(region, locales, weight, math.inf, changes, seller))
        return len(self.products) - 1

    def write(self, p: int, loc: int, head: int, description: int) -> None:
        """Product ``p``'s page text in storefront ``loc`` (its listing, a first review
        summary)."""
        product = self.products[p]
        product.heads[loc], product.descriptions[loc] = self.new(head), self.new(description)
        product.summaries[loc] = [(-1.0, self.new(clipped_length(self.rng, *SUMMARY)))]

    def go_live(self, p: int) -> None:
        """Product ``p`` goes on sale: its storefronts' samplers take it (HOME_PULL x at
        home)."""
        product = self.products[p]
        for loc in product.locales:
            w = product.weight * (HOME_PULL if LOCALES[loc][3] == product.region else 1.0)
            self.ids[loc].append(p)
            self.cum[loc].append((self.cum[loc][-1] if self.cum[loc] else 0.0) + w)

    def launch_weight(self) -> float:
        """A new product's weight: the weight of a rank in the top LAUNCH_TOP ranks (a
        launch with a campaign), else of a rank in the catalog's lower 90 %."""
        rng, n = self.rng, len(self.products)
        if rng.random() < LAUNCH_TOP[0]:
            return rng.randint(1, LAUNCH_TOP[1]) ** -ZIPF
        return rng.uniform(0.1 * n, n) ** -ZIPF

    def version(self, p: int, t: float) -> int:
        """How many times product ``p``'s offer line has changed by ``t``."""
        return bisect.bisect_right(self.products[p].changes, t)

    def page(self, p: int, loc: int, t: float) -> list[Segment]:
        """Product ``p``'s page in storefront ``loc`` at ``t``: head, offer line (price,
        stock), description, review summary; an offer change makes the rest new content."""
        product = self.products[p]
        key = (loc, self.version(p, t))
        if key not in product.offers:
            product.offers[key] = self.new(self.rng.randint(*OFFER))
        return [product.heads[loc], product.offers[key], product.descriptions[loc],
                self.summary(p, loc)]

    def summary(self, p: int, loc: int) -> Segment:
        """Product ``p``'s latest review summary in storefront ``loc``."""
        return self.products[p].summaries[loc][-1][1]

    def pick(self, loc: int, t: float) -> int:
        """A product a shopper in storefront ``loc`` looks at, at ``t``: a boost's (each
        takes its share of the picks) or by weight among the live products."""
        rng = self.rng
        self.boosts = [b for b in self.boosts if b.end > t]
        for b in self.boosts:
            if loc in b.locales and rng.random() < b.share(t):
                return b.product
        cum = self.cum[loc]
        return self.ids[loc][min(bisect.bisect(cum, rng.random() * cum[-1]), len(cum) - 1)]

    def boost(self, b: Boost, changes: list[float]) -> None:
        """Start boost ``b`` (in the storefronts where its product is listed); its product's
        offer line changes at ``changes`` as well (a sale's price, stock running low)."""
        product = self.products[b.product]
        b.locales = frozenset(b.locales & set(product.locales))
        self.boosts.append(b)
        for t in changes:
            bisect.insort(product.changes, t)


def halvings(peak: float, floor: float) -> float:
    """How many halvings take ``peak`` below ``floor``."""
    return max(0.0, math.log2(peak / floor))
