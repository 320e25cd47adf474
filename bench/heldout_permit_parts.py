"""bench.heldout's ``permits_office`` shape, its world: a city's building code (chapters cut
into sections, each chapter owned by a review discipline, amended now and then), the zoning
districts' regulations and the parcels in them, the permit types (a guide, a section of the
fee schedule, plan-review checklists per discipline, an inspection checklist, intake
requirements, summary and letter templates) and the permits themselves: an application form,
a plan set whose sheets are replaced on resubmission, and a file log that grows as reviews,
letters and inspections land. The event clock and new applications arriving. See
bench/heldout_permits_office.py's docstring for the numbers."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.heldout_fewshot import ClockedState, Segment, clipped_length
from bench.heldout_legal_parts import Versioned
from bench.heldout_meeting_parts import poisson
from bench.heldout_recruit_parts import hour_of

HOUR, DAY, MINUTE = 3600.0, 86400.0, 60.0
END = 2 * DAY  # the clock starts Wednesday 00:00 city time and ends Friday 00:00
DISCIPLINES = "ASMEPF"  # architectural, structural, mechanical, electrical, plumbing, fire
SHEET_SHARE = (0.4, 0.15, 0.12, 0.13, 0.1, 0.1)  # a plan set's sheets by discipline
CHAPTERS = 30  # building-code chapters (the model code and the city's local amendments)
CHAPTER = (6000, 0.5, 2000, 16000)  # tokens of a chapter
SECTION = 700  # tokens of a code section
DIGEST = (2, 4)  # sections of its chapters a discipline's review prompt quotes
DISTRICTS = 14  # zoning districts, weight Zipf(0.8) by a random rank
ZONING = (3200, 0.4, 1200, 8000)  # tokens of a district's regulations, 600-token sections
PARCELS = 8000  # parcels at scale 1.0 (at least 300)
PARCEL = (420, 0.45, 150, 1500)  # tokens of a parcel record (owner, lot, overlays, history)
FORM = (600, 0.4, 250, 1800)  # tokens of an application form (scope, valuation, parties)
SHEET = (650, 0.5, 200, 2000)  # tokens of a plan sheet's extracted text and notes
ENTRY = (160, 0.6, 40, 600)  # tokens of a file log entry (review, letter, inspection result)
GUIDE = (2000, 0.4, 800, 5000)  # tokens of a permit type's applicant guide
FEES = (350, 0.4, 150, 800)  # tokens of a type's section of the fee schedule
CHECKLIST = (900, 0.4, 400, 2200)  # a type's plan-review checklist, per discipline
INSPECTION = (800, 0.4, 300, 1800)  # a type's inspection checklist
REQUIREMENTS = (1100, 0.4, 500, 2400)  # a type's submittal requirements (intake)
TEMPLATE = (300, 0.4, 120, 700)  # a type's nightly summary template
LETTER = (900, 0.4, 400, 1800)  # a type's correction-letter template
# name, weight, disciplines, sheets (median, sigma, lo, hi), share that needs plan review
TYPES = (("residential", 0.25, "ASMEP", (10, 0.4, 4, 30), 0.9),
         ("accessory", 0.15, "AS", (4, 0.4, 2, 8), 0.6),
         ("adu", 0.08, "ASMEP", (14, 0.4, 6, 30), 1.0),
         ("tenant", 0.12, "AMEPF", (22, 0.5, 8, 70), 1.0),
         ("commercial", 0.05, "ASMEPF", (50, 0.5, 20, 160), 1.0),
         ("trade", 0.22, "MEP", (2, 0.5, 1, 6), 0.3),
         ("demolition", 0.05, "AS", (3, 0.4, 1, 8), 0.5),
         ("sign", 0.08, "ASE", (3, 0.4, 1, 6), 0.7))
MIX = 0.5  # sigma of a seed's lognormal factor on each type's weight (the city's mix)
APPS = 60  # new applications a day at scale 1.0 (x 0.8..1.2 per day)
# how likely an application arrives in each hour (portal all day, counter 08..16)
ARRIVE_HOURS = (0.1, 0.05, 0.03, 0.02, 0.02, 0.05, 0.2, 0.5, 1.0, 1.2, 1.2, 1.0, 0.9, 1.1,
                1.1, 1.0, 0.8, 0.5, 0.4, 0.4, 0.4, 0.35, 0.25, 0.15)
CORRECTIONS = 140  # permits awaiting resubmission at the start, at scale 1.0
RESUBMIT = 10 * DAY  # their resubmissions spread uniformly over this long from the start
ACTIVE = 700  # issued permits under inspection at the start, at scale 1.0
LOG = (2, 12)  # log entries an issued permit's file holds at the start


@dataclass
class Kind:
    """A permit type: weight, disciplines (indices), sheets, plan-review share, guide, fee
    section (versions: the fee schedule is re-issued), checklists per discipline, inspection
    checklist, intake requirements, summary and letter templates."""

    name: str
    weight: float
    discs: list[int]
    sheets: tuple
    review: float
    guide: Segment
    fees: Versioned
    checklists: dict[int, Segment]
    inspection: Segment
    requirements: Segment
    template: Segment
    letter: Segment


@dataclass
class Permit:
    """A permit: its type, parcel, when it was applied for, the form, the plan set (sheets as
    versions, one per submission; None without plan review), each sheet's discipline, the
    last review's comment per sheet, its state and the file log as (time, entry)."""

    kind: int
    parcel: int
    opened: float
    form: Segment
    plans: Versioned | None
    discs: list[int]
    comments: dict[int, Segment] = field(default_factory=dict)
    state: str = "intake"  # applied, intake, review, reviewed, corrections, issued
    log: list[tuple[float, Segment]] = field(default_factory=list)

    def file(self) -> list[Segment]:
        """The permit file as it stands: the form, then every log entry."""
        return [self.form, *(s for _, s in self.log)]


