"""bench.heldout's ``sales_crm`` shape, its world: a B2B sales org's CRM as its assistant sees
it. Sales teams in a few time zones, each selling to one segment (small business, mid-market,
enterprise) with the segment's playbook; account executives (AEs) owning a book of accounts,
each with a profile, a history that grows as notes, emails and call summaries land, and open
opportunities whose records the reps rewrite; SDRs working leads; the product sheets,
competitor battlecards and price book everyone reads. A product launch revises sheets,
playbooks and battlecards (later sections new); a quarter's end adds a promotion to the price
book. The event clock and the local-time calendar. See bench/heldout_sales_crm.py's
docstring for the numbers."""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.heldout_fewshot import ClockedState, Segment, clipped_length
from bench.heldout_legal_parts import Versioned
from bench.heldout_meeting_parts import pick, poisson
from bench.heldout_recruit_parts import hour_of, local, utc

HOUR, DAY, MINUTE = 3600.0, 86400.0, 60.0
END = 2 * DAY  # the trace is two UTC days
NEVER = -1e18  # the time of content that predates the trace
# scenario -> weekday (0 is Monday) of the clock's first UTC day
SCENARIOS = {"normal": 0, "launch": 0, "quarter_end": 3, "event": 2}
TEAMS = 8
ZONES = ((-7.0, 0.35), (-5.0, 0.1), (-4.0, 0.3), (1.0, 0.15), (2.0, 0.05), (10.0, 0.05))
SEGMENTS = ((0, 0.35), (1, 0.4), (2, 0.25))  # small business, mid-market, enterprise
REVIEW_DAYS = ((0, 0.7), (2, 0.15), (3, 0.15))  # weekday of a team's pipeline review
REPS = 8  # reps a team at scale 1.0 (x 0.8..1.2, at least 2)
SDR_SHARE = 0.33  # of a team's reps (at least one AE)
BOOK = (30, 20, 10)  # accounts an AE owns, by segment
DEPTH = (0.7, 1.0, 1.6)  # history length factor by segment
PROFILE = (400, 0.4, 150, 1000)  # tokens of an account's profile (firmographics, contacts)
ENTRY = (160, 0.7, 40, 800)  # tokens of a history entry (a note, an email, a summary)
ENTRIES = (12, 0.7, 2, 60)  # history entries an account has before the trace
HISTORY_CAP = 12000  # tokens of history an account starts with at most
OPPS = ((0, 0.45), (1, 0.35), (2, 0.15), (3, 0.05))  # open opportunities of an account
OPP = (350, 0.4, 150, 900)  # tokens of an opportunity's record (stage, amount, next steps)
STAGES = 6
PRODUCTS = 10  # product sheets before a launch (a launch adds one)
SHEET = (1600, 0.4, 700, 3500)  # tokens of a product sheet, in SHEET_SECTION sections
SHEET_SECTION = 400
PLAYBOOK = (6000, 0.3, 3500, 10000)  # tokens of a segment's playbook, in PLAY_SECTION
PLAY_SECTION = 600
CARDS = 8  # competitor battlecards
CARD = (1500, 0.4, 700, 3000)
PRICING = (2200, 0.3, 1200, 4000)  # the price book
PROMO = (500, 0.3, 200, 900)  # quarter_end: the promotion's addendum to the price book
PROMO_AT = 15 * HOUR  # quarter_end: when the addendum lands
QUARTER = 0.45  # quarter_end: opportunities closing by the quarter's end (the clock's end)
HORIZON = 60 * DAY  # otherwise: opportunities close 1 day..HORIZON ahead
STYLE = (200, 0.4, 80, 500)  # tokens of a rep's email style and signature
TEMPLATES = 6  # outreach templates a team's SDRs share
TEMPLATE = (300, 0.4, 120, 700)
LAUNCH = (1, 9.0, -7.0)  # launch scenario: local day, hour and zone of the launch
REVISED = (2, 4)  # products whose sheets a launch revises (besides the new one)
REVISED_CARDS = 3


@dataclass
class Team:
    """A sales team: UTC offset, segment, weekday of its pipeline review, the SDRs'
    outreach templates and its reps (ids into ``World.reps``)."""

    tz: float
    segment: int
    review_day: int
    templates: list[Segment]
    reps: list[int] = field(default_factory=list)


