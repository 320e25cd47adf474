"""bench.heldout's ``course_grading`` shape, its world: the courses a university's teaching
assistant platform routes to this replica (each with a syllabus, a course FAQ, an email
template, lecture notes, a meeting pattern and one assignment in play: its statement, its
rubric by question, its deadline and how it is graded), the students enrolled in each (a
record line apiece) and their submissions arriving on the clock: a lognormal run-up to the
deadline, a rush in its last hour, late ones after; resubmissions after instant feedback;
a deadline extension that re-plans the students who had not submitted. See
bench/heldout_course_grading.py's docstring for the numbers."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import ClockedState, Segment, clipped_length
from bench.heldout_legal_parts import Versioned
from bench.heldout_meeting_parts import pick

HOUR, DAY, MINUTE = 3600.0, 86400.0, 60.0
END = 2 * DAY  # the clock starts at midnight the day before the deadline day; ends 48 h later
COURSES = 22  # courses at scale 1.0 (x 0.85..1.15 per seed, x the root of the scale)
ENROLL = (55, 0.8, 12, 500)  # students in a course (x the root of the scale, at least 6)
# course type -> (weight, questions (lo, hi), tokens of a student's answer to one question)
TYPES = {"code": (0.3, (1, 4), (700, 0.7, 100, 5000)),
         "problems": (0.35, (3, 8), (260, 0.7, 40, 1500)),
         "essay": (0.2, (1, 1), (2200, 0.5, 800, 8000)),
         "lab": (0.15, (2, 5), (450, 0.6, 80, 2500))}
SYLLABUS = (2500, 0.5, 900, 7000)  # tokens of a syllabus
FAQ = (2600, 0.5, 800, 8000)  # tokens of a course FAQ (policies, logistics), in sections
FAQ_SECTION = 500
TEMPLATE = (500, 0.4, 250, 1000)  # tokens of the course's feedback-email template
STATEMENT = (1500, 0.5, 400, 5000)  # tokens of the assignment statement
RUBRIC_PART = (200, 0.5, 60, 800)  # tokens of the rubric of one question
NOTES = (2800, 0.4, 1200, 6000)  # tokens of one lecture's notes, in sections
NOTE_SECTION = 600
LECTURES = (6, 14)  # lectures given so far (notes on the platform)
COVERS = (1, 2)  # of the latest lectures, those the assignment covers
RECORD = (110, 0.4, 50, 250)  # tokens of a student's record line (name, section, standing)
# (day, local hour) of a deadline -> weight before a seed's x 0.4..1.6 each
DEADLINES = (((0, 23.99), 0.2), ((1, 9.0), 0.08), ((1, 12.0), 0.1), ((1, 17.0), 0.17),
             ((1, 23.99), 0.45))
INSTANT = (0.25, 0.5)  # a seed's share of courses graded on submission (instant feedback)
BY_QUESTION = 0.5  # batch-graded courses (not essays) that grade question by question
LATE_OK = 0.7  # courses that take late submissions
ON_TIME, LATE = 0.88, 0.06  # students who submit by the deadline, late (if taken)
RUSH = (0.25, 25 * MINUTE)  # on-time submitters in the last-hour rush: share, mean lead
EARLY = (7 * HOUR, 1.3, 36, 150 * HOUR)  # the others' lead before the deadline (seconds)
LATENESS = (4 * HOUR, 1.1, 72, 48 * HOUR)  # a late one's delay after the deadline (seconds)
RESUBMIT = (0.3, (1.5 * HOUR, 0.9, 720, 12 * HOUR), 3, 0.5)  # chance, delay, most, answer
# changed: after instant feedback a student may submit again, each answer new with chance 0.5
EXTEND = (0.5, 3, (2.0, 10.0))  # seeds with an extension; of the 3 largest courses due on
# day 1; announced 2..10 h before the deadline, which moves 24 h later
PATTERNS = (("mwf", 0.55), ("tth", 0.45))  # 50 minutes both days, or 75 minutes one day
RECORDED = 0.75  # courses whose lectures are recorded (and their transcripts summarized)


@dataclass
class Course:
    """A course: its type, enrollment, syllabus, FAQ (versions as announcements change a
    section), email template, lecture notes (sections per lecture) and which lectures the
    assignment covers, the statement, the rubric (versions of its per-question parts), the
    deadline, how it is graded ("instant", "submission" or "question"), whether it takes late
    work, the students' record lines, its meetings (start, minutes), the lecture summaries
    made during the trace, its submissions (ids in arrival order) and each student's latest;
    ``gen`` counts the deadline's moves (an extension re-plans)."""

    kind: str
    size: int
    syllabus: Segment
    faq: Versioned
    template: Segment
    notes: list[list[Segment]]
    covers: list[int]
    statement: Segment
    rubric: Versioned
    deadline: float
    mode: str
    late_ok: bool
    records: list[Segment]
    meetings: list[tuple[float, float]]
    summaries: list[Segment] = field(default_factory=list)
    subs: list[int] = field(default_factory=list)
    latest: dict[int, int] = field(default_factory=dict)
    gen: int = 0
    walked: bool = False  # the batch grading walk has started


