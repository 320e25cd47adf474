"""bench.heldout's ``fin_research`` shape, its world: a buy-side firm's coverage universe in
an earnings season (companies by sector and market cap, each with a profile card, a KPI
sheet, its latest earnings release and periodic filing, and for the core names the analyst's
model, tab by tab), the two days' earnings calendar, the documents the replica reads, the
event clock and the generator's base that sends requests. See bench/heldout_finres.py's
docstring for the numbers."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.heldout_fewshot import ClockedState, Segment, clipped_length
from bench.heldout_legal_parts import Versioned
from bench.heldout_media_parts import cut

HOUR, DAY, MINUTE = 3600.0, 86400.0, 60.0
END = 2 * DAY  # the clock starts on Tuesday 00:00 New York time; the trace ends Thursday 00:00
BEFORE = -1e18  # the time of content written before the trace
UNIVERSE = 320  # companies covered at scale 1.0 (x 0.85..1.15 by seed, at least 12)
SECTORS = 11  # GICS sectors (fewer in a small universe: about 8 companies each)
CAP_ZIPF = 0.9  # analysts' interest in a company by its market-cap rank
CORE = (0.6, 0.15)  # chance a company is a core name: top third of its sector, the rest
PEERS = (3, 6)  # a company's peer list: the nearest by market cap in its sector
CARD = (450, 0.35, 200, 900)  # tokens of a company's profile card
KPI_SHEET = (1100, 0.35, 500, 2200)  # tokens of a company's KPI sheet (one quarter's)
TABS = (3, 7)  # tabs of an analyst's model of a core name
TAB = (1800, 0.4, 600, 4000)  # tokens of a model tab (as text)
PRESS = (5500, 0.35, 2500, 12000)  # tokens of an earnings release (8-K exhibit 99.1)
FILING = {"10-Q": (16000, 0.3, 8000, 32000), "10-K": (42000, 0.25, 25000, 64000)}
TENK = 0.08  # reporters filing a 10-K (fiscal year just ended) rather than a 10-Q
SECTION = (1800, 0.3, 800, 3200)  # tokens of a document section (an item, a table)
REPORTING = (0.07, 0.11)  # chance a company reports on each day of the trace
YESTERDAY = 0.05  # companies that reported on Monday after the close (before the trace)
PRE_MARKET = (0.45, 0.65)  # reporters releasing before the open (the rest after the close)
CALL_MINUTES = (45.0, 75.0)
GUIDANCE = 0.45  # releases that change guidance
FILED = (0.45, 0.25)  # filing the 10-Q the same day (0.5..3 h later), the next day 07..18


@dataclass
class Company:
    """A covered company: sector, market-cap rank in it (0 the largest), analysts' interest,
    whether it is a core name, its profile card, KPI sheet (last quarter's, then each KPI
    stage's output), latest release and periodic filing (sections; a filing's last is its
    risk factors), the analyst's model (tabs; core names) and its peer list."""

    sector: int
    rank: int
    weight: float
    core: bool
    card: Segment
    kpi: Versioned
    press: Versioned
    filing: Versioned
    tabs: Versioned | None
    peers: list[int] = field(default_factory=list)


@dataclass
class Report:
    """A company's earnings: release time, call start and length (minutes), when the periodic
    filing lands (None: after the trace), its form, and whether guidance changes."""

    company: int
    release: float
    call: float
    length: float
    filed: float | None
    form: str
    guidance: bool


@dataclass
class Doc:
    """A document the ingest pipeline reads: its company, form ("press", "transcript",
    "10-Q", "10-K"), arrival time, sections, the KPI sheet as it stood when it arrived (what
    "compare" reads), for a periodic filing the previous filing's risk factors (what "risk"
    reads), its stages' outputs and request indices by stage."""

    company: int
    form: str
    time: float
    sections: list[Segment]
    prior: Segment
    risks: Segment | None = None
    outputs: dict[str, Segment] = field(default_factory=dict)
    sent: dict[str, list[int]] = field(default_factory=dict)


def tokens(segs: list[Segment]) -> int:
    return sum(n for _, n in segs)


