"""bench.heldout's ``meeting_assist`` shape, its world: the clock of orgs in seven time zones,
each org's glossary (edited now and then), its teams with their recurring meetings (weekly
series, daily standups, an all-hands) and past summaries, and a meeting's live transcript.
See bench/heldout_meeting_assist.py's docstring for what each part models."""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.heldout_bi_parts import local_hour, weekday
from bench.heldout_fewshot import Segment, clipped_length

HOUR, DAY = 3600.0, 86400.0
RATE = 40.0  # tokens a second a reply decodes at
SPEAK = 2.6  # transcript tokens a second while someone talks
LABEL = 8  # tokens of the "[00:12:31] Name:" line head before each utterance
ASR_LAG = 4.0  # seconds from an utterance's end to its line in the transcript
# (UTC offset in hours, share of the orgs); the clock's 0 is Monday 00:00 UTC
ZONES = ((-8.0, 0.2), (-5.0, 0.25), (0.0, 0.15), (1.0, 0.12), (5.5, 0.1), (9.0, 0.1),
         (10.0, 0.08))
# how likely a meeting starts in each local hour of a weekday (the waves)
STARTS = (0, 0, 0, 0, 0, 0, 0, 0.1, 0.5, 1.0, 1.0, 0.8, 0.3, 0.7, 0.9, 0.8, 0.6, 0.25,
          0.08, 0.03, 0.01, 0.01, 0, 0)
WEEKEND = 0.04  # x a weekday's weight
ORGS = 18  # at scale 1.0 (scaled, at least 3)
TEAMS = 56  # at scale 1.0 (scaled, at least one an org), more in larger orgs
ZIPF = 0.7  # org size by a random rank
ALLHANDS = 3  # orgs with an all-hands every other week: the largest (scaled, at least 1)
LANGUAGES = 8  # target languages of translation
# an org's rolling-summary interval (s; None: off)
EVERY = ((300.0, 0.15), (600.0, 0.4), (900.0, 0.2), (None, 0.25))
ADHOC = ((15, 0.15), (30, 0.5), (45, 0.1), (60, 0.2), (90, 0.05))  # booked minutes
WEEKLY = ((30, 0.4), (45, 0.2), (60, 0.4))
LONG = ((60, 0.5), (90, 0.35), (120, 0.15))  # all-hands
GLOSSARY_SECTION = 250  # tokens per glossary section (terms sorted, so an edit is mid-way)


def pick(rng: random.Random, choices: tuple) -> object:
    """A value from ``choices``, (value, weight) pairs."""
    return rng.choices([c[0] for c in choices], [c[1] for c in choices])[0]


def poisson(rng: random.Random, mean: float) -> int:
    """A Poisson count (Knuth; the means here are small)."""
    limit, k, p = math.exp(-mean), 0, rng.random()
    while p > limit:
        k += 1
        p *= rng.random()
    return k


def start_weight(t: float, tz: float) -> float:
    """How likely a meeting starts at ``t`` in an org at ``tz`` (1.0 at a weekday's peak)."""
    w = STARTS[int(local_hour(t, tz))]
    return w * (WEEKEND if weekday(t, tz) >= 5 else 1.0)


def slot(rng: random.Random, hour_start: float) -> float:
    """When in the hour from ``hour_start`` a booked meeting begins: on the hour mostly, then
    the half hour, the quarters, now and then any minute; the bot joins 0..120 s late."""
    minute = pick(rng, ((0, 0.6), (30, 0.25), (15, 0.04), (45, 0.04), (None, 0.07)))
    at = rng.uniform(0, 60) if minute is None else minute
    return hour_start + at * 60 + rng.uniform(0, 120)


def next_slot(t: float, tz: float, at: float, days: tuple[int, ...]) -> float:
    """The first time after ``t`` that is ``at`` o'clock local on one of ``days``."""
    day = (t / HOUR + tz) // 24
    while True:
        cand = (day * 24 + at - tz) * HOUR
        if cand > t and weekday(cand, tz) in days:
            return cand
        day += 1


