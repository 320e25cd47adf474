"""bench.heldout's ``tax_prep`` shape, its world: a tax-preparation firm's clients in the two
busiest days of filing season (each with an organizer profile, last year's return, the source
documents it has uploaded and the records the intake job extracted from them, a return draft
once a preparer finishes it), the firm's reference library (IRS publication sections, some hot
this season), its internal guidance memo (revised now and then) and the amended-return files
re-opened from earlier years; the clock, the office's hours and the serial job queues. See
bench/heldout_tax_prep.py's docstring for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import ClockedState, Segment, clipped_length
from bench.heldout_legal_parts import Versioned, sections
from bench.heldout_meeting_parts import poisson

HOUR, DAY, MINUTE = 3600.0, 86400.0, 60.0
END = 2 * DAY  # Monday 00:00 local to Wednesday 00:00; Tuesday is the deadline's eve
PAST = -1e18  # "before the trace"
# how busy the office is in each local hour (preparers work long days in the crunch)
OFFICE = (0, 0, 0, 0, 0, 0, 0.1, 0.4, 0.8, 1.0, 1.0, 1.0, 0.8, 1.0, 1.0, 1.0, 1.0, 0.9,
          0.8, 0.7, 0.5, 0.3, 0.1, 0)
PORTAL = (0.2, 0.1, 0.05, 0.03, 0.03, 0.1, 0.3, 0.6, 0.8, 0.9, 1.0, 1.0, 1.0, 1.0, 0.9, 0.9,
          0.9, 1.0, 1.2, 1.4, 1.4, 1.1, 0.7, 0.4)  # client uploads, an evening peak
EVE = 1.25  # day 1 (the deadline's eve) is this much busier
CLIENTS = 230  # returns in progress on this replica at scale 1.0 (at least 30)
DONE = 0.35  # of them already finished (a return draft) before the trace
FORMS = (("W-2", 5.0, (1, 2)), ("1099-INT", 3.0, (1, 1)), ("1099-DIV", 2.5, (1, 2)),
         ("1099-B", 1.5, (4, 30)), ("1099-NEC", 1.5, (1, 1)), ("1099-R", 1.2, (1, 2)),
         ("1098", 2.0, (1, 1)), ("1098-T", 0.8, (1, 1)), ("K-1", 0.7, (2, 6)),
         ("SSA-1099", 0.8, (1, 1)), ("1099-G", 0.6, (1, 1)), ("1095-A", 0.4, (1, 3)),
         ("receipts", 1.0, (2, 12)))  # form type, weight, pages (lo, hi)
FORM_PROMPT = (700, 0.4, 300, 1600)  # tokens of a form type's extraction prompt (schema)
DOCS = (6, 0.5, 2, 18)  # source documents per client
UPLOADED = 0.55  # of a client's documents uploaded (and extracted) before the trace
PAGE = (550, 0.4, 150, 1400)  # OCR tokens of a scanned page
RECORD = (220, 0.5, 60, 900)  # tokens of the record extracted from a page
PROFILE = (600, 0.5, 200, 1800)  # the client's organizer questionnaire
PRIOR = (4000, 0.4, 1800, 12000)  # last year's return (in 500-token sections)
RETURN = (4500, 0.4, 2000, 11000)  # a return draft, summary worksheet first
SUMMARY = (1100, 0.3, 500, 2200)  # the summary worksheet
LIBRARY = 40  # IRS publication sections in the reference index
PUB = (2600, 0.5, 900, 7000)  # tokens of a publication section
HOT = 4  # sections hot this season (a law change), weighted as the top one
MEMO = (7, 700, 0.4, 300, 1600)  # internal guidance memo: sections, tokens per section
AMENDS = 30  # amended-return files re-opened at scale 1.0 (at least 4)
NOTICE = (900, 0.4, 400, 2000)  # an IRS notice (CP2000) that prompted the amendment


@dataclass
class Doc:
    """A source document: form type, pages (OCR text), when uploaded, the records extracted
    from its pages (filled as the intake job reads them) and when the last one landed."""

    client: int
    form: int
    pages: list[Segment]
    uploaded: float
    records: list[Segment] = field(default_factory=list)
    done: float = float("inf")


@dataclass
class Client:
    """A return in progress: the profile, last year's return, documents (in upload order),
    the return draft's versions (none until a preparer finishes it) and how it went."""

    profile: Segment
    prior: list[Segment]
    docs: list[int] = field(default_factory=list)
    draft: Versioned | None = None
    walkin: bool = False
    extended: bool = False
    sessions: int = 0


@dataclass
class Queue:
    """A serial job (the intake extraction queue, a review pass, a batch walk): its kind,
    owner, items, how far it is, its request indices and whether a step is scheduled."""

    kind: str
    owner: int
    items: list = field(default_factory=list)
    pos: int = 0
    sent: list[int] = field(default_factory=list)
    busy: bool = False


