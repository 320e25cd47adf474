"""bench.heldout's ``lit_screen`` shape, the title-and-abstract side: screening runs a review
team starts in its working hours (each record screened by reviewer prompts A and B, record by
record or in two passes), the adjudicator's walk over each run's conflicts, living reviews'
search updates (the new records screened at once, then flagged old ones re-checked), protocol
amendments (new criteria, maybe a new worked example or extraction field group, then the
included records re-screened) and the nightly de-duplication walk over the last day's imports.
Every walk is one stream, each request after the last one's reading and writing. See
bench/heldout_lit_screen.py's docstring for the numbers."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_lits_world import (ASK, DAY, EXAMPLE, GROUP, HOUR, OFFICE, World, hour_of,
                                      utc)
from bench.heldout_meeting_parts import pick

SYSTEM = {"screen": 450, "adjudicate": 600, "dedup": 350}  # system prompts (tokens)
CUE = {"screen": 40, "adjudicate": 50, "dedup": 30}  # the instruction at the end
OUTPUT = {"screen": (160, 0.4, 40, 500), "adjudicate": (260, 0.4, 80, 600),
          "dedup": (25, 0.3, 10, 60)}  # tokens written (median, sigma, lo, hi)
PREFILL, DECODE = 8000.0, 40.0  # tokens a second the replica reads and writes for a stream
RUNS = ((1, 0.35), (2, 0.45), (3, 0.2))  # screening runs a team starts per local workday
ACCURACY = {"A": (0.96, 0.08), "B": (0.88, 0.03)}  # P(include) if relevant, if not
ADJUDICATOR = (0.95, 0.2)  # P(include) if relevant, if not
LIVING = (1, 2)  # living reviews (a search update during the trace) per seed
UPDATE = (130, 0.5, 40, 450)  # new records a search update brings (x scale)
UPDATE_HOURS = (6.0, 7.0)  # local hours the update's auto-screening starts
RECHECK = 0.25  # unsure records re-checked per new record of an update (the trace's first)
AMENDMENTS = (1, 2)  # reviews whose protocol is amended during the trace, per seed
AMEND_RECHECK = (80, 0.5, 20, 250)  # included records re-screened after one (x scale)
DUPES = ((0, 0.3), (1, 0.35), (2, 0.2), (3, 0.1), (4, 0.05))  # candidate duplicates a record
DEDUP_HOURS = (1.0, 2.0)  # UTC hours the nightly de-duplication walk starts
SCREENS = ("screen", "update", "recheck")  # the walks that send the screening prompt
WORKERS = {"screen": 4, "update": 8, "recheck": 4, "adjudicate": 1, "dedup": 2, "fulltext": 3,
           "extract": 3, "rob": 3}  # requests a walk keeps in flight (threaded extraction: 1)


@dataclass
class Stream:
    """A walk: kind, owner (a review, or the night for dedup), steps (a record or paper id
    first, then a reviewer, candidate, window, field group or domain), ``info`` (when it
    started and why: recheck "update" or "amend"; or what the desk's walks hold fixed), how
    many workers take its steps in order, each its next once its last is read and written,
    how far it is, its request indices, and the workers still busy."""

    kind: str
    owner: int
    steps: list[tuple]
    info: object = None
    workers: int = 1
    pos: int = 0
    sent: list[int] = field(default_factory=list)
    active: int = 0


class Jobs(World):
    """The world (``World``) and the title-and-abstract walks."""

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, scale)
        self.system = {k: self.new(n) for k, n in SYSTEM.items()}
        self.cue = {k: self.new(n) for k, n in CUE.items()}
        self.walks: list[Stream] = []
        self.runs_left = [0] * len(self.reviews)
        self.adjudicated: list[list[int]] = [[] for _ in self.reviews]
        self.amendments: list[tuple[int, float]] = []  # (review, when)
        self.updates: list[tuple[int, list[int]]] = []  # (review, its new records)
        self._plan_changes()
        for k in range(len(self.reviews)):
            self._plan_runs(k)
        for night in (0, 1):
            self.at(night * DAY + self.plan.uniform(*DEDUP_HOURS) * HOUR, "dedup", night)

    def _plan_changes(self) -> None:
        """The living reviews' search updates (local 06..07 on a day on the clock; they
        fetch full texts as they go) and the amendments (reviews among the 4 largest)."""
        plan, order = self.plan, sorted(range(len(self.reviews)), key=self._by_size)
        self.living = plan.sample(order, min(len(order), plan.randint(*LIVING)))
        amended = plan.sample(order[:4], plan.randint(*AMENDMENTS))
        for k, rv in enumerate(self.reviews):
            if k in self.living:
                rv.rolling = True
                days = [d for d in (-1, 0, 1, 2) if 0 <= utc(d, UPDATE_HOURS[0], rv.tz)
                        and utc(d, UPDATE_HOURS[1], rv.tz) < self.END]
                self.at_local(plan.choice(days), plan.uniform(*UPDATE_HOURS), rv.tz, "update", k)
            if k in amended:
                self.at(self.work_time(rv.tz, plan), "amend", k)

    def _by_size(self, k: int) -> float:
        return -self.reviews[k].weight

    def _plan_runs(self, k: int) -> None:
        """Review ``k``'s screening runs: 1..3 each local workday that falls on the clock."""
        rng, tz = self.plan, self.reviews[k].tz
        for d in (-1, 0, 1, 2):
            for _ in range(pick(rng, RUNS)):
                t = utc(d, hour_of(rng, OFFICE, 8), tz)
                if 0 <= t < self.END:
                    self.at(t, "run", k)
                    self.runs_left[k] += 1

    def start(self, s: Stream, ordered: bool = False) -> None:
        """Start walk ``s`` now with its kind's workers (one if it must go ``ordered``)."""
        s.workers = 1 if ordered else WORKERS[s.kind]
        self.walks.append(s)
        s.active = s.workers
        for _ in range(s.workers):
            self.at(self.now, "stream", s)

    def pace(self, segs: list[Segment], out: int) -> float:
        """Seconds until a stream's next request: reading the prompt, writing ``out``."""
        work = sum(n for _, n in segs) / PREFILL + out / DECODE
        return work * self.rng.uniform(0.8, 1.25)

    def _on_stream(self, s: Stream) -> None:
        """A worker's next step (``step_<kind>`` builds it); once the steps are all taken
        and the last worker is done, ``done_<kind>``."""
        base = "screen" if s.kind in SCREENS else s.kind
        if s.pos == len(s.steps):
            s.active -= 1
            if not s.active:
                getattr(self, "done_" + base)(s)
            return
        step = s.steps[s.pos]
        s.pos += 1
        segs, out = getattr(self, "step_" + base)(s, step)
        s.sent.append(self.emit(s.kind, s.owner, step[0], segs))
        self.at(self.now + self.pace(segs, out), "stream", s)

    def output(self, kind: str) -> Segment:
        """A new output of ``kind``'s length."""
        return self.new(clipped_length(self.rng, *OUTPUT[kind]))

    def screen_prompt(self, r: int, who: str) -> list[Segment]:
        """Screening: system prompt, the criteria and worked examples as they stand, with
        reviewer ``who``'s variant first or after them (``Setup``), the record, the cue."""
        rv = self.reviews[self.records[r].review]
        body = [*rv.protocol.at(self.now), *rv.examples.at(self.now)]
        var = rv.variants[who]
        head = [var, *body] if self.setup.persona_first else [*body, var]
        return [self.system["screen"], *head, self.records[r].text, self.cue["screen"]]

    def screening(self, kind: str, k: int, recs: list[int], why: str = "") -> None:
        """A dual-screening walk over ``recs``: A then B per record, or A's pass then B's
        (none if ``recs`` is empty)."""
        if not recs:
            return
        for r in recs:
            self.records[r].status = "queued"
        if self.setup.paired:
            steps = [(r, w) for r in recs for w in "AB"]
        else:
            steps = [(r, w) for w in "AB" for r in recs]
        self.start(Stream(kind, k, steps, (self.now, why)))

    def step_screen(self, s: Stream, step: tuple) -> tuple[list[Segment], int]:
        """Reviewer ``who`` screens the record: its rationale is kept, its vote drawn."""
        r, who = step
        rec, segs, out = self.records[r], self.screen_prompt(r, who), self.output("screen")
        rec.notes[who] = out
        hit, miss = ACCURACY[who]
        rec.votes[who] = self.rng.random() < (hit if rec.relevant else miss)
        return segs, out[1]

    def done_screen(self, s: Stream) -> None:
        """Both votes in: agreed records are decided, conflicts go to the adjudicator; an
        update's walk is followed by re-checks of unsure records."""
        disputed = []
        for r in dict.fromkeys(step[0] for step in s.steps):
            rec = self.records[r]
            if rec.votes["A"] != rec.votes["B"]:
                rec.status = "disputed"
                disputed.append((r,))
            else:
                rec.status = "included" if rec.votes["A"] else "excluded"
                if rec.votes["A"]:
                    self.included(r)
        if disputed:
            self.start(Stream("adjudicate", s.owner, disputed, (self.now, "")))
        if s.kind == "update":
            self.recheck(s.owner, round(RECHECK * len(s.steps) / 2))

    def recheck(self, k: int, n: int) -> None:
        """After a search update, ``n`` unsure records re-checked: those the adjudicator left
        unsure during the trace first, then a sample of the library's."""
        rv = self.reviews[k]
        recent = [r for r in rv.pool if self.records[r].status == "unsure"][:n]
        old = [r for r in rv.library if self.records[r].status == "unsure"]
        old = self.rng.sample(old, min(len(old), n - len(recent)))
        self.screening("recheck", k, sorted(recent + old), "update")

    def step_adjudicate(self, s: Stream, step: tuple) -> tuple[list[Segment], int]:
        """The adjudicator: its system prompt, the criteria and examples, the record, both
        reviewers' rationales, the cue; its decision is final."""
        r = step[0]
        rec = self.records[r]
        rv = self.reviews[rec.review]
        segs = [self.system["adjudicate"], *rv.protocol.at(self.now), *rv.examples.at(self.now),
                rec.text, rec.notes["A"], rec.notes["B"], self.cue["adjudicate"]]
        include = self.rng.random() < ADJUDICATOR[0 if rec.relevant else 1]
        rec.status, rec.adjudicated = ("included" if include else "unsure"), self.now
        self.adjudicated[rec.review].append(r)
        if include:
            self.included(r)
        return segs, clipped_length(self.rng, *OUTPUT["adjudicate"])

    def done_adjudicate(self, s: Stream) -> None:
        """Nothing follows an adjudication walk."""

    def included(self, r: int) -> None:
        """A hook for the desk (record ``r`` goes on to full text)."""

    def _on_run(self, k: int) -> None:
        """A screening run of review ``k``: its share of the records imported by now and not
        yet screened (its last run takes them all)."""
        rv = self.reviews[k]
        todo = [r for r in rv.pool if self.records[r].status == "new"
                and self.records[r].imported <= self.now]
        quota = math.ceil(len(todo) / self.runs_left[k])
        self.runs_left[k] -= 1
        if todo:
            self.screening("screen", k, todo[:quota] if self.runs_left[k] else todo)

    def _on_update(self, k: int) -> None:
        """A living review's search update lands: its new records are screened at once."""
        n = max(2, round(clipped_length(self.rng, *UPDATE) * self.scale))
        recs = [self.record(k, self.now) for _ in range(n)]
        self.updates.append((k, recs))
        self.screening("update", k, recs)

    def _on_amend(self, k: int) -> None:
        """Review ``k``'s protocol is amended: one criteria section rewritten (half the time a
        worked example or an extraction field group added), then included records re-screened
        under the new criteria."""
        rng, rv = self.rng, self.reviews[k]
        crit = list(rv.protocol.current)
        i = rng.randrange(len(crit))
        crit[i] = self.new(max(40, round(crit[i][1] * rng.uniform(0.8, 1.4))))
        rv.protocol.versions.append((self.now, crit))
        if rng.random() < 0.5:
            rv.examples.versions.append((self.now, [*rv.examples.current,
                                                    self.new(clipped_length(rng, *EXAMPLE))]))
        if rng.random() < 0.5:
            rv.template.versions.append((self.now, [*rv.template.current,
                                                    self.new(clipped_length(rng, *GROUP))]))
            rv.asks.append(self.new(clipped_length(rng, *ASK)))
        self.amendments.append((k, self.now))
        done = [r for r in rv.library + rv.pool if self.records[r].status == "included"]
        n = min(len(done), max(2, round(clipped_length(rng, *AMEND_RECHECK) * self.scale)))
        self.screening("recheck", k, sorted(rng.sample(done, n)), "amend")

    def _on_dedup(self, night: int) -> None:
        """The nightly de-duplication walk: every record imported in the day before the
        night's midnight, by import time, against 0..4 candidate duplicates from its
        review's library (a blocking step picked them)."""
        rng, lo, hi = self.rng, (night - 1) * DAY, night * DAY
        recs = sorted((rec.imported, r) for r, rec in enumerate(self.records)
                      if lo <= rec.imported < hi)
        steps = []
        for _, r in recs:
            lib = self.reviews[self.records[r].review].library
            steps += [(r, c) for c in sorted(rng.sample(lib, min(len(lib), pick(rng, DUPES))))]
        self.start(Stream("dedup", night, steps, (self.now, "")))

    def step_dedup(self, s: Stream, step: tuple) -> tuple[list[Segment], int]:
        """A pair: system prompt, the new record, the candidate, the cue."""
        r, c = step
        segs = [self.system["dedup"], self.records[r].text, self.records[c].text,
                self.cue["dedup"]]
        return segs, clipped_length(self.rng, *OUTPUT["dedup"])

    def done_dedup(self, s: Stream) -> None:
        """Nothing follows a de-duplication walk."""
