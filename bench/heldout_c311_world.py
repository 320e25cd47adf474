"""bench.heldout's ``city_311`` shape, its world: a mid-size city's 311 service (non-emergency
requests) as one replica sees it. The departments (each with its FAQ and status-update
template), the shared prompts (the resident assistant's system prompt per language, the service
catalog, the intake router's prompt and department taxonomy), the tickets (open ones from
before the clock, new ones as residents report things; each with its text and a history that
grows), the policy documents (one revised as an ordinance passes), the scheduled notices (the
next day's street sweeping per district, the holiday collection schedule) and the seed's
scenario (a quiet weekday, a storm, a holiday schedule change, a water-main break). See
bench/heldout_city_311.py's docstring for the numbers."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import ClockedState, Segment, clipped_length
from bench.heldout_legal_parts import Versioned
from bench.heldout_meeting_parts import pick
from bench.heldout_recruit_parts import sections

HOUR, DAY, MINUTE = 3600.0, 86400.0, 60.0
END = 2 * DAY  # Monday 00:00 local to Wednesday 00:00 (one city, one clock)
SCENARIOS = ("quiet", "storm", "holiday", "watermain")  # by seed: (seed - 1) % 4
# streets, sanitation, water, parks, noise, permits, animals, transit, housing, billing
DEPTS = ("streets", "sanitation", "water", "parks", "noise", "permits", "animals", "transit",
         "housing", "billing")
DEPT_WEIGHT = (0.24, 0.2, 0.08, 0.07, 0.1, 0.09, 0.05, 0.05, 0.07, 0.05)
FIELD_DEPTS = (0, 1, 2, 3, 6)  # departments whose reports are places (dedup by neighborhood)
CELLS = 40  # neighborhoods the dedup search is keyed by
DISTRICTS = 8  # street-sweeping districts
LANGS = (("en", 0.8), ("es", 0.13), ("zh", 0.03), ("vi", 0.02), ("tl", 0.02))
SYSTEM = 900  # tokens of the resident assistant's system prompt (one per language)
CATALOG = (1600, 400)  # tokens of the service catalog overview, section size
FAQ = (1500, 0.5, 500, 4500)  # tokens of a department's FAQ (sections of FAQ_SECTION)
FAQ_SECTION = 400
TEMPLATE = (300, 0.3, 150, 600)  # tokens of a department's status-update template
TEXT = (140, 0.7, 30, 800)  # tokens of a ticket's text as filed
UPDATE = (80, 0.7, 15, 500)  # tokens of one history entry (agent note, comment, status)
BACKLOG = 1100  # open tickets at the clock's start at scale 1.0 (x 0.85..1.15)
BACKLOG_HISTORY = (2, 0.8, 0, 12)  # history entries of a backlog ticket
POLICIES = 8  # policy documents (ordinances, fee schedules, permit rules)
POLICY = (4000, 0.5, 1500, 12000)  # tokens of one, in POLICY_SECTION sections
POLICY_SECTION = 600
NOTICE = (700, 0.4, 300, 1500)  # tokens of a district's next-day sweeping notice
HOLIDAY_NOTICE = (1400, 0.3, 800, 2500)  # tokens of the holiday collection schedule
# how likely a resident contact lands in each hour of the day (peaks mid-morning, evening)
RESIDENT_HOURS = (0.1, 0.06, 0.04, 0.03, 0.04, 0.1, 0.3, 0.6, 0.9, 1.0, 1.0, 0.95, 0.9, 0.9,
                  0.85, 0.8, 0.8, 0.85, 0.9, 0.9, 0.75, 0.55, 0.35, 0.2)


@dataclass
class Dept:
    """A department: its traffic weight, FAQ sections and status-update template."""

    weight: float
    faq: list[Segment]
    template: Segment


@dataclass
class Ticket:
    """A service request: department, neighborhood, when filed, its text, its history (agent
    notes, resident comments, posted status updates), whether open, and how many history
    entries the last nightly run saw (-1: none yet)."""

    dept: int
    cell: int
    created: float
    text: Segment
    history: list[Segment] = field(default_factory=list)
    open: bool = True
    seen: int = -1


def count(rng: random.Random, mean: float) -> int:
    """A Poisson-like count: Poisson for small means, a rounded normal for large ones."""
    if mean < 30:
        k, p, limit = 0, rng.random(), math.exp(-mean)
        while p > limit:
            k, p = k + 1, p * rng.random()
        return k
    return max(0, round(rng.gauss(mean, math.sqrt(mean))))


def hour_at(rng: random.Random, day: int, weights: tuple = RESIDENT_HOURS) -> float:
    """A time on ``day`` by the hourly ``weights``."""
    return (day * 24 + rng.choices(range(24), weights)[0] + rng.random()) * HOUR


class World(ClockedState):
    """The departments, prompts, tickets, policies and notices on the clock; ``file`` makes a
    ticket. bench.heldout_c311_jobs.Jobs builds on it."""

    END = END

    def __init__(self, rng: random.Random, scale: float, scenario: str) -> None:
        super().__init__(rng, 0, scale)
        self.scenario, new = scenario, self.new
        self.depts = [Dept(w * rng.uniform(0.8, 1.25),
                           sections(new, clipped_length(rng, *FAQ), FAQ_SECTION),
                           new(clipped_length(rng, *TEMPLATE))) for w in DEPT_WEIGHT]
        self.langs = {lang: new(SYSTEM) for lang, _ in LANGS}
        self.catalog = sections(new, CATALOG[0], CATALOG[1])
        self.tickets: list[Ticket] = []
        self.nearby: dict[tuple[int, int], list[int]] = {}  # (dept, cell) -> open tickets
        for _ in range(max(40, round(BACKLOG * scale * rng.uniform(0.85, 1.15)))):
            t = self.file(self.dept_by_weight(), rng.randrange(CELLS), -rng.uniform(0, 20) * DAY)
            self.tickets[t].history = [new(clipped_length(rng, *UPDATE))
                                       for _ in range(clipped_length(rng, *BACKLOG_HISTORY))]
        self.policies = [Versioned([(-1e18, sections(new, clipped_length(rng, *POLICY),
                                                     POLICY_SECTION))])
                         for _ in range(POLICIES)]
        self.notices = [Versioned([(d * DAY - 6 * HOUR, [new(clipped_length(rng, *NOTICE))])
                                   for d in (0, 1, 2)]) for _ in range(DISTRICTS)]
        self.holiday = Versioned([(-1e18, [new(clipped_length(rng, *HOLIDAY_NOTICE))])])

    def dept_by_weight(self) -> int:
        return self.rng.choices(range(len(DEPTS)), [d.weight for d in self.depts])[0]

    def lang(self) -> str:
        return pick(self.rng, LANGS)

    def file(self, dept: int, cell: int, when: float, text: Segment | None = None) -> int:
        """A new open ticket; its id."""
        text = text or self.new(clipped_length(self.rng, *TEXT))
        self.tickets.append(Ticket(dept, cell, when, text))
        self.nearby.setdefault((dept, cell), []).append(len(self.tickets) - 1)
        return len(self.tickets) - 1

    def close(self, t: int) -> None:
        """Ticket ``t`` is resolved (or merged as a duplicate)."""
        ticket = self.tickets[t]
        if ticket.open:
            ticket.open = False
            self.nearby[(ticket.dept, ticket.cell)].remove(t)

    def note(self, t: int) -> Segment:
        """A new entry on ticket ``t``'s history; the entry."""
        entry = self.new(clipped_length(self.rng, *UPDATE))
        self.tickets[t].history.append(entry)
        return entry

    def open_tickets(self) -> list[int]:
        return [t for t, x in enumerate(self.tickets) if x.open]

    def daily(self, rate: float, name: str, factor=lambda day: 1.0,
              weights: tuple = RESIDENT_HOURS) -> None:
        """``rate`` x scale x factor(day) events ``name`` a day (Poisson) by ``weights``."""
        for day in (0, 1):
            for _ in range(count(self.rng, rate * self.scale * factor(day))):
                self.at(hour_at(self.rng, day, weights), name, None)
