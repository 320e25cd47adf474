"""bench.heldout's ``bank_kyc`` shape, its world: the bank's KYC policy (a chapter per customer
type, a periodic-review chapter and a screening policy, each cut into sections and amended
now and then), the jurisdictions it books customers in (each with its rules and a SAR
template), the customer base (a profile that a completed review replaces, the last review
memo, a 90-day activity summary, the sanctions-list section the name falls in), the
consolidated sanctions list (a header and sections by name, re-issued during the day) with
the screening it drives (delta re-screening after each issue, payment-screening hits), the
analysts' shifts and the job streams' pace. See bench/heldout_bank_kyc.py's docstring for
the numbers."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.heldout_fewshot import ClockedState, Segment, clipped_length
from bench.heldout_legal_parts import Versioned
from bench.heldout_meeting_parts import pick, poisson
from bench.heldout_recruit_parts import hour_of, sections

HOUR, DAY, MINUTE = 3600.0, 86400.0, 60.0
END = 2 * DAY  # the clock starts Tuesday 00:00 bank time and ends Thursday 00:00
BEFORE = -1e18  # the time of content that was there before the clock's start
TYPES = (("individual", 0.7), ("sole", 0.1), ("corporate", 0.2))  # customer types
RISKS = (("low", 0.6), ("medium", 0.3), ("high", 0.1))  # customers' risk ratings
CUSTOMERS = 20000  # the customer base at scale 1.0 (at least 400)
JURISDICTIONS = (4, 9)  # the bank books customers in this many, Zipf(1) by a random rank
RULES = (1500, 0.5, 800, 3500)  # tokens of a jurisdiction's rules (AML law, regulator's KYC)
SAR_TEMPLATE = (1600, 0.3, 1000, 2500)  # tokens of its suspicious-activity report template
POLICY = (2200, 0.4, 1500, 4000)  # tokens of the KYC policy's chapter for a customer type
PERIODIC = (1500, 0.3, 800, 3000)  # tokens of its periodic-review chapter
SCREENING = (1800, 0.3, 1200, 3000)  # tokens of the screening policy
SECTION = 600  # tokens of a policy section
PROFILE = (600, 0.5, 250, 1500)  # tokens of a customer profile (KYC data, risk factors)
MEMO = (600, 0.5, 250, 1500)  # tokens of the last review's memo
ACTIVITY = (900, 0.5, 300, 2500)  # tokens of a 90-day activity summary
NAMES = 26  # sections of the consolidated sanctions list, by name; weight rank^-0.7
LIST_SECTION = (700, 0.5, 300, 1600)  # tokens of a list section
HEADER = 120  # tokens of the list's header (issue number, date, programs)
ISSUES = (2, 4)  # the list is re-issued this many times over the two days
ISSUE_HOURS = (10.0, 17.5)  # when a re-issue lands (day 0 or 1)
DELTA = (3, 8)  # sections a re-issue changes
HITS = (100, 0.4, 40, 300)  # potential matches a delta run adjudicates (x scale)
PAYMENTS = 120  # payment-screening hits a day at scale 1.0, 06..20
PAYMENT = (550, 0.4, 300, 900)  # tokens of a payment message (pacs.008, MT103)
SCREEN_SYSTEM, SCREEN_CUE = 800, 40
SCREEN_OUT = (120, 0.4, 60, 250)  # tokens of a screening decision
STREAM_OUT = (250, 0.5, 40, 900)  # tokens the other jobs' requests write
HOME = (0.6, 1.0, 1.0, 0.9, 0.6, 0.9, 1.0, 0.9, 0.7, 0.4)  # analysts at work by hour, 08..17
OFFSHORE = (0.55, 0.4, 5.5)  # seeds with an offshore centre, its share of analysts, hours
# ahead of bank time (its 08:00..18:00 is bank 02:30..12:30)
PREFILL, DECODE = 6000.0, 35.0  # tokens a second the replica reads and writes for a stream


@dataclass
class Jurisdiction:
    """Where customers are booked: traffic weight, its rules (sections), its SAR template."""

    weight: float
    rules: list[Segment]
    sar: Segment


@dataclass
class Customer:
    """A customer: type, jurisdiction, risk rating, sanctions-list section of the name,
    profile (versions: a completed review writes a new one), last memo, activity summary."""

    type: str
    jur: int
    risk: str
    name: int
    profile: Versioned
    memo: Segment
    activity: Segment


@dataclass
class Stream:
    """A job's walk, one request at a time at the replica's pace: its items, ``prompt``
    turning an item into (kind, owner, step, segments), a ``done`` hook called when the
    walk is over, how far it is and its request indices."""

    items: list
    prompt: Callable[[object], tuple[str, int, int, list[Segment]]]
    done: Callable[[], None] | None = None
    pos: int = 0
    sent: list[int] = field(default_factory=list)


def versioned(rng: random.Random, new: Callable, size: tuple, section: int) -> Versioned:
    """A document of ``size`` tokens in sections, as it stood before the clock's start."""
    return Versioned([(BEFORE, sections(new, clipped_length(rng, *size), section))])


