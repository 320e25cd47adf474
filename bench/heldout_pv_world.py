"""bench.heldout's ``pv_intake`` shape, its world: a pharmaceutical company's marketed products
(each with an SmPC label in sections, a literature search protocol, a therapeutic area whose
MedDRA-style term excerpt the intake prompts carry, prior case narratives in the safety
database), the case-intake coding guide, the products under a signal review (a dossier whose
case-series table is refreshed each night), the label updates and the coding-guide update that
land mid-trace, and the adverse-event cases arriving through the day (a surge for one product
in some seeds). The event clock and the hour-of-day profiles. See bench/heldout_pv_intake.py's
docstring for the numbers."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.heldout_fewshot import ClockedState, Segment, clipped_length
from bench.heldout_legal_parts import Versioned
from bench.heldout_meeting_parts import poisson

HOUR, DAY, MINUTE = 3600.0, 86400.0, 60.0
END = 2 * DAY  # the clock starts Tuesday 00:00 UTC and ends Thursday 00:00 UTC
PRODUCTS = 14
AREAS = 6  # therapeutic areas (cardio, onco, CNS, ...), one term excerpt each
LABEL = (6000, 0.35, 3000, 14000)  # tokens of a product's SmPC
LABEL_SECTION = 650  # an SmPC section (4.1 indications, 4.4 warnings, 4.8 undesirable ...)
GUIDE, GUIDE_SECTION = 2600, 650  # the intake coding guide (conventions, field rules)
EXCERPT = (1700, 0.3, 900, 3500)  # tokens of an area's MedDRA-style term excerpt
PROTOCOL = (1600, 0.4, 700, 3500)  # tokens of a product's literature search protocol
PRIOR = (120, 0.8, 20, 600)  # prior cases of a product in the database (x scale)
NARRATIVE = (550, 0.4, 200, 1400)  # tokens of a prior case's narrative
CASES = 250  # new adverse-event cases a day at scale 1.0 (Poisson by INTAKE_HOURS)
# source kind, share, tokens (median, sigma, lo, hi)
SOURCES = (("call", 0.45, (1500, 0.5, 400, 6000)), ("email", 0.35, (450, 0.7, 100, 2500)),
           ("form", 0.2, (650, 0.4, 250, 2000)))
SIGNALS = (1, 3)  # products under a signal review (by seed)
DOSSIER = (3500, 0.3, 1500, 7000)  # tokens of a dossier's background (stable)
TABLE = (1800, 0.3, 800, 4000)  # tokens of its case-series table (new each night, 01:00 UTC)
LABEL_UPDATES = (1, 2)  # products whose label changes mid-trace, at 20..80 % of the trace
GUIDE_UPDATE = 0.5  # seeds whose coding guide gets a new section at 30..70 % of the trace
SURGE = (0.6, (40, 120), (3.0, 8.0))  # seeds with a surge, cases (x scale), hours it lasts
# UTC hours of case arrivals: EU call centre and mailbox by day, the US one into the night
INTAKE_HOURS = (0.5, 0.3, 0.2, 0.15, 0.15, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 0.9, 1.0, 1.3,
                1.5, 1.5, 1.4, 1.2, 1.0, 0.9, 0.9, 0.8, 0.7, 0.6)
# UTC hours the safety staff work: EU 07..16, US 13..22
OFFICE_HOURS = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.1, 0.7, 1.0, 1.0, 1.0, 0.9, 1.0, 1.5,
                1.6, 1.6, 1.3, 0.9, 0.8, 0.8, 0.7, 0.5, 0.2, 0.0)


@dataclass
class Product:
    """A marketed product: its traffic weight (Zipf by a random rank), area, label versions,
    literature protocol, screening weekday (0 Monday) and its cases (prior narratives first,
    then ids of in-trace cases as ``("case", id)``)."""

    weight: float
    area: int
    label: Versioned
    protocol: Segment
    weekday: int
    prior: list[Segment]
    cases: list[int] = field(default_factory=list)


@dataclass
class Case:
    """An adverse-event case: arrival, product, source kind and document, whether it is
    serious, what the intake steps wrote (extraction, coding), and its request indices."""

    time: float
    product: int
    source_kind: str
    source: Segment
    serious: bool
    surge: bool = False
    outputs: list[Segment] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)


def sections(new: Callable, total: int, size: int) -> list[Segment]:
    """``total`` tokens of new content in sections of about ``size``."""
    k = max(1, round(total / size))
    return [new(total // k + (i < total % k)) for i in range(k)]


def hour_at(rng: random.Random, weights: tuple, day: int) -> float:
    """A time on ``day`` (seconds on the clock) by hour ``weights``, with its minutes."""
    return (day * 24 + rng.choices(range(24), weights)[0] + rng.random()) * HOUR


class World(ClockedState):
    """Products, labels, guide, signals and the cases arriving on the clock; ``emit`` sends a
    request. bench.heldout_pv_cases.Cases builds on it."""

    END = END

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, 0, scale)
        new = self.new
        self.guide = Versioned([(-1e18, sections(new, GUIDE, GUIDE_SECTION))])
        self.excerpts = [new(clipped_length(rng, *EXCERPT)) for _ in range(AREAS)]
        self.products = [self._product(r ** -1.0) for r in
                         rng.sample(range(1, PRODUCTS + 1), PRODUCTS)]
        self.cases: list[Case] = []
        self.signals = rng.sample(range(PRODUCTS), rng.randint(*SIGNALS))
        self.dossiers = {p: self._dossier() for p in self.signals}
        self.label_updates = self._label_updates()
        self.guide_update = None
        if rng.random() < GUIDE_UPDATE:
            self.guide_update = self._guide_update(rng.uniform(0.3, 0.7) * END)
        self.surge = self._plan_surge() if rng.random() < SURGE[0] else None
        for day in (0, 1):
            for _ in range(poisson(rng, CASES * scale)):
                self.at(hour_at(rng, INTAKE_HOURS, day), "case", self.by_weight())

    def _product(self, weight: float) -> Product:
        rng, new = self.rng, self.new
        label = Versioned([(-1e18, sections(new, clipped_length(rng, *LABEL), LABEL_SECTION))])
        prior = [new(clipped_length(rng, *NARRATIVE)) for _ in
                 range(max(3, round(clipped_length(rng, *PRIOR) * self.scale)))]
        return Product(weight, rng.randrange(AREAS), label,
                       new(clipped_length(rng, *PROTOCOL)), rng.randrange(5), prior)

    def _dossier(self) -> Versioned:
        """A signal dossier: the stable background, then a case-series table refreshed at
        01:00 UTC each night (a new version from the table on)."""
        rng, new = self.rng, self.new
        background = new(clipped_length(rng, *DOSSIER))
        return Versioned([(t, [background, new(clipped_length(rng, *TABLE))])
                          for t in (-1e18, 1 * HOUR, DAY + 1 * HOUR)])

    def _label_updates(self) -> list[tuple[int, float, int]]:
        """1..2 products whose label changes at 20..80 % of the trace: every section from a
        random one on is new (a variation rewrites 4.4 onwards, say). (product, time,
        first changed section)."""
        out = []
        for p in self.rng.sample(range(PRODUCTS), self.rng.randint(*LABEL_UPDATES)):
            old = self.products[p].label.current
            k = self.rng.randrange(1, len(old)) if len(old) > 1 else 0
            t = self.rng.uniform(0.2, 0.8) * END
            fresh = [self.new(max(50, round(n * self.rng.uniform(0.9, 1.2)))) for _, n in old[k:]]
            self.products[p].label.versions.append((t, old[:k] + fresh))
            out.append((p, t, k))
        return out

    def _guide_update(self, t: float) -> tuple[float, int]:
        """The coding guide gets a convention memo inserted at a random section: every
        section from there on is new content after it. (time, section)."""
        old = self.guide.current
        k = self.rng.randrange(len(old))
        memo = self.new(clipped_length(self.rng, 300, 0.4, 120, 700))
        self.guide.versions.append((t, old[:k] + [memo] + [self.new(n) for _, n in old[k:]]))
        return t, k

    def _plan_surge(self) -> tuple[int, float, float]:
        """A surge (a media report, a quality complaint) for one product: extra cases over a
        few hours, mostly short emails and web forms. (product, start, end)."""
        rng = self.rng
        p = self.by_weight()
        start = rng.uniform(0.2, 0.7) * END
        end = start + rng.uniform(*SURGE[2]) * HOUR
        for _ in range(max(3, round(rng.randint(*SURGE[1]) * self.scale))):
            self.at(rng.triangular(start, end, start + (end - start) * 0.3), "surge_case", p)
        return p, start, end

    def by_weight(self) -> int:
        """A product by its traffic weight."""
        return self.rng.choices(range(PRODUCTS), [p.weight for p in self.products])[0]

    def new_case(self, p: int, kinds: tuple, surge: bool) -> int:
        """A case of product ``p`` arriving now, its source kind drawn from ``kinds``."""
        rng = self.rng
        kind, _, size = rng.choices(kinds, [k[1] for k in kinds])[0]
        serious = rng.random() < 0.22
        self.cases.append(Case(self.now, p, kind, self.new(clipped_length(rng, *size)),
                               serious, surge))
        self.products[p].cases.append(len(self.cases) - 1)
        return len(self.cases) - 1

    def label(self, p: int) -> list[Segment]:
        """Product ``p``'s label as it stands now."""
        return self.products[p].label.at(self.now)
