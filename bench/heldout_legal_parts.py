"""bench.heldout's ``legal_review`` shape, its world: firms in seven time zones with their
practice playbooks (edited now and then), their matters (deals with a data room, litigation
with discovery and briefs, contract negotiations) and the documents of each, versioned where a
contract is negotiated or a brief revised. See bench/heldout_legal_review.py's docstring for
what each part models and its numbers."""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.heldout_bi_parts import local_hour, weekday
from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_meeting_parts import pick

HOUR, DAY = 3600.0, 86400.0
RATE = 40.0  # tokens a second a reply decodes at
FIRMS = 14  # at scale 1.0 (scaled, at least 3)
ZIPF = 1.0  # firm size by a random rank
# (UTC offset in hours, share of the firms); the clock's 0 is Monday 00:00 UTC
ZONES = ((-5.0, 0.3), (-6.0, 0.1), (-8.0, 0.15), (0.0, 0.2), (1.0, 0.1), (8.0, 0.1),
         (10.0, 0.05))
# how busy lawyers are in each local hour of a weekday (1.0 at the peak; they work late)
HOURS = (0.02, 0.01, 0.01, 0.01, 0.01, 0.02, 0.05, 0.2, 0.5, 0.9, 1.0, 1.0, 0.7, 0.8, 1.0,
         1.0, 1.0, 0.9, 0.7, 0.5, 0.4, 0.35, 0.25, 0.1)
WEEKEND = 0.15  # x a weekday's weight
CRUNCH = 48 * HOUR  # before a deadline: no weekends, nights at least NIGHT_FLOOR
NIGHT_FLOOR = 0.5
PRACTICES = ("corporate", "litigation", "commercial")  # a playbook each
MATTER_KINDS = {"deal": "corporate", "litigation": "litigation", "contract": "commercial"}
FIRM_MIX = ((("deal", 0.35), ("litigation", 0.4), ("contract", 0.25)),  # a law firm
            (("deal", 0.15), ("litigation", 0.15), ("contract", 0.7)))  # an in-house team
SECTION = 500  # tokens per section of a contract, brief, playbook or protocol


def busy(t: float, tz: float, crunch: bool = False) -> float:
    """How busy a lawyer at ``tz`` is at ``t``; in a crunch every day is a weekday and the
    night is never below NIGHT_FLOOR."""
    w = HOURS[int(local_hour(t, tz))]
    if crunch:
        return max(w, NIGHT_FLOOR)
    return w * (WEEKEND if weekday(t, tz) >= 5 else 1.0)