class World(ClockedState):
    """The policy, jurisdictions, customers, sanctions list and screening, the shifts and the
    stream runner; ``emit`` sends a request. bench.heldout_kyc_jobs.Jobs builds on it."""

    END = END

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, 0, scale)
        ranks = rng.sample(range(1, JURISDICTIONS[1] + 1), rng.randint(*JURISDICTIONS))
        self.jurs = [Jurisdiction(r ** -1.0, sections(self.new, clipped_length(rng, *RULES),
                                                      SECTION),
                                  self.new(clipped_length(rng, *SAR_TEMPLATE))) for r in ranks]
        self.policy = {t: versioned(rng, self.new, POLICY, SECTION) for t, _ in TYPES}
        self.periodic = versioned(rng, self.new, PERIODIC, SECTION)
        self.screening = versioned(rng, self.new, SCREENING, SECTION)
        self.offshore = rng.random() < OFFSHORE[0]
        self.name_weights = [r ** -0.7 for r in rng.sample(range(1, NAMES + 1), NAMES)]
        self.customers: list[Customer] = []
        self.by_name: list[list[int]] = [[] for _ in range(NAMES)]
        for _ in range(max(400, round(CUSTOMERS * scale))):
            self.customer(BEFORE, pick(rng, TYPES), self.jur_by_weight())
        self.header = Versioned([(BEFORE, [self.new(HEADER)])])
        self.names = [Versioned([(BEFORE, [self.new(clipped_length(rng, *LIST_SECTION))])])
                      for _ in range(NAMES)]
        self.issues: list[tuple[float, list[int], Stream]] = []  # (time, changed, delta walk)
        self.screens: list[tuple[str, int, int, int]] = []  # (source, subject, name, request)
        self.screen_system, self.screen_cue = self.new(SCREEN_SYSTEM), self.new(SCREEN_CUE)
        days = sorted(rng.choice((0, 1)) for _ in range(rng.randint(*ISSUES)))
        for d in days:
            self.at(d * DAY + rng.uniform(*ISSUE_HOURS) * HOUR, "issue", None)
        for d in (0, 1):
            for _ in range(poisson(rng, PAYMENTS * scale)):
                self.at(d * DAY + rng.uniform(6, 20) * HOUR, "payment", None)

    def jur_by_weight(self) -> int:
        return self.rng.choices(range(len(self.jurs)), [j.weight for j in self.jurs])[0]

    def customer(self, t: float, kind: str, jur: int, profile: Segment | None = None) -> int:
        """A new customer of type ``kind`` in ``jur`` (its profile from ``t``); its id."""
        rng, new = self.rng, self.new
        name = rng.choices(range(NAMES), self.name_weights)[0]
        first = profile or new(clipped_length(rng, *PROFILE))
        self.customers.append(Customer(kind, jur, pick(rng, RISKS), name,
                                       Versioned([(t, [first])]),
                                       new(clipped_length(rng, *MEMO)),
                                       new(clipped_length(rng, *ACTIVITY))))
        self.by_name[name].append(len(self.customers) - 1)
        return len(self.customers) - 1

    def profile(self, c: int) -> Segment:
        """Customer ``c``'s profile as it stands now."""
        return self.customers[c].profile.at(self.now)[0]

    def on_duty(self, t: float) -> bool:
        """Whether analysts are at work at ``t`` (home 08..18, offshore 02:30..12:30)."""
        h = t / HOUR % 24
        return 8 <= h < 18 or (self.offshore and 8 - OFFSHORE[2] <= h < 18 - OFFSHORE[2])

    def next_duty(self, t: float) -> float:
        """``t`` if analysts are at work then, else early in the next shift."""
        if self.on_duty(t):
            return t
        day, h = divmod(t / HOUR, 24)
        start = 8 - OFFSHORE[2] if self.offshore else 8.0
        day += h >= start
        return (day * 24 + start) * HOUR + self.rng.uniform(0, 30) * MINUTE

    def staff_time(self, day: int) -> float:
        """When an analyst on ``day`` starts something: home hours by HOME, or (a share
        OFFSHORE[1] where there is an offshore centre) the same local hours offshore."""
        h = hour_of(self.rng, HOME, 8)
        if self.offshore and self.rng.random() < OFFSHORE[1]:
            h -= OFFSHORE[2]
        return (day * 24 + h) * HOUR

    def pace(self, segs: list[Segment], out: tuple) -> float:
        """Seconds until a stream's next request: reading the prompt, writing the output."""
        work = sum(n for _, n in segs) / PREFILL + clipped_length(self.rng, *out) / DECODE
        return work * self.rng.uniform(0.8, 1.25)

    def walk(self, s: Stream, when: float | None = None) -> Stream:
        """Start ``s`` at ``when`` (now if None)."""
        self.at(self.now if when is None else when, "stream", s)
        return s

    def _on_stream(self, s: Stream) -> None:
        """The walk's next item, or its ``done`` hook when it has none left."""
        if s.pos >= len(s.items):
            if s.done:
                s.done()
            return
        kind, owner, step, segs = s.prompt(s.items[s.pos])
        s.pos += 1
        s.sent.append(self.emit(kind, owner, step, segs))
        out = SCREEN_OUT if kind == "screen" else STREAM_OUT
        self.at(self.now + self.pace(segs, out), "stream", s)

    def screen(self, source: str, subject: int, name: int, party: Segment) -> tuple:
        """A screening request: system prompt, screening policy, the list's header and the
        section of the name as they stand now, the party (profile, extraction or payment),
        cue; (kind, owner: the list issue in force, step: its index in ``screens``, segs)."""
        segs = [self.screen_system, *self.screening.at(self.now), *self.header.at(self.now),
                *self.names[name].at(self.now), party, self.screen_cue]
        self.screens.append((source, subject, name, len(self.out)))
        return "screen", len(self.header.versions) - 1, len(self.screens) - 1, segs

    def _on_issue(self, _: None) -> None:
        """The list is re-issued: a new header, DELTA sections changed; the delta run walks
        potential matches in the changed sections, section by section, in id order."""
        rng = self.rng
        self.header.versions.append((self.now, [self.new(HEADER)]))
        changed = sorted(rng.sample(range(NAMES), rng.randint(*DELTA)))
        for k in changed:
            self.names[k].versions.append((self.now,
                                           [self.new(clipped_length(rng, *LIST_SECTION))]))
        pool = [(k, c) for k in changed for c in self.by_name[k]]
        hits = min(len(pool), max(3, round(clipped_length(rng, *HITS) * self.scale)))
        todo = sorted(rng.sample(pool, hits))
        s = Stream(todo, lambda kc: self.screen("delta", kc[1], kc[0], self.profile(kc[1])))
        self.issues.append((self.now, changed, self.walk(s)))

    def _on_payment(self, _: None) -> None:
        """A payment's party names hit the list: the hit is adjudicated at once."""
        name = self.rng.choices(range(NAMES), self.name_weights)[0]
        message = self.new(clipped_length(self.rng, *PAYMENT))
        self.emit(*self.screen("payment", message[0], name, message))
