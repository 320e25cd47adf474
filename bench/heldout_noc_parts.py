"""bench.heldout's ``telecom_noc`` shape, its world: a mobile operator's radio network in 6..10
regions (cell sites on fiber aggregation rings, each with a topology record that a planned
change may replace), the platforms (3 radio vendors, 2 router vendors, the core), each with a
configuration reference (a new software release replaces part of it) and, but the core, an
alarm dictionary; the NOC's runbooks, the change policy (revised now and then), the outage
status page as last issued, the event clock with its hour-of-day weights, and the planned
changes: each method of procedure reviewed against the policy on submission, edited and
re-reviewed, then run in the night's maintenance window. See bench/heldout_telecom_noc.py's
docstring for the numbers."""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import ClockedState, Segment, clipped_length
from bench.heldout_legal_parts import Versioned, revise
from bench.heldout_meeting_parts import poisson
from bench.heldout_recruit_parts import hour_of, sections

HOUR, DAY, MINUTE = 3600.0, 86400.0, 60.0
END = 2 * DAY  # the clock starts at 00:00 operator time and ends two midnights later
SITES = 1000  # cell sites at scale 1.0 (at least 80)
REGIONS = (6, 10)  # how many (by seed); sizes Zipf(0.7) by a random rank, at least 10 sites
RING = (24, 0.5, 8, 60)  # sites on a fiber aggregation ring (its first is the hub)
RECORD = (450, 0.5, 200, 1500)  # tokens of a site's topology record
PLATFORMS = ("ran", "ran", "ran", "router", "router", "core")
CODES = {"ran": 90, "router": 60}  # alarm codes in a vendor's dictionary
ENTRY = (450, 0.5, 150, 1500)  # tokens of a dictionary entry
CODE_ZIPF = 1.1  # how often each code fires in steady state, by a random rank
CONFIG_REF = (4500, 0.4, 2000, 12000)  # tokens of a platform's configuration reference
REF_SECTION = 600
RELEASES = (1, 2)  # platforms whose reference gets a new release during the trace
RELEASE_SHARE = (0.3, 0.6)  # of the reference's sections the release rewrites
RUNBOOKS = 40  # the NOC's runbooks (0: fiber cut, 1: power outage)
RUNBOOK = (3500, 0.5, 1200, 9000)
RUNBOOK_ZIPF = 0.9
SECTION = 500  # tokens per section of a runbook, a procedure (MOP) or the policy
POLICY = (7000, 0.3, 4000, 12000)  # the change-management policy
POLICY_EDIT = (0.5, (34.0, 40.0))  # chance of a revision, on day 1 at 10..16
CHANGES = 45  # planned changes submitted a day at scale 1.0 (office hours; as many the day
# before the clock, approved already)
CHANGE_MIX = ((("ran", 0.6), ("router", 0.25), ("core", 0.15)))  # what a change touches
MOP = (4000, 0.5, 1200, 15000)  # tokens of a method of procedure
CHANGE_LINE = (60, 0.3, 30, 120)  # tokens of a change's line in the change log
REVIEW_LAG = (1 * MINUTE, 5 * MINUTE)  # from a submission or an edit to its review
EDIT = (0.45, 3, (1.5 * HOUR, 0.7, 20 * MINUTE, 6 * HOUR))  # chance a review is followed
# by an edit, at most, and the delay
CUTOFF = 16.0  # changes submitted before 16:00 go in that night's window, later the next
WINDOW = (0.5, 5.0)  # hours of the maintenance window a change starts in
NEW_RECORD = 0.6  # changes at a site that replace its topology record
KPI_TEMPLATE = (800, 0.4, 400, 2000)  # a region's KPI report template and thresholds
STATUS = (300, 0.4, 150, 800)  # the status page as it stands before the trace
# hour-of-day weights (00..23): alarms (the maintenance window 00..05 adds planned work),
# customer care, pasted logs; OFFICE for 08..17
ALARM_HOURS = (1.0, 1.1, 1.1, 1.0, 0.9, 0.7, 0.6, 0.7, 0.9, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0,
               1.0, 1.0, 0.9, 0.9, 0.8, 0.7, 0.7, 0.8)
CARE_HOURS = (0.1, 0.05, 0.05, 0.05, 0.05, 0.1, 0.2, 0.5, 0.9, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0,
              1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.6, 0.4, 0.2)
LOG_HOURS = (0.3, 0.3, 0.3, 0.3, 0.2, 0.2, 0.3, 0.5, 0.9, 1.0, 1.0, 1.0, 0.8, 1.0, 1.0, 1.0,
             0.9, 0.7, 0.5, 0.4, 0.4, 0.4, 0.3, 0.3)
