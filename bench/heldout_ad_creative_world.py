"""bench.heldout's ``ad_creative`` shape, its world: an advertising platform's creative generator
over a work week as one replica sees it. The platform's system prompt, its ad policies per
region and per category (each in versions: a region's policy is rewritten once mid-week), the
agencies' style prompts, the locales' guides, the channel formats' specs, the seasonal brief
template, the advertisers (brand guidelines and tone, a product feed synced every night) and
their campaigns (a brief, the feed entries it is about, its formats and locales) with their
cells: one (format, locale) each, holding the live variants. See bench/heldout_ad_creative.py's
docstring for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import ClockedState, Segment, clipped_length
from bench.heldout_legal_parts import Versioned
from bench.heldout_meeting_parts import poisson

HOUR, DAY, MINUTE = 3600.0, 86400.0, 60.0
END = 5 * DAY  # Monday 00:00 to Saturday 00:00, the platform's local time
SYSTEM = 1200  # the creative generator's role, output rules and JSON format
REGION_POLICY = (1500, 0.4, 600, 3500)  # a region's ad policies (claims, disclosures, privacy)
BRAND = (1800, 0.5, 500, 4500)  # an advertiser's brand guidelines and tone
AGENCY_STYLE = (900, 0.4, 300, 2000)  # an agency's house style over all its advertisers
BRIEF = (700, 0.5, 250, 2000)  # a campaign's brief
LOCALE = (400, 0.4, 150, 900)  # a locale's guide (spelling, formality, currency, taboos)
SEASONAL = 1800  # the seasonal event's brief template
RUNNING = (1, 2)  # campaigns an advertiser runs from before the trace
SYNC_AT = 2.0  # local hour the nightly feed sync runs
POLICY_AT = ((1, 3), (10.0, 17.0))  # the region policy rewrite: day, local hours
# category -> (policy tokens: median, advertisers' weight): regulated ones have long rules
CATEGORIES = {"retail": (500, 3.0), "apparel": (450, 2.0), "travel": (700, 1.5),
              "software": (450, 1.5), "food": (600, 1.5), "auto": (800, 1.0),
              "finance": (2600, 1.0), "health": (2800, 0.8), "alcohol": (1800, 0.4),
              "gambling": (3000, 0.3)}


@dataclass(frozen=True)
class Format:
    """A channel format: its spec's tokens (rules, limits, examples), variants a job writes
    per cell (lo, hi) and a variant's tokens (median, sigma, lo, hi)."""

    name: str
    spec: int
    variants: tuple[int, int]
    output: tuple[int, float, int, int]


FORMATS = {f.name: f for f in (
    Format("headline", 700, (3, 6), (45, 0.3, 20, 90)),  # a set of short headlines
    Format("description", 600, (2, 4), (50, 0.3, 25, 100)),
    Format("sitelinks", 500, (2, 3), (70, 0.3, 30, 140)),
    Format("callouts", 400, (2, 3), (30, 0.3, 12, 60)),
    Format("caption", 800, (3, 6), (80, 0.4, 30, 200)),
    Format("story", 600, (2, 4), (60, 0.4, 25, 150)),
    Format("video_script", 1300, (2, 3), (450, 0.4, 180, 1000)),
    Format("carousel", 700, (2, 4), (200, 0.4, 80, 450)),
    Format("sponsored_product", 600, (3, 5), (50, 0.3, 20, 110)),
    Format("display", 700, (2, 4), (70, 0.3, 30, 150)),
    Format("product_copy", 900, (1, 3), (260, 0.4, 100, 600)))}


@dataclass(frozen=True)
class Layout:
    """The seed's platform: its formats, locales, regions (advertisers' shares), advertisers,
    agencies (count, share of the advertisers they manage), feed entries an advertiser has
    (lo, hi) and their tokens, entries a campaign is about (lo, hi), the share of entries the
    nightly sync rewrites, bulk jobs and editing sessions a day, the share of cells under an
    A/B test, the share of advertisers in the seasonal event and its day, and two prompt
    orders: the agency's style before the policies (an agency tool) and the draft before the
    chat in an editing session (NOTE(ad-head), NOTE(ad-edit-draft))."""

    name: str
    formats: tuple[str, ...]
    locales: int
    regions: tuple[float, ...]
    advertisers: int
    agencies: tuple[int, float]
    feed: tuple[int, int]
    entry: tuple[int, float, int, int]
    products: tuple[int, int]
    churn: float
    per_day: tuple[float, float]
    ab: float
    seasonal: tuple[float, int]
    agency_first: bool
    draft_in_head: bool


