"""bench.heldout's ``permits_office`` shape, the office's jobs: the intake check of every new
application, the plan-review agent that walks an accepted plan set sheet by sheet (against
the type's checklist for the sheet's discipline and the code sections it quotes) and then
drafts the correction or approval letter, its re-run after a resubmission, the afternoon's
notice letters, the nightly summary of the day's applications and the public-records walks
over archived files. See bench/heldout_permits_office.py's docstring for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_meeting_parts import poisson
from bench.heldout_permit_parts import DAY, HOUR, MINUTE, City

SYSTEM = {"intake": 700, "review": 1200, "letter": 500, "nightly": 600, "records": 800}
CUE = {"intake": 40, "review": 45, "letter": 35, "notice": 30, "nightly": 30, "rollup": 40,
       "records": 40}
OUTPUT = {"review": (220, 0.5, 40, 700), "letter": (450, 0.4, 150, 1000),
          "nightly": (120, 0.3, 60, 250), "records": (90, 0.8, 10, 600)}
PREFILL, DECODE = 6000.0, 35.0  # tokens a second the replica reads and writes for a stream
OFFICE = (7.5, 16.5)  # hours the intake staff accept plan sets into review
ACCEPT = (10.0, 120.0)  # minutes from arrival (or the office's opening) to acceptance
COMMENT = (0.3, 0.12)  # chance a sheet gets a comment: first review, later rounds
COMMENT_TOKENS = (180, 0.5, 60, 600)
APPROVAL = 600  # tokens of the approval-letter template
REVISE = (0.85, (0.05, 0.3))  # sheets replaced on a resubmission: commented ones; others
QUICK = (0.25, (4 * HOUR, 0.6, 2 * HOUR, 20 * HOUR))  # corrections sent in the trace that
# come back in it, and how long after
NIGHTLY = (1.0, 1.5)  # hours the nightly summary starts (the day before's applications)
NOTICES = (60, (16.0, 16.5))  # notice letters a day at scale 1.0, the hours the batch starts
NOTICE = (650, 0.3, 400, 900)  # tokens of each of 3 notice templates
RECORDS = (7, (8, 17))  # public-records requests a day at scale 1.0, office hours
DOCS = (40, 0.8, 10, 300)  # archived documents a request's walk reads
ARCHIVE = (1200, 0.6, 300, 5000)  # tokens of an archived document
REQUEST = (220, 0.5, 80, 600)  # tokens of a records request's text


@dataclass
class Stream:
    """A job's walk, one request at a time at the job's pace: kind, owner (permit, night or
    records request), items (sheet indices, permits, documents), the round (review), how far
    it is, its request indices and what it found (a review's comments per sheet)."""

    kind: str
    owner: int
    items: list[int]
    round: int = 0
    pos: int = 0
    sent: list[int] = field(default_factory=list)
    found: dict[int, Segment] = field(default_factory=dict)
    prior: dict[int, Segment] = field(default_factory=dict)


class Jobs(City):
    """The city (``City``) and the office's jobs."""

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, scale)
        self.system = {k: self.new(n) for k, n in SYSTEM.items()}
        self.cue = {k: self.new(n) for k, n in CUE.items()}
        self.approval = self.new(APPROVAL)
        self.notices = [self.new(clipped_length(rng, *NOTICE)) for _ in range(3)]
        self.notice_walks: list[Stream] = []
        self.reviews: list[Stream] = []
        self.nights: list[Stream] = []
        self.records: list[tuple[Segment, Stream]] = []
        self.letters: list[tuple[int, int, str]] = []  # (request, permit, what)
        self.summaries: dict[int, Segment] = {}
        for p, permit in enumerate(self.permits):
            if permit.state == "applied":
                self.tuesday(p)
        for d in (0, 1):
            self.at(d * DAY + rng.uniform(*NIGHTLY) * HOUR, "nightly", d)
            self.at(d * DAY + rng.uniform(*NOTICES[1]) * HOUR, "notices", d)
            for _ in range(poisson(rng, RECORDS[0] * scale)):
                self.at(d * DAY + rng.uniform(*RECORDS[1]) * HOUR, "records", d)

    def tuesday(self, p: int) -> None:
        """An application from the day before the clock: issued over the counter without a
        plan set, reviewed that day if accepted before the office closed (its outcome after
        the trace), else accepted on Wednesday morning."""
        permit = self.permits[p]
        if not permit.plans:
            permit.state = "issued"
        elif permit.opened + DAY < OFFICE[1] * HOUR:
            permit.state = "reviewed"
        else:
            permit.state = "intake"
            self.accept(p, 0.0)

    def accept(self, p: int, t: float) -> None:
        """Intake staff accept permit ``p``'s plan set into review: within office hours after
        ``t``, at the next opening otherwise."""
        hour = t % DAY / HOUR
        start = t if OFFICE[0] <= hour < OFFICE[1] else (
            (t // DAY + (hour >= OFFICE[1])) * DAY + OFFICE[0] * HOUR)
        self.at(start + self.rng.uniform(*ACCEPT) * MINUTE, "review", p)

    def _on_arrive(self, _: object) -> int:
        """A new application: its intake check now; its plan set into review once accepted."""
        p = super()._on_arrive(_)
        permit = self.permits[p]
        kind = self.kinds[permit.kind]
        index = [self.new(8 * len(permit.discs) + 20)] if permit.plans else []
        self.emit("intake", p, 0, [self.system["intake"], kind.requirements, permit.form,
                                   *index, self.cue["intake"]])
        if permit.plans:
            self.accept(p, self.now)
        else:
            permit.state = "issued"
        return p

    def review_prompt(self, s: Stream, sheet: int) -> list[Segment]:
        """A sheet's review: system prompt, the type's checklist for the sheet's discipline,
        the code sections it quotes as they stand, the form, the sheet as submitted, the last
        round's comment on it (re-reviews), the instruction."""
        permit = self.permits[s.owner]
        d = permit.discs[sheet]
        prior = [s.prior[sheet]] if sheet in s.prior else []
        return [self.system["review"], self.kinds[permit.kind].checklists[d],
                *self.code(self.digests[d]), permit.form, permit.plans.at(self.now)[sheet],
                *prior, self.cue["review"]]

    def _on_review(self, p: int) -> None:
        """The plan-review agent takes permit ``p``'s plan set as it stands, in sheet order."""
        permit = self.permits[p]
        permit.state = "review"
        rnd = len([v for v in permit.plans.versions if v[0] <= self.now]) - 1
        s = Stream("review" if rnd == 0 else "rereview", p, list(range(len(permit.discs))),
                   rnd, prior=dict(permit.comments))
        self.reviews.append(s)
        self.at(self.now, "stream", s)

    def pace(self, segs: list[Segment], kind: str) -> float:
        """Seconds until a job stream's next request: reading the prompt, writing the output."""
        out = clipped_length(self.rng, *OUTPUT[kind])
        work = sum(n for _, n in segs) / PREFILL + out / DECODE
        return work * self.rng.uniform(0.8, 1.25)

    def _on_stream(self, s: Stream) -> None:
        """The walk's next item; a review's walk ends with its letter."""
        if s.pos == len(s.items):
            if s.kind in ("review", "rereview"):
                self.letter(s)
            return
        item = s.items[s.pos]
        s.pos += 1
        if s.kind == "nightly":
            segs, pace = self.nightly_prompt(s, item), "nightly"
        elif s.kind == "notice":
            segs, pace = self.notice_prompt(item), "letter"
        elif s.kind == "records":
            segs, pace = self.records_prompt(s), "records"
        else:
            segs, pace = self.review_prompt(s, item), "review"
            if self.rng.random() < COMMENT[s.round > 0]:
                s.found[item] = self.new(clipped_length(self.rng, *COMMENT_TOKENS))
        if s.kind == "notice":
            s.sent.append(self.emit("letter", item, -1, segs))
            self.letters.append((s.sent[-1], item, "notice"))
        else:
            s.sent.append(self.emit(s.kind, s.owner, item, segs))
        self.at(self.now + self.pace(segs, pace), "stream", s)

    def letter(self, s: Stream) -> None:
        """The review's letter: corrections (the type's template, the form, the comments in
        sheet order) or approval; its summary joins the file. Some corrections sent in the
        trace come back in it."""
        p, permit = s.owner, self.permits[s.owner]
        kind = self.kinds[permit.kind]
        found = [s.found[k] for k in sorted(s.found)]
        template = kind.letter if found else self.approval
        segs = [self.system["letter"], template, permit.form, *found, self.cue["letter"]]
        what = "corrections" if found else "approval"
        self.letters.append((self.emit("letter", p, s.round, segs), p, what))
        self.note(p, self.entry())
        permit.comments = dict(s.found)
        permit.state = "corrections" if found else "issued"
        if found and self.rng.random() < QUICK[0]:
            self.at(self.now + clipped_length(self.rng, *QUICK[1]), "resubmit", p)

    def _on_resubmit(self, p: int) -> None:
        """A revised plan set: most commented sheets replaced, a few others; then review."""
        rng, permit = self.rng, self.permits[p]
        share = rng.uniform(*REVISE[1])
        sheets = list(permit.plans.at(self.now))
        for k, sheet in enumerate(sheets):
            if rng.random() < (REVISE[0] if k in permit.comments else share):
                sheets[k] = self.new(max(100, round(sheet[1] * rng.uniform(0.8, 1.3))))
        permit.plans.versions.append((self.now, sheets))
        permit.state = "intake"
        self.note(p, self.entry())
        self.accept(p, self.now)

    def nightly_prompt(self, s: Stream, item: int) -> list[Segment]:
        """An application's summary (item >= 0) or a type's roll-up of the night's summaries
        (item -1 - type)."""
        if item >= 0:
            permit = self.permits[item]
            return [self.system["nightly"], self.kinds[permit.kind].template, permit.form,
                    self.cue["nightly"]]
        k = -1 - item
        day = [self.summaries[p] for p in s.items if p >= 0 and self.permits[p].kind == k]
        return [self.system["nightly"], self.kinds[k].template, *day, self.cue["rollup"]]

    def _on_nightly(self, d: int) -> None:
        """The nightly summary of the day before's applications, in order, then one roll-up
        per type that had any."""
        apps = [p for p, x in enumerate(self.permits) if (d - 1) * DAY <= x.opened < d * DAY]
        for p in apps:
            self.summaries[p] = self.new(clipped_length(self.rng, *OUTPUT["nightly"]))
        kinds = sorted({self.permits[p].kind for p in apps})
        self.nights.append(s := Stream("nightly", d, apps + [-1 - k for k in kinds]))
        self.at(self.now, "stream", s)

    def _on_notices(self, d: int) -> None:
        """The afternoon's notice letters (inspection scheduled, expiry warning, final) to
        issued permits, in id order, one stream."""
        issued = [p for p, x in enumerate(self.permits) if x.state == "issued"]
        n = min(len(issued), poisson(self.rng, NOTICES[0] * self.scale))
        self.notice_walks.append(s := Stream("notice", d, sorted(self.rng.sample(issued, n))))
        self.at(self.now, "stream", s)

    def notice_prompt(self, p: int) -> list[Segment]:
        """A notice letter: system prompt, one of the notice templates, the form, the cue."""
        j = self.rng.randrange(len(self.notices))
        return [self.system["letter"], self.notices[j], self.permits[p].form, self.cue["notice"]]

    def records_prompt(self, s: Stream) -> list[Segment]:
        """A records request's step: system prompt, the request, one archived document read
        once, the instruction."""
        return [self.system["records"], self.records[s.owner][0],
                self.new(clipped_length(self.rng, *ARCHIVE)), self.cue["records"]]

    def _on_records(self, d: int) -> None:
        """A public-records request: a walk over archived documents, each read once."""
        n = clipped_length(self.rng, *DOCS)
        s = Stream("records", len(self.records), list(range(n)))
        self.records.append((self.new(clipped_length(self.rng, *REQUEST)), s))
        self.at(self.now, "stream", s)

