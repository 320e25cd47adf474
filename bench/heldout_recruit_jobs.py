"""bench.heldout's ``recruiting`` shape, the platform's jobs: each employer's early-morning
screening batch (every new application of each open requisition scored against its job
description and rubric), re-screens after a rubric edit, the job fair's applications screened
as they arrive, the nightly job-matching walk over the candidates with alerts on, recruiters'
outreach campaigns drafted from templates, and interview loops whose feedback summary is
re-written as each interviewer's notes land. See bench/heldout_recruiting.py's docstring for
the numbers."""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_meeting_parts import poisson
from bench.heldout_recruit_parts import (DAY, EMPLOYERS, FIELDS, HOUR, MINUTE, RUBRIC, World,
                                         hour_of, utc)

SYSTEM = {"screen": 700, "match": 900, "outreach": 500, "feedback": 600}  # system prompts
CUE = {"screen": 40, "match": 45, "outreach": 30, "feedback": 50}  # instruction at the end
OUTPUT = {"screen": (250, 0.3, 120, 500), "match": (120, 0.4, 40, 300),
          "outreach": (220, 0.3, 120, 400), "feedback": (320, 0.3, 150, 600)}
PREFILL, DECODE = 6000.0, 35.0  # tokens a second the replica reads and writes for a stream
BATCH_HOURS = (5.0, 7.0)  # local hours an employer's screening batch starts
RUBRIC_EDITS = (10.0, (10.0, 17.0))  # a day at scale 1.0 (Poisson), local hours
MATCH_HOURS = (2.0, 3.0)  # UTC hours the nightly matching walk starts
MATCHES = 5  # open requisitions of the candidate's family a match prompt lists
OUTREACH = 14  # campaigns a day at scale 1.0, local 09..17
SOURCED = (25, 0.6, 10, 60)  # candidates a campaign drafts emails for
LOOPS = 60  # interview loops a day at scale 1.0, starting local 09..16
PANEL = (2, 5)  # interviewers in a loop, 45..60 minutes each, back to back
NOTE = (350, 0.5, 150, 800)  # tokens of an interviewer's notes
NOTE_DELAY = (1.5 * HOUR, 0.8, 0.3 * HOUR, 6 * HOUR)  # from the interview's end to its notes
FAIR = ((4, 8), (250, 450), (10.0, 16.0, 12.5))  # job fair: requisitions, applications (x
# scale), local hours (start, end, peak) on day 1
OFFICE = (0.6, 1.0, 1.0, 0.9, 0.6, 0.9, 1.0, 0.9, 0.7)  # office work starts, local 09..17


@dataclass
class Stream:
    """A job's walk, one request at a time at the job's pace: kind, owner, items (application
    ids, candidates), how far it is and its request indices."""

    kind: str
    owner: int
    items: list[int]
    pos: int = 0
    sent: list[int] = field(default_factory=list)


@dataclass
class Loop:
    """An interview loop: requisition, application, local day, when each interview ends,
    the notes in the order they landed, the summary each feedback run wrote."""

    req: int
    app: int
    day: int
    ends: list[float]
    notes: list[Segment] = field(default_factory=list)
    summaries: list[Segment] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)


