"""The sellers' and the marketplace's jobs of bench.heldout's ``marketplace`` shape: the listing
tool's batches for newly uploaded products, their going on sale, the nightly review
summarization walking the catalog, flash sales, items going viral and one-off bulk pastes;
bench/heldout_marketplace.py's docstring states what each part models and its parameters."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_gateway_parts import poisson
from bench.heldout_marketplace_chat import ChatState
from bench.heldout_marketplace_parts import (DAY, HORIZON, HOUR, LOCALES, MINUTE, RATE,
                                             REGION_SHARES, REGIONS, SELLING, SUMMARY, Boost,
                                             clock, halvings, rate, thin)
from bench.heldout_vision_parts import Length, lognormal

SELLERS, PARETO = 200, 1.2  # sellers in the shard (scaled, at least 4); their sizes' tail
STYLE: Length = (800, 0.6, 200, 3000)  # a seller's style guide
ABROAD = 0.2  # chance a seller also lists in each storefront outside its region
BATCHES_PER_DAY = 8  # listing batches a weekday (scaled, at least 0.75)
BATCH: Length = (10, 0.9, 2, 120)  # products a batch uploads
ATTRIBUTES: Length = (220, 0.6, 60, 900)  # a product's raw attributes
LISTING: Length = (700, 0.4, 250, 1800)  # a generated listing; its first quarter is the head
GAP = (0.1, 0.5)  # seconds from a job's reply to its next request
MODERATION: Length = (2 * HOUR, 0.8, 0.25 * HOUR, 12 * HOUR)  # upload to on sale
JOB_AT = 8.0  # UTC hour the review job starts: 03:00 in the marketplace's home (en-US)
REVIEWS_PER_DAY = 180  # new reviews in the shard a day (scaled), by product weight
NEW_REVIEWS, REVIEW = 40, (90, 0.8, 15, 600)  # the most a job sends per product; a review
FLASH_PER_DAY = 5.0  # deals of the hour a day (scaled, at least 1)
FLASH_HOURS = (11, 12, 13, 18, 19, 20, 21)  # local hours a deal starts (its region's first)
FLASH_ITEMS, FLASH_RANKS = (1, 3), (0.005, 0.2)  # products; ranks (share of the catalog)
FLASH_SHARE: Length = (0.08, 0.5, 0.03, 0.2)  # of the region's product picks, for an hour
FLASH_TICK = 15 * MINUTE  # the deal's "% claimed" in its offer line changes this often
VIRAL_PER_DAY = 1.5  # scaled, at least 0.5
VIRAL_SHARE: Length = (0.06, 0.5, 0.02, 0.2)  # at the peak, of the storefronts' picks
VIRAL_RISE, VIRAL_HALF = (HOUR, 4 * HOUR), (8 * HOUR, 0.5, 3 * HOUR, 30 * HOUR)
VIRAL_NEW, VIRAL_HOME = 0.5, 0.6  # launched in the last 3 days; viral in its region only
VIRAL_STOCK, VIRAL_FLOOR = (2, 5), 0.003  # offer changes in its first day; share it ends at
UPLOADS_PER_DAY = 15  # one-off bulk catalog pastes a weekday (scaled, at least 1)
PASTE: Length = (10000, 0.7, 3000, 40000)
ASK = (20, 200)


@dataclass
class Seller:
    """A seller: home region, the storefronts it lists in, its weight (Pareto) and style
    guide."""

    region: int
    locales: list[int]
    weight: float
    style: Segment


@dataclass
class Batch:
    """A listing batch: its seller, each product's attributes, the (product, storefront) of
    each request in order and the request indices."""

    seller: int
    attributes: dict[int, Segment]
    requests: list[tuple[int, int]]
    sent: list[int] = field(default_factory=list)


@dataclass
class Night:
    """A review-summarization run: when it started, per product (catalog order) the new
    reviews it saw and what its requests send after the prompt (the product's head, its
    summary then, the new reviews), the (product, storefront) of each request and their
    request indices."""

    start: float
    reviews: dict[int, int]
    inputs: dict[int, list[Segment]]
    requests: list[tuple[int, int]]
    sent: list[int] = field(default_factory=list)


def home_offset(region: int) -> float:
    """The hours from UTC of ``region``'s first storefront."""
    return next(off for _, off, _, g in LOCALES if g == region)