def sections(new: Callable, total: int, size: int) -> list[Segment]:
    """``total`` tokens of new content in sections of about ``size``."""
    k = max(1, round(total / size))
    return [new(total // k + (i < total % k)) for i in range(k)]


def zipf(rng: random.Random, n: int, s: float) -> list[float]:
    """Weights 1/rank^s for ``n`` items, the ranks shuffled."""
    return [r ** -s for r in rng.sample(range(1, n + 1), n)]


class City(ClockedState):
    """The code, zoning, parcels, permit types and permits; new applications arrive on the
    clock. bench.heldout_permit_jobs.Jobs builds on it; ``emit`` sends a request."""

    END = END

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, 0, scale)
        new = self.new
        self.chapters = [Versioned([(-1e18, sections(new, clipped_length(rng, *CHAPTER),
                                                      SECTION))]) for _ in range(CHAPTERS)]
        self.chapter_weight = zipf(rng, CHAPTERS, 1.0)
        order = rng.sample(range(CHAPTERS), CHAPTERS)
        self.discipline_of = {c: k % len(DISCIPLINES) for k, c in enumerate(order)}
        self.digests = [self.digest(d) for d in range(len(DISCIPLINES))]
        self.districts = [sections(new, clipped_length(rng, *ZONING), 600)
                          for _ in range(DISTRICTS)]
        self.district_weight = zipf(rng, DISTRICTS, 0.8)
        self.parcels = [(rng.choices(range(DISTRICTS), self.district_weight)[0],
                         new(clipped_length(rng, *PARCEL)))
                        for _ in range(max(300, round(PARCELS * scale)))]
        self.kinds = [self.kind(*t) for t in TYPES]
        self.permits: list[Permit] = []
        self.pipeline(scale)
        for d in (-1, 0, 1):
            rate = APPS * scale * rng.uniform(0.8, 1.2)
            for t in sorted(DAY * d + hour_of(rng, ARRIVE_HOURS) * HOUR
                            for _ in range(poisson(rng, rate))):
                self.arrive_at(t)

    def digest(self, d: int) -> list[tuple[int, int]]:
        """The (chapter, section) pairs discipline ``d``'s review prompt quotes."""
        mine = [c for c in range(CHAPTERS) if self.discipline_of[c] == d]
        out: list[tuple[int, int]] = []
        for _ in range(self.rng.randint(*DIGEST)):
            c = self.rng.choices(mine, [self.chapter_weight[c] for c in mine])[0]
            k = self.rng.randrange(len(self.chapters[c].current))
            if (c, k) not in out:
                out.append((c, k))
        return sorted(out)

    def kind(self, name: str, weight: float, discs: str, sheets: tuple, review: float) -> Kind:
        rng, new = self.rng, self.new
        ds = [DISCIPLINES.index(x) for x in discs]
        return Kind(name, weight * rng.lognormvariate(0.0, MIX), ds, sheets, review,
                    new(clipped_length(rng, *GUIDE)),
                    Versioned([(-1e18, [new(clipped_length(rng, *FEES))])]),
                    {d: new(clipped_length(rng, *CHECKLIST)) for d in ds},
                    new(clipped_length(rng, *INSPECTION)), new(clipped_length(rng, *REQUIREMENTS)),
                    new(clipped_length(rng, *TEMPLATE)), new(clipped_length(rng, *LETTER)))

    def code(self, pairs: list[tuple[int, int]]) -> list[Segment]:
        """The code sections ``pairs`` as they stand now."""
        return [self.chapters[c].at(self.now)[k] for c, k in pairs]

    def plan_set(self, k: int) -> tuple[list[int], list[Segment]]:
        """A new plan set of type ``k``: each sheet's discipline (sorted, as a set is bound)
        and its text."""
        kind, rng = self.kinds[k], self.rng
        n = clipped_length(rng, *kind.sheets)
        discs = sorted(rng.choices(kind.discs, [SHEET_SHARE[d] for d in kind.discs], k=n))
        return discs, [self.new(clipped_length(rng, *SHEET)) for _ in discs]

    def permit(self, t: float, state: str) -> int:
        """A new permit applied for at ``t`` (a plan set if its type needs review)."""
        rng = self.rng
        k = rng.choices(range(len(self.kinds)), [x.weight for x in self.kinds])[0]
        discs, sheets, plans = [], [], None
        if rng.random() < self.kinds[k].review:
            discs, sheets = self.plan_set(k)
            plans = Versioned([(t, sheets)])
        self.permits.append(Permit(k, rng.randrange(len(self.parcels)), t,
                                   self.new(clipped_length(rng, *FORM)), plans, discs,
                                   state=state))
        return len(self.permits) - 1

    def pipeline(self, scale: float) -> None:
        """Permits from before the trace: awaiting resubmission (comments on about a third
        of their sheets, at least one) and issued ones with a file log, under inspection."""
        rng = self.rng
        for _ in range(max(5, round(CORRECTIONS * scale))):
            p = self.permit(-rng.uniform(3, 30) * DAY, "corrections")
            permit = self.permits[p]
            if permit.plans is None:
                permit.state = "issued"
                continue
            n = len(permit.discs)
            for s in {rng.randrange(n), *(s for s in range(n) if rng.random() < 0.33)}:
                permit.comments[s] = self.new(clipped_length(rng, 180, 0.5, 60, 600))
            self.at(rng.uniform(0, RESUBMIT), "resubmit", p)
        for _ in range(max(20, round(ACTIVE * scale))):
            p = self.permit(-rng.uniform(5, 200) * DAY, "issued")
            self.permits[p].log = [(-rng.uniform(0, 5) * DAY, self.entry())
                                   for _ in range(rng.randint(*LOG))]
            self.permits[p].log.sort(key=lambda e: e[0])

    def entry(self) -> Segment:
        return self.new(clipped_length(self.rng, *ENTRY))

    def note(self, p: int, seg: Segment) -> None:
        """Append ``seg`` to permit ``p``'s file log now."""
        self.permits[p].log.append((self.now, seg))

    def arrive_at(self, t: float) -> None:
        """An application at ``t`` (before the clock's start: added at once, as applied)."""
        if t < 0:
            self.permit(t, "applied")
        else:
            self.at(t, "arrive", None)

    def _on_arrive(self, _: object) -> int:
        return self.permit(self.now, "intake")

    def _on_resubmit(self, p: int) -> None:
        """A hook for the jobs (the re-review of a revised plan set)."""
