"""bench.heldout's ``recruiting`` shape, its world: the employers on a staffing platform (each in
a time zone, with a company profile, an applicant FAQ, an offer-letter template and outreach
templates), their requisitions (a job description, a rubric the hiring manager edits now and
then, a one-paragraph summary), the candidate database (a resume and the parsed profile made
from it, both replaced when a candidate uploads a new resume) and the applications arriving
through the day. The event clock and the local-time calendar. See
bench/heldout_recruiting.py's docstring for the numbers."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.heldout_fewshot import ClockedState, Segment, clipped_length
from bench.heldout_legal_parts import Versioned
from bench.heldout_meeting_parts import pick, poisson

HOUR, DAY, MINUTE = 3600.0, 86400.0, 60.0
END = 2 * DAY  # the clock starts Tuesday 00:00 UTC; the trace ends at Thursday 00:00 UTC
EMPLOYERS = 36
ZONES = ((-8.0, 0.22), (-6.0, 0.13), (-5.0, 0.3), (0.0, 0.1), (1.0, 0.15), (5.5, 0.1))
FIELDS = 12  # job families (engineering, nursing, sales, warehouse, ...)
REQS = 260  # open requisitions at scale 1.0 (x 0.85..1.15, at least 12)
LATE_REQS = 0.1  # of them opened during the trace (local 09..17), the rest before
CANDIDATES = 9000  # candidates in the database at scale 1.0 (at least 200)
COMPANY = (900, 0.5, 400, 2500)  # tokens of an employer's company profile
FAQ = (2000, 0.5, 800, 7000)  # tokens of its applicant FAQ (benefits, process, locations)
FAQ_SECTION = 500
OFFER = (1000, 0.3, 600, 2000)  # tokens of its offer-letter template
TEMPLATE = (280, 0.4, 150, 500)  # tokens of each of its 3 outreach templates
JD = (1200, 0.4, 500, 3000)  # tokens of a job description
RUBRIC = (500, 0.5, 200, 1500)  # tokens of a screening rubric
SUMMARY = (220, 0.3, 120, 400)  # tokens of a requisition's summary (job alerts, outreach)
RESUME = (900, 0.45, 300, 2500)  # tokens of a resume
PROFILE = (280, 0.4, 120, 700)  # tokens of the profile parsed from it
APPLY = (2.5, 0.8, 0.5, 30.0)  # applications a day per requisition (lognormal, clipped)
NEW_CANDIDATE = 0.7  # applications from someone not yet in the database
REUPLOAD = 0.4  # a known candidate applying uploads a new resume
ALERTS = 0.08  # database candidates with job alerts on (the nightly matching walk)
ALERTS_NEW = 0.15  # new candidates (applying) who turn alerts on
# how likely an application (a candidate's evening peak) lands in each local hour
APPLY_HOURS = (0.2, 0.1, 0.05, 0.03, 0.03, 0.05, 0.2, 0.5, 0.8, 1.0, 1.0, 0.9, 1.0, 0.9,
               0.8, 0.8, 0.8, 0.9, 1.1, 1.3, 1.4, 1.2, 0.8, 0.4)


@dataclass
class Employer:
    """An employer: its UTC offset, traffic weight (Zipf by a random rank), company profile,
    FAQ sections, offer template, outreach templates and requisitions."""

    tz: float
    weight: float
    company: Segment
    faq: list[Segment]
    offer: Segment
    templates: list[Segment]
    reqs: list[int] = field(default_factory=list)


@dataclass
class Req:
    """A requisition: its employer, job family, seniority, description, rubric (versions as
    the hiring manager edits it), summary, when it opened (-inf: before the trace) and its
    applications (ids into ``World.apps``, in arrival order; ``screened`` of them done by
    the batches)."""

    employer: int
    field: int
    level: float
    jd: Segment
    rubric: Versioned
    summary: Segment
    opened: float
    apps: list[int] = field(default_factory=list)
    screened: int = 0


@dataclass
class Candidate:
    """A candidate: job family, seniority, [resume, profile] versions (a new upload replaces
    both) and whether job alerts are on."""

    field: int
    level: float
    cv: Versioned
    alerts: bool


@dataclass
class App:
    """An application: when, to which requisition, by whom, the resume and profile as
    uploaded, the score its first screening gave (None before)."""

    time: float
    req: int
    cand: int
    resume: Segment
    profile: Segment
    score: float | None = None


def local(t: float, tz: float) -> float:
    """Hours since local midnight of day 0 (so 33.0 is 09:00 on day 1)."""
    return t / HOUR + tz


def utc(day: int, hour: float, tz: float) -> float:
    """Seconds on the clock of ``hour`` local time on local ``day``."""
    return (day * 24 + hour - tz) * HOUR


def sections(new: Callable, total: int, size: int) -> list[Segment]:
    """``total`` tokens of new content in sections of about ``size``."""
    k = max(1, round(total / size))
    return [new(total // k + (i < total % k)) for i in range(k)]


def hour_of(rng: random.Random, weights: tuple, first: int = 0) -> float:
    """A local hour (with its minutes) by ``weights`` for hours first, first + 1, ..."""
    return rng.choices(range(first, first + len(weights)), weights)[0] + rng.random()


class World(ClockedState):
    """Employers, requisitions, candidates and the applications arriving on the clock;
    ``emit`` sends a request. bench.heldout_recruit_jobs.Jobs builds on it."""

    END = END

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, 0, scale)
        self.employers = [self._employer(r ** -1.0) for r in
                          rng.sample(range(1, EMPLOYERS + 1), EMPLOYERS)]
        self.cands: list[Candidate] = []
        self.by_field: list[list[int]] = [[] for _ in range(FIELDS)]
        for _ in range(max(200, round(CANDIDATES * scale))):
            self.candidate(-1e18, rng.randrange(FIELDS), rng.random() < ALERTS)
        self.reqs: list[Req] = []
        self.apps: list[App] = []
        n = max(12, round(REQS * scale * rng.uniform(0.85, 1.15)))
        weights = [e.weight for e in self.employers]
        for e in rng.choices(range(EMPLOYERS), weights, k=n):
            late = rng.random() < LATE_REQS
            d = rng.choice((0, 1))
            self.open_req(e, utc(d, rng.uniform(9, 17), self.employers[e].tz) if late else -1e18)

    def _employer(self, weight: float) -> Employer:
        rng, new = self.rng, self.new
        return Employer(pick(rng, ZONES), weight, new(clipped_length(rng, *COMPANY)),
                        sections(new, clipped_length(rng, *FAQ), FAQ_SECTION),
                        new(clipped_length(rng, *OFFER)),
                        [new(clipped_length(rng, *TEMPLATE)) for _ in range(3)])

    def candidate(self, t: float, fld: int, alerts: bool) -> int:
        """A new candidate of job family ``fld`` (its resume and profile from ``t``)."""
        rng = self.rng
        cv = [self.new(clipped_length(rng, *RESUME)), self.new(clipped_length(rng, *PROFILE))]
        self.cands.append(Candidate(fld, rng.random(), Versioned([(t, cv)]), alerts))
        self.by_field[fld].append(len(self.cands) - 1)
        return len(self.cands) - 1

    def open_req(self, e: int, t: float, steady: bool = True) -> int:
        """A requisition of employer ``e`` opening at ``t``; if ``steady``, its applications
        from then (or from a day before the clock's start for one open before) to the end."""
        rng, tz = self.rng, self.employers[e].tz
        r = len(self.reqs)
        rubric = Versioned([(-1e18, [self.new(clipped_length(rng, *RUBRIC))])])
        self.reqs.append(Req(e, rng.randrange(FIELDS), rng.random(),
                             self.new(clipped_length(rng, *JD)), rubric,
                             self.new(clipped_length(rng, *SUMMARY)), t))
        self.employers[e].reqs.append(r)
        rate = min(APPLY[3], max(APPLY[2], rng.lognormvariate(0.0, APPLY[1]) * APPLY[0]))
        whens = [utc(d, hour_of(rng, APPLY_HOURS), tz) for d in (-1, 0, 1, 2)
                 for _ in range(poisson(rng, rate if steady else 0.0))]
        for when in sorted(whens):
            if max(t, -DAY) <= when < END:
                self.apply_at(when, r)
        return r

    def apply_at(self, when: float, r: int) -> None:
        """An application to ``r`` at ``when`` (before the clock's start: added at once)."""
        if when < 0:
            self.now, now = when, self.now
            self._on_apply(r)
            self.now = now
        else:
            self.at(when, "apply", r)

    def _on_apply(self, r: int) -> int:
        """Someone applies to ``r``: a new candidate, or one of the family in the database
        (uploading a new resume some of the time). The application's id."""
        rng, req = self.rng, self.reqs[r]
        pool = self.by_field[req.field]
        if rng.random() < NEW_CANDIDATE or not pool:
            c = self.candidate(self.now, req.field, rng.random() < ALERTS_NEW)
        else:
            c = rng.choice(pool)
            if rng.random() < REUPLOAD:
                cv = [self.new(clipped_length(rng, *RESUME)),
                      self.new(clipped_length(rng, *PROFILE))]
                self.cands[c].cv.versions.append((self.now, cv))
        resume, profile = self.cands[c].cv.at(self.now)
        self.apps.append(App(self.now, r, c, resume, profile))
        req.apps.append(len(self.apps) - 1)
        return len(self.apps) - 1

    def employer_by_weight(self) -> int:
        return self.rng.choices(range(EMPLOYERS), [e.weight for e in self.employers])[0]

    def open_reqs(self, e: int) -> list[int]:
        """Employer ``e``'s requisitions open now."""
        return [r for r in self.employers[e].reqs if self.reqs[r].opened <= self.now]

    def profile(self, c: int) -> Segment:
        """Candidate ``c``'s profile as it stands now."""
        return self.cands[c].cv.at(self.now)[1]
