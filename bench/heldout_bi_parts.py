"""bench.heldout's ``bi_copilot`` shape, its company: the clock of three offices, the teams
with their warehouse schemas (tables whose DDL changes in migrations) and metric glossaries,
and the dashboards. See bench/heldout_bi_copilot.py's docstring for what each part models."""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, clipped_length

HOUR, DAY = 3600.0, 86400.0
RATE = 40.0  # tokens a second a reply decodes at
# (name, UTC offset in hours, share of the teams); the clock's 0 is Monday 00:00 UTC
OFFICES = (("new_york", -5.0, 0.5), ("london", 0.0, 0.3), ("bangalore", 5.5, 0.2))
WORK = (0.03, 0.03, 0.03, 0.03, 0.03, 0.03, 0.03, 0.35, 0.8, 1.0, 1.0, 0.95, 0.65, 0.9, 1.0,
        1.0, 0.85, 0.5, 0.25, 0.15, 0.08, 0.04, 0.03, 0.03)  # by local hour, weekdays
WEEKEND = 0.08  # x a weekday's weight
WAREHOUSES = (0.5, 0.3, 0.2)  # Snowflake, BigQuery, Postgres: a team's dialect guide
TEAMS = 24  # at scale 1.0 (scaled, at least 3)
ZIPF = 0.9  # team activity by a random rank
SCHEMA_CAP = 8000  # tokens of schema the copilot puts in a prompt (tables in order)
MIGRATIONS = 0.7  # a team's migrations a day, on average
GLOSSARY_EDIT = 0.15  # chance a migration also edits the team's glossary
EVERY = {"hourly": 0.15, "4h": 0.30, "daily": 0.55}  # dashboards' refresh schedules


def local_hour(t: float, tz: float) -> float:
    """The hour of day (0..24) at UTC offset ``tz``."""
    return (t / HOUR + tz) % 24


