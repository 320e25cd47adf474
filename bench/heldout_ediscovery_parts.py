"""bench.heldout's ``ediscovery_review`` shape, its world: a litigation matter's collected
documents (custodians' mailboxes with email threads and attachments, their file shares), the
negotiated search terms and which documents they hit, and the generator's base that sends
requests (walks over a list at a steady rate). See bench/heldout_ediscovery_review.py's
docstring for the numbers."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.heldout_fewshot import ClockedState, Segment, clipped_length
from bench.heldout_legal_parts import sections

HOUR, DAY, MINUTE = 3600.0, 86400.0, 60.0
END = 4 * DAY + 19 * HOUR  # Friday 19:00: the trace ends (the clock's 0 is Monday 00:00)
DOCS = (2800, 1100)  # documents in the two collections at scale 1.0 (x 0.85..1.15)
CUSTODIANS = ((5, 8), (2, 4))  # custodians in each collection (the second: new ones)
SUPPLEMENT = (0.15, 0.3)  # share of the first collection's threads the second continues
EMAILS, FILES = 0.55, 0.18  # shares of a custodian's documents (attachments come with emails)
THREAD = (2, 0.8, 1, 12)  # messages in a thread (median, sigma, lo, hi)
QUOTED = 6  # earlier messages an email quotes below its own text, newest first
ATTACH = (0.25, (1, 3))  # emails with attachments, and how many
HEADER = {"email": (70, 0.3, 30, 200), "attachment": (25, 0.3, 10, 60),
          "file": (35, 0.3, 15, 90)}  # tokens of a document's header (names, dates, path)
BODY = {"email": (160, 0.9, 15, 3000), "attachment": (900, 1.0, 60, 12000),
        "file": (700, 1.1, 40, 12000)}  # tokens of its body (in 500-token sections)
DATES = ((-400.0, -40.0), (-40.0, -3.0))  # days: the first collection's range, the supplement's
TERMS = (30, 50)  # negotiated search terms in the first list
ADDED = (2, 5)  # terms added at the meet-and-confer
BREADTH = (0.015, 1.0, 0.002, 0.15)  # share of the documents a term hits (median, sigma, ..)
TERM_TOKENS = (40, 0.5, 12, 160)  # tokens of a term's text (the Boolean string, its notes)
WORK = (9.0, 18.0)  # the reviewers' working hours


@dataclass
class Doc:
    """A collected document: "email", "attachment" or "file", its custodian and collection
    (0 or 1), its date (days before the matter), ``own`` (its header and body) and ``text``
    as processing reads it (an email: ``own``, then the messages it quotes, newest first;
    otherwise ``own``), its thread (emails) and parent email (attachments)."""

    kind: str
    custodian: int
    batch: int
    date: float
    own: list[Segment]
    text: list[Segment] = field(default_factory=list)
    thread: int = -1
    parent: int = -1


@dataclass
class Corpus:
    """Every document (index = doc id), the threads (their emails' ids in date order), each
    collection's ids in processing order (custodian by custodian: the mailbox in date order
    with each email's attachments after it, then the file share) and its custodians."""

    docs: list[Doc] = field(default_factory=list)
    threads: list[list[int]] = field(default_factory=list)
    order: list[list[int]] = field(default_factory=list)
    custodians: list[list[int]] = field(default_factory=list)

    def inclusive(self, d: int, batch: int) -> bool:
        """Whether doc ``d`` survives thread de-duplication once collection ``batch`` is in:
        not an email that a later collected message of its thread quotes."""
        doc = self.docs[d]
        if doc.kind != "email":
            return True
        later = self.threads[doc.thread]
        return all(self.docs[m].batch > batch for m in later[later.index(d) + 1:])

    def bates(self, batch: int) -> list[int]:
        """The documents of collections up to ``batch`` in production (Bates) order."""
        return [d for b in range(batch + 1) for d in self.order[b]]


def _doc(rng: random.Random, new: Callable, kind: str, who: int, batch: int,
         date: float) -> Doc:
    own = [new(clipped_length(rng, *HEADER[kind])),
           *sections(new, clipped_length(rng, *BODY[kind]))]
    return Doc(kind, who, batch, date, own, list(own))


def _message(rng: random.Random, new: Callable, c: Corpus, t: int, who: int, batch: int,
             date: float) -> list[int]:
    """The next email of thread ``t`` (quoting the last QUOTED before it) and its
    attachments: their ids."""
    doc = _doc(rng, new, "email", who, batch, date)
    doc.thread = t
    for m in reversed(c.threads[t][-QUOTED:]):
        doc.text += c.docs[m].own
    e = len(c.docs)
    c.docs.append(doc)
    c.threads[t].append(e)
    out = [e]
    if rng.random() < ATTACH[0]:
        for _ in range(rng.randint(*ATTACH[1])):
            att = _doc(rng, new, "attachment", who, batch, date)
            att.parent = e
            out.append(len(c.docs))
            c.docs.append(att)
    return out


def _mailbox(rng: random.Random, new: Callable, c: Corpus, who: int, n: int) -> list[int]:
    """A new custodian's mailbox of about ``n`` emails in threads (first collection's
    dates), then ``n`` x FILES / EMAILS file-share documents: ids in processing order."""
    batch = len(c.order)
    dated: list[tuple[float, list[int]]] = []
    emails = 0
    while emails < n:
        c.threads.append([])
        t, date = len(c.threads) - 1, rng.uniform(*DATES[0])
        for _ in range(clipped_length(rng, *THREAD)):
            dated.append((date, _message(rng, new, c, t, who, batch, date)))
            date += rng.expovariate(0.5)
            emails += 1
    out = [d for _, ids in sorted(dated, key=lambda x: x[0]) for d in ids]
    for _ in range(round(n * FILES / EMAILS)):
        out.append(len(c.docs))
        c.docs.append(_doc(rng, new, "file", who, batch, rng.uniform(*DATES[0])))
    return out


def _supplement(rng: random.Random, new: Callable, c: Corpus) -> list[int]:
    """The second collection's later date range from the first's custodians: replies that
    continue some of the first collection's threads, in date order."""
    first = [t for t, ms in enumerate(c.threads) if c.docs[ms[0]].batch == 0]
    picked = rng.sample(first, round(len(first) * rng.uniform(*SUPPLEMENT)))
    dated = []
    for t in picked:
        who = c.docs[c.threads[t][0]].custodian
        date = max(rng.uniform(*DATES[1]), c.docs[c.threads[t][-1]].date + 0.1)
        for _ in range(rng.randint(1, 4)):
            dated.append((who, date, _message(rng, new, c, t, who, 1, date)))
            date += rng.expovariate(1.0)
    dated.sort(key=lambda x: (x[0], x[1]))
    return [d for *_, ids in dated for d in ids]


def corpus(rng: random.Random, new: Callable, scale: float) -> Corpus:
    """The two collections: DOCS x scale documents each (x 0.85..1.15) over their
    custodians (Zipf sizes by a random rank); the second adds new custodians and continues
    some of the first's threads."""
    c = Corpus()
    for batch, (n, span) in enumerate(zip(DOCS, CUSTODIANS)):
        total = max(20, round(n * scale * rng.uniform(0.85, 1.15)))
        k = rng.randint(*span)
        base = sum(map(len, c.custodians))
        sizes = [r ** -0.7 for r in rng.sample(range(1, k + 1), k)]
        order = _supplement(rng, new, c) if batch else []
        share = (total - len(order)) * EMAILS / sum(sizes)
        c.custodians.append(list(range(base, base + k)))
        for who, size in zip(c.custodians[-1], sizes):
            order += _mailbox(rng, new, c, who, max(2, round(share * size)))
        c.order.append(order)
    return c


@dataclass
class Term:
    """A search term: its versions as (time, text, keep) (a narrowed term keeps a share of
    its hits), the documents its broadest version hits with a draw each, and when it was
    added (-inf for the first list)."""

    versions: list[tuple[float, Segment, float]]
    hits: dict[int, float]
    added: float = -math.inf

    def version(self, t: float) -> int:
        return max(k for k, v in enumerate(self.versions) if v[0] <= t)

    def text(self, t: float) -> Segment:
        return self.versions[self.version(t)][1]

    def hit(self, d: int, t: float) -> bool:
        keep = self.versions[self.version(t)][2]
        return self.added <= t and self.hits.get(d, 1.0) < keep


def terms(rng: random.Random, new: Callable, n_docs: int) -> list[Term]:
    """TERMS search terms and ADDED more (``added`` inf until the meet-and-confer), each
    hitting a BREADTH share of the documents."""
    out, first = [], rng.randint(*TERMS)
    for k in range(first + rng.randint(*ADDED)):
        median, sigma, lo, hi = BREADTH
        share = min(hi, max(lo, rng.lognormvariate(math.log(median), sigma)))
        docs = rng.sample(range(n_docs), max(1, round(n_docs * share)))
        out.append(Term([(-math.inf, new(clipped_length(rng, *TERM_TOKENS)), 1.0)],
                        {d: rng.random() for d in docs}, -math.inf if k < first else math.inf))
    return out


@dataclass
class Walk:
    """A job sending one request per item at ``rate`` a second: ``make(item)`` gives the
    step and segments (None skips it), ``after(item, index)`` runs after each send,
    ``done()`` after the last. ``sent``: (item, request index)."""

    kind: str
    owner: int
    items: list
    make: Callable[[object], tuple[int, list[Segment]] | None]
    rate: float
    after: Callable[[object, int], None] | None = None
    done: Callable[[], None] | None = None
    sent: list[tuple[object, int]] = field(default_factory=list)
    at: int = 0


class World(ClockedState):
    """The matter on the event clock: the corpus and the search terms; ``emit`` sends a
    request, ``walk`` starts a job. bench.heldout_ediscovery_jobs.Jobs builds on it."""

    END = END

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, 0, scale)
        self.corpus = corpus(rng, self.new, scale)
        self.terms = terms(rng, self.new, len(self.corpus.docs))

    def walk(self, w: Walk, when: float) -> Walk:
        self.at(when, "walk", w)
        return w

    def _on_walk(self, w: Walk) -> None:
        item = w.items[w.at] if w.at < len(w.items) else None
        made = w.make(item) if item is not None else None
        if made is not None:
            i = self.emit(w.kind, w.owner, made[0], made[1])
            w.sent.append((item, i))
            if w.after:
                w.after(item, i)
        w.at += 1
        if w.at < len(w.items):
            self.at(self.now + self.rng.expovariate(w.rate), "walk", w)
        elif w.done:
            w.done()

    def working(self, t: float) -> float:
        """``t`` if it falls in a weekday's WORK hours, else the next day's start (+ up to
        30 minutes)."""
        day, h = int(t // DAY), t % DAY / HOUR
        if WORK[0] <= h < WORK[1]:
            return t
        day += h >= WORK[1]
        return day * DAY + WORK[0] * HOUR + self.rng.uniform(0, 30 * MINUTE)
