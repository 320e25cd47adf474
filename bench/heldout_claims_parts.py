"""bench.heldout's ``insurance_claims`` shape, its world: an insurer's lines of business (each
with its intake script, base policy forms and a pool of endorsements), policies written on
them, the claims book (open claims and their files growing as the claim goes on), the storm
and its catastrophe bulletin, and the event clock that sends requests. See
bench/heldout_claims.py's docstring for the numbers."""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.heldout_fewshot import ClockedState, Segment, clipped_length
from bench.heldout_legal_parts import Versioned

HOUR, DAY, MINUTE = 3600.0, 86400.0, 60.0
END = 2 * DAY  # the trace ends at the second midnight (a Monday and a Tuesday)
REGIONS = 12
# line -> (share of everyday claims, share of storm claims, intake script tokens, base forms,
# endorsements in its pool)
LINES = {"auto": (0.5, 0.25, (1100, 0.3, 500, 2200), 2, 14),
         "home": (0.3, 0.6, (1300, 0.3, 600, 2500), 3, 24),
         "commercial": (0.12, 0.15, (1600, 0.3, 800, 3000), 3, 30),
         "liability": (0.08, 0.0, (1400, 0.3, 700, 2600), 2, 18)}
FORM = (14000, 0.35, 6000, 26000)  # tokens of a base policy form (the wording)
FORM_SECTION = 1500  # tokens per section of a form
FORM_USE = 1.5  # Zipf exponent of the forms' use within a line (the standard form leads)
ENDORSEMENT = (900, 0.6, 200, 3000)  # tokens of an endorsement
ENDORSED = (0, 1, 1, 2, 2, 3, 4, 5, 6)  # endorsements on a policy (one drawn)
DECLARATIONS = (700, 0.3, 300, 1500)  # tokens of a policy's declarations page
OPEN = 450  # open claims at the trace's start at scale 1.0 (x 0.85..1.15)
AGE = 60.0  # days an open claim at the start has been open (uniform 0.2..AGE)
NOTICE = (550, 0.4, 200, 1400)  # tokens of a first notice of loss (the intake's summary)
# file entry -> (share of an old claim's entries, tokens)
ENTRIES = {"note": (0.65, (180, 0.7, 40, 900)), "photos": (0.2, (500, 0.6, 120, 1800)),
           "estimate": (0.15, (1800, 0.5, 600, 5000))}
STORM = (380, 850)  # the storm's claims on this replica at scale 1.0
SUMMARY = (260, 0.3, 120, 500)  # tokens of a claim's status summary


@dataclass
class Policy:
    """A policy: its line, base form (index in the line's forms), endorsements (indices in
    the line's pool, in form-number order) and declarations page."""

    line: str
    form: int
    endorsements: list[int]
    declarations: Segment


@dataclass
class Claim:
    """A claim: its policy, region, when it was opened, whether the storm caused it, the day
    of the week its reserve review falls on, its file as (time, what, segment) entries in
    time order ("fnol" first, then "note", "photos", "estimate") and its status summary's
    versions as (since, segment)."""

    policy: Policy
    region: int
    opened: float
    cat: bool
    review: int
    entries: list[tuple[float, str, Segment]] = field(default_factory=list)
    summary: list[tuple[float, Segment]] = field(default_factory=list)

    def file_at(self, t: float) -> list[Segment]:
        """The claim file as it stood at ``t``."""
        return [seg for when, _, seg in self.entries if when <= t]

    def summary_at(self, t: float) -> Segment:
        k = bisect.bisect_right([s for s, _ in self.summary], t) - 1
        return self.summary[max(k, 0)][1]

    def changed(self, lo: float, hi: float) -> bool:
        """Whether an entry joined the file in [lo, hi)."""
        return any(lo <= when < hi for when, _, _ in self.entries)


@dataclass
class Line:
    """A line of business: its intake script, base forms (sections) and endorsement pool."""

    name: str
    script: Segment
    forms: list[list[Segment]]
    pool: list[Segment]


@dataclass
class Storm:
    """The catastrophe: landfall, when the CAT is declared, its region, the storm claims
    still to come and the bulletin's versions (the intake and triage addendum)."""

    landfall: float
    declared: float
    region: int
    claims: int
    bulletin: Versioned


