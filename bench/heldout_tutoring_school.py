"""The timetable, homework and auto-grading of bench.heldout's ``tutoring`` shape: class
periods whose students join a teacher's activity, homework that students work on before its
deadline and come back to, and the grading jobs after the deadlines;
bench/heldout_tutoring.py's docstring states what each part models and its parameters, and
adds exam review on top of ``SchoolState`` here."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_tutoring_parts import (ACTIVITY, HOUR, LIBRARY, RATE, WRITING, Conv,
                                          TutoringBase, clock, week)
from bench.heldout_vision_parts import Length, lognormal

SECTIONS, COURSES = 26, 14  # scaled, at least 2 each
# class periods
IN_CLASS = 0.3  # meetings where the teacher launches an activity
LAUNCH = (2.0, 15.0)  # minutes into the period
PRESENT = (0.85, 1.0)  # share of the roster in class
JOIN: Length = (90.0, 0.8, 15.0, 900.0)  # seconds from the launch to a student's first message
CLASS_TURNS: Length = (3, 0.6, 1, 12)
CLOSE_READING = 0.25  # class activities on the week's reading (when the course has one)
SHARED = 0.4  # activities and homework prompts taken from the course's shared library
REVIEW_CLASS = 0.7  # meetings the school day before an exam that review the study guide
# homework
HOMEWORK = 0.6  # meetings that set homework
HW_KINDS = (("problems", 0.45), ("reading", 0.3), ("essay", 0.25))
TONIGHT = 0.3  # problems and essays due at 23:59 that night, else at the next meeting
READING_DUE = (2, 4)  # readings are due this many meetings later
USE = (0.3, 0.7)  # share of the roster that opens the tutor on an assignment
LAG: Length = (8.0, 1.0, 0.3, 96.0)  # hours before the deadline a student starts
HW_TURNS: Length = (4, 0.6, 1, 15)
DRAFT: Length = (900, 0.6, 250, 3000)  # an essay draft pasted in
RESUME, AGAIN = 0.35, 0.2  # sittings followed by a return (the first; a later one)
BACK: Length = (4.0, 1.0, 0.5, 48.0)  # hours until the student comes back
BACK_TURNS: Length = (2, 0.6, 1, 8)
REDRAFT = 0.5  # returns to an essay that paste a revised draft
# auto-grading
GRADED = 0.5  # assignments graded by the batch job
GRADE_AFTER: Length = (0.75, 1.0, 0.08, 12.0)  # hours after the deadline
SUBMIT = (0.8, 0.98)  # share of the roster that submits
SUBMISSION: dict[str, Length] = {"problems": (300, 0.8, 40, 2000),
                                 "reading": (250, 0.6, 60, 1200), "essay": (1000, 0.5, 250, 3500)}
CRITERIA, CRITERION = (0.3, (3, 5)), (20, 80)  # jobs grading criterion by criterion
RUBRIC: Length = (700, 0.6, 200, 2500)
FEEDBACK: Length = (150, 0.6, 40, 600)
GRADE_GAP = (0.1, 0.5)  # seconds between a reply and the next request


@dataclass
class Lesson:
    """A class activity: its section, local day, launch time, period end, what follows the
    course's unit line (the activity, the reading and the activity, or the review prompt and
    study guide) and its students' conversations."""

    section: int
    day: int
    launch: float
    end: float
    material: list[Segment]
    convs: list[int] = field(default_factory=list)


@dataclass
class Assignment:
    """Homework: its section, kind, what tutoring sends after the unit line, the task's text
    (the prompt or the reading guide), its rubric, whether it comes from the course's shared
    library, when it was set and is due, its students' conversations and its grading job's
    index (-1 if not graded)."""

    section: int
    kind: str
    material: list[Segment]
    task: Segment
    rubric: Segment
    shared: bool
    assigned: float
    deadline: float
    convs: list[int] = field(default_factory=list)
    job: int = -1


@dataclass
class Job:
    """An auto-grading run: its assignment, the submissions (roster order) with their roster
    places, the criteria it asks one by one (none: the whole rubric at once) and the request
    index of each call."""

    assignment: int
    submissions: list[tuple[int, Segment]]
    criteria: list[Segment]
    sent: list[int] = field(default_factory=list)