class Jobs(World):
    """The world (``World``) and the platform's jobs."""

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, scale)
        self.system = {k: self.new(n) for k, n in SYSTEM.items()}
        self.cue = {k: self.new(n) for k, n in CUE.items()}
        self.batches: list[Stream] = []
        self.rescreens: list[tuple[float, Stream]] = []  # (edit time, walk)
        self.nights: list[Stream] = []
        self.campaigns: list[tuple[int, int, Stream]] = []  # (requisition, template, walk)
        self.loops: list[Loop] = []
        self.fair_reqs: list[int] = []
        self._open_key, self._open = -1, []
        for e, emp in enumerate(self.employers):
            for d in (-1, 0, 1, 2):
                self.at_local(d, rng.uniform(*BATCH_HOURS), emp.tz, "batch", e)
            self.daily(e, OUTREACH, OFFICE, 9, "campaign")
            self.daily(e, LOOPS, OFFICE[:8], 9, "loop")
            self.daily(e, RUBRIC_EDITS[0], OFFICE, 10, "rubric")
        for night in (0, 1):
            self.at(night * DAY + rng.uniform(*MATCH_HOURS) * HOUR, "match", night)
        self.plan_fair()
        self._opens = sorted(req.opened for req in self.reqs)

    def at_local(self, day: int, hour: float, tz: float, name: str, payload: object) -> None:
        """Schedule ``name`` at a local time if it falls on the clock (0..END)."""
        t = utc(day, hour, tz)
        if 0 <= t < self.END:
            self.at(t, name, payload)

    def daily(self, e: int, rate: float, hours: tuple, first: int, name: str) -> None:
        """Each local day, employer ``e``'s share (by weight) of ``rate`` x scale events
        (Poisson) at local hours by ``hours`` from ``first``."""
        emp, total = self.employers[e], sum(x.weight for x in self.employers)
        for d in (-1, 0, 1, 2):
            for _ in range(poisson(self.rng, rate * self.scale * emp.weight / total)):
                self.at_local(d, hour_of(self.rng, hours, first), emp.tz, name, e)

    def screen_prompt(self, a: int) -> list[Segment]:
        """Screening: system prompt, the job description, the rubric as it stands, the resume
        as uploaded, the instruction."""
        app = self.apps[a]
        req = self.reqs[app.req]
        return [self.system["screen"], req.jd, *req.rubric.at(self.now), app.resume,
                self.cue["screen"]]

    def picks(self, c: int, open_by_field: list[list[int]]) -> list[int]:
        """The MATCHES open requisitions of candidate ``c``'s family nearest its seniority."""
        cand = self.cands[c]
        mine = open_by_field[cand.field]
        return sorted(mine, key=lambda r: (abs(self.reqs[r].level - cand.level), r))[:MATCHES]

    def match_prompt(self, c: int, open_by_field: list[list[int]]) -> list[Segment]:
        """Job matching: system prompt, the profile, the picked requisitions' summaries."""
        summaries = [self.reqs[r].summary for r in self.picks(c, open_by_field)]
        return [self.system["match"], self.profile(c), *summaries, self.cue["match"]]

    def outreach_prompt(self, n: int, c: int) -> list[Segment]:
        """Outreach: system prompt, the company profile, the template, the requisition's
        summary, the candidate's profile, the instruction."""
        r, k, _ = self.campaigns[n]
        emp = self.employers[self.reqs[r].employer]
        return [self.system["outreach"], emp.company, emp.templates[k], self.reqs[r].summary,
                self.profile(c), self.cue["outreach"]]

    def feedback_prompt(self, n: int) -> list[Segment]:
        """A feedback summary: system prompt, the job description, the candidate's profile,
        the notes so far in the order they landed, the instruction."""
        loop = self.loops[n]
        return [self.system["feedback"], self.reqs[loop.req].jd, self.apps[loop.app].profile,
                *loop.notes, self.cue["feedback"]]

    def pace(self, segs: list[Segment], kind: str) -> float:
        """Seconds until a job stream's next request: reading the prompt, writing the output."""
        out = clipped_length(self.rng, *OUTPUT[kind])
        work = sum(n for _, n in segs) / PREFILL + out / DECODE
        return work * self.rng.uniform(0.8, 1.25)

    def _on_stream(self, s: Stream) -> None:
        """The walk's next item; a screening gives the application its score (first time)."""
        if s.pos >= len(s.items):
            return
        item = s.items[s.pos]
        s.pos += 1
        if s.kind == "match":
            segs, step = self.match_prompt(item, self.open_by_field()), s.owner
        elif s.kind == "outreach":
            segs, step = self.outreach_prompt(s.owner, item), item
        else:
            segs, step = self.screen_prompt(item), item
            if self.apps[item].score is None:
                self.apps[item].score = self.rng.random()
        owner = item if s.kind == "match" else s.owner
        s.sent.append(self.emit(s.kind, owner, step, segs))
        self.at(self.now + self.pace(segs, "screen" if "screen" in s.kind else s.kind),
                "stream", s)

    def open_by_field(self) -> list[list[int]]:
        """The requisitions open now per job family (rebuilt when one has opened)."""
        key = bisect.bisect_right(self._opens, self.now)
        if self._open_key != key:
            self._open_key, self._open = key, [[] for _ in range(FIELDS)]
            for r, req in enumerate(self.reqs):
                if req.opened <= self.now:
                    self._open[req.field].append(r)
        return self._open

    def _on_batch(self, e: int) -> None:
        """Employer ``e``'s screening batch: every application its open requisitions got since
        the last batch, requisition by requisition, in arrival order."""
        todo = []
        for r in self.open_reqs(e):
            req = self.reqs[r]
            todo += req.apps[req.screened:]
            req.screened = len(req.apps)
        if todo:
            self.batches.append(s := Stream("screen", e, todo))
            self.at(self.now, "stream", s)

    def _on_rubric(self, e: int) -> None:
        """A hiring manager edits the rubric of one of ``e``'s requisitions (by applications):
        every application screened so far is screened again with it."""
        rs = [r for r in self.open_reqs(e) if self.reqs[r].screened]
        if not rs:
            return
        r = self.rng.choices(rs, [self.reqs[r].screened for r in rs])[0]
        req = self.reqs[r]
        req.rubric.versions.append((self.now, [self.new(clipped_length(self.rng, *RUBRIC))]))
        s = Stream("rescreen", r, req.apps[:req.screened])
        self.rescreens.append((self.now, s))
        self.at(self.now, "stream", s)

    def _on_match(self, night: int) -> None:
        """The nightly matching walk: every candidate with alerts on, in id order."""
        todo = [c for c, cand in enumerate(self.cands) if cand.alerts]
        self.nights.append(s := Stream("match", night, todo))
        self.at(self.now, "stream", s)

    def _on_campaign(self, e: int) -> None:
        """A recruiter drafts outreach for one of ``e``'s requisitions to candidates of its
        family sourced from the database, from one of the employer's templates."""
        rs = self.open_reqs(e)
        if not rs:
            return
        r = self.rng.choice(rs)
        pool = self.by_field[self.reqs[r].field]
        todo = self.rng.sample(pool, min(len(pool), clipped_length(self.rng, *SOURCED)))
        self.campaigns.append((r, self.rng.randrange(3), s := Stream("outreach", 0, todo)))
        s.owner = len(self.campaigns) - 1
        self.at(self.now, "stream", s)

    def _on_loop(self, e: int) -> None:
        """An interview loop for the best-scored screened application of one of ``e``'s
        requisitions not yet interviewed; each interviewer's notes land hours after."""
        rng, taken = self.rng, {loop.app for loop in self.loops}
        apps = [a for r in self.open_reqs(e) for a in self.reqs[r].apps
                if self.apps[a].score is not None and a not in taken]
        if not apps:
            return
        a = max(apps, key=lambda a: self.apps[a].score)
        length = rng.uniform(45, 60) * MINUTE
        ends = [self.now + (i + 1) * length for i in range(rng.randint(*PANEL))]
        day = int((self.now / HOUR + self.employers[e].tz) // 24)
        self.loops.append(Loop(self.apps[a].req, a, day, ends))
        for t in ends:
            self.at(t + clipped_length(rng, *NOTE_DELAY), "note", len(self.loops) - 1)
        self.loop_started(len(self.loops) - 1)

    def loop_started(self, n: int) -> None:
        """A hook for the desk (the day's debrief)."""

    def _on_note(self, n: int) -> None:
        """An interviewer's notes land: the loop's feedback summary is written again."""
        loop = self.loops[n]
        loop.notes.append(self.new(clipped_length(self.rng, *NOTE)))
        segs = self.feedback_prompt(n)
        loop.sent.append(self.emit("feedback", n, len(loop.notes), segs))
        loop.summaries.append(self.new(clipped_length(self.rng, *OUTPUT["feedback"])))

    def plan_fair(self) -> None:
        """A virtual job fair on day 1 of one of the 6 largest employers: FAIR requisitions
        opened at 09:00 local, applications over the afternoon, each screened at once."""
        rng = self.rng
        big = sorted(range(EMPLOYERS), key=lambda e: -self.employers[e].weight)[:6]
        self.fair_employer = e = rng.choice(big)
        tz = self.employers[e].tz
        self.fair_reqs = [self.open_req(e, utc(1, 9.0, tz), steady=False)
                          for _ in range(rng.randint(*FAIR[0]))]
        lo, hi, peak = FAIR[2]
        for _ in range(max(2, round(rng.randint(*FAIR[1]) * self.scale))):
            self.at_local(1, rng.triangular(lo, hi, peak), tz, "fair", rng.choice(self.fair_reqs))

    def _on_fair(self, r: int) -> None:
        """A job-fair application: screened at once (``fair``)."""
        a = self._on_apply(r)
        self.apps[a].score = self.rng.random()
        self.reqs[r].screened = len(self.reqs[r].apps)
        self.emit("fair", r, a, self.screen_prompt(a))
        self.fair_applied(r)

    def fair_applied(self, r: int) -> None:
        """A hook for the desk (the applicant's FAQ questions)."""
