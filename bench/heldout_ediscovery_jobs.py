"""bench.heldout's ``ediscovery_review`` shape, the platform's jobs: processing each collection
one document at a time as a bare prompt (the document, then the job's cue), its exceptions
re-run exactly, email threading over the threads a collection touched, the AI first-level
review pass over the search-term population behind the review protocol (its coding kept),
re-review after a protocol change, and search-term hit reports over a stored sample per term.
See bench/heldout_ediscovery_review.py's docstring for the numbers."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from bench.heldout_ediscovery_parts import DAY, HOUR, MINUTE, Walk, World
from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_legal_parts import Versioned, revise, sections

SYSTEM = {"review": 450, "thread": 350, "hits": 300, "chat": 700, "depo": 600, "prod": 400,
          "privlog": 450}  # tokens of each application's system prompt
CUE = {"ingest": 30, "thread": 25, "review": 70, "hits": 40, "qc": 45, "prod": 30,
       "privlog": 35}  # tokens of each job's instruction after the document
PROTOCOL = (1500, 0.25, 1000, 3000)  # tokens of the review protocol (in sections)
COLLECT = ((0.0, (7.5, 8.5)), (2.0, (18.0, 20.0)))  # (day, hours) each collection comes in
PROCESS = (1.2, 2.5)  # documents a second processing sends at scale 1.0 (x scale)
JOB_RATE = (0.6, 1.5)  # requests a second of the other jobs at scale 1.0 (x scale)
EXCEPTIONS = (0.01, 0.03)  # share of a collection's documents that fail processing
PAUSE = (5.0, 20.0)  # minutes between one job of a collection and the next
RESPONSIVE = (0.3, 0.12, 0.8)  # chance coded responsive: base, + per further term hit, cap
PRIVILEGED, HOT = 0.07, 0.06  # of the population; hot: of the responsive ones
CODING = (120, 0.5, 40, 400)  # tokens of a coding decision and its rationale
UPDATES = ((1.0, 1.0), (3.0, 0.5))  # (day, chance) of a protocol update (11:00..15:00)
REREVIEW = (0.5, 0.8)  # share of responsive or privileged docs re-run, chance a call stands
HIT_RUNS = ((0.0, (14.0, 16.0)), (1.0, (16.0, 18.0)), (3.0, (10.0, 12.0)))  # hit reports
SAMPLE = 8  # documents a term's report samples at scale 1.0 (at least 1)
REVISED = ((1.0, (10.0, 13.0)), (0.15, 0.3), (0.4, 0.8))  # meet-and-confer; terms; keep


@dataclass
class Coding:
    """A first-level call on a document: responsive, privileged, hot, the decision's text
    and the index of the request that made it (a QC correction has the QC request's)."""

    responsive: bool
    privileged: bool
    hot: bool
    reply: Segment
    request: int


@dataclass
class HitRun:
    """A hit report: when it started, per live term (its version, the sampled documents),
    and the walk."""

    time: float
    samples: dict[int, tuple[int, list[int]]] = field(default_factory=dict)
    walk: Walk | None = None


class Jobs(World):
    """The platform's batch side on the matter (``World``); bench.heldout_ediscovery_desk.Desk
    adds the people."""

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, scale)
        self.system = {k: self.new(n) for k, n in SYSTEM.items()}
        self.cue = {k: self.new(n) for k, n in CUE.items()}
        self.protocol = Versioned([(-1e18, sections(self.new, clipped_length(rng, *PROTOCOL)))])
        self.processed: dict[int, float] = {}  # doc -> when processing sent it
        self.coding: dict[int, list[Coding]] = {}
        self.qc_queue: list[int] = []
        self.ingests: list[Walk] = []
        self.exceptions: list[Walk] = []
        self.thread_jobs: list[Walk] = []
        self.first_passes: list[Walk] = []
        self.rereviews: list[Walk] = []
        self.hit_runs: list[HitRun] = []
        for batch, (day, hours) in enumerate(COLLECT):
            self.at((day + rng.uniform(*hours) / 24) * DAY, "collect", batch)
        for day, chance in UPDATES:
            if rng.random() < chance:
                self.at(day * DAY + rng.uniform(11, 15) * HOUR, "protocol", None)
        for day, hours in HIT_RUNS:
            self.at(day * DAY + rng.uniform(*hours) * HOUR, "hit_report", None)
        self.at(REVISED[0][0] * DAY + rng.uniform(*REVISED[0][1]) * HOUR, "confer", None)

    def rate(self, span: tuple[float, float]) -> float:
        return self.rng.uniform(*span) * self.scale

    def later(self) -> float:
        return self.now + self.rng.uniform(*PAUSE) * MINUTE

    def review(self, d: int) -> list[Segment]:
        return self.review_at(d, self.now)

    def review_at(self, d: int, t: float) -> list[Segment]:
        """A first-level review prompt at ``t``: system prompt, the protocol as it stands,
        the document, the coding instruction."""
        return [self.system["review"], *self.protocol.at(t), *self.corpus.docs[d].text,
                self.cue["review"]]

    def _on_collect(self, batch: int) -> None:
        """A collection comes in: processing walks it, one bare prompt a document."""
        def make(d):
            return d, [*self.corpus.docs[d].text, self.cue["ingest"]]

        def after(d, _):
            self.processed[d] = self.now

        order = self.corpus.order[batch]
        self.ingests.append(self.walk(Walk("ingest", batch, order, make, self.rate(PROCESS),
                                           after, lambda: self._failed(batch)), self.now))

    def _failed(self, batch: int) -> None:
        """The exceptions (timeouts, a worker lost) are re-run exactly, in order."""
        w = self.ingests[batch]
        n = max(1, round(len(w.sent) * self.rng.uniform(*EXCEPTIONS)))
        redo = sorted(self.rng.sample(range(len(w.sent)), n))
        items = [w.sent[k] for k in redo]
        self.exceptions.append(self.walk(
            Walk("exception", batch, items, lambda x: (x[0], self.meta[x[1]][3]),
                 self.rate(PROCESS), done=lambda: self._threads(batch)), self.later()))
        if batch == 0:
            self.opened()

    def opened(self) -> None:
        """The workspace opens to its users (Desk)."""

    def _threads(self, batch: int) -> None:
        """Threading: every thread the collection touched that now has two messages or
        more, its messages' own text in date order."""
        c = self.corpus

        def make(t):
            msgs = [m for m in c.threads[t] if c.docs[m].batch <= batch]
            return t, [self.system["thread"], *[s for m in msgs for s in c.docs[m].own],
                       self.cue["thread"]]

        touched = sorted({c.docs[d].thread for d in c.order[batch] if c.docs[d].kind == "email"})
        items = [t for t in touched if sum(c.docs[m].batch <= batch for m in c.threads[t]) > 1]
        self.thread_jobs.append(self.walk(Walk("thread", batch, items, make,
                                               self.rate(JOB_RATE),
                                               done=lambda: self._first_pass(batch)),
                                          self.later()))

    def population(self, batch: int, t: float) -> list[int]:
        """The collection's review population at ``t``: documents that survive thread
        de-duplication and hit a live search term, in processing order."""
        c = self.corpus
        return [d for d in c.order[batch] if c.inclusive(d, batch)
                and any(term.hit(d, t) for term in self.terms)]

    def _first_pass(self, batch: int) -> None:
        """The AI first-level review over the population; its calls feed the QC queue."""
        when = self.later()
        items = self.population(batch, when)
        self.first_passes.append(self.walk(Walk(
            "first_pass", batch, items, lambda d: (d, self.review(d)), self.rate(JOB_RATE),
            self._code, lambda: self._sample(items)), when))

    def _code(self, d: int, i: int) -> None:
        """The first-level call on ``d`` made by request ``i`` (a re-run keeps a call with
        REREVIEW's chance)."""
        rng, old = self.rng, self.coding.get(d)
        hits = sum(term.hit(d, self.now) for term in self.terms)
        p = min(RESPONSIVE[2], RESPONSIVE[0] + RESPONSIVE[1] * (hits - 1))
        resp = rng.random() < p
        priv, hot = rng.random() < PRIVILEGED, resp and rng.random() < HOT
        if old and rng.random() < REREVIEW[1]:
            resp, priv, hot = old[-1].responsive, old[-1].privileged, old[-1].hot
        reply = self.new(clipped_length(rng, *CODING))
        self.coding.setdefault(d, []).append(Coding(resp, priv, hot, reply, i))

    def _sample(self, items: list[int]) -> None:
        """QC's sample: every privileged or hot call, 15 % of the responsive, 5 % of the rest."""
        for d in items:
            c = self.coding[d][-1]
            share = 1.0 if c.privileged or c.hot else 0.15 if c.responsive else 0.05
            if self.rng.random() < share:
                self.qc_queue.append(d)

    def _on_protocol(self, _: object) -> None:
        """The protocol is revised (an issue reworded, guidance added); that evening the
        coded responsive or privileged documents it touches are re-run behind it."""
        self.protocol.versions.append((self.now, revise(self.rng, self.new,
                                                        self.protocol.current, 1)))
        day = self.now // DAY * DAY
        self.at(day + self.rng.uniform(19, 21) * HOUR, "rereview", None)

    def _on_rereview(self, _: object) -> None:
        items = [d for w in self.first_passes for d, _ in w.sent
                 if (self.coding[d][-1].responsive or self.coding[d][-1].privileged)
                 and self.rng.random() < REREVIEW[0]]
        self.rereviews.append(self.walk(Walk("rereview", len(self.rereviews), items,
                                              lambda d: (d, self.review(d)),
                                              self.rate(JOB_RATE), self._code,
                                              lambda: self._changed(items)), self.now))

    def _changed(self, items: list[int]) -> None:
        """The re-run calls that changed go to QC."""
        for d in items:
            a, b = self.coding[d][-2:]
            if (a.responsive, a.privileged) != (b.responsive, b.privileged):
                self.qc_queue.append(d)

    def _on_confer(self, _: object) -> None:
        """The meet-and-confer: some terms are narrowed (new text, a share of their hits
        kept), the added ones go live."""
        rng = self.rng
        live = [t for t in self.terms if t.added < self.now]
        for t in rng.sample(live, round(len(live) * rng.uniform(*REVISED[1]))):
            keep = t.versions[-1][2] * rng.uniform(*REVISED[2])
            t.versions.append((self.now, self.new(round(t.text(self.now)[1] * 1.2) + 4), keep))
        for t in self.terms:
            if t.added == math.inf:
                t.added = self.now

    def _on_hit_report(self, _: object) -> None:
        """Per live term, the stored sample again if the term is unchanged (plus a share of
        the hits collected since), else a new sample; term by term."""
        rng, now = self.rng, self.now
        prev = self.hit_runs[-1] if self.hit_runs else None
        run, n = HitRun(now), max(1, round(SAMPLE * self.scale))
        for k, term in enumerate(self.terms):
            hits = [d for d in self.processed if term.hit(d, now)]
            v = term.version(now)
            if not hits:
                continue
            old = prev.samples.get(k) if prev else None
            if old and old[0] == v:
                new = [d for d in hits if self.processed[d] > prev.time]
                extra = min(len(new), round(n * len(new) / len(hits)))
                run.samples[k] = (v, old[1] + rng.sample(new, extra))
            else:
                run.samples[k] = (v, rng.sample(hits, min(n, len(hits))))
        items = [(k, d) for k, (_, docs) in run.samples.items() for d in docs]

        def make(x):
            k, d = x
            return d, [self.system["hits"], self.terms[k].text(self.now),
                       *self.corpus.docs[d].text, self.cue["hits"]]

        run.walk = self.walk(Walk("hits", len(self.hit_runs), items, make,
                                  self.rate(JOB_RATE)), now)
        self.hit_runs.append(run)