OFFICE = (0.6, 1.0, 1.0, 0.9, 0.6, 0.8, 1.0, 0.9, 0.8, 0.5)


@dataclass
class Platform:
    """A vendor platform: "ran", "router" or "core", its configuration reference (versions
    by release), its alarm dictionary's entries (none for the core) and their weights."""

    kind: str
    ref: Versioned
    entries: list[Segment]
    weights: list[float]  # cumulative, for rng.choices
    weight: float  # how often engineers ask about its configuration
    tx: list[int]  # the codes a cut link raises (loss of signal, link down, S1/X2 down)
    power: list[int]  # mains failure, battery low, site down


@dataclass
class Site:
    """A cell site: its region, ring, topology record (versions), alarm propensity."""

    region: int
    ring: int
    record: Versioned
    noise: float


@dataclass
class Change:
    """A planned change: its platform, site (None for the core), procedure (versions as
    the engineer edits it), line in the change log, when it was submitted, when it runs in
    the maintenance window (None: after the clock) and its reviews' request indices."""

    platform: int
    site: int | None
    mop: Versioned
    line: Segment
    submitted: float
    window: float | None
    reviews: list[int] = field(default_factory=list)


@dataclass
class Region:
    """A region: its radio and router platforms, sites, rings (site lists, hub first) and
    KPI report template."""

    ran: int
    router: int
    template: Segment
    sites: list[int] = field(default_factory=list)
    rings: list[list[int]] = field(default_factory=list)


def count(rng: random.Random, mean: float) -> int:
    """A Poisson count; normal for large means."""
    if mean > 30:
        return max(0, round(rng.gauss(mean, math.sqrt(mean))))
    return poisson(rng, mean)


