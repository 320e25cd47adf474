"""bench.heldout's ``legal_review`` shape, the hourly clock and the batch jobs: sessions,
uploads, playbook edits and new matters booked in each firm's working hours (busier before a
deadline), clause extraction walking a data room in order with a review grid's column groups,
discovery productions reviewed document by document behind the matter's protocol, and a QC
sample of each production a few hours later. See bench/heldout_legal_review.py's docstring for
the numbers."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_legal_desk import MATTERS, Desk
from bench.heldout_legal_matters import make_doc, production
from bench.heldout_legal_parts import (DAY, HOUR, HOURS, PRACTICES, RATE, Versioned, busy,
                                       next_busy, revise)
from bench.heldout_meeting_parts import poisson

ASK, DRAFT, UPLOAD = 0.25, 0.05, 0.12  # sessions / uploads a lawyer starts a weekday
EDITS = 0.3  # playbook edits a firm makes a weekday
NEW_MATTERS = 0.06  # matters a firm of mean size opens a weekday
ROOM_ADDS = 0.05  # data-room uploads a weekday in a deal with a grid
WORKERS = {"extract": 4, "review": 6, "qc": 2}  # requests a job keeps in flight
OUTPUT = {"extract": (120, 0.6, 20, 600), "review": (150, 0.4, 60, 400),
          "qc": (100, 0.4, 40, 300)}  # reply tokens (median, sigma, lo, hi)
PREFILL = 12000.0  # prompt tokens a second
PER_GROUP = 6  # columns per extraction request
QC_SHARE = 0.1
HOT = 0.03  # share of reviewed documents a reviewer adds to the matter's workspace
PROTOCOL_EDIT = 0.15  # productions after whose first results the protocol is amended


@dataclass
class Job:
    """A batch job of a matter: "extract" (items (document, column group) in data-room order,
    every group of a document in a row), "review" or "qc" (items (document, 0) in Bates
    order); the column groups, its request indices, workers still running."""

    matter: int
    kind: str
    items: list[tuple[int, int]]
    groups: list[Segment]
    cursor: int = 0
    running: int = 0
    sent: list[int] = field(default_factory=list)


class Jobs(Desk):
    """The whole generator: the Desk plus the clock and the batch jobs. ``run`` (EventState's)
    walks it until the trace has its requests."""

    def __init__(self, rng: random.Random, size: int, scale: float) -> None:
        super().__init__(rng, size, scale)
        self.jobs: list[Job] = []
        self.seen: dict[int, list[int]] = {}  # a matter's produced documents
        self.at(0.0, "hour", None)
        for f, firm in enumerate(self.firms):
            for _ in range(max(1, round(MATTERS * firm.weight))):
                self.open(f, 0.0)

    def plan(self, mid: int, t: float) -> None:
        """Desk's plan, and: a deal's review grid (4..24 columns) walked over its data room
        (a new deal's 1..24 hours on, 20 % of the older ones' within 6 days, the rest's before
        the trace), 0.3 (Poisson) walks of 1..2 added columns within 10 days; productions in
        a litigation with discovery, the first within 5 days."""
        super().plan(mid, t)
        m, rng, tz = self.matters[mid], self.rng, self.tz(mid)
        if m.kind == "deal":
            fresh = t > 0 or rng.random() < 0.2
            m.grid = self.grid(clipped_length(rng, 10, 0.5, 4, 24))
            if fresh:
                later = t + rng.uniform(1, 24) * HOUR if t > 0 else rng.uniform(0, 6 * DAY)
                self.at(next_busy(rng, later, tz), "walk", (mid, None))
            for _ in range(poisson(rng, 0.3)):
                later = t + rng.uniform(0.5 if not fresh else 6.5, 10) * DAY
                self.at(next_busy(rng, later, tz), "walk", (mid, 1 + (rng.random() < 0.4)))
        if m.protocol is not None:
            self.seen[mid] = []
            self.at(next_busy(rng, t + rng.uniform(0, 5 * DAY), tz), "production", mid)

    def grid(self, columns: int) -> list[Segment]:
        """Column groups of PER_GROUP columns: each group's definitions, 60 tokens a column."""
        sizes = [min(PER_GROUP, columns - k) for k in range(0, columns, PER_GROUP)]
        return [self.new(60 * n + self.rng.randint(20, 80)) for n in sizes]

    def _on_hour(self, _: None) -> None:
        """Book this hour's sessions and uploads in every matter, playbook edits and new
        matters, each at the firm's (or, in a crunch, the matter's) hour weight."""
        self.at(self.now + HOUR, "hour", None)
        rng, norm = self.rng, sum(HOURS)
        for f, firm in enumerate(self.firms):
            for mid in list(firm.matters):
                m = self.matters[mid]
                w = busy(self.now, firm.tz, m.crunch(self.now)) * m.boost(self.now) / norm
                for kind, rate in (("ask", ASK), ("draft", DRAFT)):
                    for _ in range(poisson(rng, rate * m.lawyers * w)):
                        self.at(self.now + rng.uniform(0, HOUR), "start",
                                (mid, kind, *self.draft_base(mid, kind)))
                for _ in range(poisson(rng, UPLOAD * m.lawyers * w)):
                    self.at(self.now + rng.uniform(0, HOUR), "upload", mid)
                if m.kind == "deal" and m.grid and rng.random() < ROOM_ADDS * w:
                    self.at(self.now + rng.uniform(0, HOUR), "room", mid)
            w = busy(self.now, firm.tz) / norm
            if rng.random() < EDITS * w:
                self.at(self.now + rng.uniform(0, HOUR), "edit", f)
            if rng.random() < NEW_MATTERS * firm.weight * w:
                self.at(self.now + rng.uniform(0, HOUR), "open", f)

    def draft_base(self, mid: int, kind: str) -> tuple[list[int] | None, list[Segment]]:
        """What a drafting session starts from: a brief's or negotiated contract's current
        version (50 %, where the matter has one), else nothing (a clause from scratch); an
        ask session picks its documents when it starts."""
        m = self.matters[mid]
        pool = m.briefs + m.negotiated
        if kind != "draft" or not pool or self.rng.random() < 0.5:
            return (None if kind == "ask" else []), []
        d = self.rng.choice(pool)
        return [d], list(self.docs[d].text.current)

    def _on_open(self, f: int) -> None:
        self.open(f, self.now)

    def _on_edit(self, f: int) -> None:
        """A knowledge lawyer rewords, adds or strikes 1..2 sections of a practice playbook:
        every later section is new content from then on."""
        book: Versioned = self.firms[f].playbooks[self.rng.choice(PRACTICES)]
        book.versions.append((self.now, revise(self.rng, self.new, book.current,
                                               self.rng.randint(1, 2))))

    def _on_walk(self, payload: tuple) -> None:
        """Walk the data room: the whole grid (``added`` None), or 1..2 columns added to it
        (one new group) over every document again."""
        mid, added = payload
        m = self.matters[mid]
        groups = m.grid if added is None else [self.grid(added)[0]]
        if added is not None:
            m.grid.append(groups[0])
        self.start_job(mid, "extract", m.room, groups)

    def _on_room(self, mid: int) -> None:
        """5..30 documents added to the data room, walked with the whole grid."""
        m, rng = self.matters[mid], self.rng
        new = []
        for _ in range(rng.randint(5, 30)):
            self.docs.append(make_doc(rng, self.new, rng.choice(("record", "contract"))))
            new.append(len(self.docs) - 1)
            m.docs.append(new[-1])
            m.pop.append(0.3)
        m.room.extend(new)
        self.start_job(mid, "extract", new, m.grid)

    def start_job(self, mid: int, kind: str, docs: list[int], groups: list[Segment]) -> int:
        items = [(d, g) for d in docs for g in range(max(1, len(groups)))]
        self.jobs.append(Job(mid, kind, items, list(groups)))
        j = len(self.jobs) - 1
        for _ in range(min(WORKERS[kind], len(items))):
            self.jobs[j].running += 1
            self.at(self.now, "work", j)
        return j

    def _on_production(self, mid: int) -> None:
        """A production arrives and its review starts; the case team amends the protocol
        10..90 minutes on, after the first results (PROTOCOL_EDIT), so the QC sample and later
        productions are reviewed behind the new version; the next production 6 days (median,
        2..12) later."""
        rng = self.rng
        docs = production(rng, self.new, self.docs, self.seen[mid])
        self.start_job(mid, "review", docs, [])
        if rng.random() < PROTOCOL_EDIT:
            self.at(self.now + rng.uniform(10, 90) * 60, "amend", mid)
        later = self.now + clipped_length(rng, 6 * DAY, 0.4, 2 * DAY, 12 * DAY)
        self.at(next_busy(rng, later, self.tz(mid)), "production", mid)

    def _on_amend(self, mid: int) -> None:
        protocol = self.matters[mid].protocol
        protocol.versions.append((self.now, revise(self.rng, self.new, protocol.current, 1)))

    def _on_work(self, j: int) -> None:
        """A job's worker sends its next item, then takes the next when the reply is done;
        when a review is done, its QC sample is booked hours later."""
        job, rng = self.jobs[j], self.rng
        if job.cursor == len(job.items):
            job.running -= 1
            if job.running == 0 and job.kind == "review":
                later = self.now + rng.uniform(2, 24) * HOUR
                self.at(next_busy(rng, later, self.tz(job.matter)), "qc", j)
            return
        d, g = job.items[job.cursor]
        job.cursor += 1
        segs = self.batch_prompt(job, d, g)
        job.sent.append(len(self.out))
        self.send(job.kind, job.matter, j, segs)
        if job.kind == "review" and rng.random() < HOT and d not in self.matters[job.matter].docs:
            self.matters[job.matter].docs.append(d)
            self.matters[job.matter].pop.append(rng.uniform(0.5, 2.0))
        took = sum(n for _, n in segs) / PREFILL + clipped_length(rng, *OUTPUT[job.kind]) / RATE
        self.at(self.now + took + 0.2, "work", j)

    def batch_prompt(self, job: Job, d: int, g: int) -> list[Segment]:
        """Extraction: the document, then the column group. Review: the matter's protocol as
        of now, then the document. QC: a review's prompt, then the QC task and the first
        pass's coding."""
        body = self.docs[d].body()
        if job.kind == "extract":
            return [self.system, self.tasks["extract"], *body, job.groups[g]]
        protocol = self.matters[job.matter].protocol.at(self.now)
        segs = [self.system, self.tasks["review"], *protocol, *body]
        if job.kind == "qc":
            segs += [self.tasks["qc"], self.new(self.rng.randint(30, 120))]
        return segs

    def _on_qc(self, j: int) -> None:
        """A QC_SHARE sample (at least 5) of review ``j``'s documents, in Bates order."""
        docs = [d for d, _ in self.jobs[j].items]
        k = min(len(docs), max(5, math.ceil(QC_SHARE * len(docs))))
        sample = sorted(self.rng.sample(range(len(docs)), k))
        self.start_job(self.jobs[j].matter, "qc", [docs[i] for i in sample], [])