def weekday(t: float, tz: float) -> int:
    """0 (Monday) .. 6 (Sunday) at UTC offset ``tz``."""
    return int((t / HOUR + tz) // 24) % 7


def busy(t: float, tz: float) -> float:
    """How busy an office at ``tz`` is at ``t`` (1.0 at a weekday's peak)."""
    w = WORK[int(local_hour(t, tz))]
    return w * (WEEKEND if weekday(t, tz) >= 5 else 1.0)


def next_local(t: float, tz: float, at: float, weekdays: bool) -> float:
    """The first time after ``t`` that is ``at`` o'clock at ``tz`` (on a weekday if asked)."""
    day = (t / HOUR + tz) // 24
    while True:
        cand = (day * 24 + at - tz) * HOUR
        if cand > t and not (weekdays and weekday(cand, tz) >= 5):
            return cand
        day += 1


@dataclass
class Table:
    """A warehouse table: its DDL versions (time, segment) and when it was created."""

    versions: list[tuple[float, Segment]]

    @property
    def created(self) -> float:
        return self.versions[0][0]

    def at(self, t: float) -> Segment:
        """The DDL as of ``t`` (the table exists by then)."""
        k = bisect.bisect_right([v[0] for v in self.versions], t) - 1
        return self.versions[k][1]


@dataclass
class Migration:
    """A schema change: the team, when, the tables changed (indices), a table added (or
    None) and whether the glossary was edited."""

    team: int
    time: float
    changed: list[int]
    added: int | None
    glossary: bool


@dataclass
class Team:
    """An analytics team: its office, warehouse, activity weight, glossary versions, tables,
    frequently asked metric questions and nightly report sections."""

    office: int
    warehouse: int
    weight: float
    glossary: list[tuple[float, Segment]]
    tables: list[Table]
    faq: list[Segment]
    sections: list[Segment]
    migrations: list[Migration] = field(default_factory=list)

    @property
    def tz(self) -> float:
        return OFFICES[self.office][1]

    def glossary_at(self, t: float) -> Segment:
        k = bisect.bisect_right([v[0] for v in self.glossary], t) - 1
        return self.glossary[k][1]

    def schema(self, t: float) -> list[Segment]:
        """The tables' DDL as of ``t``, in order, up to SCHEMA_CAP tokens."""
        out, total = [], 0
        for table in self.tables:
            if table.created > t:
                continue
            seg = table.at(t)
            if out and total + seg[1] > SCHEMA_CAP:
                break
            out.append(seg)
            total += seg[1]
        return out


@dataclass
class Dashboard:
    """A team's dashboard: its header, tiles' SQL, refresh schedule (a key of EVERY), the
    UTC hour offset of a "4h" schedule, and the request indices of each run."""

    team: int
    header: Segment
    tiles: list[Segment]
    every: str
    offset: int
    runs: list[list[int]] = field(default_factory=list)

    def next_run(self, t: float, tz: float) -> float:
        """The first scheduled refresh after ``t``."""
        if self.every == "daily":
            return next_local(t, tz, 6.0, False)
        if self.every == "4h":
            k = (t / HOUR - self.offset) // 4 + 1
            return (k * 4 + self.offset) * HOUR
        return min(next_local(t, tz, float(h), True) for h in range(7, 20))


def offices(n: int) -> list[int]:
    """Each of ``n`` teams' office, by the offices' shares (every office has one when n >= 3)."""
    count = [0] * len(OFFICES)
    out = []
    for i in range(n):
        k = max(range(len(OFFICES)), key=lambda o: OFFICES[o][2] * (i + 1) - count[o])
        count[k] += 1
        out.append(k)
    return out


def make_team(rng: random.Random, new, office: int, rank: int) -> Team:
    """A team at time 0: 4..60 tables (median 12) of 40..1200-token DDL (median 130), a
    300..2500-token glossary, 25 FAQ questions, 3..10 report sections."""
    tables = [Table([(0.0, new(clipped_length(rng, 130, 0.7, 40, 1200)))])
              for _ in range(clipped_length(rng, 12, 0.7, 4, 60))]
    glossary = [(0.0, new(clipped_length(rng, 900, 0.6, 300, 2500)))]
    faq = [new(clipped_length(rng, 25, 0.5, 8, 80)) for _ in range(25)]
    sections = [new(clipped_length(rng, 220, 0.4, 100, 400))
                for _ in range(clipped_length(rng, 6, 0.4, 3, 10))]
    warehouse = rng.choices(range(len(WAREHOUSES)), WAREHOUSES)[0]
    return Team(office, warehouse, 1.0 / rank ** ZIPF, glossary, tables, faq, sections)


def migrate(rng: random.Random, new, team: Team, index: int, t: float) -> Migration:
    """Change 1..3 existing tables (their DDL grows by -10..+35 %), add one 25 % of the time,
    edit the glossary GLOSSARY_EDIT of the time; recorded on the team."""
    live = [k for k, tab in enumerate(team.tables) if tab.created <= t]
    changed = sorted(rng.sample(live, min(len(live), rng.choices((1, 2, 3), (6, 3, 1))[0])))
    for k in changed:
        old = team.tables[k].at(t)[1]
        team.tables[k].versions.append((t, new(max(20, round(old * rng.uniform(0.9, 1.35))))))
    added = None
    if rng.random() < 0.25:
        team.tables.append(Table([(t, new(clipped_length(rng, 130, 0.7, 40, 1200)))]))
        added = len(team.tables) - 1
    edit = rng.random() < GLOSSARY_EDIT
    if edit:
        old = team.glossary_at(t)[1]
        team.glossary.append((t, new(round(old * rng.uniform(0.95, 1.2)))))
    m = Migration(index, t, changed, added, edit)
    team.migrations.append(m)
    return m


def make_dashboard(rng: random.Random, new, team: int) -> Dashboard:
    """A dashboard of 2..14 tiles (median 6), SQL 80..500 tokens (median 180) each."""
    tiles = [new(clipped_length(rng, 180, 0.5, 80, 500))
             for _ in range(clipped_length(rng, 6, 0.5, 2, 14))]
    every = rng.choices(list(EVERY), list(EVERY.values()))[0]
    return Dashboard(team, new(clipped_length(rng, 90, 0.5, 40, 200)), tiles, every,
                     rng.randrange(4))