class World(ClockedState):
    """The network, the platforms, the documents, the clock and the planned changes with
    their reviews; ``emit`` sends a request. bench.heldout_noc_alarms.Alarms builds on it."""

    END = END

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, 0, scale)
        self.platforms = [self._platform(k) for k in PLATFORMS]
        self.sites: list[Site] = []
        self.regions = [self._region() for _ in range(rng.randint(*REGIONS))]
        self._place_sites(max(80, round(SITES * scale)))
        self.runbooks = [sections(self.new, clipped_length(rng, *RUNBOOK), SECTION)
                         for _ in range(RUNBOOKS)]
        self.runbook_weights = [r ** -RUNBOOK_ZIPF
                                for r in rng.sample(range(1, RUNBOOKS + 1), RUNBOOKS)]
        self.policy = Versioned([(-math.inf, sections(self.new, clipped_length(rng, *POLICY),
                                                      SECTION))])
        self.status = Versioned([(-math.inf, [self.new(clipped_length(rng, *STATUS))])])
        self.releases: list[tuple[float, int]] = []
        self.changes: list[Change] = []
        self.review_system, self.review_cue = self.new(1000), self.new(40)
        for _ in range(count(rng, CHANGES * scale)):
            self.submit(-DAY + hour_of(rng, OFFICE, 8) * HOUR)
        self.daily(CHANGES, OFFICE, 8, "submit")
        for p in rng.sample(range(len(PLATFORMS)), rng.randint(*RELEASES)):
            self.at(rng.uniform(0.15, 0.85) * END, "release", p)
        if rng.random() < POLICY_EDIT[0]:
            self.at(rng.uniform(*POLICY_EDIT[1]) * HOUR, "policy", None)

    def _platform(self, kind: str) -> Platform:
        rng, new = self.rng, self.new
        ref = Versioned([(-math.inf, sections(new, clipped_length(rng, *CONFIG_REF),
                                              REF_SECTION))])
        n = CODES.get(kind, 0)
        entries = [new(clipped_length(rng, *ENTRY)) for _ in range(n)]
        weights = list(itertools.accumulate(r ** -CODE_ZIPF
                                            for r in rng.sample(range(1, n + 1), n)))
        storm = rng.sample(range(n), 7) if n else [0] * 7
        return Platform(kind, ref, entries, weights, rng.lognormvariate(0.0, 0.6), storm[:4],
                        storm[4:])

    def _region(self) -> Region:
        rng = self.rng
        ran = rng.choices(range(3), [1.0, 0.7, 0.4])[0]
        return Region(ran, rng.choice((3, 4)), self.new(clipped_length(rng, *KPI_TEMPLATE)))

    def _place_sites(self, n: int) -> None:
        """``n`` sites over the regions (Zipf(0.7) by a random rank, at least 10 each), cut
        into rings in id order."""
        rng, k = self.rng, len(self.regions)
        w = [r ** -0.7 for r in rng.sample(range(1, k + 1), k)]
        sizes = [10 + round((n - 10 * k) * x / sum(w)) for x in w]
        for g, size in enumerate(sizes):
            region = self.regions[g]
            while len(region.sites) < size:
                ring = [len(self.sites) + i
                        for i in range(min(clipped_length(rng, *RING), size - len(region.sites)))]
                for _ in ring:
                    record = Versioned([(-math.inf, [self.new(clipped_length(rng, *RECORD))])])
                    self.sites.append(Site(g, len(region.rings), record,
                                           rng.lognormvariate(0.0, 1.2)))
                region.sites += ring
                region.rings.append(ring)

    def record(self, s: int) -> Segment:
        """Site ``s``'s topology record as it stands."""
        return self.sites[s].record.at(self.now)[0]

    def daily(self, rate: float, hours: tuple, first: int, name: str, payload=None) -> None:
        """On each day of the clock, rate x scale events (Poisson) at hours by ``hours``
        (weights for hours first, first + 1, ...)."""
        for d in (0, 1):
            for _ in range(count(self.rng, rate * self.scale)):
                self.at(d * DAY + hour_of(self.rng, hours, first) * HOUR, name, payload)

    def _on_release(self, p: int) -> None:
        """A new software release of platform ``p``: its reference partly rewritten."""
        ref = self.platforms[p].ref
        secs = ref.current
        share = self.rng.uniform(*RELEASE_SHARE)
        ref.versions.append((self.now, revise(self.rng, self.new, secs,
                                              max(1, round(share * len(secs))))))
        self.releases.append((self.now, p))

    def _on_policy(self, _: None) -> None:
        """The change policy is revised: 1..3 sections reworded, added or struck."""
        secs = revise(self.rng, self.new, self.policy.current, self.rng.randint(1, 3))
        self.policy.versions.append((self.now, secs))

    def submit(self, t: float) -> int:
        """A change submitted at ``t``: what it touches, its procedure, its window."""
        rng = self.rng
        kind = rng.choices([k for k, _ in CHANGE_MIX], [w for _, w in CHANGE_MIX])[0]
        region = rng.choice(self.regions)
        site = rng.choice(region.sites)
        p, site = {"ran": (region.ran, site), "router": (region.router, region.rings[
            self.sites[site].ring][0]), "core": (len(PLATFORMS) - 1, None)}[kind]
        mop = Versioned([(t, sections(self.new, clipped_length(rng, *MOP), SECTION))])
        day = int(t // DAY) + 1 + (t % DAY >= CUTOFF * HOUR)
        window = day * DAY + rng.uniform(*WINDOW) * HOUR
        self.changes.append(Change(p, site, mop, self.new(clipped_length(rng, *CHANGE_LINE)),
                                   t, window if window < END else None))
        n = len(self.changes) - 1
        if window < END:
            self.at(window, "execute", n)
        return n

    def _on_submit(self, _: None) -> None:
        n = self.submit(self.now)
        self.at(self.now + self.rng.uniform(*REVIEW_LAG), "review", n)

    def _on_review(self, n: int) -> None:
        """A review: system prompt, the policy as it stands, the procedure as it stands, the
        instruction; it may send the engineer back to edit (at most EDIT[1] times)."""
        ch = self.changes[n]
        segs = [self.review_system, *self.policy.at(self.now), *ch.mop.at(self.now),
                self.review_cue]
        ch.reviews.append(self.emit("review", n, len(ch.reviews), segs))
        when = self.now + clipped_length(self.rng, *EDIT[2])
        if len(ch.reviews) <= EDIT[1] and self.rng.random() < EDIT[0] and when < (
                ch.window or END) - HOUR:
            self.at(when, "edit", n)

    def _on_edit(self, n: int) -> None:
        """The engineer edits the procedure (1..3 sections) and it is reviewed again."""
        mop = self.changes[n].mop
        mop.versions.append((self.now, revise(self.rng, self.new, mop.current,
                                              self.rng.randint(1, 3))))
        self.at(self.now + self.rng.uniform(*REVIEW_LAG), "review", n)

    def _on_execute(self, n: int) -> None:
        """The change runs in the window; most at a site replace its topology record."""
        ch = self.changes[n]
        if ch.site is not None and self.rng.random() < NEW_RECORD:
            record = self.new(clipped_length(self.rng, *RECORD))
            self.sites[ch.site].record.versions.append((self.now, [record]))
        self.change_executed(n)

    def change_executed(self, n: int) -> None:
        """A hook for the desk (the change's config diff explained that morning)."""