LAYOUTS = (
    Layout("search", ("headline", "description", "sitelinks", "callouts"), 3,
           (0.6, 0.25, 0.15), 120, (3, 0.3), (3, 12), (120, 0.4, 50, 300), (1, 3), 0.03,
           (14.0, 30.0), 0.4, (0.3, 3), False, False),
    Layout("social", ("caption", "story", "video_script", "carousel"), 5,
           (0.45, 0.3, 0.15, 0.1), 80, (4, 0.4), (5, 30), (180, 0.4, 60, 400), (1, 4), 0.05,
           (10.0, 45.0), 0.35, (0.4, 3), False, True),
    Layout("retail", ("sponsored_product", "display", "product_copy", "caption"), 2,
           (0.8, 0.2), 60, (2, 0.2), (40, 200), (220, 0.4, 100, 450), (8, 24), 0.15,
           (13.0, 30.0), 0.35, (0.7, 2), False, False),
    Layout("agency", ("headline", "description", "caption", "video_script", "display"), 4,
           (0.5, 0.3, 0.2), 60, (6, 1.0), (5, 40), (160, 0.4, 60, 350), (2, 8), 0.05,
           (10.0, 40.0), 0.35, (0.5, 3), True, True))


@dataclass
class Advertiser:
    """An advertiser: its region, category, agency (None: manages itself), activity weight,
    brand guidelines and tone, product feed (entries in versions) and campaigns."""

    region: int
    category: str
    agency: int | None
    weight: float
    brand: Segment
    feed: Versioned
    campaigns: list[int] = field(default_factory=list)


@dataclass
class Campaign:
    """A campaign: its advertiser, brief (None: a seasonal campaign, behind the seasonal
    template), feed entries it is about (indices, feed order), formats, locales, cells."""

    advertiser: int
    brief: Segment | None
    products: tuple[int, ...]
    formats: tuple[str, ...]
    locales: tuple[int, ...]
    cells: list[int] = field(default_factory=list)


@dataclass
class Cell:
    """One (format, locale) of a campaign: its live variants (generated, A/B refreshed or
    edited; empty before its first job), whether it runs an A/B test, since when its variants
    are live."""

    campaign: int
    format: str
    locale: int
    variants: list[Segment] = field(default_factory=list)
    tested: bool = False
    since: float = 0.0