def make_line(rng: random.Random, new: Callable, name: str) -> Line:
    _, _, script, forms, pool = LINES[name]
    sections = []
    for _ in range(forms):
        total = clipped_length(rng, *FORM)
        k = max(1, round(total / FORM_SECTION))
        sections.append([new(total // k + (i < total % k)) for i in range(k)])
    return Line(name, new(clipped_length(rng, *script)), sections,
                [new(clipped_length(rng, *ENDORSEMENT)) for _ in range(pool)])


def tokens(segs: list[Segment]) -> int:
    return sum(n for _, n in segs)


class World(ClockedState):
    """The lines, the claims book and the storm on the event clock; ``emit`` sends a
    request. bench.heldout_claims_jobs.Platform builds on it (through the desk)."""

    END = END

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, 0, scale)
        self.lines = {name: make_line(rng, self.new, name) for name in LINES}
        self.claims: list[Claim] = []
        self.open: list[int] = []  # open claim ids, oldest first
        self.cat_claims: list[int] = []  # the storm's claims, oldest first
        self.storm = self.make_storm()
        for _ in range(max(20, round(OPEN * scale * rng.uniform(0.85, 1.15)))):
            self.old_claim()
        self.claims.sort(key=lambda c: c.opened)
        self.open = list(range(len(self.claims)))

    def make_storm(self) -> Storm:
        """Landfall 12:00 on day 0 .. 06:00 on day 1; declared 1..3 hours later; the
        bulletin updated 1..3 times 6..30 hours after that."""
        rng = self.rng
        landfall = rng.uniform(12.0, 30.0) * HOUR
        declared = landfall + rng.uniform(1.0, 3.0) * HOUR
        versions = [(declared, [self.new(clipped_length(rng, 700, 0.3, 400, 1200))])]
        for t in sorted(rng.uniform(6.0, 30.0) * HOUR for _ in range(rng.randint(1, 3))):
            versions.append((declared + t, [self.new(clipped_length(rng, 700, 0.3, 400, 1200))]))
        n = round(rng.uniform(*STORM) * self.scale)
        return Storm(landfall, declared, rng.randrange(REGIONS), max(5, n), Versioned(versions))

    def policy(self, line: str) -> Policy:
        """A new policy on ``line``: its form by use, endorsements by how often they are
        written (the first of the pool most), its declarations."""
        rng, ln = self.rng, self.lines[line]
        form = rng.choices(range(len(ln.forms)), [(k + 1) ** -FORM_USE
                                                  for k in range(len(ln.forms))])[0]
        weights = [1.0 / (k + 1) for k in range(len(ln.pool))]
        chosen: set[int] = set()
        for _ in range(rng.choice(ENDORSED)):
            chosen.add(rng.choices(range(len(ln.pool)), weights)[0])
        return Policy(line, form, sorted(chosen), self.new(clipped_length(rng, *DECLARATIONS)))

    def wording(self, p: Policy) -> list[Segment]:
        """A policy's wording: its base form, its endorsements, its declarations."""
        ln = self.lines[p.line]
        return [*ln.forms[p.form], *(ln.pool[k] for k in p.endorsements), p.declarations]

    def old_claim(self) -> None:
        """A claim opened before the trace: its notice and 1..25 later entries (more the
        older it is), the last ones' summary."""
        rng = self.rng
        line = rng.choices(list(LINES), [v[0] for v in LINES.values()])[0]
        opened = -rng.uniform(0.2, AGE) * DAY
        c = Claim(self.policy(line), rng.randrange(REGIONS), opened, False, rng.randrange(7))
        c.entries.append((opened, "fnol", self.new(clipped_length(rng, *NOTICE))))
        n = min(25, 1 + int(rng.expovariate(1.0) * (1 - opened / DAY / 4)))
        kinds = list(ENTRIES)
        for when in sorted(rng.uniform(opened, 0.0) for _ in range(n)):
            what = rng.choices(kinds, [v[0] for v in ENTRIES.values()])[0]
            c.entries.append((when, what, self.new(clipped_length(rng, *ENTRIES[what][1]))))
        c.summary.append((c.entries[-1][0], self.new(clipped_length(rng, *SUMMARY))))
        self.claims.append(c)

    def add_entry(self, c: int, what: str, seg: Segment) -> None:
        """An entry joins claim ``c``'s file now; a note or an estimate rewrites its status
        summary."""
        claim = self.claims[c]
        claim.entries.append((self.now, what, seg))
        if what != "photos":
            claim.summary.append((self.now, self.new(clipped_length(self.rng, *SUMMARY))))

    def open_claim(self, p: Policy, region: int, cat: bool, notice: Segment) -> int:
        """A new claim with its first notice of loss; the platform's follow-ups
        (``_on_opened`` in bench.heldout_claims_jobs)."""
        c = Claim(p, region, self.now, cat, self.rng.randrange(7))
        c.entries.append((self.now, "fnol", notice))
        c.summary.append((self.now, self.new(clipped_length(self.rng, *SUMMARY))))
        self.claims.append(c)
        self.open.append(len(self.claims) - 1)
        if cat:
            self.cat_claims.append(len(self.claims) - 1)
        self.at(self.now, "opened", len(self.claims) - 1)
        return len(self.claims) - 1


def hour_at(rng: random.Random, day: float, weights: tuple[float, ...], first: int) -> float:
    """A time on ``day`` in the hours from ``first`` by ``weights`` (one per hour)."""
    h = rng.choices(range(first, first + len(weights)), weights)[0]
    return day + (h + rng.random()) * HOUR