@dataclass
class Rep:
    """A rep: team, whether an SDR (else an AE), email style, accounts owned (AEs)."""

    team: int
    sdr: bool
    style: Segment
    accounts: list[int] = field(default_factory=list)


@dataclass
class Account:
    """An account: owner, activity weight, profile, history entries with their times (in the
    order they landed), open opportunities."""

    rep: int
    weight: float
    profile: Segment
    times: list[float]
    entries: list[Segment]
    opps: list[int] = field(default_factory=list)

    def history(self, t: float) -> list[Segment]:
        """The entries that had landed by ``t``, oldest first."""
        return self.entries[:bisect.bisect_right(self.times, t)]


@dataclass
class Opp:
    """An open opportunity: account, products, stage, close time, record versions."""

    account: int
    products: list[int]
    stage: int
    close: float
    record: Versioned


def sections(new: Callable, total: int, size: int) -> list[Segment]:
    """``total`` tokens of new content in sections of about ``size``."""
    k = max(1, round(total / size))
    return [new(total // k + (i < total % k)) for i in range(k)]


def revise(rng: random.Random, new: Callable, secs: list[Segment], extra: int) -> list[Segment]:
    """A revision keeping ``secs``' first 1..n-1 sections (all of a one-section text) and
    rewriting the rest at their sizes, plus ``extra`` new sections."""
    keep = rng.randint(1, max(1, len(secs) - 1))
    size = secs[-1][1]
    return [*secs[:keep], *(new(n) for _, n in secs[keep:]), *(new(size) for _ in range(extra))]


class World(ClockedState):
    """The org, its content and its calendar; ``emit`` sends a request. The jobs
    (bench.heldout_crm_jobs.Jobs) build on it."""

    END = END

    def __init__(self, rng: random.Random, scale: float, scenario: str) -> None:
        super().__init__(rng, 0, scale)
        self.scenario, self.weekday = scenario, SCENARIOS[scenario]
        new = self.new
        self.launch = utc(*LAUNCH) if scenario == "launch" else None
        self.sheets = [Versioned([(NEVER, sections(new, clipped_length(rng, *SHEET),
                                                   SHEET_SECTION))]) for _ in range(PRODUCTS)]
        self.playbooks = [Versioned([(NEVER, sections(new, clipped_length(rng, *PLAYBOOK),
                                                      PLAY_SECTION))]) for _ in range(3)]
        self.cards = [Versioned([(NEVER, [new(clipped_length(rng, *CARD))])])
                      for _ in range(CARDS)]
        self.pricing = Versioned([(NEVER, [new(clipped_length(rng, *PRICING))])])
        if self.launch is not None:
            self._plan_launch()
        if scenario == "quarter_end":
            base = self.pricing.current
            self.pricing.versions.append((PROMO_AT, [*base, new(clipped_length(rng, *PROMO))]))
        self.teams: list[Team] = []
        self.reps: list[Rep] = []
        self.accounts: list[Account] = []
        self.opps: list[Opp] = []
        for _ in range(TEAMS):
            self._team()

    def _plan_launch(self) -> None:
        """The launch: a new product's sheet, 2..4 sheets and every playbook revised from a
        section on (a playbook gains a section on the new product), 3 battlecards rewritten."""
        rng, new, t = self.rng, self.new, self.launch
        for p in rng.sample(range(PRODUCTS), rng.randint(*REVISED)):
            self.sheets[p].versions.append((t, revise(rng, new, self.sheets[p].current, 0)))
        self.sheets.append(Versioned([(t, sections(new, clipped_length(rng, *SHEET),
                                                   SHEET_SECTION))]))
        for book in self.playbooks:
            book.versions.append((t, revise(rng, new, book.current, 1)))
        for c in rng.sample(range(CARDS), REVISED_CARDS):
            self.cards[c].versions.append((t, [new(clipped_length(rng, *CARD))]))

    def _team(self) -> None:
        """A team, its reps (a third SDRs) and the AEs' books of accounts."""
        rng = self.rng
        segment = pick(rng, SEGMENTS)
        templates = [self.new(clipped_length(rng, *TEMPLATE)) for _ in range(TEMPLATES)]
        team = Team(pick(rng, ZONES), segment, pick(rng, REVIEW_DAYS), templates)
        self.teams.append(team)
        size = max(2, round(REPS * self.scale * rng.uniform(0.8, 1.2)))
        sdrs = min(size - 1, round(size * SDR_SHARE))
        for k in range(size):
            self.reps.append(Rep(len(self.teams) - 1, k < sdrs,
                                 self.new(clipped_length(rng, *STYLE))))
            team.reps.append(len(self.reps) - 1)
            if k >= sdrs:
                for _ in range(round(BOOK[segment] * rng.uniform(0.7, 1.3))):
                    self._account(len(self.reps) - 1, segment)

    def _account(self, rep: int, segment: int) -> None:
        """An account of ``rep``: profile, the history it starts with, its open opps."""
        rng, new = self.rng, self.new
        n = round(clipped_length(rng, *ENTRIES) * DEPTH[segment])
        entries: list[Segment] = []
        while len(entries) < n and sum(t for _, t in entries) < HISTORY_CAP:
            entries.append(new(clipped_length(rng, *ENTRY)))
        a = len(self.accounts)
        self.accounts.append(Account(rep, rng.lognormvariate(0.0, 1.0),
                                     new(clipped_length(rng, *PROFILE)),
                                     [NEVER] * len(entries), entries))
        self.reps[rep].accounts.append(a)
        for _ in range(pick(rng, OPPS)):
            close = (rng.uniform(0.1, END) if self.scenario == "quarter_end"
                     and rng.random() < QUARTER else rng.uniform(DAY, HORIZON))
            record = Versioned([(NEVER, [new(clipped_length(rng, *OPP))])])
            products = rng.sample(range(PRODUCTS), pick(rng, ((1, 0.6), (2, 0.3), (3, 0.1))))
            self.opps.append(Opp(a, sorted(products), rng.randint(1, STAGES), close, record))
            self.accounts[a].opps.append(len(self.opps) - 1)

    def workday(self, day: int) -> bool:
        """Whether local ``day`` (day 0 is the clock's first UTC day) is Monday..Friday."""
        return (self.weekday + day) % 7 < 5

    def later(self, t: float, name: str, payload: object) -> None:
        """Schedule ``name`` at ``t`` if it falls on the clock (0..END)."""
        if 0 <= t < self.END:
            self.at(t, name, payload)

    def daily(self, tz: float, rate: float, hours: tuple, first: int, name: str,
              payload: object) -> None:
        """Each local workday at ``tz``, Poisson(``rate``) events ``name`` at local hours by
        ``hours`` from ``first``."""
        for d in (-1, 0, 1, 2):
            if self.workday(d):
                for _ in range(poisson(self.rng, rate)):
                    self.later(utc(d, hour_of(self.rng, hours, first), tz), name, payload)

    def tz_of(self, rep: int) -> float:
        return self.teams[self.reps[rep].team].tz

    def office(self, t: float, tz: float) -> float:
        """``t``, or the next local workday's 08:00..09:00 when ``t`` is outside 08..19 of a
        workday at ``tz``."""
        h = local(t, tz)
        day, hour = int(h // 24), h % 24
        if self.workday(day) and 8 <= hour < 19:
            return t
        day += hour >= 19
        while not self.workday(day):
            day += 1
        return utc(day, 8 + self.rng.random(), tz)

    def live_products(self) -> list[int]:
        """The products whose sheets exist now (a launched one from the launch)."""
        return [p for p, s in enumerate(self.sheets) if s.versions[0][0] <= self.now]

    def sheets_of(self, products: list[int]) -> list[Segment]:
        """The sheets of ``products`` as they stand, in product order."""
        return [s for p in products for s in self.sheets[p].at(self.now)]

    def note(self, a: int, seg: Segment) -> None:
        """A history entry lands on account ``a`` now."""
        acc = self.accounts[a]
        acc.times.append(self.now)
        acc.entries.append(seg)

    def history(self, a: int) -> list[Segment]:
        return self.accounts[a].history(self.now)

    def update(self, o: int) -> None:
        """A rep rewrites opportunity ``o``'s record now (moving its stage at times)."""
        opp = self.opps[o]
        opp.record.versions.append((self.now, [self.new(clipped_length(self.rng, *OPP))]))
        if self.rng.random() < 0.3:
            opp.stage = min(STAGES, opp.stage + 1)

    def account_of(self, rep: int) -> int:
        """One of AE ``rep``'s accounts, by activity weight."""
        accs = self.reps[rep].accounts
        return self.rng.choices(accs, [self.accounts[a].weight for a in accs])[0]

    def aes(self) -> list[int]:
        return [r for r, rep in enumerate(self.reps) if not rep.sdr]
