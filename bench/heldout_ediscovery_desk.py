"""bench.heldout's ``ediscovery_review`` shape, the people: second-level QC reviewers re-sending
a first-level prompt with its coding and a QC question (and follow-ups), attorneys' chats over
the review protocol and the case memo (revised in the evenings), deposition prep sessions over
a deponent's packet of documents and an outline, and Friday's production: a check of every
produced document, redactions, a re-check, a privilege log. See
bench/heldout_ediscovery_review.py's docstring for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_ediscovery_jobs import JOB_RATE, Coding, Jobs
from bench.heldout_ediscovery_parts import DAY, END, HOUR, MINUTE, Walk
from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_legal_parts import Versioned, revise, sections
from bench.heldout_meeting_parts import poisson

QC_REVIEWERS = 3  # at scale 1.0 (at least 1)
QC_PACE = (150.0, 0.6)  # seconds a QC reviewer spends on a document (median, sigma)
FOLLOW_UPS = (0.6, 0.3, 0.1)  # chance of 0, 1, 2 follow-up questions on a QC document
ANSWER = (150, 0.5, 40, 600)  # tokens of the model's QC answer
QUESTION = (30, 0.7, 8, 200)  # tokens of a reviewer's or attorney's question
FOLLOW_GAP = (20.0, 120.0)  # seconds between an answer and the follow-up
OVERTURN = 0.12  # QC calls overturned: privilege lifted, else responsiveness flipped
CHATS = 16  # attorneys' chat sessions a weekday at scale 1.0, by the hour
HOURS = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.02, 0.1, 0.5, 0.9, 1.0, 1.0, 0.6, 0.8, 1.0, 1.0,
         0.9, 0.8, 0.6, 0.4, 0.35, 0.3, 0.15, 0.05)  # attorneys by the hour
TURNS = (4, 0.7, 1, 14)  # turns of a chat
MESSAGE = (40, 0.9, 8, 400)  # tokens of an attorney's message
REPLY = (220, 0.6, 40, 1200)  # tokens of the model's reply
PASTE = 0.25  # messages that paste a coded responsive document
THINK = (60.0, 1.0)  # seconds between a reply and the next message (median, sigma)
AWAY = (0.15, (10.0, 60.0))  # gaps where the attorney leaves and comes back (minutes)
MAX_CONTEXT = 16000  # tokens of a chat's context that end it
RATE = 40.0  # tokens a second a reply decodes at
MEMO = (3500, 0.3, 2000, 6000)  # tokens of the case memo (in sections)
MEMO_EDIT = ((18.0, 22.0), 0.8)  # evenings (days 0..3) the memo is revised, and the chance
DEPO = (3.0, (8.0, 9.0), (2, 3))  # the day and hours prep starts, deponents
PACKET = (10, 24)  # documents in a deponent's packet at scale 1.0 (x scale, at least 4)
SESSIONS = (2, 3)  # prep sessions per deponent, Thursday 09:00..Friday 17:00
DEPO_TURNS = (6, 0.6, 2, 16)
OUTLINE = (2000, 0.3, 1000, 3500)  # tokens of a deponent's outline (after the packet)
OUTLINE_EDIT = 0.5  # sessions after which the outline is revised
PRODUCTION = (4.0, (7.0, 8.0))  # Friday: the production check starts
GUIDE = 600  # tokens of the confidentiality designation guide (after the system prompt)
REDACT = (0.06, (10.0, 14.0))  # produced documents redacted, and the hours the edits land
RECHECK, PRIVLOG = (15.0, 16.0), (12.0, 13.0)  # Friday: the re-check, the privilege log


@dataclass
class Session:
    """A multi-turn conversation: QC (``owner``: the reviewer, ``doc``: the document, turns
    left), chat (the attorney session) or depo (``owner``: the deponent); the history after
    the head, the request indices, the documents pasted per turn (chat)."""

    kind: str
    owner: int
    turns: int
    doc: int = -1
    history: list[Segment] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)
    pasted: list[int] = field(default_factory=list)


@dataclass
class Production:
    """Friday's production: the documents in Bates order, the check, the flagged
    documents and their redacted text, the re-check and the privilege log walks."""

    items: list[int]
    check: Walk | None = None
    redacted: dict[int, list[Segment]] = field(default_factory=dict)
    recheck: Walk | None = None
    privlog: Walk | None = None


class Desk(Jobs):
    """The whole replica: the jobs (``Jobs``) and the people working the matter."""

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, scale)
        self.memo = Versioned([(-1e18, sections(self.new, clipped_length(rng, *MEMO)))])
        self.guide = self.new(GUIDE)
        self.sessions: list[Session] = []
        self.qc: list[Session] = []
        self.packets: dict[int, list[int]] = {}
        self.outlines: dict[int, Versioned] = {}
        self.production: Production | None = None
        for day in range(4):
            if rng.random() < MEMO_EDIT[1]:
                self.at(day * DAY + rng.uniform(*MEMO_EDIT[0]) * HOUR, "memo", None)
        self.at(DEPO[0] * DAY + rng.uniform(*DEPO[1]) * HOUR, "depo_plan", None)
        self.at(PRODUCTION[0] * DAY + rng.uniform(*PRODUCTION[1]) * HOUR, "production", None)

    def opened(self) -> None:
        """The first collection is processed: attorneys and QC reviewers start."""
        self.at((self.now // HOUR + 1) * HOUR, "chats", None)
        for r in range(max(1, round(QC_REVIEWERS * self.scale))):
            self.at(self.now + self.rng.uniform(0, 30 * MINUTE), "qc", r)

    def _on_memo(self, _: object) -> None:
        self.memo.versions.append((self.now, revise(self.rng, self.new, self.memo.current,
                                                    self.rng.randint(1, 2))))

    def turn(self, s: Session, head: list[Segment], msg: list[Segment], reply: int) -> None:
        """Send the head, the history and ``msg``; the reply joins the history."""
        s.sent.append(self.emit(s.kind, s.owner, len(s.sent), [*head, *s.history, *msg]))
        s.history += [*msg, self.new(reply)]
        s.turns -= 1

    def _on_qc(self, r: int) -> None:
        """A QC reviewer takes the next sampled document: its first-level prompt as it
        stands, the call, the QC question; follow-ups extend it."""
        t = self.working(self.now)
        if t > self.now or not self.qc_queue:
            self.at(t if t > self.now else self.now + self.rng.uniform(20, 40) * MINUTE, "qc", r)
            return
        d = self.qc_queue.pop(0)
        n = self.rng.choices((1, 2, 3), FOLLOW_UPS)[0]
        s = Session("qc", r, n, d, [self.coding[d][-1].reply])
        self.qc.append(s)
        self.at(self.now, "qc_turn", s)

    def _on_qc_turn(self, s: Session) -> None:
        rng = self.rng
        self.turn(s, self.review(s.doc), [self.new(clipped_length(rng, *QUESTION))],
                  clipped_length(rng, *ANSWER))
        if s.turns > 0:
            self.at(self.now + rng.uniform(*FOLLOW_GAP), "qc_turn", s)
            return
        if rng.random() < OVERTURN:
            c = self.coding[s.doc][-1]
            resp = c.responsive if c.privileged else not c.responsive
            self.coding[s.doc].append(Coding(resp, False, c.hot and c.privileged,
                                             s.history[-1], s.sent[-1]))
        self.at(self.now + rng.lognormvariate(0.0, QC_PACE[1]) * QC_PACE[0], "qc", s.owner)

    def _on_chats(self, _: object) -> None:
        """Each hour, the attorneys' sessions that start in it (weekdays, by the hour)."""
        rng, day = self.rng, int(self.now // DAY)
        self.at(self.now + HOUR, "chats", None)
        for _ in range(poisson(rng, CHATS * self.scale * HOURS[int(self.now % DAY // HOUR)]
                               / sum(HOURS) * (day < 5))):
            self.sessions.append(Session("chat", len(self.sessions),
                                         clipped_length(rng, *TURNS)))
            self.at(self.now + rng.uniform(0, HOUR), "chat_turn", self.sessions[-1])

    def _on_chat_turn(self, s: Session) -> None:
        """A turn: system prompt, the protocol and the memo as they stand, the history, the
        message (sometimes pasting a responsive document); the attorney may step away."""
        rng = self.rng
        msg = [self.new(clipped_length(rng, *MESSAGE))]
        coded = [d for d, c in self.coding.items() if c[-1].responsive]
        pasted = rng.choice(coded) if coded and rng.random() < PASTE else -1
        if pasted >= 0:
            msg += self.corpus.docs[pasted].text
        s.pasted.append(pasted)
        head = [self.system["chat"], *self.protocol.at(self.now), *self.memo.at(self.now)]
        reply = clipped_length(rng, *REPLY)
        self.turn(s, head, msg, reply)
        size = sum(n for _, n in self.meta[s.sent[-1]][3]) + reply
        if s.turns <= 0 or size > MAX_CONTEXT:
            return
        gap = reply / RATE + rng.lognormvariate(0.0, THINK[1]) * THINK[0]
        if rng.random() < AWAY[0]:
            gap += rng.uniform(*AWAY[1]) * MINUTE
        self.at(self.now + gap, "chat_turn", s)

    def _on_depo_plan(self, _: object) -> None:
        """The deponents: the custodians with the most hot documents; each gets a packet
        (their hot documents and a sample of their responsive ones, by date), an outline and
        prep sessions."""
        rng, docs = self.rng, self.corpus.docs
        resp = [d for d, c in self.coding.items() if c[-1].responsive]
        by: dict[int, list[int]] = {}
        for d in resp:
            by.setdefault(docs[d].custodian, []).append(d)
        hot = {w: sum(self.coding[d][-1].hot for d in ds) for w, ds in by.items()}
        who = sorted(by, key=lambda w: (-hot[w], -len(by[w]), rng.random()))
        size = max(4, round(rng.randint(*PACKET) * self.scale))
        for w in who[:rng.randint(*DEPO[2])]:
            ds = sorted(by[w], key=lambda d: (not self.coding[d][-1].hot, rng.random()))
            self.packets[w] = sorted(ds[:size], key=lambda d: docs[d].date)
            self.outlines[w] = Versioned([(self.now, sections(
                self.new, clipped_length(rng, *OUTLINE)))])
            for _ in range(rng.randint(*SESSIONS)):
                when = self.working(rng.uniform(self.now + HOUR, 4 * DAY + 17 * HOUR))
                self.at(min(when, END - HOUR), "depo_turn",
                        Session("depo", w, clipped_length(rng, *DEPO_TURNS)))

    def _on_depo_turn(self, s: Session) -> None:
        """A question over the packet and the outline; after the last, the outline may be
        revised."""
        rng, w = self.rng, s.owner
        if not s.sent:
            self.sessions.append(s)
        head = [self.system["depo"], *[x for d in self.packets[w]
                                       for x in self.corpus.docs[d].text],
                *self.outlines[w].at(self.now)]
        reply = clipped_length(rng, *REPLY)
        self.turn(s, head, [self.new(clipped_length(rng, *QUESTION))], reply)
        if s.turns > 0:
            gap = reply / RATE + rng.lognormvariate(0.0, THINK[1]) * THINK[0]
            self.at(self.now + gap, "depo_turn", s)
        elif rng.random() < OUTLINE_EDIT:
            o = self.outlines[w]
            o.versions.append((self.now, revise(rng, self.new, o.current, 1)))

    def produced(self, d: int, text: list[Segment]) -> tuple[int, list[Segment]]:
        return d, [self.system["prod"], self.guide, *text, self.cue["prod"]]

    def _on_production(self, _: object) -> None:
        """Friday: the documents coded responsive and not privileged, in Bates order, are
        checked; some get redactions during the day; re-check and privilege log follow."""
        rng, day = self.rng, self.now // DAY * DAY
        last = self.coding
        items = [d for d in self.corpus.bates(1) if d in last and last[d][-1].responsive
                 and not last[d][-1].privileged]
        p = self.production = Production(items)
        p.check = self.walk(Walk("prod_check", 0, items, lambda d: self.produced(
            d, self.corpus.docs[d].text), self.rate(JOB_RATE)), self.now)
        for d in items:
            if rng.random() < REDACT[0]:
                self.at(day + rng.uniform(*REDACT[1]) * HOUR, "redact", d)
        privileged = [d for d in self.corpus.bates(1) if d in last and last[d][-1].privileged]
        p.privlog = self.walk(Walk("privlog", 0, privileged, lambda d: (d, [
            self.system["privlog"], *self.corpus.docs[d].text, self.coding[d][-1].reply,
            self.cue["privlog"]]), self.rate(JOB_RATE)), day + rng.uniform(*PRIVLOG) * HOUR)
        self.at(day + rng.uniform(*RECHECK) * HOUR, "recheck", None)

    def _on_redact(self, d: int) -> None:
        """A paralegal redacts a passage: that section (not the header) becomes new text."""
        text = list(self.corpus.docs[d].text)
        k = self.rng.randrange(1, len(text)) if len(text) > 1 else 0
        text[k] = self.new(text[k][1])
        self.production.redacted[d] = text

    def _on_recheck(self, _: object) -> None:
        p = self.production
        p.recheck = self.walk(Walk("recheck", 1, p.items, lambda d: self.produced(
            d, p.redacted.get(d, self.corpus.docs[d].text)), self.rate(JOB_RATE)), self.now)
