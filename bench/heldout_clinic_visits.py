"""bench.heldout's ``clinical_scribe`` shape, the clinics' side: the ambient scribe drafting a
note from each visit's transcript behind the specialty's template and the patient's chart
summary, the clinician's revisions of the draft, signing (the note joins the chart), chart
Q&A and formulary or guideline lookups around visits, the inbox of patient messages worked in
batches with drafted replies, and the prior-authorization desk's letters. See
bench/heldout_clinical_scribe.py's docstring for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_clinic_parts import DAY, HOUR, MINUTE, SPECIALTIES, Network
from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_meeting_parts import poisson

NO_SHOW = 0.1  # booked visits that do not happen
REVISIONS = (0.45, 0.35, 0.15, 0.05)  # chance a draft is revised 0..3 times
INSTRUCTION = (30, 0.6, 8, 120)  # tokens of a clinician's revision instruction
REVIEW = (1.0, 6.0)  # minutes between a draft and the clinician's next revision
SIGN_SOON = (0.6, (5.0, 60.0))  # notes signed minutes after the last draft; the rest at
PAJAMA = (18.0, 22.0)  # local hours the rest are signed at (the evening's charting)
PRECHART = (0.35, (2.0, 20.0))  # visits a chart Q&A session precedes, minutes before
LOOKUP = 0.2  # visits with a formulary or guideline lookup during them
RESULTS = (0.4, (900, 0.7, 200, 3000))  # chart sessions that load recent results, tokens
QUESTION = (35, 0.7, 8, 200)  # tokens of a question to the chart or lookup assistant
ANSWER = (180, 0.6, 40, 700)  # tokens of its answer
TURNS = {"chart": (2, 0.6, 1, 8), "lookup": (1, 0.5, 1, 3), "oncall": (2, 0.5, 1, 5)}
THINK = (40.0, 0.8)  # seconds between an answer and the next question (median, sigma)
DECODE = 40.0  # tokens a second a reply decodes at
MESSAGES = 10.0  # patient messages a clinician's inbox gets a day
MESSAGE_HOURS = (1, 1, 1, 1, 1, 2, 4, 6, 8, 9, 9, 9, 9, 8, 8, 8, 8, 8, 9, 10, 10, 8, 5, 2)
MESSAGE = (90, 0.8, 10, 800)  # tokens of a patient's message
THREAD = (0.4, (1, 3), (120, 0.6, 30, 500))  # messages in a thread: exchanges before, tokens
BACKLOG = (1.2, 0.3)  # days of messages waiting at the start: after a weekend, else
BATCHES = (7.5, 12.25, 16.75)  # local hours a clinician works the inbox
DRAFT = (140, 0.5, 40, 500)  # tokens of a drafted reply
REGEN = 0.2  # drafts regenerated with an instruction ("shorter", "less technical")
PACE = (40.0, 180.0)  # seconds a clinician spends on one message
FOLLOW_UP = (0.12, (2.0, 30.0))  # seen patients who write in, hours after the note is signed
AUTH_HOURS = (10.0, 14.0)  # local hours the prior-authorization desk drafts its letters
ORDER = (160, 0.5, 60, 400)  # tokens of the order a prior-authorization letter argues for
AUTH_PACE = (2.0, 6.0)  # minutes per letter


@dataclass
class Encounter:
    """A visit the scribe drafts: clinician (-1 in the emergency department), patient,
    specialty, site, when it began, its transcript, the scribe request's segments, the drafts and
    instructions after them, revisions planned, request indices, when it was signed and the
    signed note."""

    clinician: int
    patient: int
    spec: str
    site: int
    begin: float
    transcript: Segment
    revisions: int
    prompt: list[Segment] = field(default_factory=list)
    history: list[Segment] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)
    signed: float = float("inf")
    note: Segment | None = None


@dataclass
class Session:
    """A chat with the chart assistant ("chart", "oncall") or the lookup assistant: its
    patient or document, its head (system prompt and context, fixed when opened), the turns
    left, the history and its request indices."""

    kind: str
    about: int
    head: list[Segment]
    turns: int
    history: list[Segment] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)


@dataclass
class Message:
    """A patient's message: the patient, the clinician, the earlier thread, the message, when
    it arrived, whether its draft is regenerated, and its request indices."""

    patient: int
    clinician: int
    thread: list[Segment]
    body: Segment
    arrived: float
    regen: bool
    sent: list[int] = field(default_factory=list)


class Clinics(Network):
    """The clinics (``Network``): visits and their scribe drafts, chart and lookup sessions,
    the inbox, the prior-authorization desk."""

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, scale)
        self.encounters: list[Encounter] = []
        self.sessions: list[Session] = []
        self.messages: list[Message] = []
        self.queue: dict[int, list[int]] = {c: [] for c in range(len(self.clinicians))}
        self.batches: list[tuple[int, float, list[int]]] = []  # (clinician, time, messages)
        self.auths: list[tuple[int, int, Segment, int]] = []  # (encounter, payer, order, req)
        self.auth_queue: dict[int, list[tuple[int, int, Segment]]] = {}
        self.to_code: list[tuple[str, int]] = []  # signed notes the coding job has not taken
        for day in (0, 1):
            self.at(day * DAY, "clinic_day", day)

    def _on_clinic_day(self, day: int) -> None:
        """The day's visits (weekdays), inbox messages and batches, the desk's letters."""
        for c, (site, spec) in enumerate(self.clinicians):
            for begin, length in self._slots(day, site, spec):
                self._book(c, site, spec, begin, length)
            self._inbox_day(day, c, site)
        for s in range(len(self.sites)):
            self.auth_queue.setdefault(s, [])
            for h in AUTH_HOURS:
                self.at(self.clock(day, s, h + self.rng.uniform(0, 0.5)), "auth_batch", s)

    def _slots(self, day: int, site: int, spec: str) -> list[tuple[float, float]]:
        """A clinician's visits: half the day's in 08..12 local, the rest in 13..17; each
        slot's patient late by -2..10 minutes, the visit 70..105 % of the slot; no-shows
        left out."""
        rng = self.rng
        n = max(2, round(SPECIALTIES[spec][2] * rng.uniform(0.75, 1.1)))
        out = []
        for start, k in ((8.0, n // 2), (13.0, n - n // 2)):
            slot = 4 * HOUR / k
            for i in range(k):
                if rng.random() < NO_SHOW:
                    continue
                begin = self.clock(day, site, start) + i * slot + rng.uniform(-2, 10) * MINUTE
                out.append((begin, slot * rng.uniform(0.7, 1.05)))
        return out

    def _book(self, c: int, site: int, spec: str, begin: float, length: float) -> None:
        """A visit: its patient, maybe a chart Q&A before it and a lookup during it, the
        scribe's draft 10..90 s after it ends."""
        rng = self.rng
        e = self.encounter(c, self.patient(site, c), spec, site, begin)
        if rng.random() < PRECHART[0]:
            self.at(begin - rng.uniform(*PRECHART[1]) * MINUTE, "open_chart", e)
        if rng.random() < LOOKUP:
            self.at(begin + length * rng.uniform(0.3, 0.8), "lookup", None)
        self.at(begin + length + rng.uniform(10, 90), "scribe", e)

    def encounter(self, c: int, p: int, spec: str, site: int, begin: float) -> int:
        rng = self.rng
        transcript = self.new(clipped_length(rng, *SPECIALTIES[spec][1]))
        revisions = rng.choices(range(len(REVISIONS)), REVISIONS)[0]
        self.encounters.append(Encounter(c, p, spec, site, begin, transcript, revisions))
        return len(self.encounters) - 1

    def draft(self, enc: Encounter) -> Segment:
        return self.new(clipped_length(self.rng, SPECIALTIES[enc.spec][3], 0.35, 150, 2500))

    def _on_scribe(self, e: int) -> None:
        """The scribe's draft: system prompt, the specialty's template, the chart summary as
        it stands, the transcript, the cue."""
        enc, tx = self.encounters[e], self.texts
        enc.prompt = [tx["system"]["scribe"], tx["template"][enc.spec],
                      *self.patients[enc.patient].chart.at(self.now), enc.transcript,
                      tx["cue"]["scribe"]]
        enc.sent.append(self.emit("scribe", e, 0, enc.prompt))
        enc.history.append(draft := self.draft(enc))
        self._after_draft(e, draft[1])

    def _after_draft(self, e: int, out: int) -> None:
        """The next revision a few minutes after the output, else the signature."""
        enc, rng = self.encounters[e], self.rng
        done = self.now + out / DECODE
        if len(enc.sent) <= enc.revisions:
            self.at(done + rng.uniform(*REVIEW) * MINUTE, "revise", e)
        elif enc.clinician < 0 or rng.random() < SIGN_SOON[0]:
            self.at(done + rng.uniform(*SIGN_SOON[1]) * MINUTE, "sign", e)
        else:
            day = int(self.now // DAY)
            late = self.clock(day, enc.site, rng.uniform(*PAJAMA))
            self.at(max(late, done + 30 * MINUTE), "sign", e)

    def _on_revise(self, e: int) -> None:
        """A revision: the scribe prompt, every draft and instruction so far, the new
        instruction; the new draft replaces the last."""
        enc = self.encounters[e]
        ask = self.new(clipped_length(self.rng, *INSTRUCTION))
        segs = [*enc.prompt, *enc.history, ask]
        enc.sent.append(self.emit("revise", e, len(enc.sent), segs))
        enc.history += [ask, draft := self.draft(enc)]
        self._after_draft(e, draft[1])

    def _on_sign(self, e: int) -> None:
        """The note is signed: its summary joins the chart (maybe with new medications,
        problems or results), the coding job will take it, a letter or a message may
        follow."""
        enc, rng = self.encounters[e], self.rng
        enc.signed, enc.note = self.now, enc.history[-1]
        self.chart_note(enc.patient)
        self.to_code.append(("visit", e))
        if rng.random() < SPECIALTIES[enc.spec][4]:
            order = self.new(clipped_length(rng, *ORDER))
            self.auth_queue[enc.site].append((e, rng.randrange(len(self.texts["payer"])), order))
        if enc.clinician >= 0 and rng.random() < FOLLOW_UP[0]:
            self.at(self.now + rng.uniform(*FOLLOW_UP[1]) * HOUR, "message",
                    (enc.clinician, enc.patient))

    def _on_open_chart(self, e: int) -> None:
        """Pre-charting: the clinician asks the chart assistant about the next patient (the
        chart as it stands, sometimes the recent results loaded after it)."""
        enc, rng = self.encounters[e], self.rng
        head = [self.texts["system"]["chart"], *self.patients[enc.patient].chart.at(self.now)]
        if rng.random() < RESULTS[0]:
            head.append(self.new(clipped_length(rng, *RESULTS[1])))
        self.open("chart", enc.patient, head)

    def _on_lookup(self, _: object) -> None:
        """A formulary or guideline lookup: the lookup prompt, a document by popularity."""
        d = self.doc()
        self.open("lookup", d, [self.texts["system"]["lookup"], *self.texts["doc"][d]])

    def open(self, kind: str, about: int, head: list[Segment]) -> None:
        turns = clipped_length(self.rng, *TURNS[kind])
        self.sessions.append(Session(kind, about, head, turns))
        self.at(self.now, "turn", len(self.sessions) - 1)

    def _on_turn(self, n: int) -> None:
        """A question: the session's head, the history, the question; the answer joins the
        history and the next question follows a think time."""
        ses, rng = self.sessions[n], self.rng
        ask = self.new(clipped_length(rng, *QUESTION))
        ses.sent.append(self.emit(ses.kind, n, len(ses.sent), [*ses.head, *ses.history, ask]))
        ses.history += [ask, answer := self.new(clipped_length(rng, *ANSWER))]
        ses.turns -= 1
        if ses.turns > 0:
            wait = answer[1] / DECODE + rng.lognormvariate(0.0, THINK[1]) * THINK[0]
            self.at(self.now + wait, "turn", n)

    def _inbox_day(self, day: int, c: int, site: int) -> None:
        """A clinician's messages for the day (by MESSAGE_HOURS, local) and inbox batches."""
        rng = self.rng
        for _ in range(poisson(rng, MESSAGES)):
            h = rng.choices(range(24), MESSAGE_HOURS)[0] + rng.random()
            self.at(self.clock(day, site, h), "message", (c, -1))
        backlog = BACKLOG[self.weekday0 > 0] * MESSAGES if day == 0 else 0.0
        for _ in range(poisson(rng, backlog)):
            self.at(0.0, "message", (c, -1))  # waiting since before the trace
        for h in BATCHES:
            self.at(self.clock(day, site, h + rng.uniform(0, 1 / 3)), "batch", c)

    def _on_message(self, arg: tuple[int, int]) -> None:
        """A message arrives in the clinician's queue (from a new patient of the panel, or a
        seen patient's follow-up), sometimes after an earlier exchange in its thread."""
        (c, p), rng = arg, self.rng
        p = self.patient(self.clinicians[c][0], c) if p < 0 else p
        thread = []
        if rng.random() < THREAD[0]:
            thread = [self.new(clipped_length(rng, *THREAD[2]))
                      for _ in range(2 * rng.randint(*THREAD[1]))]
        body = self.new(clipped_length(rng, *MESSAGE))
        self.messages.append(Message(p, c, thread, body, self.now, rng.random() < REGEN))
        self.queue[c].append(len(self.messages) - 1)

    def _on_batch(self, c: int) -> None:
        """The clinician works the queue in arrival order, one message at a time."""
        todo, self.queue[c] = self.queue[c], []
        self.batches.append((c, self.now, todo))
        if todo:
            self.at(self.now, "reply", todo)

    def _on_reply(self, todo: list[int]) -> None:
        """A drafted reply (system prompt, the chart summary as it stands, the thread, the
        message, the cue), then maybe its regeneration with an instruction; then the next."""
        m, rng = self.messages[todo[0]], self.rng
        segs = [self.texts["system"]["inbox"], *self.patients[m.patient].chart.at(self.now),
                *m.thread, m.body, self.texts["cue"]["inbox"]]
        if m.sent:
            prev = self.meta[m.sent[0]][3]
            segs = [*prev, self.new(clipped_length(rng, *DRAFT)),
                    self.new(clipped_length(rng, *INSTRUCTION))]
        m.sent.append(self.emit("regen" if m.sent else "inbox", todo[0], len(m.sent), segs))
        rest = todo if m.regen and len(m.sent) == 1 else todo[1:]
        if rest:
            self.at(self.now + rng.uniform(*PACE), "reply", rest)

    def _on_auth_batch(self, s: int) -> None:
        todo, self.auth_queue[s] = self.auth_queue[s], []
        if todo:
            self.at(self.now, "auth", todo)

    def _on_auth(self, todo: list[tuple[int, int, Segment]]) -> None:
        """A prior-authorization letter: system prompt, the payer's template, the chart
        summary as it stands, the signed note, the order, the cue."""
        (e, payer, order), tx = todo[0], self.texts
        enc = self.encounters[e]
        segs = [tx["system"]["prior_auth"], tx["payer"][payer],
                *self.patients[enc.patient].chart.at(self.now), enc.note, order,
                tx["cue"]["prior_auth"]]
        self.auths.append((e, payer, order, self.emit("prior_auth", e, 0, segs)))
        if len(todo) > 1:
            self.at(self.now + self.rng.uniform(*AUTH_PACE) * MINUTE, "auth", todo[1:])