@dataclass
class Org:
    """A customer org: time zone, size, its settings (rolling-summary interval or None for
    off; the share of its meetings whose host turns live highlights on, 0 in 40 % of orgs;
    summary and action items in two requests (40 %) or one; nightly digest on, 60 %), the
    languages its members translate into (1..2 in 25 % of orgs), glossary versions (time,
    sections) and its teams."""

    tz: float
    weight: float
    every: float | None
    highlights: float
    separate: bool
    digest: bool
    languages: list[int]
    glossary: list[tuple[float, list[Segment]]]
    teams: list[int] = field(default_factory=list)

    def glossary_at(self, t: float) -> list[Segment]:
        k = bisect.bisect_right([v[0] for v in self.glossary], t) - 1
        return self.glossary[k][1]


@dataclass
class Team:
    """A team of an org: its final summaries (time, segment; some from before the trace)
    and its recurring series."""

    org: int
    summaries: list[tuple[float, Segment]]
    series: list[int] = field(default_factory=list)


@dataclass
class Series:
    """A recurring meeting: "weekly", "standup" (every weekday) or "allhands" (every other
    week, the whole org, from the first week on); its fixed header (title, regular
    attendees, standing agenda), slot (local hour, weekdays), booked minutes, attendees, the
    last instance's final summary (one from before the trace at first, among the team's
    summaries) and its meetings."""

    team: int
    kind: str
    head: Segment
    days: tuple[int, ...]
    at: float
    minutes: int
    people: int
    last: Segment
    meetings: list[int] = field(default_factory=list)


@dataclass
class Meeting:
    """A meeting the assistant joined: who, when, its header segments (after the glossary),
    the glossary as of its start, its utterances (end time, segment), the languages it is
    translated into, its final summary and action items once made, its request indices."""

    org: int
    team: int
    series: int | None
    kind: str
    start: float
    end: float
    people: int
    head: list[Segment]
    glossary: list[Segment]
    said: list[tuple[float, Segment]]
    languages: list[int]
    summary: Segment | None = None
    actions: Segment | None = None
    sent: list[int] = field(default_factory=list)

    def heard(self, t: float) -> list[Segment]:
        """The transcript's lines at ``t``: every utterance that ended ASR_LAG before."""
        k = bisect.bisect_right([e for e, _ in self.said], t - ASR_LAG)
        return [s for _, s in self.said[:k]]

    def window(self, t: float, span: float) -> list[Segment]:
        """The lines that reached the transcript in the ``span`` seconds before ``t``."""
        return [s for e, s in self.said if t - span < e + ASR_LAG <= t]

    def context(self, system: Segment, t: float, glossary: list[Segment] | None = None):
        """The live prompt's head: system prompt, glossary, header, transcript so far."""
        gloss = self.glossary if glossary is None else glossary
        return [system, *gloss, *self.head, *self.heard(t)]


def talk(rng: random.Random, new: Callable, start: float, end: float,
         presenter: bool) -> list[tuple[float, Segment]]:
    """Utterances from ``start`` until past ``end``: 4..900 tokens (median 40; a presenter's
    110 most of the time) at SPEAK tokens a second with pauses (2.5 s on average)."""
    out, t = [], start + rng.uniform(5, 40)
    while t < end or not out:
        median = 110 if presenter and rng.random() < 0.7 else 40
        n = clipped_length(rng, median, 0.9, 4, 900)
        t += n / SPEAK + rng.expovariate(1 / 2.5)
        out.append((t, new(n + LABEL)))
    return out