class Office(ClockedState):
    """The firm's clients, library, memo and amended files on the clock; queues that send
    one request after another at the replica's pace. bench.heldout_taxp_jobs builds on it."""

    END = END
    PREFILL, DECODE = 8000.0, 40.0  # tokens a second a job reads and writes

    def __init__(self, rng: random.Random, scale: float, scenario: str) -> None:
        super().__init__(rng, 0, scale)
        self.scenario, new = scenario, self.new
        self.form_prompts = [new(clipped_length(rng, *FORM_PROMPT)) for _ in FORMS]
        self.library = [new(clipped_length(rng, *PUB)) for _ in range(LIBRARY)]
        self.weights = [1.0 / r for r in rng.sample(range(1, LIBRARY + 1), LIBRARY)]
        for k in rng.sample(range(LIBRARY), HOT):
            self.weights[k] = 1.0
        self.memo = Versioned([(PAST, [new(clipped_length(rng, *MEMO[1:]))
                                       for _ in range(MEMO[0])])])
        self.docs: list[Doc] = []
        self.clients: list[Client] = []
        for _ in range(max(30, round(CLIENTS * scale))):
            self.client(PAST, rng.random() < DONE)
        self.amends = [self.amend_file() for _ in range(max(4, round(AMENDS * scale)))]

    def client(self, t: float, finished: bool, docs: int = 0, walkin: bool = False) -> int:
        """A new client (at ``t``): profile, last year's return, ``docs`` documents (drawn if
        0); a finished one has all documents in and a draft from before the trace."""
        rng, c = self.rng, len(self.clients)
        prior = sections(self.new, clipped_length(rng, *PRIOR))
        self.clients.append(Client(self.new(clipped_length(rng, *PROFILE)), prior,
                                   walkin=walkin))
        for _ in range(docs or clipped_length(rng, *DOCS)):
            before = finished or (t == PAST and rng.random() < UPLOADED)
            self.document(c, PAST if before else self.upload_time(t, walkin))
        if finished:
            self.clients[c].draft = Versioned([(PAST, self.return_draft())])
        return c

    def upload_time(self, t: float, walkin: bool) -> float:
        """When a document arrives: a walk-in's at once, else by the portal's hours."""
        if walkin:
            return t
        h = self.rng.choices(range(48), [w * (EVE if h >= 24 else 1.0) for h, w in
                                          enumerate(PORTAL * 2)])[0]
        return (h + self.rng.random()) * HOUR

    def document(self, c: int, t: float) -> None:
        """A document of client ``c`` uploaded at ``t`` (before the trace: extracted too)."""
        rng = self.rng
        f = rng.choices(range(len(FORMS)), [x[1] for x in FORMS])[0]
        pages = [self.new(clipped_length(rng, *PAGE)) for _ in range(rng.randint(*FORMS[f][2]))]
        d = len(self.docs)
        self.docs.append(Doc(c, f, pages, t))
        self.clients[c].docs.append(d)
        if t == PAST:
            self.docs[d].records = [self.new(clipped_length(rng, *RECORD)) for _ in pages]
            self.docs[d].done = PAST
        else:
            self.at(t, "upload", d)

    def return_draft(self) -> list[Segment]:
        """A return draft's sections: the summary worksheet, then the forms and schedules."""
        rng = self.rng
        return [self.new(clipped_length(rng, *SUMMARY)),
                *sections(self.new, clipped_length(rng, *RETURN))]

    def revise_draft(self, c: int) -> int:
        """A preparer fixes what the reviewer found: one section is rewritten (so every
        block from it on is new). Which section."""
        draft = self.clients[c].draft
        secs = list(draft.current)
        k = self.rng.randrange(len(secs))
        secs[k] = self.new(max(40, round(secs[k][1] * self.rng.uniform(0.8, 1.3))))
        draft.versions.append((self.now, secs))
        return k

    def amend_file(self) -> list[Segment]:
        """An amended-return file: the return as filed (earlier year), its records, the
        IRS notice that prompted the amendment."""
        rng = self.rng
        filed = sections(self.new, clipped_length(rng, *RETURN))
        records = [self.new(clipped_length(rng, *RECORD)) for _ in range(rng.randint(3, 9))]
        return [*filed, *records, self.new(clipped_length(rng, *NOTICE))]

    def records(self, c: int) -> list[Segment]:
        """Client ``c``'s extracted records as they stand now, in upload order."""
        return [r for d in self.clients[c].docs if self.docs[d].done <= self.now
                for r in self.docs[d].records]

    def daily(self, per_day: float, name: str, hours: tuple = OFFICE, payload=None,
              boost=None) -> None:
        """About ``per_day`` x scale events ``name`` a day by ``hours``, busier on the eve;
        ``boost(day, hour)`` multiplies the rate (a surge)."""
        total = sum(hours)
        for h in range(48):
            rate = per_day * self.scale * hours[h % 24] / total * (EVE if h >= 24 else 1.0)
            rate *= boost(h // 24, h % 24) if boost else 1.0
            for _ in range(poisson(self.rng, rate)):
                self.at((h + self.rng.random()) * HOUR, name, payload)

    def push(self, q: Queue, item) -> None:
        """Queue ``item`` on ``q``; an idle queue starts at once."""
        q.items.append(item)
        if not q.busy:
            q.busy = True
            self.at(self.now, "step", q)

    def _on_step(self, q: Queue) -> None:
        """The next item of queue ``q``: its request, then the next after the replica has
        read the prompt and written the answer."""
        if q.pos >= len(q.items):
            q.busy = False
            return
        wait = self.paused(q)
        if wait > self.now:
            self.at(wait, "step", q)
            return
        segs, out = self.prompt(q, q.items[q.pos])
        q.sent.append(self.emit(q.kind, q.owner, q.pos, segs))
        q.pos += 1
        read = sum(t for _, t in segs)
        self.at(self.now + (read / self.PREFILL + out / self.DECODE)
                * self.rng.uniform(0.8, 1.25), "step", q)

    def paused(self, q: Queue) -> float:
        """When queue ``q`` may go on (now unless the job has an outage); jobs override it."""
        return self.now

    def prompt(self, q: Queue, item) -> tuple[list[Segment], int]:
        """The segments of ``q``'s request for ``item`` and its answer's tokens (jobs')."""
        raise NotImplementedError

    def active(self) -> list[int]:
        """Clients in progress (no draft yet) with at least one record in, by id."""
        return [c for c, x in enumerate(self.clients) if x.draft is None and not x.extended
                and any(self.docs[d].done <= self.now for d in x.docs)]