def company(rng: random.Random, new: Callable, sector: int, rank: int, size: int,
            weight: float) -> Company:
    """A company of ``sector`` at market-cap ``rank`` of ``size``: its card, last quarter's
    KPI sheet, release and 10-Q, and a model if it is a core name."""
    core = rng.random() < CORE[0 if rank < size / 3 else 1]
    tabs = None
    if core:
        tabs = Versioned([(BEFORE, [new(clipped_length(rng, *TAB))
                                    for _ in range(rng.randint(*TABS))])])
    card = new(clipped_length(rng, *CARD))
    kpi = Versioned([(BEFORE, [new(clipped_length(rng, *KPI_SHEET))])])
    press = cut(rng, new, clipped_length(rng, *PRESS), SECTION)
    filing = cut(rng, new, clipped_length(rng, *FILING["10-Q"]), SECTION)
    return Company(sector, rank, weight, core, card, kpi, Versioned([(BEFORE, press)]),
                   Versioned([(BEFORE, filing)]), tabs)


def universe(rng: random.Random, new: Callable, scale: float) -> list[Company]:
    """UNIVERSE x scale (x 0.85..1.15) companies, by sector (random sizes) then market cap:
    the order the screening job walks them. Interest falls with the global market-cap rank;
    peers are the nearest in the sector by market cap, nearest first."""
    n = max(12, round(UNIVERSE * scale * rng.uniform(0.85, 1.15)))
    sectors = max(2, min(SECTORS, n // 8))
    sizes = [1] * sectors
    for s in rng.choices(range(sectors), [rng.uniform(0.4, 1.6) for _ in range(sectors)],
                         k=n - sectors):
        sizes[s] += 1
    cap = rng.sample(range(1, n + 1), n)  # a global market-cap rank per company
    out: list[Company] = []
    for s, size in enumerate(sizes):
        ranks = sorted(cap[len(out):len(out) + size])
        base = len(out)
        for r, g in enumerate(ranks):
            out.append(company(rng, new, s, r, size, g ** -CAP_ZIPF))
        for r in range(size):
            near = sorted((j for j in range(size) if j != r), key=lambda j: (abs(j - r), j))
            out[base + r].peers = [base + j for j in near[:rng.randint(*PEERS)]]
    return out


def calendar(rng: random.Random, n: int) -> tuple[list[Report], list[int]]:
    """Who reports on each day and when: releases before the open (06:00..08:00 on a
    5-minute mark, the call 1..2 hours later on a half hour) or after the close (16:01..
    16:20, the call at 16:30..17:30); the periodic filing the same day, the next or later.
    Also the companies that reported on Monday after the close."""
    rates, pre = [rng.uniform(*REPORTING) for _ in range(2)], rng.uniform(*PRE_MARKET)
    reports, yesterday = [], []
    for c in range(n):
        u = rng.random()
        if u >= rates[0] + rates[1]:
            if u < rates[0] + rates[1] + YESTERDAY:
                yesterday.append(c)
            continue
        day = DAY * (u >= rates[0])
        if rng.random() < pre:
            release = day + 6 * HOUR + rng.randrange(25) * 5 * MINUTE
            call = (release // (HOUR / 2) + rng.randint(2, 4)) * HOUR / 2
        else:
            release = day + 16 * HOUR + rng.uniform(1, 20) * MINUTE
            call = day + 16 * HOUR + rng.randint(1, 3) * HOUR / 2
        u, filed = rng.random(), None
        if u < FILED[0]:
            filed = release + rng.uniform(0.5, 3.0) * HOUR
        elif u < FILED[0] + FILED[1]:
            filed = day + DAY + rng.uniform(7, 18) * HOUR
        form = "10-K" if rng.random() < TENK else "10-Q"
        reports.append(Report(c, release, call, rng.uniform(*CALL_MINUTES), filed, form,
                              rng.random() < GUIDANCE))
    return reports, yesterday


class World(ClockedState):
    """The universe and its calendar on the event clock; ``emit`` sends a request.
    bench.heldout_finres_filings.Filings builds on it (and the desk on that)."""

    END = END

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, 0, scale)
        self.companies = universe(rng, self.new, scale)
        self.reports, yesterday = calendar(rng, len(self.companies))
        self.docs: list[Doc] = []
        for c in yesterday:  # Monday's after-close releases, summarized before the trace
            co = self.companies[c]
            t = -rng.uniform(7.3, 7.9) * HOUR
            press = cut(rng, self.new, clipped_length(rng, *PRESS), SECTION)
            co.press.versions.append((t, press))
            doc = Doc(c, "press", t, co.press.current, co.kpi.current[0])
            doc.outputs["summary"] = self.new(clipped_length(rng, 260, 0.3, 100, 600))
            self.docs.append(doc)

    def pick(self, ok: Callable[[int], bool] = lambda c: True) -> int:
        """A company by analysts' interest among those ``ok`` accepts (at least one must)."""
        cos = self.companies
        while True:
            c = self.rng.choices(range(len(cos)), [co.weight for co in cos])[0]
            if ok(c):
                return c
