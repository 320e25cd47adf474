"""bench.heldout's ``lit_screen`` shape, its world: an evidence-synthesis group's systematic
reviews (each with a home site's time zone, a protocol whose criteria are amended now and then,
worked examples, two reviewer prompt variants, a data-extraction template), the records each
review screens during the trace (title and abstract, imported before the trace or by a hand
search on day 0) and the records it screened before (its library). How this deployment builds
its prompts (``Setup``) is drawn per seed. The event clock and the local-time calendar. See
bench/heldout_lit_screen.py's docstring for the numbers."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import ClockedState, Segment, clipped_length
from bench.heldout_legal_parts import Versioned
from bench.heldout_meeting_parts import pick
from bench.heldout_recruit_parts import hour_of, local, utc

HOUR, DAY, MINUTE = 3600.0, 86400.0, 60.0
END = 2 * DAY  # the clock starts Monday 00:00 UTC; the trace ends at Wednesday 00:00 UTC
SITES = ((0.0, 0.5), (-5.0, 0.3), (10.0, 0.2))  # review teams' UTC offsets, shares
REVIEWS = (4, 8)  # reviews running at once (per seed)
REVIEW_WEIGHT = 0.8  # Zipf exponent of their sizes (by a random rank)
PROTOCOL = (1300, 0.4, 600, 3500)  # tokens of the criteria (objectives, PICO, exclusions)
PROTOCOL_SECTION = 350  # tokens of a criteria section
EXAMPLES = (3, 8)  # worked examples a screening prompt carries
EXAMPLE = (300, 0.35, 150, 650)  # tokens of one (an abstract, the decision, the reason)
VARIANT = (200, 0.4, 100, 450)  # tokens of a reviewer variant's instructions
GROUPS = (4, 7)  # field groups of the extraction template
GROUP = (350, 0.4, 150, 800)  # tokens of a field group's definitions
ASK = (120, 0.4, 50, 300)  # tokens of the instruction that asks for one field group
ABSTRACT = (300, 0.45, 60, 900)  # tokens of a record's title and abstract
TITLE_ONLY = (0.08, (30, 90))  # records without an abstract, their tokens
TA_TOTAL = 1000  # records screened over the trace at scale 1.0 (x 0.85..1.15), by weight
HAND_SEARCH = 0.3  # of a review's records, imported on day 0 (local 09..17), not before
LIBRARY = 3  # records screened before the trace, per record screened during it
LIBRARY_STATUS = (("excluded", 0.82), ("included", 0.1), ("unsure", 0.08))
RELEVANT = (0.04, 0.15)  # share of a review's records that meet its criteria
ROLLING = 0.5  # reviews that fetch the full text of each record as it is included
WINDOWS = (14000, 3000)  # most tokens of a paper one full-text request reads (per seed)
OFFICE = (0.7, 1.0, 1.0, 0.9, 0.6, 0.8, 1.0, 0.9, 0.7, 0.4)  # work by local hour, 08..17


@dataclass
class Setup:
    """How the deployment builds its prompts, drawn per seed: ``persona_first`` puts the
    reviewer variant right after the system prompt (else after the worked examples);
    ``paired`` screens each record by A then B (else A over the whole run, then B);
    ``window``: the most tokens of a paper one full-text request reads; ``threaded``:
    extraction is one thread per paper (else each field group is asked on its own)."""

    persona_first: bool
    paired: bool
    window: int
    threaded: bool


@dataclass
class Review:
    """A systematic review: home site's UTC offset, size weight, share of relevant records,
    criteria sections, worked examples and extraction field groups (each as versions), the
    instruction per field group, the reviewer variants A and B, whether it fetches full
    texts as records are included (else only its earlier backlog is read at full text), the
    records it screens during the trace (import order) and those it screened before."""

    tz: float
    weight: float
    relevant: float
    protocol: Versioned
    examples: Versioned
    template: Versioned
    asks: list[Segment]
    variants: dict[str, Segment]
    rolling: bool
    pool: list[int] = field(default_factory=list)
    library: list[int] = field(default_factory=list)


@dataclass
class Record:
    """A record (title and abstract): its review, text, whether it meets the criteria, when
    it was imported, its status (new; queued for a screening walk; included; excluded;
    disputed: the reviewers disagreed, awaiting the adjudicator; unsure: excluded by the
    adjudicator, flagged for re-checks), each reviewer's latest vote and rationale, when it
    was last adjudicated."""

    review: int
    text: Segment
    relevant: bool
    imported: float
    status: str = "new"
    votes: dict[str, bool] = field(default_factory=dict)
    notes: dict[str, Segment] = field(default_factory=dict)
    adjudicated: float = -math.inf


class World(ClockedState):
    """The reviews and their records on the clock; ``emit`` sends a request.
    bench.heldout_lits_jobs.Jobs builds on it."""

    END = END

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, 0, scale)
        self.plan = random.Random(rng.random())  # the jobs' calendar, the same at any scale
        self.setup = Setup(rng.random() < 0.5, rng.random() < 0.5, rng.choice(WINDOWS),
                           rng.random() < 0.5)
        n = rng.randint(*REVIEWS)
        self.reviews = [self._review(r ** -REVIEW_WEIGHT) for r in rng.sample(range(1, n + 1), n)]
        self.records: list[Record] = []
        total = TA_TOTAL * scale * rng.uniform(0.85, 1.15)
        weights = sum(rv.weight for rv in self.reviews)
        for k, rv in enumerate(self.reviews):
            self._fill(k, max(6, round(total * rv.weight / weights)))

    def _review(self, weight: float) -> Review:
        """A review of size ``weight``: its site, criteria, examples, template, variants."""
        rng, new = self.rng, self.new
        criteria = clipped_length(rng, *PROTOCOL)
        parts = max(1, round(criteria / PROTOCOL_SECTION))
        groups = rng.randint(*GROUPS)
        return Review(pick(rng, SITES), weight, rng.uniform(*RELEVANT),
                      Versioned([(-math.inf, [new(criteria // parts) for _ in range(parts)])]),
                      Versioned([(-math.inf, [new(clipped_length(rng, *EXAMPLE))
                                              for _ in range(rng.randint(*EXAMPLES))])]),
                      Versioned([(-math.inf, [new(clipped_length(rng, *GROUP))
                                              for _ in range(groups)])]),
                      [new(clipped_length(rng, *ASK)) for _ in range(groups)],
                      {w: new(clipped_length(rng, *VARIANT)) for w in "AB"},
                      rng.random() < ROLLING)

    def record(self, k: int, imported: float, status: str = "new") -> int:
        """A new record of review ``k`` imported at ``imported``; its id."""
        rng = self.rng
        if rng.random() < TITLE_ONLY[0]:
            text = self.new(rng.randint(*TITLE_ONLY[1]))
        else:
            text = self.new(clipped_length(rng, *ABSTRACT))
        relevant = rng.random() < self.reviews[k].relevant
        self.records.append(Record(k, text, relevant, imported, status))
        return len(self.records) - 1

    def _fill(self, k: int, size: int) -> None:
        """Review ``k``'s library (screened before) and the ``size`` records it screens
        during the trace: most imported the day before, a share by day 0's hand search."""
        rng, rv = self.rng, self.reviews[k]
        rv.library = [self.record(k, -math.inf, pick(rng, LIBRARY_STATUS))
                      for _ in range(LIBRARY * size)]
        whens = [utc(0, hour_of(rng, OFFICE[1:], 9), rv.tz) if rng.random() < HAND_SEARCH
                 else -rng.uniform(0, DAY) for _ in range(size)]
        rv.pool = [self.record(k, t) for t in sorted(whens)]

    def at_local(self, day: int, hour: float, tz: float, name: str, payload: object) -> None:
        """Schedule ``name`` at a local time if it falls on the clock (0..END)."""
        t = utc(day, hour, tz)
        if 0 <= t < self.END:
            self.at(t, name, payload)

    def work_time(self, tz: float, rng: random.Random) -> float:
        """A time on the clock in local working hours (08..17 by OFFICE) at ``tz``."""
        while True:
            t = utc(rng.choice((-1, 0, 1, 2)), hour_of(rng, OFFICE, 8), tz)
            if 0 <= t < self.END:
                return t

    def at_work(self, t: float, tz: float, name: str, payload: object) -> None:
        """Schedule ``name`` at ``t``, or if that is outside local 08..18 at the next local
        08:00..09:30; not if past the clock's end."""
        h = local(t, tz)
        day, hour = int(h // 24), h % 24
        if not 8 <= hour < 18:
            t = utc(day + (hour >= 18), 8 + self.rng.uniform(0, 1.5), tz)
        if t < self.END:
            self.at(t, name, payload)

    def daily(self, rate: float, choices: list[tuple[float, float]], hours: tuple,
              first: int, name: str) -> None:
        """Each local day, ``rate`` x scale events a day split over ``choices`` (UTC offset,
        weight) by weight (Poisson), at local hours by ``hours`` from ``first``; the payload
        is the choice's index."""
        total = sum(w for _, w in choices)
        for k, (tz, w) in enumerate(choices):
            for d in (-1, 0, 1, 2):
                for _ in range(poisson(self.rng, rate * self.scale * w / total)):
                    self.at_local(d, hour_of(self.rng, hours, first), tz, name, k)

    def by_weight(self) -> int:
        """A review, by weight."""
        return self.rng.choices(range(len(self.reviews)), [r.weight for r in self.reviews])[0]


def poisson(rng: random.Random, mean: float) -> int:
    """A Poisson count (Knuth for small means, normal beyond 30)."""
    if mean > 30:
        return max(0, round(rng.gauss(mean, math.sqrt(mean))))
    limit, k, p = math.exp(-mean), 0, rng.random()
    while p > limit:
        k += 1
        p *= rng.random()
    return k
