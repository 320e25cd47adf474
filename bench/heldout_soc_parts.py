"""bench.heldout's ``soc_copilot`` shape, its world: the MSSP's client organisations (Zipf
sizes, their own time zones), each with an environment profile, runbooks per alert category,
a detection-rule catalog (rules versioned as detection engineers rewrite them), an asset
inventory in chunks and a hunt checklist; the SOC's clock of three shifts; alerts and the
bursts (campaigns, storms) they come in. See bench/heldout_soc_copilot.py's docstring for what
each part models and its numbers."""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.heldout_bi_parts import local_hour, weekday
from bench.heldout_call_center_parts import sections
from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_legal_parts import Versioned
from bench.heldout_meeting_parts import pick

HOUR, DAY, MINUTE = 3600.0, 86400.0, 60.0
CLIENTS = 12  # at scale 1.0 (scaled, at least 3)
ZIPF = 1.0  # client size by a random rank
# (UTC offset of the client's offices, share of the clients); the clock's 0 is Monday 00:00 UTC
ZONES = ((-5.0, 0.35), (-6.0, 0.15), (-8.0, 0.2), (0.0, 0.15), (1.0, 0.1), (10.0, 0.05))
# alerts by the client's local hour on a weekday (1.0 at the peak): people log on, read mail
# and browse by day; scanners, backups and batch jobs keep the night above zero
HOURS = (0.3, 0.25, 0.25, 0.25, 0.3, 0.35, 0.5, 0.75, 0.95, 1.0, 1.0, 0.95, 0.9, 0.95, 1.0,
         0.95, 0.85, 0.7, 0.55, 0.45, 0.4, 0.35, 0.35, 0.3)
WEEKEND = 0.5  # x a weekday's alerts
ALERTS = 2.0  # alerts an hour at the peak for a client of mean size
SOC_TZ = -5.0  # the MSSP's SOC (one site, 24/7)
SHIFTS = ((7, "day", 1.0), (15, "swing", 0.6), (23, "night", 0.3))  # start, name, staffing
CATEGORIES = ("phishing", "malware", "identity", "network", "cloud", "endpoint",
              "exfiltration", "policy")
PROFILE = (2200, 0.4, 1000, 6000)  # tokens of a client's environment profile (x size^0.2)
RUNBOOK = (900, 0.5, 300, 3000)  # tokens of a client's runbook for one category
RULES = (90, 0.4, 25, 400)  # rules in a client's catalog (x size^0.5)
RULE_ZIPF = 1.1  # how often a rule fires, by a random rank
ASSETS = (40, 0.3, 10, 250)  # chunks of a client's asset inventory (x size^0.7)
ASSET = (420, 0.3, 250, 600)  # tokens of an inventory chunk (about 50 assets)
CHECKLIST = (700, 0.4, 300, 1500)  # tokens of a client's standing hunt checklist
HUNTERS = 0.5  # clients with the nightly threat-hunt service (the largest always)
EVENTS = (600, 0.8, 120, 4000)  # tokens of an alert's raw event / log excerpt


def busy(t: float, tz: float) -> float:
    """How many alerts a client at ``tz`` raises at ``t`` (1.0 at a weekday's peak)."""
    w = HOURS[int(local_hour(t, tz))]
    return w * (WEEKEND if weekday(t, tz) >= 5 else 1.0)


def office(t: float, tz: float) -> bool:
    """Whether ``t`` is in office hours (weekdays 08..18 local) at ``tz``."""
    return weekday(t, tz) < 5 and 8 <= local_hour(t, tz) < 18