def glossary(rng: random.Random, new: Callable) -> list[Segment]:
    """An org glossary (100..2500 tokens, median 400) in sections of about 250 tokens."""
    total = clipped_length(rng, 400, 0.7, 100, 2500)
    k = max(1, round(total / GLOSSARY_SECTION))
    return [new(total // k + (i < total % k)) for i in range(k)]


def edit(rng: random.Random, new: Callable, sections: list[Segment]) -> list[Segment]:
    """The glossary after an admin adds or rewords terms in one section."""
    k = rng.randrange(len(sections))
    grown = max(20, round(sections[k][1] * rng.uniform(0.9, 1.3)))
    return [*sections[:k], new(grown), *sections[k + 1:]]


def _org(rng: random.Random, new: Callable, weight: float) -> Org:
    tz = pick(rng, ZONES)
    languages = rng.sample(range(LANGUAGES), rng.randint(1, 2)) if rng.random() < 0.25 else []
    settings = (rng.uniform(0.2, 0.8) * (rng.random() < 0.6), rng.random() < 0.4,
                rng.random() < 0.6)
    return Org(tz, weight, pick(rng, EVERY), *settings, languages,
               [(-1e18, glossary(rng, new))])


def _series(rng: random.Random, new: Callable, team: int, kind: str) -> Series:
    if kind == "standup":
        days, at, minutes = (0, 1, 2, 3, 4), rng.choice((9.0, 9.5, 10.0)), 15
        people = clipped_length(rng, 6, 0.4, 3, 12)
    elif kind == "allhands":
        days, at = (rng.randrange(4),), float(rng.choice((10, 11, 13, 15, 16)))
        minutes, people = pick(rng, LONG), clipped_length(rng, 600, 0.8, 100, 3000)
    else:
        days, minutes = (rng.randrange(5),), pick(rng, WEEKLY)
        at = rng.choice((9.0, 10.0, 10.5, 11.0, 13.0, 14.0, 14.5, 15.0, 16.0))
        people = clipped_length(rng, 6, 0.5, 3, 20)
    head = new(clipped_length(rng, 200, 0.6, 60, 900))
    last = new(clipped_length(rng, 350, 0.4, 120, 1000))
    return Series(team, kind, head, days, at, minutes, people, last)


def world(rng: random.Random, new: Callable, scale: float):
    """The orgs (Zipf sizes by a random rank), their teams (one each, the rest by size; each
    with 3..15 summaries from the week before) and the series (0..2 weekly a team, a standup
    for 45 % of teams, an all-hands in each of the ALLHANDS largest orgs)."""
    n = max(3, round(ORGS * scale))
    ranks = rng.sample(range(1, n + 1), n)
    sizes = [r ** -ZIPF for r in ranks]
    mean = sum(sizes) / n
    orgs = [_org(rng, new, s / mean) for s in sizes]
    homes = [*range(n), *rng.choices(range(n), sizes, k=max(0, round(TEAMS * scale) - n))]
    teams: list[Team] = []
    series: list[Series] = []
    for o, org in enumerate(orgs):
        for _ in range(homes.count(o)):
            old = [(-rng.uniform(0, 7 * DAY), new(clipped_length(rng, 350, 0.4, 120, 1000)))
                   for _ in range(rng.randint(3, 15))]
            org.teams.append(len(teams))
            teams.append(Team(o, sorted(old)))
            kinds = ["weekly"] * rng.randint(0, 2) + ["standup"] * (rng.random() < 0.45)
            for kind in kinds:
                _add_series(rng, new, teams, series, len(teams) - 1, kind)
    big = sorted(range(n), key=lambda o: -orgs[o].weight)[:max(1, round(ALLHANDS * scale))]
    for o in sorted(big):
        _add_series(rng, new, teams, series, orgs[o].teams[0], "allhands")
    return orgs, teams, series


def _add_series(rng: random.Random, new: Callable, teams: list[Team], series: list[Series],
                team: int, kind: str) -> None:
    """A new series of ``team``; its last summary (from a slot before the trace) joins the
    team's summaries."""
    s = _series(rng, new, team, kind)
    teams[team].series.append(len(series))
    series.append(s)
    teams[team].summaries.append((-rng.uniform(0, 3 * DAY if kind == "standup" else 7 * DAY),
                                  s.last))
    teams[team].summaries.sort()