def next_busy(rng: random.Random, t: float, tz: float) -> float:
    """A time at or after ``t`` when a lawyer at ``tz`` picks up work (busy hours likelier)."""
    while rng.random() > busy(t, tz):
        t = (t // HOUR + 1) * HOUR
    return t + rng.uniform(0, HOUR - t % HOUR)


def sections(new: Callable, total: int) -> list[Segment]:
    """``total`` tokens cut into sections of about SECTION tokens."""
    k = max(1, round(total / SECTION))
    return [new(total // k + (i < total % k)) for i in range(k)]


def revise(rng: random.Random, new: Callable, secs: list[Segment], edits: int) -> list[Segment]:
    """``secs`` after ``edits`` changes: a section reworded (70 %), one inserted (20 %) or one
    struck (10 %); the rest stays the same content."""
    out = list(secs)
    for _ in range(edits):
        k, r = rng.randrange(len(out)), rng.random()
        if r < 0.7:
            out[k] = new(max(20, round(out[k][1] * rng.uniform(0.8, 1.3))))
        elif r < 0.9 or len(out) < 3:
            out.insert(k, new(clipped_length(rng, 250, 0.6, 40, 1500)))
        else:
            del out[k]
    return out


def first_change(a: list[Segment], b: list[Segment]) -> int:
    """How many leading sections ``a`` and ``b`` share."""
    k = 0
    while k < min(len(a), len(b)) and a[k] == b[k]:
        k += 1
    return k


@dataclass
class Versioned:
    """Content that changes now and then (a playbook, a review protocol, a negotiated
    contract, a brief): its versions as (time, sections), the first from before the trace."""

    versions: list[tuple[float, list[Segment]]]

    def at(self, t: float) -> list[Segment]:
        k = bisect.bisect_right([v[0] for v in self.versions], t) - 1
        return self.versions[max(k, 0)][1]

    @property
    def current(self) -> list[Segment]:
        return self.versions[-1][1]


@dataclass
class Doc:
    """A document in a matter: "contract" (negotiated in rounds), "brief" (revised before
    filing), "record", "form" (one of a family on the same template), "filing", "email",
    "attachment" (discovery), "upload" (added by a lawyer); ``head`` is the family's shared
    title block, if any. ``text`` holds its versions."""

    kind: str
    text: Versioned
    head: Segment | None = None

    def body(self, t: float = math.inf) -> list[Segment]:
        """The document as the product sends it at ``t``: its title block, then sections."""
        return ([self.head] if self.head else []) + self.text.at(t)


@dataclass
class Firm:
    """A law firm or in-house legal team: time zone, size (mean 1), its profile (name,
    jurisdiction, house style), one playbook a practice, whether its lawyers run playbook
    reviews of counterparty drafts, its matters."""

    tz: float
    weight: float
    inhouse: bool
    profile: Segment
    playbooks: dict[str, Versioned]
    issues: bool
    matters: list[int] = field(default_factory=list)


@dataclass
class Matter:
    """A deal, a litigation or a contract negotiation: its firm, header (parties, summary),
    lawyers, documents in workspace order with each one's popularity, the negotiated
    contracts and briefs among them, the data room (a deal's) or the review protocol (a
    litigation in discovery, else None), deadlines (signing, filings), its review grid's
    column groups (a deal's, once set up)."""

    firm: int
    kind: str
    header: Segment
    lawyers: int
    docs: list[int] = field(default_factory=list)
    pop: list[float] = field(default_factory=list)
    negotiated: list[int] = field(default_factory=list)
    briefs: list[int] = field(default_factory=list)
    room: list[int] = field(default_factory=list)
    protocol: Versioned | None = None
    deadlines: list[float] = field(default_factory=list)
    grid: list[Segment] = field(default_factory=list)

    def crunch(self, t: float) -> bool:
        """Within CRUNCH before one of its deadlines."""
        return any(0 <= d - t < CRUNCH for d in self.deadlines)

    def boost(self, t: float) -> float:
        """How much busier the matter is at ``t``: 1 + 4 e^(-left / 18 h) in the 72 hours
        before a deadline, 0.3 after its last one (a signed deal, a filed brief: quiet)."""
        ahead = [d - t for d in self.deadlines if d >= t]
        if self.deadlines and not ahead:
            return 0.3
        left = min(ahead, default=math.inf)
        return 1.0 + 4.0 * math.exp(-left / (18 * HOUR)) if left < 72 * HOUR else 1.0


def playbook(rng: random.Random, new: Callable) -> Versioned:
    """A practice playbook / clause library: 800..10000 tokens, median 2000."""
    return Versioned([(-1e18, sections(new, clipped_length(rng, 2000, 0.6, 800, 10000)))])


def make_firm(rng: random.Random, new: Callable, weight: float) -> Firm:
    inhouse = rng.random() < 0.4
    books = {p: playbook(rng, new) for p in PRACTICES}
    return Firm(pick(rng, ZONES), weight, inhouse,
                new(clipped_length(rng, 300, 0.5, 120, 900)), books, rng.random() < 0.6)


def firms(rng: random.Random, new: Callable, scale: float) -> list[Firm]:
    """FIRMS (scaled, at least 3) firms of Zipf(ZIPF) sizes by a random rank, mean size 1."""
    n = max(3, round(FIRMS * scale))
    ranks = rng.sample(range(1, n + 1), n)
    sizes = [r ** -ZIPF for r in ranks]
    mean = sum(sizes) / n
    return [make_firm(rng, new, s / mean) for s in sizes]