@dataclass
class Sub:
    """A submission: when, course, student, the answers (one segment a question), which of
    the student's submissions it is, whether late; the feedback the grader wrote for each
    question (-1: the whole submission) as it stands and when it was last graded."""

    time: float
    course: int
    student: int
    answers: list[Segment]
    number: int
    late: bool
    feedback: dict[int, Segment] = field(default_factory=dict)
    graded: float | None = None


def hour(t: float) -> float:
    """The hour of the day (0..24) at ``t``."""
    return (t / HOUR) % 24


def sections(new, total: int, size: int) -> list[Segment]:
    """``total`` tokens of new content in sections of about ``size``."""
    k = max(1, round(total / size))
    return [new(total // k + (i < total % k)) for i in range(k)]


class World(ClockedState):
    """The courses, their students and the submissions arriving on the clock (before the
    clock's start too: those are handled first, no request sent for them). ``submitted`` and
    ``extended`` are hooks for the jobs."""

    END = END

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, 0, scale)
        self.mix = [w * rng.uniform(0.4, 1.6) for _, w in DEADLINES]
        self.instant = rng.uniform(*INSTANT)
        self.root = math.sqrt(scale)  # courses and their enrollment both scale by it
        n = max(4, round(COURSES * self.root * rng.uniform(0.85, 1.15)))
        self.courses = [self._course() for _ in range(n)]
        self.subs: list[Sub] = []
        for c, course in enumerate(self.courses):
            for s in range(course.size):
                self.plan(c, s)
        self.extension = self._extension()

    def _course(self) -> Course:
        rng, new = self.rng, self.new
        kind = rng.choices(list(TYPES), [v[0] for v in TYPES.values()])[0]
        questions = rng.randint(*TYPES[kind][1])
        notes = [sections(new, clipped_length(rng, *NOTES), NOTE_SECTION)
                 for _ in range(rng.randint(*LECTURES))]
        day, at = rng.choices([d[0] for d in DEADLINES], self.mix)[0]
        mode = "instant" if rng.random() < self.instant else (
            "question" if kind != "essay" and rng.random() < BY_QUESTION else "submission")
        size = max(6, round(clipped_length(rng, *ENROLL) * self.root))
        rubric = [new(clipped_length(rng, *RUBRIC_PART)) for _ in range(questions)]
        return Course(kind, size, new(clipped_length(rng, *SYLLABUS)),
                      Versioned([(-1e18, sections(new, clipped_length(rng, *FAQ), FAQ_SECTION))]),
                      new(clipped_length(rng, *TEMPLATE)), notes,
                      list(range(len(notes)))[-rng.randint(*COVERS):],
                      new(clipped_length(rng, *STATEMENT)), Versioned([(-1e18, rubric)]),
                      (day * 24 + at) * HOUR, mode, rng.random() < LATE_OK,
                      [new(clipped_length(rng, *RECORD)) for _ in range(size)],
                      self._meetings())

    def _meetings(self) -> list[tuple[float, float]]:
        """A course's meetings in the trace: MWF (50 minutes on both days) or TTh (75 minutes
        on one of them), at a start hour 08..16 (on the half hour)."""
        rng = self.rng
        start = rng.randrange(16, 34) / 2 * HOUR
        if pick(rng, PATTERNS) == "mwf":
            return [(d * DAY + start, 50.0) for d in (0, 1)]
        return [(rng.choice((0, 1)) * DAY + start, 75.0)]

    def lead(self) -> float:
        """Seconds before the deadline an on-time submission lands."""
        if self.rng.random() < RUSH[0]:
            return self.rng.expovariate(1 / RUSH[1])
        return clipped_length(self.rng, *EARLY)

    def plan(self, c: int, s: int, after: float = -1e18) -> None:
        """Student ``s``'s first submission to course ``c`` (on time, late or none), after
        ``after`` (an extension re-plans from the announcement)."""
        course, rng = self.courses[c], self.rng
        u = rng.random()
        if u < ON_TIME:
            t = course.deadline - self.lead()
            for _ in range(4):
                if t > after:
                    break
                t = course.deadline - self.lead()
            t = t if t > after else rng.uniform(after, course.deadline)
        elif u < ON_TIME + LATE and course.late_ok:
            t = course.deadline + clipped_length(rng, *LATENESS)
        else:
            return
        if t < END:
            self.at(t, "submit", (c, s, course.gen))

    def _on_submit(self, arg: tuple[int, int, int]) -> None:
        """A student submits: new answers, or (again) the last ones with some changed."""
        c, s, gen = arg
        course, rng = self.courses[c], self.rng
        if gen != course.gen:
            return
        prev = self.subs[course.latest[s]] if s in course.latest else None
        size = TYPES[course.kind][2]
        if prev is None:
            answers = [self.new(clipped_length(rng, *size)) for _ in course.rubric.current]
        else:
            changed = [rng.random() < RESUBMIT[3] for _ in prev.answers]
            changed[rng.randrange(len(changed))] = True
            answers = [self.new(clipped_length(rng, *size)) if x else a
                       for a, x in zip(prev.answers, changed)]
        number = prev.number + 1 if prev else 1
        self.subs.append(Sub(self.now, c, s, answers, number, self.now > course.deadline))
        i = len(self.subs) - 1
        course.subs.append(i)
        course.latest[s] = i
        self.submitted(i)
        if course.mode == "instant" and number <= RESUBMIT[2] and rng.random() < RESUBMIT[0]:
            t = self.now + clipped_length(rng, *RESUBMIT[1])
            if t < course.deadline:
                self.at(t, "submit", (c, s, gen))

    def submitted(self, i: int) -> None:
        """A hook for the jobs (grading on submission, late work)."""

    def _extension(self) -> tuple[int, float] | None:
        """Half the seeds: one of the 3 largest courses due on day 1 gets 24 more hours,
        announced 2..10 h before its deadline; (course, announcement) or None."""
        rng = self.rng
        if rng.random() >= EXTEND[0]:
            return None
        due = [c for c, x in enumerate(self.courses) if DAY <= x.deadline < END]
        due = sorted(due, key=lambda c: -self.courses[c].size)[:EXTEND[1]]
        if not due:
            return None
        c = rng.choice(due)
        t = self.courses[c].deadline - rng.uniform(*EXTEND[2]) * HOUR
        self.at(t, "extend", c)
        return c, t

    def _on_extend(self, c: int) -> None:
        """The deadline moves 24 h; the FAQ's first section (deadlines) is rewritten; every
        student who has not submitted is planned again from now."""
        course = self.courses[c]
        course.deadline += DAY
        course.gen += 1
        faq = list(course.faq.current)
        faq[0] = self.new(faq[0][1])
        course.faq.versions.append((self.now, faq))
        for s in range(course.size):
            if s not in course.latest:
                self.plan(c, s, self.now)
        self.extended(c)

    def extended(self, c: int) -> None:
        """A hook for the jobs (the grading and similarity runs move with the deadline)."""