# NOTE(ad-head): a generation prompt is the platform's system prompt, the ad policies of the
# advertiser's region and then of its category, the agency's style (if any), the brand
# guidelines, the campaign brief, the feed entries as they stand, then the task (format spec,
# locale guide, ...): this writer's guess at how such a platform layers its prompt (platform
# rules first, account-level settings after). An agency tool is the agency's own product, so
# its style comes right after the system prompt. A seasonal campaign has the seasonal brief
# template right after the system prompt and no brief of its own.
# NOTE(ad-scale): one replica serves ``scale`` x the layout's advertisers, and the
# marketers' jobs and sessions a day scale with them; the rest (A/B refreshes, reviews, the
# seasonal wave) follows the campaigns, so a scaled-down week has every part.
class World(ClockedState):
    """The platform on the clock. bench.heldout_ad_creative_desk.Desk builds on it."""

    END = END

    def __init__(self, rng: random.Random, scale: float, layout: Layout) -> None:
        super().__init__(rng, 0, scale)
        self.layout, new = layout, self.new
        self.system, self.seasonal = new(SYSTEM), new(SEASONAL)
        self.region_policy = [Versioned([(-DAY, [new(clipped_length(rng, *REGION_POLICY))])])
                              for _ in layout.regions]
        self.category_policy = {c: new(clipped_length(rng, m, 0.3, m // 2, 2 * m))
                                for c, (m, _) in CATEGORIES.items()}
        self.styles = [new(clipped_length(rng, *AGENCY_STYLE)) for _ in range(layout.agencies[0])]
        self.locale_guides = [new(clipped_length(rng, *LOCALE)) for _ in range(layout.locales)]
        self.specs = {f: new(FORMATS[f].spec) for f in layout.formats}
        n = max(4, round(layout.advertisers * scale))  # NOTE(ad-scale)
        self.advertisers = [self.add_advertiser() for _ in range(n)]
        self.campaigns: list[Campaign] = []
        self.cells: list[Cell] = []
        self.policy_edits: list[tuple[float, int]] = []  # (when, region)
        self.syncs: list[float] = []
        for a in range(len(self.advertisers)):
            for _ in range(rng.randint(*RUNNING)):
                self.live_from_last_week(self.add_campaign(a))
        for day in range(int(END // DAY)):
            self.at(day * DAY + SYNC_AT * HOUR, "sync", day)
        day, hours = POLICY_AT
        self.at((24 * rng.randint(*day) + rng.uniform(*hours)) * HOUR, "policy",
                rng.choices(range(len(layout.regions)), layout.regions)[0])

    def add_advertiser(self) -> Advertiser:
        rng, layout = self.rng, self.layout
        region = rng.choices(range(len(layout.regions)), layout.regions)[0]
        category = rng.choices(list(CATEGORIES), [w for _, w in CATEGORIES.values()])[0]
        agency = rng.randrange(layout.agencies[0]) if rng.random() < layout.agencies[1] else None
        feed = [self.new(clipped_length(rng, *layout.entry))
                for _ in range(rng.randint(*layout.feed))]
        return Advertiser(region, category, agency, rng.lognormvariate(0.0, 1.0),
                          self.new(clipped_length(rng, *BRAND)), Versioned([(-DAY, feed)]))

    def add_campaign(self, a: int, seasonal: bool = False, formats: int = 0) -> int:
        """A new campaign of advertiser ``a``: its entries, formats (``formats`` of them, else
        1..all) and locales (1..3, the first locale most often), its cells format by format."""
        rng, layout, adv = self.rng, self.layout, self.advertisers[a]
        n = len(adv.feed.current)
        products = tuple(sorted(rng.sample(range(n), min(n, rng.randint(*layout.products)))))
        fs = layout.formats
        chosen = rng.sample(fs, formats or rng.randint(1, len(fs)))
        k = rng.randint(1, min(3, layout.locales))
        locales = rng.sample(range(layout.locales), k) if rng.random() < 0.5 else range(k)
        brief = None if seasonal else self.new(clipped_length(rng, *BRIEF))
        camp = Campaign(a, brief, products, tuple(f for f in fs if f in chosen),
                        tuple(sorted(locales)))
        self.campaigns.append(camp)
        adv.campaigns.append(len(self.campaigns) - 1)
        for f in camp.formats:
            for loc in camp.locales:
                camp.cells.append(len(self.cells))
                self.cells.append(Cell(len(self.campaigns) - 1, f, loc))
        return len(self.campaigns) - 1

    def live_from_last_week(self, c: int) -> None:
        """A campaign already running: its cells' variants written before the trace."""
        for k in self.campaigns[c].cells:
            cell = self.cells[k]
            fmt = FORMATS[cell.format]
            cell.variants = [self.new(clipped_length(self.rng, *fmt.output))
                             for _ in range(self.rng.randint(*fmt.variants))]
            cell.tested, cell.since = self.rng.random() < self.layout.ab, -DAY

    def policies(self, a: int, when: float | None = None) -> list[Segment]:
        """Advertiser ``a``'s region policy and category policy as they stand at ``when``
        (now if None)."""
        adv, t = self.advertisers[a], self.now if when is None else when
        return [*self.region_policy[adv.region].at(t), self.category_policy[adv.category]]

    def head(self, c: int, when: float | None = None) -> list[Segment]:
        """What every generation or editing prompt for campaign ``c`` starts with at
        ``when`` (now if None; NOTE(ad-head))."""
        camp, t = self.campaigns[c], self.now if when is None else when
        adv = self.advertisers[camp.advertiser]
        style = [] if adv.agency is None else [self.styles[adv.agency]]
        pol = self.policies(camp.advertiser, t)
        mid = [*style, *pol] if self.layout.agency_first else [*pol, *style]
        top = [self.system] if camp.brief else [self.system, self.seasonal]
        brief = [camp.brief] if camp.brief else []
        feed = adv.feed.at(t)
        return [*top, *mid, adv.brand, *brief, *(feed[k] for k in camp.products)]

    def task(self, k: int) -> list[Segment]:
        """Cell ``k``'s format spec and locale guide (what follows the head)."""
        cell = self.cells[k]
        return [self.specs[cell.format], self.locale_guides[cell.locale]]

    def _on_sync(self, _) -> None:
        """The nightly feed sync: each advertiser's entries rewritten by the layout's churn
        (prices, stock, titles), a new version where any changed."""
        rng = self.rng
        for adv in self.advertisers:
            entries = list(adv.feed.current)
            changed = [k for k in range(len(entries)) if rng.random() < self.layout.churn]
            for k in changed:
                entries[k] = self.new(entries[k][1])
            if changed:
                adv.feed.versions.append((self.now, entries))
        self.syncs.append(self.now)

    def _on_policy(self, region: int) -> None:
        """A region's ad policy rewritten (every later prompt of the region has the new
        version); the desk re-checks the region's live ads."""
        old = self.region_policy[region].current[0]
        self.region_policy[region].versions.append((self.now, [self.new(old[1])]))
        self.policy_edits.append((self.now, region))
        self.policy_changed(region)

    def policy_changed(self, region: int) -> None:
        """A region's policy was rewritten (the desk reacts)."""


def week_times(rng: random.Random, per_day: float, hours: tuple, days: int) -> list[float]:
    """About ``per_day`` events a day over ``days`` days by ``hours`` (Poisson per hour)."""
    total, out = sum(hours), []
    for h in range(24 * days):
        for _ in range(poisson(rng, per_day * hours[h % 24] / total)):
            out.append((h + rng.random()) * HOUR)
    return out
