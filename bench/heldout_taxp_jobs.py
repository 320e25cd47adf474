"""bench.heldout's ``tax_prep`` shape, the firm's jobs: the intake queue that reads every
uploaded page with its form type's fixed extraction prompt, the reviewer's checklist pass over
a finished return (sent back for a fix now and then, then passed again), the client e-mail
drafted once a return passes, the nightly re-check of every finished return against the
guidance memo (and a daytime one when the memo changes mid-day), and the deadline-eve walk
that files extensions for the returns that will not make it. See bench/heldout_tax_prep.py's
docstring for the numbers."""

from __future__ import annotations

import random

from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_legal_parts import Versioned
from bench.heldout_taxp_world import DAY, HOUR, MINUTE, MEMO, PAST, Office, Queue

SYSTEM = {"intake": 650, "review": 900, "recheck": 500, "extension": 450, "email": 500}
CUE = {"review": 40, "recheck": 60, "extension": 30}
OUTPUT = {"intake": (220, 0.5, 60, 900), "review": (300, 0.5, 60, 1200),
          "recheck": (90, 0.6, 20, 600), "extension": (250, 0.2, 150, 400)}
CHECKLIST = (9, 280, 0.4, 120, 700)  # reviewer checklist: items, tokens per item
REVIEW_DELAY = (1.5 * HOUR, 0.7, 0.2 * HOUR, 8 * HOUR)  # a finished return to its review
SENT_BACK = 0.3  # reviews that find something; the fix lands FIX_DELAY later
FIX_DELAY = (1.0 * HOUR, 0.6, 0.2 * HOUR, 5 * HOUR)
RECHECK_AT = 1.0  # local hour each night's re-check batch starts
MEMO_EDIT = (17.0, 20.0)  # hours of day 0 the guidance memo is revised (every seed)
MIDDAY_EDIT = (34.0, 37.0)  # hours of the mid-day revision (the "memo" scenario)
OUTAGE = (9.5, (3.0, 5.0))  # the scanner pipeline stops at this hour of day 0 (3..5 h)
EXTENSIONS = (19.0, 20.5)  # hours of day 1 the extension walk starts
TEMPLATES = 5  # client e-mail templates (return ready, missing document, payment, ...)
TEMPLATE = (450, 0.3, 250, 900)
EXT_TEMPLATE = (800, 0.2, 500, 1200)  # the Form 4868 instructions and firm letter
EMAIL_NOTE = (80, 0.7, 15, 400)  # the preparer's instruction for an e-mail (and revisions)
EMAIL_DELAY = (0.6 * HOUR, 0.8, 5 * MINUTE, 4 * HOUR)
EMAIL_REVISIONS = ((0, 0.55), (1, 0.3), (2, 0.15))
ESTIMATE = (180, 0.4, 80, 400)  # an extension's estimated figures