def school_day(day: int, step: int) -> int:
    """The local day ``step`` school days after ``day`` (before it when negative)."""
    sign = 1 if step > 0 else -1
    for _ in range(abs(step)):
        day += sign
        while (3 + day) % 7 >= 5:
            day += sign
    return day


class SchoolState(TutoringBase):
    """TutoringBase with the class meetings (``exams``, filled by the caller, names each
    course's exam: no activity at it, a review the school day before), homework and
    grading."""

    def __init__(self, rng: random.Random, size: int, scale: float) -> None:
        super().__init__(rng, size, scale, max(2, round(SECTIONS * scale)),
                         max(2, round(COURSES * scale)))
        self.lessons: list[Lesson] = []
        self.assignments: list[Assignment] = []
        self.jobs: list[Job] = []
        self.exams: dict = {}

    def _on_meeting(self, payload: tuple[int, int]) -> None:
        """A class meets: no activity at its exam; the day before, a review of the study
        guide (REVIEW_CLASS), else an activity (IN_CLASS); homework set at the end."""
        s, day = payload
        sec, rng = self.sections[s], self.rng
        exam = self.exams.get(sec.course)
        if exam and exam.day == day:
            return
        if exam and day == school_day(exam.day, -1):
            if rng.random() < REVIEW_CLASS:
                self._lesson(s, day, exam.material)
        elif rng.random() < IN_CLASS:
            self._lesson(s, day, self._activity(sec.course))
        if rng.random() < HOMEWORK:
            self.at(self.period(s, day)[1], "assign", (s, day))

    def _activity(self, c: int) -> list[Segment]:
        """A class activity: from the course's library (SHARED) or the teacher's own, after
        the week's reading for a close reading (CLOSE_READING, if there is one)."""
        rng = self.rng
        if rng.random() < SHARED:
            act = rng.choice(self.library(c))
        else:
            act = self.new(clipped_length(rng, *ACTIVITY))
        reading = self.reading(c, week(self.now))
        return [reading[0], act] if reading and rng.random() < CLOSE_READING else [act]

    def _lesson(self, s: int, day: int, material: list[Segment]) -> None:
        """The teacher launches an activity; the students present join within minutes."""
        rng, sec = self.rng, self.sections[s]
        launch = self.now + rng.uniform(*LAUNCH) * 60
        self.lessons.append(Lesson(s, day, launch, self.period(s, day)[1], material))
        for _ in range(round(sec.roster * rng.uniform(*PRESENT))):
            self.at(launch + lognormal(rng, *JOIN), "join", len(self.lessons) - 1)

    def _on_join(self, k: int) -> None:
        """A student in class starts a conversation on the activity (until the bell)."""
        lesson = self.lessons[k]
        sec = self.sections[lesson.section]
        lesson.convs.append(len(self.convs))
        self.open(Conv("class", sec.course, sec.offset, lesson.section, lesson.material,
                       lesson.end, clipped_length(self.rng, *CLASS_TURNS)))

    def _on_assign(self, payload: tuple[int, int]) -> None:
        """Homework is set: the students who will use the tutor start before the deadline
        (LAG, by students' hours); the grading job runs after it (GRADED)."""
        s, day = payload
        rng, sec = self.rng, self.sections[s]
        a = self._assignment(s, day)
        self.assignments.append(a)
        i = len(self.assignments) - 1
        for _ in range(round(sec.roster * rng.uniform(*USE))):
            t = self.student_time(self.now + 600, a.deadline, LAG, sec.offset)
            if t is not None:
                self.at(t, "homework", i)
        if rng.random() < GRADED:
            self.at(a.deadline + lognormal(rng, *GRADE_AFTER) * HOUR, "job", i)

    def _assignment(self, s: int, day: int) -> Assignment:
        """An assignment: problems, the week's reading (due READING_DUE meetings later) or an
        essay (writing subjects); its prompt and rubric from the course's library (SHARED)
        or the teacher's own; due tonight (TONIGHT) or at the next meeting."""
        rng, sec = self.rng, self.sections[s]
        kind = rng.choices([k for k, _ in HW_KINDS], [w for _, w in HW_KINDS])[0]
        reading = self.reading(sec.course, week(self.now))
        if kind == "reading" and reading:
            deadline = self.period(s, school_day(day, rng.randint(*READING_DUE)))[0]
            return Assignment(s, kind, list(reading), reading[1], self._rubric(), True,
                              self.now, deadline)
        if kind != "essay" or self.courses[sec.course].subject not in WRITING:
            kind = "problems"
        shared = rng.random() < SHARED
        task, rubric = (rng.choice(self._homework(sec.course)) if shared else
                        (self.new(clipped_length(rng, *ACTIVITY)), self._rubric()))
        if rng.random() < TONIGHT:
            deadline = clock(day, 23 + 59 / 60, sec.offset)
        else:
            deadline = self.period(s, school_day(day, 1))[0]
        return Assignment(s, kind, [task], task, rubric, shared, self.now, deadline)

    def _rubric(self) -> Segment:
        """A new rubric."""
        return self.new(clipped_length(self.rng, *RUBRIC))

    def _homework(self, c: int) -> list[tuple[Segment, Segment]]:
        """Course ``c``'s shared homework prompts this week, each with its rubric."""
        lib = self.courses[c].homework
        w = week(self.now)
        if w not in lib:
            lib[w] = [(self.new(clipped_length(self.rng, *ACTIVITY)), self._rubric())
                      for _ in range(LIBRARY)]
        return lib[w]

    def _on_homework(self, i: int) -> None:
        """A student opens the tutor on an assignment (an essay's first message pastes the
        draft)."""
        rng, a = self.rng, self.assignments[i]
        sec, essay = self.sections[a.section], a.kind == "essay"
        paste = self.new(clipped_length(rng, *DRAFT)) if essay else None
        a.convs.append(len(self.convs))
        self.open(Conv("reading" if a.kind == "reading" else "homework", sec.course,
                       sec.offset, a.section, a.material, a.deadline,
                       clipped_length(rng, *HW_TURNS), paste=paste, essay=essay))

    def ended(self, i: int) -> None:
        """A homework, reading or review sitting is over: the student comes back (RESUME
        after the first, AGAIN after a later one) BACK hours later, by students' hours,
        if that is before the deadline or exam; back at an essay, REDRAFT paste a new draft."""
        rng, conv = self.rng, self.convs[i]
        if conv.kind not in ("homework", "reading", "review"):
            return
        if rng.random() >= (RESUME if len(conv.sittings) == 1 else AGAIN):
            return
        t = self.student_time(self.now, conv.until, BACK, conv.offset, forward=True)
        if t is None:
            return
        if conv.essay and rng.random() < REDRAFT:
            conv.paste = self.new(clipped_length(rng, *DRAFT))
        self.at(t, "back", i)

    def _on_back(self, i: int) -> None:
        """The student is back: the conversation goes on, re-sent whole."""
        self.sitting(i, clipped_length(self.rng, *BACK_TURNS))

    def _on_job(self, i: int) -> None:
        """The grading job of assignment ``i`` starts: the submissions in roster order, each
        graded whole or (CRITERIA) criterion by criterion."""
        rng, a = self.rng, self.assignments[i]
        roster = self.sections[a.section].roster
        places = sorted(rng.sample(range(roster), round(roster * rng.uniform(*SUBMIT))))
        subs = [(p, self.new(clipped_length(rng, *SUBMISSION[a.kind]))) for p in places]
        criteria = []
        if rng.random() < CRITERIA[0]:
            criteria = [self.new(rng.randint(*CRITERION)) for _ in range(rng.randint(*CRITERIA[1]))]
        a.job = len(self.jobs)
        self.jobs.append(Job(i, subs, criteria))
        self._on_grade((a.job, 0))

    def _on_grade(self, payload: tuple[int, int]) -> None:
        """A grading call: grader prompt + rubric + the task + a submission (+ a criterion);
        the next starts when its feedback is written."""
        j, n = payload
        job = self.jobs[j]
        a, per = self.assignments[job.assignment], max(1, len(job.criteria))
        segs = [self.heads["grader"], a.rubric, a.task, job.submissions[n // per][1]]
        segs += [job.criteria[n % per]] if job.criteria else []
        job.sent.append(len(self.out))
        self.send("grade", j, n, segs)
        if n + 1 < per * len(job.submissions):
            done = self.now + clipped_length(self.rng, *FEEDBACK) / RATE
            self.at(done + self.rng.uniform(*GRADE_GAP), "grade", (j, n + 1))