def next_office(rng: random.Random, t: float, tz: float) -> float:
    """A time at or after ``t`` in office hours at ``tz`` (uniform in the hour it finds)."""
    while not office(t, tz):
        t = (t // HOUR + 1) * HOUR
    return t + rng.uniform(0, HOUR - t % HOUR)


def shift(t: float) -> tuple[int, str, float]:
    """The SOC shift at ``t``: (index into SHIFTS, name, staffing)."""
    h = local_hour(t, SOC_TZ)
    i = 0 if 7 <= h < 15 else 1 if 15 <= h < 23 else 2
    return i, SHIFTS[i][1], SHIFTS[i][2]


def shift_end(t: float) -> float:
    """When the shift on at ``t`` hands off (the next of 07:00, 15:00, 23:00 SOC time)."""
    h = local_hour(t, SOC_TZ)
    nxt = min((s for s, _, _ in SHIFTS if s > h), default=SHIFTS[0][0] + 24)
    return t + (nxt - h) * HOUR


@dataclass
class Rule:
    """A detection rule: its alert category (index into CATEGORIES) and its text as sections
    (header and metadata, detection logic, exclusions), versioned as engineers rewrite it."""

    category: int
    text: Versioned


@dataclass
class Client:
    """A client organisation: offices' time zone, size (mean 1), environment profile and the
    runbook of each category (Versioned), its rule catalog (catalog order) and how often each
    rule fires (cumulative, by index), its asset inventory (chunks, in inventory order), the
    hunt checklist (Versioned), whether it has the hunt service, and its closed cases'
    summaries as (time, summary) for the weekly report."""

    tz: float
    weight: float
    profile: Versioned
    runbooks: list[Versioned]
    rules: list[Rule]
    cum: list[float]
    assets: list[Segment]
    checklist: Versioned
    hunts: bool
    closed: list[tuple[float, Segment]] = field(default_factory=list)

    def rule(self, rng: random.Random) -> int:
        """A rule by how often it fires (index into ``rules``)."""
        return bisect.bisect_left(self.cum, rng.random() * self.cum[-1])

    def noisy(self, k: int) -> list[int]:
        """The ``k`` rules that fire most often, commonest first."""
        w = [b - a for a, b in zip([0.0, *self.cum], self.cum)]
        return sorted(range(len(w)), key=lambda i: -w[i])[:k]

    def in_categories(self, names: tuple[str, ...]) -> list[int]:
        """The rules whose category is one of ``names`` (catalog order)."""
        return [i for i, r in enumerate(self.rules) if CATEGORIES[r.category] in names]


def make_rule(rng: random.Random, new: Callable) -> Rule:
    """A rule of 150..1000 tokens: header 40..120, logic 60..600, exclusions 20..300."""
    text = [new(rng.randint(40, 120)), new(clipped_length(rng, 220, 0.6, 60, 600)),
            new(clipped_length(rng, 80, 0.7, 20, 300))]
    return Rule(rng.randrange(len(CATEGORIES)), Versioned([(-1e18, text)]))


def make_client(rng: random.Random, new: Callable, weight: float, hunts: bool) -> Client:
    """A client of size ``weight`` (see the module constants for the sizes)."""
    profile = sections(new, clipped_length(rng, PROFILE[0] * weight ** 0.2, *PROFILE[1:]))
    runbooks = [Versioned([(-1e18, sections(new, clipped_length(rng, *RUNBOOK)))])
                for _ in CATEGORIES]
    n = clipped_length(rng, RULES[0] * weight ** 0.5, *RULES[1:])
    rules = [make_rule(rng, new) for _ in range(n)]
    cum, total = [], 0.0
    for rank in rng.sample(range(1, n + 1), n):
        total += rank ** -RULE_ZIPF
        cum.append(total)
    chunks = clipped_length(rng, ASSETS[0] * weight ** 0.7, *ASSETS[1:])
    checklist = sections(new, clipped_length(rng, *CHECKLIST))
    return Client(pick(rng, ZONES), weight, Versioned([(-1e18, profile)]), runbooks, rules,
                  cum, [new(clipped_length(rng, *ASSET)) for _ in range(chunks)],
                  Versioned([(-1e18, checklist)]), hunts)


def clients(rng: random.Random, new: Callable, scale: float) -> list[Client]:
    """CLIENTS (scaled, at least 3) of Zipf(ZIPF) sizes by a random rank, mean size 1; the
    largest and about HUNTERS of the rest have the hunt service."""
    n = max(3, round(CLIENTS * scale))
    sizes = [r ** -ZIPF for r in rng.sample(range(1, n + 1), n)]
    mean = sum(sizes) / n
    top = max(sizes)
    return [make_client(rng, new, s / mean, s == top or rng.random() < HUNTERS)
            for s in sizes]


@dataclass
class Alert:
    """One alert the SOAR hands to the copilot: client, rule, where it came from ("normal",
    "campaign" or "storm") and its burst (index into ``bursts``, -1 for none), when it was
    raised, the triage prompt's head length (segments before the incident context and the
    events), its events, the prompt so far (head, context, events, tool calls and results),
    the lookups left and its request indices."""

    client: int
    rule: int
    origin: str
    burst: int
    time: float
    head: int
    events: Segment
    segs: list[Segment]
    tools: int
    sent: list[int] = field(default_factory=list)


@dataclass
class Burst:
    """A campaign (one attack firing related rules) or a storm (a noisy rule): client, kind,
    rules, start and end time, its alerts (indices, in order), the incident context the SOAR
    attaches once it has correlated them, as (alerts seen when it was written, segment), the
    alert count that triggers the next one, and the threat-intel lookups (call, result) its
    alerts share."""

    client: int
    kind: str
    rules: list[int]
    start: float
    end: float
    alerts: list[int] = field(default_factory=list)
    context: list[tuple[int, Segment]] = field(default_factory=list)
    refresh: int = 0
    iocs: list[tuple[Segment, Segment]] = field(default_factory=list)
