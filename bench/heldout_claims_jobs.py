"""bench.heldout's ``insurance_claims`` shape, the platform's side: each new claim's triage
behind the triage rubric (and the storm's bulletin), photos and estimates joining the files
(an estimate reviewed behind its rubric as it lands), acknowledgement letters drafted in
hourly batches and adjusters' letters from templates, and the nightly walks over the book
behind their rubrics (subrogation and fraud screens, audits, reserve reviews) with the CAT
team's reserve walk over the storm's claims. See bench/heldout_claims.py's docstring for the
numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_claims_desk import OFFICE, Desk
from bench.heldout_claims_parts import DAY, ENTRIES, HOUR, MINUTE, Segment, hour_at, tokens
from bench.heldout_fewshot import clipped_length

# kind -> tokens of its system prompt and rubric (one segment each)
HEADS = {"triage": (700, 1800), "estimate": (600, 1500), "letter": (400, 0),
         "subro": (600, 2800), "fraud": (600, 3200), "audit": (500, 3000),
         "reserve": (600, 2200)}
CUES = {"subro": 1, "fraud": 1, "audit": 3, "reserve": 1, "cat_reserve": 1}  # cues a claim
TRIAGE = (5.0, 60.0)  # seconds after a claim opens that it is triaged
PHOTOS = (0.6, (0.5, 20.0))  # new claims (not liability) whose photos come, hours later
ESTIMATE = (0.4, (10.0, 40.0))  # new claims whose estimate comes, hours later
ESTIMATES = 30  # estimates a day on the book's claims at scale 1.0 (office hours)
TEMPLATES = 20  # letter templates (Zipf(1.0) use); each line has its acknowledgement
TEMPLATE = (1100, 0.5, 400, 2500)  # tokens of a letter template
ACK_HOURS = (8, 20)  # the acknowledgement batch runs at :05 each hour in 08..20
LETTERS = (40, 0.2, (30.0, 300.0))  # letters a day; redrafted, seconds later
INSTRUCTION = (60, 0.8, 10, 300)  # tokens of an adjuster's letter instruction
NIGHT = {"subro": 1.0, "fraud": 2.0, "audit": 3.5, "reserve": 5.5}  # start hours (+0..30 min)
AUDIT = 36  # claims an audit samples a night at scale 1.0
SUBRO_LINES = ("auto", "home", "commercial")
FLAG = (0.04, (100, 0.4, 40, 300))  # fraud screens flagged for a deep dive; output tokens
CAT_RESERVE = (15.0, 17.0)  # hours on day 1 the CAT team's reserve walk starts
PREFILL, DECODE = 6000.0, 35.0  # tokens a second a job stream reads and writes
OUT = (120, 0.5, 30, 400)  # tokens a walk's request writes


@dataclass
class Walk:
    """A job over claims, one request at a time at the job's pace: its kind, the claims in
    order, the head before the file, whether the bulletin follows the head, when it
    started and the requests as (claim, cue, request index)."""

    kind: str
    todo: list[int]
    head: list[Segment]
    bulletin: bool = False
    start: float = 0.0
    sent: list[tuple[int, int, int]] = field(default_factory=list)
    pos: int = 0
    deep: tuple[int, int, list[Segment]] | None = None  # a flagged screen's deep dive


class Platform(Desk):
    """The whole replica: the book (``World``), the people (``Desk``) and the platform's
    jobs; ``run`` ends at the second midnight."""

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, scale)
        self.heads = {k: [self.new(a)] + ([self.new(b)] if b else []) for k, (a, b) in
                      HEADS.items()}
        self.cues = {k: [self.new(rng.randint(20, 80)) for _ in range(n)]
                     for k, n in CUES.items()}
        self.templates = [self.new(clipped_length(rng, *TEMPLATE)) for _ in range(TEMPLATES)]
        self.acks = {k: self.new(clipped_length(rng, *TEMPLATE)) for k in [*self.lines, "cat"]}
        self.ack_cue = self.new(30)
        self.deep_cue = self.new(60)
        self.unacked: list[int] = []
        self.walks: list[Walk] = []
        self.letters: list[tuple[int, int]] = []  # (redraft, the draft it redoes)
        self.flags: list[tuple[int, int]] = []  # (deep dive, the screen it extends)
        for day in (0.0, DAY):
            self.at(day, "jobs_day", None)
        self.at(DAY + rng.uniform(*CAT_RESERVE) * HOUR, "cat_reserve", None)

    def _on_jobs_day(self, _: object) -> None:
        """The day's nightly walks, acknowledgement batches, estimates and letters."""
        rng, day, sc = self.rng, self.now, self.scale
        for kind, h in NIGHT.items():
            self.at(day + h * HOUR + rng.uniform(0, 30) * MINUTE, "night", kind)
        for h in range(ACK_HOURS[0], ACK_HOURS[1] + 1):
            self.at(day + h * HOUR + 5 * MINUTE, "acks", None)
        for _ in range(round(ESTIMATES * sc * rng.uniform(0.8, 1.2))):
            self.at(hour_at(rng, day, OFFICE, 8), "estimate", -1)
        for _ in range(round(LETTERS[0] * sc * rng.uniform(0.8, 1.2))):
            self.at(hour_at(rng, day, OFFICE, 8), "letter", -1)

    def _on_opened(self, c: int) -> None:
        """A new claim: triage within a minute, its customer's status questions, its photos
        and estimate later, its acknowledgement in the next batch."""
        rng, claim = self.rng, self.claims[c]
        self.at(self.now + rng.uniform(*TRIAGE), "triage", c)
        self.follow_status(c)
        if claim.policy.line != "liability" and rng.random() < PHOTOS[0]:
            self.at(self.now + rng.uniform(*PHOTOS[1]) * HOUR, "photos", c)
        if rng.random() < ESTIMATE[0]:
            self.at(self.now + rng.uniform(*ESTIMATE[1]) * HOUR, "estimate", c)
        self.unacked.append(c)

    def _on_triage(self, c: int) -> None:
        """Triage: the system prompt and rubric, the bulletin (storm claims), the notice."""
        claim = self.claims[c]
        bulletin = self.storm.bulletin.at(self.now) if claim.cat else []
        self.emit("triage", c, 0, [*self.heads["triage"], *bulletin, claim.entries[0][2]])

    def _on_photos(self, c: int) -> None:
        self.add_entry(c, "photos", self.new(clipped_length(self.rng, *ENTRIES["photos"][1])))

    def _on_estimate(self, c: int) -> None:
        """An estimate lands on a claim (-1: any open one): reviewed behind the rubric after
        the file as it stood, then it joins the file."""
        c = self.rng.choice(self.open) if c < 0 else c
        est = self.new(clipped_length(self.rng, *ENTRIES["estimate"][1]))
        self.emit("estimate", c, 0, [*self.heads["estimate"], *self.claims[c].file_at(self.now),
                                     est])
        self.add_entry(c, "estimate", est)

    def ack(self, c: int) -> list[Segment]:
        claim = self.claims[c]
        template = self.acks["cat" if claim.cat else claim.policy.line]
        return [*self.heads["letter"], template, claim.summary_at(self.now), self.ack_cue]

    def _on_acks(self, _: object) -> None:
        """The hourly batch: an acknowledgement for each claim opened since the last one."""
        todo, self.unacked = self.unacked, []
        if todo:
            self.walks.append(w := Walk("ack", todo, [], start=self.now))
            self.at(self.now, "step", w)

    def _on_letter(self, arg: int | tuple[int, list[Segment], int]) -> None:
        """An adjuster drafts a letter on an open claim (recent ones as often as the rest)
        from a template; some are redrafted with a new instruction."""
        rng = self.rng
        if isinstance(arg, tuple):  # a redraft: the same up to the instruction
            c, head, j = arg
            i = self.emit("letter", c, 1, [*head, self.new(clipped_length(rng, *INSTRUCTION))])
            self.letters.append((i, j))
            return
        pool = self.recent(3.0) if rng.random() < 0.5 else self.open
        c = rng.choice(pool or self.open)
        k = rng.choices(range(TEMPLATES), [1 / (t + 1) for t in range(TEMPLATES)])[0]
        head = [*self.heads["letter"], self.templates[k], self.claims[c].summary_at(self.now)]
        j = self.emit("letter", c, 0, [*head, self.new(clipped_length(rng, *INSTRUCTION))])
        if rng.random() < LETTERS[1]:
            self.at(self.now + rng.uniform(*LETTERS[2]), "letter", (c, head, j))

    def _on_night(self, kind: str) -> None:
        """A nightly walk in claim order over: subrogation, the open claims of SUBRO_LINES
        whose file changed in the last day; fraud, the claims opened in the last day;
        audit, AUDIT x scale of the changed ones; reserve, the claims whose weekly review
        falls today, opened over a day ago."""
        rng, now = self.rng, self.now
        changed = [c for c in self.open if self.claims[c].changed(now - DAY, now)]
        if kind == "subro":
            todo = [c for c in changed if self.claims[c].policy.line in SUBRO_LINES]
        elif kind == "fraud":
            todo = self.recent(1.0)
        elif kind == "audit":
            todo = sorted(rng.sample(changed, min(len(changed), round(AUDIT * self.scale))))
        else:
            todo = [c for c in self.open if self.claims[c].review == int(now // DAY) % 7
                    and self.claims[c].opened < now - DAY]
        self.walks.append(w := Walk(kind, todo, self.heads[kind], start=now))
        self.at(now, "step", w)

    def _on_cat_reserve(self, _: object) -> None:
        """The CAT team reviews the reserves of every storm claim so far, oldest first."""
        head = [*self.heads["reserve"]]
        self.walks.append(w := Walk("cat_reserve", list(self.cat_claims), head, True,
                                    self.now))
        self.at(self.now, "step", w)

    def walk_prompt(self, w: Walk, c: int, cue: int) -> list[Segment]:
        if w.kind == "ack":
            return self.ack(c)
        bulletin = self.storm.bulletin.at(self.now) if w.bulletin else []
        return [*w.head, *bulletin, *self.claims[c].file_at(self.now), self.cues[w.kind][cue]]

    def _on_step(self, w: Walk) -> None:
        """The walk's next request (a claim's cues in order); a flagged fraud screen's deep
        dive (the screen's prompt and output, then a cue) goes next, after the output."""
        rng = self.rng
        ncues = len(self.cues.get(w.kind, [0]))
        if w.deep is not None:
            c, i, segs = w.deep
            w.deep = None
            self.flags.append((self.emit("fraud", c, 1, segs), i))
        elif w.pos < len(w.todo) * ncues:
            c, cue = w.todo[w.pos // ncues], w.pos % ncues
            w.pos += 1
            segs = self.walk_prompt(w, c, cue)
            w.sent.append((c, cue, i := self.emit(w.kind, c, cue, segs)))
            if w.kind == "fraud" and rng.random() < FLAG[0]:
                w.deep = (c, i, [*segs, self.new(clipped_length(rng, *FLAG[1])), self.deep_cue])
        else:
            return
        wait = tokens(segs) / PREFILL + clipped_length(rng, *OUT) / DECODE
        self.at(self.now + wait * rng.uniform(0.8, 1.25) / self.scale, "step", w)
