"""bench.heldout's ``lab_notebook`` shape, its world: a biotech R&D lab's electronic lab notebook
as one replica sees it. The lab's system prompt, its teams (each a share of the scientists, a
notebook-entry template, plate-map conventions, projects with grant aims and an archive of past
notebook entries), the SOP library (lab-wide protocols and, unless the seed's layout shares
everything, each team's own; an index of each library that changes when a protocol is
revised), the instruments (a parsing guide and a QC spec per instrument type, runs that start
when scientists start them and finish hours later with a one-off output log), the shared paper
set (some papers hot this week) and the reagent inventory table that the LIMS sync rewrites
now and then. The clock and the lab's hours. See bench/heldout_lab_notebook.py's docstring for
the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import ClockedState, Segment, clipped_length
from bench.heldout_legal_parts import Versioned
from bench.heldout_meeting_parts import poisson
from bench.heldout_recruit_parts import sections

HOUR, DAY, MINUTE = 3600.0, 86400.0, 60.0
END = 2 * DAY  # Monday 00:00 local to Wednesday 00:00 (one site, one clock)
PAST = -1e18  # "before the trace"
# how busy the scientists are in each hour of the day (bench work 08..19, a lunch dip)
WORK = (0.02, 0.01, 0.01, 0.01, 0.01, 0.02, 0.08, 0.35, 0.8, 1.0, 1.0, 0.95, 0.6, 0.85, 1.0,
        1.0, 0.9, 0.75, 0.45, 0.25, 0.15, 0.1, 0.06, 0.03)
# instrument type -> (parsing guide, QC spec tokens, log tokens (median, sigma, lo, hi), runs a
# day per unit, run hours (lo, hi), runs with per-sample analysis, samples (lo, hi))
TYPES = {"qpcr": (2200, 900, (3500, 0.4, 1200, 9000), 5.0, (1.0, 2.0), 0.0, (0, 0)),
         "plate_reader": (1800, 700, (2500, 0.5, 800, 8000), 7.0, (0.2, 1.0), 0.3, (12, 48)),
         "flow": (3000, 1100, (6000, 0.5, 2000, 16000), 4.0, (0.5, 2.0), 0.0, (0, 0)),
         "lcms": (4200, 1400, (9000, 0.5, 3000, 24000), 2.0, (4.0, 14.0), 0.5, (8, 40)),
         "hplc": (2500, 900, (4000, 0.4, 1500, 10000), 3.0, (1.5, 6.0), 0.0, (0, 0)),
         "sequencer": (5000, 1600, (7000, 0.4, 3000, 16000), 0.5, (10.0, 30.0), 1.0, (24, 96)),
         "imager": (1500, 600, (1800, 0.5, 600, 5000), 6.0, (0.3, 1.5), 0.0, (0, 0)),
         "bioanalyzer": (1600, 600, (2200, 0.4, 800, 5000), 3.0, (0.5, 1.0), 0.0, (0, 0))}
HEADER = (900, 0.4, 300, 2500)  # tokens of a run log's header (method, plate, sample sheet)
SAMPLE = (350, 0.5, 120, 1200)  # tokens of one sample's block of a run log
LOG_SECTION = 800
SCIENTISTS = 40  # at scale 1.0 (x 0.9..1.1, at least 6), split among the teams
LAB_SYSTEM = 1300  # the lab assistant's system prompt (safety, data policy, ELN conventions)
LAB_SOPS = 50  # lab-wide protocols
TEAM_SOPS = (10, 30)  # a team's own protocols (none when the layout shares everything)
SOP = (1800, 0.6, 400, 8000)  # tokens of a protocol, in SECTION sections
SOP_ZIPF = 1.2  # protocol popularity by a random rank: standard ones re-read often
ROW = 40  # tokens of a protocol's row in its library's index
SECTION = 500
PAPERS = 120  # the lab's shared paper set
PAPER = (7000, 0.5, 2500, 16000)  # tokens of a paper's text
HOT_PAPERS = 4  # hot this week: twice the top weight
INVENTORY = (8, 3, 450)  # table sections: 8 + 3 per team, tokens each
ARCHIVE = (30, 80)  # past notebook entries per team
ENTRY = (2000, 0.5, 600, 6000)  # tokens of a past entry
PROJECTS = (2, 4)  # per team, each with grant aims
AIMS = (2800, 0.4, 1500, 4500)
TEMPLATE = (500, 0.4, 250, 900)  # a team's notebook-entry template
CONVENTIONS = (1100, 0.4, 600, 1800)  # a team's plate-map conventions


@dataclass(frozen=True)
class Layout:
    """How the seed's lab is organised: teams, instruments, the share of protocol lookups in
    the lab-wide SOPs (1.0: no team has its own), instrument-type weights (the first two
    units are always a plate reader and an LC-MS) and a multiplier on plate-map reviews."""

    name: str
    teams: tuple[int, int]
    units: tuple[int, int]
    shared: float
    types: tuple[tuple[str, float], ...]
    plates: float


LAYOUTS = (
    Layout("core", (4, 5), (9, 11), 0.65, (("qpcr", 2), ("plate_reader", 2), ("flow", 2),
           ("lcms", 1.5), ("hplc", 1), ("sequencer", 1.5), ("imager", 1.5),
           ("bioanalyzer", 1)), 1.0),
    Layout("silo", (6, 8), (12, 15), 0.15, (("qpcr", 3), ("plate_reader", 2), ("flow", 1.5),
           ("lcms", 1), ("hplc", 2), ("sequencer", 0.5), ("imager", 2),
           ("bioanalyzer", 1.5)), 0.8),
    Layout("startup", (2, 3), (5, 7), 1.0, (("qpcr", 2), ("plate_reader", 2), ("flow", 1),
           ("lcms", 0.5), ("hplc", 1), ("sequencer", 1), ("imager", 1),
           ("bioanalyzer", 1)), 0.7),
    Layout("screening", (3, 4), (8, 10), 0.45, (("plate_reader", 5), ("lcms", 2.5),
           ("imager", 2), ("qpcr", 1), ("hplc", 1), ("flow", 0.5), ("sequencer", 0.3),
           ("bioanalyzer", 0.5)), 2.5))


@dataclass
class Sop:
    """A protocol: its team (-1: lab-wide), popularity, row in its library's index and text
    (versions as QA approves revisions)."""

    team: int
    weight: float
    row: int
    text: Versioned


@dataclass
class Project:
    """A team's project: its grant aims and its notebook entries as (when finished,
    segments), oldest first (past ones from before the trace, the days' as they close)."""

    aims: Segment
    entries: list[tuple[float, list[Segment]]] = field(default_factory=list)


@dataclass
class Team:
    """A team: share of the scientists, its protocols and their index (None: it has none),
    the entry template, the plate-map conventions, projects and scientists."""

    weight: float
    sops: list[int]
    digest: Versioned | None
    template: Segment
    conventions: Segment
    projects: list[Project]
    scientists: list[int] = field(default_factory=list)


@dataclass
class InstrumentRun:
    """An instrument run: unit, team, start, finish, output log (header first), the samples'
    blocks of the log (empty for a run without per-sample analysis), the analysis summary."""

    unit: int
    team: int
    start: float
    finish: float
    log: list[Segment]
    samples: list[Segment]
    summary: Segment | None = None


def daily_times(rng: random.Random, per_day: float, hours: tuple = WORK) -> list[float]:
    """About ``per_day`` events a day over the two days by ``hours`` (Poisson per hour)."""
    total, out = sum(hours), []
    for h in range(48):
        for _ in range(poisson(rng, per_day * hours[h % 24] / total)):
            out.append((h + rng.random()) * HOUR)
    return out


def hour_in(rng: random.Random, day: int, hours: tuple = WORK) -> float:
    """A time on ``day`` by ``hours``."""
    return (day * 24 + rng.choices(range(24), hours)[0] + rng.random()) * HOUR


class World(ClockedState):
    """The lab on the clock. bench.heldout_lab_jobs.Jobs builds on it."""

    END = END

    def __init__(self, rng: random.Random, scale: float, layout: Layout) -> None:
        super().__init__(rng, 0, scale)
        self.layout, new = layout, self.new
        self.lab_system = new(LAB_SYSTEM)
        self.sops: list[Sop] = []
        self.lab_sops = self.library(-1, LAB_SOPS)
        self.lab_digest = self.index(self.lab_sops)
        self.teams = [self.team(t) for t in range(rng.randint(*layout.teams))]
        self.units = self.instruments(rng.randint(*layout.units))
        self.guides = {k: new(v[0]) for k, v in TYPES.items()}
        self.qc_specs = {k: new(v[1]) for k, v in TYPES.items()}
        self.papers = [new(clipped_length(rng, *PAPER)) for _ in range(PAPERS)]
        self.paper_weights = [1.0 / r for r in rng.sample(range(1, PAPERS + 1), PAPERS)]
        self.hot = rng.sample(range(PAPERS), HOT_PAPERS)
        for k in self.hot:
            self.paper_weights[k] = 2.0
        rows = INVENTORY[0] + INVENTORY[1] * len(self.teams)
        self.inventory = Versioned([(PAST, [new(INVENTORY[2]) for _ in range(rows)])])
        people = max(6, round(SCIENTISTS * scale * rng.uniform(0.9, 1.1)))
        self.scientists = [t for t in range(len(self.teams))] + rng.choices(
            range(len(self.teams)), [x.weight for x in self.teams], k=people - len(self.teams))
        for s, t in enumerate(self.scientists):
            self.teams[t].scientists.append(s)
        self.runs: list[InstrumentRun] = []
        for u in range(len(self.units)):
            self.plan_runs(u)

    def library(self, team: int, n: int) -> list[int]:
        """``n`` new protocols of ``team`` (-1: lab-wide), Zipf weights by a random rank."""
        rng, out = self.rng, []
        for row, rank in enumerate(rng.sample(range(1, n + 1), n)):
            text = sections(self.new, clipped_length(rng, *SOP), SECTION)
            self.sops.append(Sop(team, rank ** -SOP_ZIPF, row, Versioned([(PAST, text)])))
            out.append(len(self.sops) - 1)
        return out

    def index(self, sops: list[int]) -> Versioned | None:
        """A library's index: a row per protocol, in SECTION sections (None if empty)."""
        if not sops:
            return None
        return Versioned([(PAST, sections(self.new, ROW * len(sops), SECTION))])

    def team(self, t: int) -> Team:
        """Team ``t``: its protocols (unless the layout shares everything), template,
        conventions and projects, each with aims and its share of the archive."""
        rng, new = self.rng, self.new
        own = [] if self.layout.shared >= 1.0 else self.library(t, rng.randint(*TEAM_SOPS))
        projects = [Project(new(clipped_length(rng, *AIMS)))
                    for _ in range(rng.randint(*PROJECTS))]
        for _ in range(rng.randint(*ARCHIVE)):
            rng.choice(projects).entries.append((PAST, [new(clipped_length(rng, *ENTRY))]))
        return Team(rng.gammavariate(2.0, 1.0), own, self.index(own),
                    new(clipped_length(rng, *TEMPLATE)), new(clipped_length(rng, *CONVENTIONS)),
                    projects)

    def instruments(self, n: int) -> list[str]:
        """The units' types: a plate reader, an LC-MS, the rest by the layout's weights."""
        kinds = [k for k, _ in self.layout.types]
        weights = [w for _, w in self.layout.types]
        return ["plate_reader", "lcms", *self.rng.choices(kinds, weights, k=n - 2)]

    def plan_runs(self, u: int) -> None:
        """Unit ``u``'s runs started on days -2..1 (at least one a day on days 0 and 1), by
        the lab's hours, scheduled where they finish on the clock."""
        rng, kind = self.rng, self.units[u]
        _, _, log, rate, span, bursty, samples = TYPES[kind]
        for day in (-2, -1, 0, 1):
            n = poisson(rng, rate * self.scale)
            for _ in range(max(n, 1) if day >= 0 else n):
                start = hour_in(rng, day)
                finish = start + rng.uniform(*span) * HOUR
                if not 0 <= finish < END:
                    continue
                k = rng.randint(*samples) if rng.random() < bursty else 0
                header = self.new(clipped_length(rng, *HEADER))
                body = [self.new(clipped_length(rng, *SAMPLE)) for _ in range(k)]
                if not k:
                    body = sections(self.new, clipped_length(rng, *log), LOG_SECTION)
                team = rng.choices(range(len(self.teams)), [t.weight for t in self.teams])[0]
                self.runs.append(InstrumentRun(u, team, start, finish, [header, *body], body[:k]))
                self.at(finish, "finish", len(self.runs) - 1)

    def revise(self, text: Versioned, k: int) -> None:
        """A new version of ``text`` from now: section ``k`` rewritten, the rest kept."""
        secs = list(text.current)
        secs[k] = self.new(max(40, round(secs[k][1] * self.rng.uniform(0.8, 1.25))))
        text.versions.append((self.now, secs))

    def digest_of(self, team: int) -> list[Segment]:
        """What a team's chats send after the lab system prompt: the lab-wide index and the
        team's own, as they stand now."""
        own = self.teams[team].digest
        return [*self.lab_digest.at(self.now), *(own.at(self.now) if own else [])]
