"""bench.heldout's ``course_grading`` shape, the platform's jobs: grading (on submission for
instant-feedback courses; else a walk after the deadline over every latest submission, whole
or question by question, the late ones that came in before it at its end and later ones as
they come), rubric edits (mid-walk or during the day) and the rescoring they trigger,
students' regrade requests, the similarity check that pairs submissions, each course's
nightly feedback emails and the recorded lectures' transcript summaries. See
bench/heldout_course_grading.py's docstring for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_meeting_parts import poisson
from bench.heldout_course_parts import (DAY, END, HOUR, MINUTE, RECORDED, RUBRIC_PART, World,
                                        hour, sections)

SYSTEM = {"grade": 1100, "similarity": 700, "email": 450, "lecture": 500}  # system prompts
CUE = {"grade": 60, "late": 80, "rescore": 60, "regrade": 70, "similarity": 50, "email": 40,
       "map": 40, "reduce": 50}  # the instruction at a prompt's end
OUTPUT = {"grade": (350, 0.4, 120, 900), "question": (120, 0.5, 40, 400),
          "similarity": (220, 0.4, 80, 600), "email": (220, 0.4, 100, 500),
          "map": (300, 0.3, 150, 500), "reduce": (900, 0.3, 500, 1600)}
PREFILL, DECODE = 6000.0, 35.0  # tokens a second the replica reads and writes for a lane
LANES = {"grade": 4, "rescore": 4, "similarity": 2, "email": 2, "lecture": 3}
AUTO = (0.5, (0.5, 2.0))  # batch walks started by a timer (share, hours after the deadline)
STAFF = (8.0, 18.0)  # the rest: a TA starts it in the next staff hours, an hour on at least
WALK_EDIT = (0.45, (0.1, 0.5), 0.6)  # walks with a rubric edit; where; it rescores the done
DAY_EDITS = (0.6, 0.4)  # instant courses: edits in the two days (Poisson); that rescore
REGRADE = (0.05, 0.015)  # graded students who ask for a regrade: batch, instant courses
APPEAL = (150, 0.7, 30, 600)  # tokens of a regrade request
APPEAL_DELAY = (5 * HOUR, 1.0, 1080, 40 * HOUR)  # after the grade is released (seconds)
SECOND = (0.2, (3 * HOUR, 1.0, 900, 20 * HOUR), (150, 0.5, 50, 400))  # a second round
# after the TA's reply (chance, delay, reply tokens)
FLAG = {"code": 0.06, "problems": 0.04, "essay": 0.03, "lab": 0.04}  # clusters a submission
FALSE = 0.02  # extra flagged pairs a submission (the filter's false positives)
EMAIL_HOURS = (1.0, 4.0)  # a course's nightly email run starts
EMAILS = 0.7  # courses that send them
PRIOR = (0.92, (260, 0.4, 120, 500))  # night 0: students with the last assignment's feedback
REMINDER = (70, 0.4, 40, 140)  # tokens of a reminder's status line (not yet submitted)
TRANSCRIPT = (150.0, 2000)  # tokens a minute of lecture (x 0.8..1.2); tokens a chunk
SUMMARY_DELAY = (10.0, 40.0)  # minutes from a lecture's end to its transcript's summary


@dataclass
class Stream:
    """A job's walk: its kind, course, items (kind, a, b), how far it is, lanes still
    running, its request indices, where a rubric edit falls (-1: none), the edits as (time,
    question, rescored), the content it walks (a transcript's chunks) and what each item's
    output was (the chunks' summaries)."""

    kind: str
    owner: int
    items: list[tuple[str, int, int]]
    lanes: int
    pos: int = 0
    sent: list[int] = field(default_factory=list)
    edit_at: int = -1
    edits: list[tuple[float, int, bool]] = field(default_factory=list)
    data: list[Segment] = field(default_factory=list)
    made: dict[int, Segment] = field(default_factory=dict)


class Jobs(World):
    """The world (``World``) and the platform's jobs."""

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, scale)
        self.system = {k: self.new(n) for k, n in SYSTEM.items()}
        self.cue = {k: self.new(n) for k, n in CUE.items()}
        self.streams: list[Stream] = []
        self.appeals: dict[tuple[int, int], list[Segment]] = {}
        self.edits: list[tuple[int, float, int]] = []  # instant courses: (course, time, q)
        for c, course in enumerate(self.courses):
            self.schedule_grading(c)
            if course.mode == "instant":
                for _ in range(poisson(rng, DAY_EDITS[0])):
                    self.at(rng.randrange(2) * DAY + rng.uniform(*STAFF) * HOUR, "edit", c)
            if rng.random() < EMAILS:
                for night in (0, 1):
                    self.at(night * DAY + rng.uniform(*EMAIL_HOURS) * HOUR, "email", c)
            if rng.random() < RECORDED:
                for start, minutes in course.meetings:
                    t = start + (minutes + rng.uniform(*SUMMARY_DELAY)) * MINUTE
                    self.at(t, "lecture", (c, minutes))

    def schedule_grading(self, c: int) -> None:
        """The grading walk (batch courses) or the similarity check (instant ones) after the
        course's deadline as it stands."""
        course, rng = self.courses[c], self.rng
        d = course.deadline
        if course.mode == "instant":
            self.at(d + rng.uniform(1.0, 4.0) * HOUR, "similar", (c, course.gen))
            return
        if rng.random() < AUTO[0]:
            t = d + rng.uniform(*AUTO[1]) * HOUR
        else:
            t = d + HOUR
            while not STAFF[0] <= hour(t) < STAFF[1]:
                t += 0.25 * HOUR
            t += rng.uniform(0.0, 2.0) * HOUR
        self.at(t, "batch", (c, course.gen))

    def extended(self, c: int) -> None:
        self.schedule_grading(c)

    def start(self, s: Stream) -> None:
        self.streams.append(s)
        for _ in range(s.lanes):
            self.at(self.now, "stream", s)

    def grade_prompt(self, i: int, q: int, cue: str) -> list[Segment]:
        """Grading: system prompt, the statement, the rubric as it stands and the answers
        (q = -1), or the one question's rubric part and answer; the cue."""
        sub = self.subs[i]
        course = self.courses[sub.course]
        rubric = course.rubric.at(self.now)
        if q < 0:
            return [self.system["grade"], course.statement, *rubric, *sub.answers,
                    self.cue[cue]]
        return [self.system["grade"], course.statement, rubric[q], sub.answers[q], self.cue[cue]]

    def pace(self, segs: list[Segment], out: int) -> float:
        """Seconds until a lane's next request: reading the prompt, writing the output."""
        return (sum(n for _, n in segs) / PREFILL + out / DECODE) * self.rng.uniform(0.8, 1.25)

    def grade(self, kind: str, i: int, q: int) -> tuple[int, list[Segment]]:
        """Grade submission ``i`` (question ``q``) now: the request (none before the clock's
        start), its feedback replaces the last; (output tokens, segments)."""
        out = clipped_length(self.rng, *OUTPUT["grade" if q < 0 else "question"])
        segs = self.grade_prompt(i, q, kind)
        if self.now >= 0:
            self.emit(kind, self.subs[i].course, (i, q), segs)
        self.subs[i].feedback[q] = self.new(out)
        self.subs[i].graded = self.now
        return out, segs

    def _on_stream(self, s: Stream) -> None:
        """A lane takes the walk's next item; the last lane out ends the walk."""
        if s.pos >= len(s.items):
            s.lanes -= 1
            if not s.lanes:
                getattr(self, "done_" + s.kind)(s)
            return
        if s.pos == s.edit_at:
            self.walk_edit(s)
        kind, a, b = s.items[s.pos]
        s.pos += 1
        if kind in ("grade", "late", "rescore"):
            out, segs = self.grade(kind, a, b)
            s.sent.append(len(self.out) - 1)
        else:
            out, segs = getattr(self, "item_" + kind)(s, a, b)
        self.at(self.now + self.pace(segs, out), "stream", s)

    def _on_batch(self, arg: tuple[int, int]) -> None:
        """A batch course's grading walk: every student's latest on-time submission in
        arrival order (each question in turn, if by question), then the late ones so far."""
        c, gen = arg
        course = self.courses[c]
        if gen != course.gen:
            return
        course.walked = True
        latest = sorted(course.latest.values())
        qs = range(len(course.rubric.current)) if course.mode == "question" else (-1,)
        items = [("grade", i, q) for q in qs for i in latest if not self.subs[i].late]
        items += [("late", i, q) for q in qs for i in latest if self.subs[i].late]
        s = Stream("grade", c, items, LANES["grade"])
        if items and self.rng.random() < WALK_EDIT[0]:
            s.edit_at = max(s.lanes, int(len(items) * self.rng.uniform(*WALK_EDIT[1])))
        self.start(s)

    def edit_rubric(self, c: int, q: int) -> None:
        """Question ``q``'s rubric part is rewritten (the later parts stay)."""
        course = self.courses[c]
        parts = list(course.rubric.current)
        parts[q] = self.new(clipped_length(self.rng, *RUBRIC_PART))
        course.rubric.versions.append((self.now, parts))

    def walk_edit(self, s: Stream) -> None:
        """The instructor edits the rubric mid-walk (the current item's question, or any when
        whole submissions are graded); perhaps the items done are graded again at the end."""
        q = s.items[s.pos][2]
        if q < 0:
            q = self.rng.randrange(len(self.courses[s.owner].rubric.current))
        self.edit_rubric(s.owner, q)
        again = self.rng.random() < WALK_EDIT[2]
        s.edits.append((self.now, q, again))
        if again:
            done = s.items[:s.pos]
            s.items += [("rescore", i, b) for _, i, b in done if b in (-1, q)]

    def done_grade(self, s: Stream) -> None:
        """Grades are released within 2 h; some students ask for a regrade; the similarity
        check runs."""
        release = self.now + self.rng.uniform(0.0, 2.0) * HOUR
        for i in sorted({i for _, i, _ in s.items}):
            if self.rng.random() < REGRADE[0]:
                self.appeal(i, release)
        self.at(self.now + self.rng.uniform(0.2, 1.5) * HOUR, "similar",
                (s.owner, self.courses[s.owner].gen))

    def done_rescore(self, s: Stream) -> None:
        """Nothing follows a rescoring walk."""

    def submitted(self, i: int) -> None:
        """Instant courses grade a submission at once; a batch course grades late work as it
        comes once its walk has started."""
        sub = self.subs[i]
        course = self.courses[sub.course]
        if course.mode == "instant":
            self.grade("late" if sub.late else "grade", i, -1)
            if self.now >= 0 and self.rng.random() < REGRADE[1]:
                self.appeal(i, self.now)
        elif sub.late and course.walked:
            for q in range(len(sub.answers)) if course.mode == "question" else (-1,):
                self.grade("late", i, q)

    def _on_edit(self, c: int) -> None:
        """An instant course's rubric edit during the day; perhaps every latest graded
        submission is graded again."""
        course = self.courses[c]
        q = self.rng.randrange(len(course.rubric.current))
        self.edit_rubric(c, q)
        self.edits.append((c, self.now, q))
        if self.rng.random() < DAY_EDITS[1]:
            items = [("rescore", i, -1) for i in sorted(course.latest.values())]
            self.start(Stream("rescore", c, items, LANES["rescore"]))

    def appeal(self, i: int, after: float) -> None:
        """A regrade request on one graded question of submission ``i``, hours after."""
        t = after + clipped_length(self.rng, *APPEAL_DELAY)
        if t < END:
            self.at(t, "regrade", (i, self.rng.choice(sorted(self.subs[i].feedback)), 1))

    def _on_regrade(self, arg: tuple[int, int, int]) -> None:
        """The grading prompt (the rubric as it stands), the feedback, the appeal (and the
        TA's reply and a second appeal in a second round), the regrade cue."""
        i, q, rnd = arg
        key = (i, q)
        thread = self.appeals.setdefault(key, [])
        if rnd > 1:
            thread.append(self.new(clipped_length(self.rng, *SECOND[2])))
        thread.append(self.new(clipped_length(self.rng, *APPEAL)))
        head = self.grade_prompt(i, q, "regrade")[:-1]
        segs = [*head, self.subs[i].feedback[q], *thread, self.cue["regrade"]]
        self.emit("regrade", self.subs[i].course, (i, q, rnd), segs)
        if rnd == 1 and self.rng.random() < SECOND[0]:
            t = self.now + clipped_length(self.rng, *SECOND[1])
            if t < END:
                self.at(t, "regrade", (i, q, 2))

    def pairs(self, c: int) -> list[tuple[int, int]]:
        """The pairs the similarity filter flags among the latest on-time submissions:
        clusters of 2..4 (all their pairs) and false positives, by the first's arrival."""
        rng, course = self.rng, self.courses[c]
        subs = sorted(i for i in course.latest.values() if not self.subs[i].late)
        if len(subs) < 2:
            return []
        out = set()
        for _ in range(poisson(rng, len(subs) * FLAG[course.kind] / 2)):
            group = sorted(rng.sample(subs, min(len(subs), rng.randint(2, 4))))
            out |= {(a, b) for k, a in enumerate(group) for b in group[k + 1:]}
        for _ in range(poisson(rng, len(subs) * FALSE)):
            out.add(tuple(sorted(rng.sample(subs, 2))))
        return sorted(out)

    def _on_similar(self, arg: tuple[int, int]) -> None:
        c, gen = arg
        if gen == self.courses[c].gen:
            items = [("similarity", a, b) for a, b in self.pairs(c)]
            self.start(Stream("similarity", c, items, LANES["similarity"]))

    def item_similarity(self, s: Stream, a: int, b: int) -> tuple[int, list[Segment]]:
        """A flagged pair: system prompt, the statement, both submissions' answers, the cue."""
        statement = self.courses[s.owner].statement
        segs = [self.system["similarity"], statement, *self.subs[a].answers,
                *self.subs[b].answers, self.cue["similarity"]]
        s.sent.append(self.emit("similarity", s.owner, (a, b), segs))
        return clipped_length(self.rng, *OUTPUT["similarity"]), segs

    def done_similarity(self, s: Stream) -> None:
        """Nothing follows a similarity check."""

    def _on_email(self, c: int) -> None:
        """A course's nightly feedback emails, student by student: night 0 those with the last
        assignment's feedback; night 1 those graded since (or submitted) and those who have
        not submitted yet while the deadline is ahead (a reminder)."""
        course, night = self.courses[c], int(self.now // DAY)
        if night == 0:
            students = [s for s in range(course.size) if self.rng.random() < PRIOR[0]]
        else:
            students = [s for s in range(course.size) if s in course.latest
                        or course.deadline > self.now]
        self.start(Stream("email", c, [("email", s, night) for s in students], LANES["email"]))

    def item_email(self, s: Stream, student: int, night: int) -> tuple[int, list[Segment]]:
        """System prompt, the course's template, the student's record, the night's content
        (the feedback as it stands, else a status line), the cue."""
        course, rng = self.courses[s.owner], self.rng
        i = course.latest.get(student)
        if night == 0:
            content = [self.new(clipped_length(rng, *PRIOR[1]))]
        elif i is not None and self.subs[i].feedback:
            content = [f for _, f in sorted(self.subs[i].feedback.items())]
        else:
            content = [self.new(clipped_length(rng, *REMINDER))]
        segs = [self.system["email"], course.template, course.records[student], *content,
                self.cue["email"]]
        s.sent.append(self.emit("email", s.owner, (student, night), segs))
        return clipped_length(rng, *OUTPUT["email"]), segs

    def done_email(self, s: Stream) -> None:
        """Nothing follows the emails."""

    def _on_lecture(self, arg: tuple[int, float]) -> None:
        """A recorded lecture's transcript (150 tokens a minute) is summarized chunk by chunk
        (map), then the chunks' summaries together (reduce)."""
        c, minutes = arg
        total = round(minutes * TRANSCRIPT[0] * self.rng.uniform(0.8, 1.2))
        chunks = sections(self.new, total, TRANSCRIPT[1])
        s = Stream("lecture", c, [("lecture", k, 0) for k in range(len(chunks))],
                   LANES["lecture"], data=chunks)
        self.start(s)

    def item_lecture(self, s: Stream, k: int, _: int) -> tuple[int, list[Segment]]:
        """Map: system prompt, the syllabus, the chunk, the cue."""
        segs = [self.system["lecture"], self.courses[s.owner].syllabus, s.data[k],
                self.cue["map"]]
        s.sent.append(self.emit("lecture", s.owner, k, segs))
        out = clipped_length(self.rng, *OUTPUT["map"])
        s.made[k] = self.new(out)
        return out, segs

    def done_lecture(self, s: Stream) -> None:
        """Reduce: system prompt, the syllabus, the chunks' summaries in order, the cue; its
        output is the lecture's summary (the tutor's newest material)."""
        course = self.courses[s.owner]
        segs = [self.system["lecture"], course.syllabus,
                *(s.made[k] for k in range(len(s.data))), self.cue["reduce"]]
        s.sent.append(self.emit("lecture", s.owner, -1, segs))
        course.summaries.append(self.new(clipped_length(self.rng, *OUTPUT["reduce"])))