class Jobs(Office):
    """The Office and its jobs (the intake queue, review passes, batch walks, e-mails)."""

    def __init__(self, rng: random.Random, scale: float, scenario: str) -> None:
        super().__init__(rng, scale, scenario)
        new = self.new
        self.system = {k: new(v) for k, v in SYSTEM.items()}
        self.cue = {k: new(v) for k, v in CUE.items()}
        self.checklist = [new(clipped_length(rng, *CHECKLIST[1:])) for _ in range(CHECKLIST[0])]
        self.templates = [new(clipped_length(rng, *TEMPLATE)) for _ in range(TEMPLATES)]
        self.ext_template = new(clipped_length(rng, *EXT_TEMPLATE))
        self.intake = Queue("intake", 0)
        self.reviews: list[Queue] = []  # owner: the client; items: checklist indices
        self.fixes: list[tuple[int, float, int]] = []  # (client, when, section rewritten)
        self.rechecks: list[Queue] = []  # owner: the night (0, 1) or 2 for the mid-day one
        self.memo_edits: list[tuple[float, int]] = []  # (when, first section changed)
        self.emails: list[tuple[int, list[int]]] = []  # (client, request indices)
        self.extensions = Queue("extension", 0)
        self.outage = (PAST, PAST)
        if scenario == "outage":
            start = OUTAGE[0] * HOUR
            self.outage = (start, start + rng.uniform(*OUTAGE[1]) * HOUR)
        for night in (0, 1):
            self.at(night * DAY + (RECHECK_AT + rng.random() * 0.5) * HOUR, "recheck", night)
        self.at(rng.uniform(*MEMO_EDIT) * HOUR, "memo", None)
        if scenario == "memo":
            self.at(rng.uniform(*MIDDAY_EDIT) * HOUR, "memo", 2)
        self.at((24 + rng.uniform(*EXTENSIONS)) * HOUR, "extend", None)

    def prompt(self, q: Queue, item) -> tuple[list[Segment], int]:
        """A job's request for ``item`` and its answer's tokens."""
        out = clipped_length(self.rng, *OUTPUT[q.kind])
        if q.kind == "intake":
            d, page = item
            doc = self.docs[d]
            return [self.system["intake"], self.form_prompts[doc.form], doc.pages[page]], out
        if q.kind == "review":
            return [*self.review_head(q.owner), self.checklist[item], self.cue["review"]], out
        c = self.clients[item]
        if q.kind == "recheck":
            head = [self.system["recheck"], *self.memo.at(self.now)]
            return [*head, c.draft.at(self.now)[0], self.cue["recheck"]], out
        return [self.system["extension"], self.ext_template, c.profile,
                self.new(clipped_length(self.rng, *ESTIMATE)), self.cue["extension"]], out

    def review_head(self, c: int) -> list[Segment]:
        """What every step of a review of client ``c`` starts with: the system prompt, the
        return draft as it stands, the extracted records."""
        return [self.system["review"], *self.clients[c].draft.at(self.now), *self.records(c)]

    def paused(self, q: Queue) -> float:
        """The intake queue waits out the scanner outage (the "outage" scenario)."""
        if q is self.intake and self.outage[0] <= self.now < self.outage[1]:
            return self.outage[1]
        return self.now

    def _on_upload(self, d: int) -> None:
        """A client uploads a document: its pages join the intake queue."""
        for page in range(len(self.docs[d].pages)):
            self.push(self.intake, (d, page))

    def _on_step(self, q: Queue) -> None:
        """A queue's step; the intake queue files each page's record as it is read, and a
        finished review pass goes on to its verdict."""
        before = q.pos
        super()._on_step(q)
        if q.pos == before:
            if q.kind == "review" and not q.busy and q.pos == len(q.items) and q.items:
                self.verdict(q)
            return
        if q is self.intake:
            d, page = q.items[before]
            doc = self.docs[d]
            doc.records.append(self.new(clipped_length(self.rng, *OUTPUT["intake"])))
            if page == len(doc.pages) - 1:
                doc.done = self.now

    def finished(self, c: int) -> None:
        """A preparer finishes client ``c``'s return: a draft, and a review pass later."""
        self.clients[c].draft = self.new_draft()
        self.at(self.now + clipped_length(self.rng, *REVIEW_DELAY), "review", c)

    def new_draft(self) -> Versioned:
        return Versioned([(self.now, self.return_draft())])

    def _on_review(self, c: int) -> None:
        """A reviewer walks the checklist over client ``c``'s return, item by item."""
        q = Queue("review", c, list(range(len(self.checklist))))
        self.reviews.append(q)
        q.busy = True
        self.at(self.now, "step", q)

    def verdict(self, q: Queue) -> None:
        """After a pass: sent back for a fix (then reviewed again), else the client e-mail."""
        c = q.owner
        if self.rng.random() < SENT_BACK:
            when = self.now + clipped_length(self.rng, *FIX_DELAY)
            self.at(when, "fix", c)
        else:
            self.at(self.now + clipped_length(self.rng, *EMAIL_DELAY), "email", c)

    def _on_fix(self, c: int) -> None:
        k = self.revise_draft(c)
        self.fixes.append((c, self.now, k))
        self._on_review(c)

    def _on_recheck(self, night: int) -> None:
        """The re-check walk: every finished return, in client order, against the memo."""
        q = Queue("recheck", night)
        self.rechecks.append(q)
        for c, x in enumerate(self.clients):
            if x.draft is not None and x.draft.versions[0][0] <= self.now:
                self.push(q, c)

    def _on_memo(self, then) -> None:
        """The guidance memo is revised: from one section on it is new; mid-day, every
        finished return is re-checked at once."""
        secs = list(self.memo.current)
        k = self.rng.randrange(1, len(secs))
        secs[k:] = [self.new(clipped_length(self.rng, *MEMO[1:])) for _ in secs[k:]]
        self.memo.versions.append((self.now, secs))
        self.memo_edits.append((self.now, k))
        if then is not None:
            self._on_recheck(then)

    def _on_email(self, c: int) -> None:
        """The client e-mail for a return that passed review, revised 0..2 times."""
        rng = self.rng
        revisions = rng.choices([0, 1, 2], [w for _, w in EMAIL_REVISIONS])[0]
        self.emails.append((c, []))
        self.at(self.now, "draft_email", (len(self.emails) - 1, rng.randrange(TEMPLATES),
                                          revisions))

    def _on_draft_email(self, item: tuple[int, int, int]) -> None:
        n, template, left = item
        c, sent = self.emails[n]
        x = self.clients[c]
        segs = [self.system["email"], self.templates[template], x.profile,
                x.draft.at(self.now)[0], self.new(clipped_length(self.rng, *EMAIL_NOTE))]
        sent.append(self.emit("email", n, len(sent), segs))
        if left:
            gap = self.rng.uniform(2, 20) * MINUTE
            self.at(self.now + gap, "draft_email", (n, template, left - 1))

    def _on_extend(self, _) -> None:
        """The deadline-eve walk: an extension for every return still in progress."""
        for c, x in enumerate(self.clients):
            if x.draft is None:
                x.extended = True
                self.push(self.extensions, c)