class JobsState(ChatState):
    """ChatState with the sellers' batches and pastes, the nightly reviews and the boosts."""

    def __init__(self, rng: random.Random, size: int, scale: float) -> None:
        super().__init__(rng, size, scale)
        self.sellers = [self.seller() for _ in range(max(4, round(SELLERS * scale)))]
        self.batches: list[Batch] = []
        self.nights: list[Night] = []
        self.boosts: list[Boost] = []
        self.uploads = 0
        for day in range(int(HORIZON // DAY)):
            self.at(clock(day, JOB_AT, 0.0), "night", day)
            for _ in range(poisson(rng, max(1.0, FLASH_PER_DAY * scale))):
                g = rng.choices(range(len(REGIONS)), REGION_SHARES)[0]
                self.at(clock(day, rng.choice(FLASH_HOURS), home_offset(g)), "flash", g)
            for _ in range(poisson(rng, max(0.5, VIRAL_PER_DAY * scale))):
                self.at((day + rng.random()) * DAY, "viral", None)
        self.next_seller("batch", max(0.75, BATCHES_PER_DAY * scale))
        self.next_seller("upload", max(1.0, UPLOADS_PER_DAY * scale))

    def seller(self) -> Seller:
        """A seller at home in a region (by shoppers' shares), listing there and abroad."""
        rng = self.rng
        g = self.catalog.region()
        locales = [i for i, loc in enumerate(LOCALES) if loc[3] == g or rng.random() < ABROAD]
        style = self.new(clipped_length(rng, *STYLE))
        return Seller(g, locales, rng.paretovariate(PARETO), style)

    def next_seller(self, name: str, per_day: float) -> None:
        """Plan the next batch or paste of a seller (by weight, in its office hours)."""
        weights = [s.weight for s in self.sellers]
        t, s = thin(self.rng, self.now, per_day,
                    lambda: self.rng.choices(range(len(weights)), weights)[0],
                    lambda t, s: rate(SELLING, t, home_offset(self.sellers[s].region)),
                    SELLING)
        self.at(t, name, s)

    def _on_batch(self, s: int) -> None:
        """Seller ``s`` uploads products; the listing tool writes each one's listing for
        every storefront the seller lists in, one request after another."""
        self.next_seller("batch", max(0.75, BATCHES_PER_DAY * self.scale))
        rng, seller, catalog = self.rng, self.sellers[s], self.catalog
        attributes = {}
        for _ in range(clipped_length(rng, *BATCH)):
            p = catalog.add(seller.region, catalog.launch_weight(), math.inf, s,
                            seller.locales)
            attributes[p] = self.new(clipped_length(rng, *ATTRIBUTES))
        requests = [(p, loc) for p in attributes for loc in seller.locales]
        self.batches.append(Batch(s, attributes, requests))
        self._on_listing((len(self.batches) - 1, 0))

    def _on_listing(self, payload: tuple[int, int]) -> None:
        """A listing request: tool prompt + style guide + attributes + the storefront's
        instruction; the listing becomes the product's page there. After the batch, each
        product goes on sale once moderated."""
        b, k = payload
        batch, rng = self.batches[b], self.rng
        p, loc = batch.requests[k]
        style = self.sellers[batch.seller].style
        batch.sent.append(len(self.out))
        self.send("listing", b, k, [self.heads["listing"], style, batch.attributes[p],
                                    self.instructions[loc]])
        out = clipped_length(rng, *LISTING)
        self.catalog.write(p, loc, out // 4, out - out // 4)
        done = self.now + out / RATE + rng.uniform(*GAP)
        if k + 1 < len(batch.requests):
            self.at(done, "listing", (b, k + 1))
        else:
            for p in batch.attributes:
                self.at(done + lognormal(rng, *MODERATION), "live", p)

    def _on_live(self, p: int) -> None:
        """Product ``p`` goes on sale."""
        self.catalog.products[p].live = self.now
        self.catalog.go_live(p)

    def _on_night(self, day: int) -> None:
        """The review job: the products on sale with new reviews since the last run (Poisson,
        REVIEWS_PER_DAY by weight), in catalog order, for each storefront it is listed in."""
        rng, products = self.rng, self.catalog.products
        last = self.nights[-1].start if self.nights else self.now - DAY
        total = sum(p.weight for p in products if p.live <= self.now)
        reviews, inputs = {}, {}
        for p, product in enumerate(products):
            span = (self.now - max(last, product.live)) / DAY
            if span > 0 and (n := poisson(rng, REVIEWS_PER_DAY * self.scale * span
                                          * product.weight / total)):
                reviews[p] = min(NEW_REVIEWS, n)
                text = sum(clipped_length(rng, *REVIEW) for _ in range(reviews[p]))
                first = product.locales[0]
                inputs[p] = [product.heads[first], self.catalog.summary(p, first),
                             self.new(text)]
        requests = [(p, loc) for p in reviews for loc in products[p].locales]
        self.nights.append(Night(self.now, reviews, inputs, requests))
        if requests:
            self._on_review((len(self.nights) - 1, 0))

    def _on_review(self, payload: tuple[int, int]) -> None:
        """A summarization request: prompt + the product's head, its summary when the run
        started and its new reviews + the storefront's instruction; the reply is the
        product's summary there from now on."""
        n, k = payload
        night, rng = self.nights[n], self.rng
        p, loc = night.requests[k]
        night.sent.append(len(self.out))
        self.send("reviews", n, k, [self.heads["reviews"], *night.inputs[p],
                                    self.instructions[loc]])
        out = clipped_length(rng, *SUMMARY)
        self.catalog.products[p].summaries[loc].append((self.now, self.new(out)))
        if k + 1 < len(night.requests):
            self.at(self.now + out / RATE + rng.uniform(*GAP), "review", (n, k + 1))

    def _on_flash(self, g: int) -> None:
        """A deal of the hour in region ``g``: a few mid-ranked products take their share
        of the region's picks for an hour; their offer lines change at the start, every
        FLASH_TICK and at the end."""
        rng, catalog = self.rng, self.catalog
        ranked = catalog.ranked
        lo, hi = (max(1, round(f * len(ranked))) for f in FLASH_RANKS)
        region = frozenset(i for i, loc in enumerate(LOCALES) if loc[3] == g)
        for p in rng.sample(ranked[lo:hi], rng.randint(*FLASH_ITEMS)):
            if region & set(catalog.products[p].locales):
                b = Boost("flash", p, region, self.now, self.now + HOUR,
                          lognormal(rng, *FLASH_SHARE))
                catalog.boost(b, [self.now + k * FLASH_TICK for k in range(5)])
                self.boosts.append(b)

    def _on_viral(self, _: object) -> None:
        """An item goes viral (VIRAL_NEW: one launched in the last 3 days): its share of the
        picks (in its region, VIRAL_HOME, else everywhere) rises, then halves every few
        hours; its stock runs low (offer changes) over its first day."""
        rng, catalog = self.rng, self.catalog
        recent = [p for p, x in enumerate(catalog.products) if 0 < self.now - x.live < 3 * DAY]
        if recent and rng.random() < VIRAL_NEW:
            p = rng.choice(recent)
        else:
            p = rng.choice(catalog.ranked[len(catalog.ranked) // 10:])
        g = catalog.products[p].region
        where = range(len(LOCALES)) if rng.random() >= VIRAL_HOME else [
            i for i, loc in enumerate(LOCALES) if loc[3] == g]
        peak, half = lognormal(rng, *VIRAL_SHARE), lognormal(rng, *VIRAL_HALF)
        rise = rng.uniform(*VIRAL_RISE)
        b = Boost("viral", p, frozenset(where), self.now,
                  self.now + rise + half * halvings(peak, VIRAL_FLOOR), peak, rise, half)
        changes = sorted(self.now + rng.random() * DAY for _ in range(rng.randint(*VIRAL_STOCK)))
        catalog.boost(b, changes)
        self.boosts.append(b)

    def _on_upload(self, s: int) -> None:
        """A seller pastes a bulk catalog file into the seller assistant: one long request."""
        self.next_seller("upload", max(1.0, UPLOADS_PER_DAY * self.scale))
        rng = self.rng
        self.send("upload", self.uploads, 0, [self.heads["seller"],
                                              self.new(clipped_length(rng, *PASTE)),
                                              self.new(rng.randint(*ASK))])
        self.uploads += 1
