"""bench.heldout's ``tutoring`` shape: one inference replica behind an online tutoring and
homework-help platform used by the schools of a district spread over four time zones. Written
after ``adaptive`` was frozen (at 395a810), by someone who had not read the eviction policies;
the workload is modelled on how such traffic looks, not on any policy. Prompts are laid out in
token segments and cut into 16-token blocks by ``bench.heldout_fewshot.Blocks`` (one model,
one key space). Time is a clock in seconds from Thursday 06:00 UTC-5; the generator runs from
the Monday 00:00 before (work set then is due in the trace) and keeps the requests from 0 on,
in arrival order; replies decode at 50 tokens/s. 6 schools (the first in UTC-5, the others
in -5 40 %, -6 30 %, -7 10 %, -8 20 %) ring a first bell at 7:20..8:40 local: 7 periods of 50
min, 5 min apart, a 35-min lunch after the fourth. Students follow a school-day profile by
local hour (0.2..0.3 while in school, rising from 15:00 to 1.9 at 21:00, 0.02..0.06 at
02..05) or a weekend one, times 1.0 Mon..Wed, 0.95 Thu, 0.6 Fri, 0.45 Sat, 0.9 Sun; teachers
are busiest 06..08 and 19..22, Sundays 1.6 times a Monday. Rates are a Monday's at scale
1.0, Poisson.

A student's request is the platform's tutor prompt (1200..2600 tokens), the course's prompt
(subject and grade, 300..1200), its unit line for the week (80..300, new for every course at
Monday 00:00 UTC-5, so every later block is new from then, also in conversations begun
before), the material (below), the student's profile line (15..60), the conversation so far
and the new message (3..400, median 25); the tutor's reply (30..700, median 140) joins the
conversation. One night at 02..04 (Friday's or Saturday's) a deploy rewrites the platform
prompt from a uniform 20..90 % of it on (new content 0.8..1.25 times as long). 14 courses
(scaled, at least 2) cycle through math, English, science, history and a language, a grade
each; 26 sections (scaled, at least 2) of 20..35 students take a course (Zipf(0.8) by course),
in a school and a period. Each course has, per week, 3 shared activities and 3 shared
homework prompts (100..1500, median 350, each with a rubric of 200..2500) and, with
chance 0.2 (math) .. 0.9 (English), a reading: a document (1200..30000, median 5000) and
its guide (100..600).

- class periods: at 30 % of meetings the teacher launches an activity 2..15 min into the
  period (40 % a shared one, else the teacher's own; 25 % of them after the week's reading,
  when there is one); 85..100 % of the roster join 15 s..15 min later (median 90 s) and
  send 1..12 turns (median 3), 15 s..400 s apart (median 60 s), until the bell. No activity
  at an exam; the school day before it 70 % of meetings review its study guide.
- homework: 60 % of meetings set some at the bell: problems (45 %), the week's reading (30 %,
  due 2..4 meetings later; material: document + guide) or an essay (25 %, writing subjects;
  the first message pastes the draft, 250..3000 tokens), else problems; 40 % of prompts are
  the course's shared ones. Problems and essays are due at 23:59 (30 %) or at the next
  meeting. 30..70 % of the roster open the tutor, each starting 0.3..96 h before the deadline
  (lognormal, median 8 h) at an hour students' activity accepts (thinning), so most start the
  evening before; 1..15 turns (median 4), 15 s..10 min apart (median 70 s). 35 % come back
  0.5..48 h later (median 4 h; 20 % again), only before the deadline, for 1..8 more turns,
  re-sending the conversation (an essay's return pastes a revised draft half the time).
- auto-grading: 50 % of assignments are graded 5 min..12 h after the deadline (median 45
  min): a job sends the submissions of 80..98 % of the roster in roster order, one at a time
  (the next after the feedback, 40..600 tokens, is written, + 0.1..0.5 s): grader prompt
  (800..1800) + rubric + the task (prompt or reading guide) + the submission (problems
  40..2000, median 300; reading 60..1200; essays 250..3500, median 1000); 30 % of jobs ask
  3..5 criteria (20..80 tokens each) one by one per submission.
- exam review: 25 % of the courses with sections (at least one) have an exam on Friday or
  the next Monday, Tuesday or Wednesday, at each section's meeting; its study guide
  (1500..12000, median 4000, after a review-mode prompt of 200..600) is posted 2..4 days
  before at 15:00. 60 % of each roster review 1..3 times (60/30/10 %), each 0.5..96 h
  before their exam (median 10 h, thinned by students' hours), 2..25 turns (median 6).
- one-off questions: 400 a Monday (at least 20; students' profile): the platform prompt, a
  quick-help prompt (300..800), the profile line, 20 % a photographed worksheet's text
  (150..1500), the question (5..800, median 40); 15 % get 1..2 follow-ups.
- teacher tools: 35 sessions a Monday (at least 3; teachers' profile): the tool's prompt
  (lesson plan 1200..2500 35 %, quiz 700..1600 35 %, rubric 500..1200, parent message
  250..700) + the course prompt and unit line (+ the week's reading for 40 % of quizzes on
  a course that has one) + 1..6 requests (20..1000 tokens, median 120) with long replies.
  Conversations end past 32000 tokens.

9000 requests at scale 1.0 span 107..124 hours (Thursday morning to Monday night or Tuesday)
over seeds 1..10: 2.06M..2.96M blocks requested, 139k..155k distinct (4.9..7.1 %: every
student's request repeats the platform, course and unit prompts, and messages are short).
Class periods are 22..31 % of the requests (25..33 % of the blocks), homework 23..31 %
(16..29 %), readings 0.5..8.4 % (1.5..15 %), exam review 3..18 % (6..35 %), one-off questions
18..22 % (8..15 %), teacher tools 3.6..4.4 % (2.5..4.9 %) and grading 6..16 % (5..11 %).
Sections, courses and rates (each with a floor) scale with the trace, class sizes do not: at
scale 0.25 a trace spans 87..132 h (seeds 1..5); at scale 0.05 (2 sections) 17..114 h, and
of seeds 1..20 11 have no grading, 10 no review, 8 no reading, 2 no class period and 1 no
teacher session.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_tutoring_parts import Conv, Course, Section, clock
from bench.heldout_tutoring_school import Assignment, Job, Lesson, SchoolState
from bench.heldout_vision_parts import Length

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, key, step, segments (see ``Run``)
KINDS = ("class", "homework", "reading", "review", "quick", "teacher", "grade")
REQUESTS = 9000  # at scale 1.0
HORIZON = 10  # local days planned from Thursday (the trace ends sooner)
EXAMS = 0.25  # courses (with sections) that have an exam, at least one
EXAM_DAYS = (1, 4, 5, 6)  # Friday, next Monday, Tuesday, Wednesday (local days)
POSTED = (2, 4)  # days before the exam the study guide is posted, at 15:00 on the clock
STUDY_GUIDE: Length = (4000, 0.5, 1500, 12000)
REVIEWERS, REVIEWS = 0.6, ((1, 0.6), (2, 0.3), (3, 0.1))  # students; sessions each
REVIEW_LAG: Length = (10.0, 0.9, 0.5, 96.0)  # hours before the student's exam
REVIEW_TURNS: Length = (6, 0.6, 2, 25)


@dataclass
class Exam:
    """A course's exam: the local day, when the study guide was posted, what review sends
    after the unit line (review prompt, study guide) and each section's exam start."""

    course: int
    day: int
    posted: float
    material: list[Segment]
    starts: dict[int, float] = field(default_factory=dict)


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, key, step, segments):
    (kind, conversation, turn) for the conversations (``convs``) and ("grade", job, call).
    ``times``: seconds from Thursday 06:00 on the clock (UTC-5). The generator runs from
    Monday 00:00, so the objects include what came before the trace: their ``sent``
    request indices are negative there."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    heads: dict[str, Segment]
    platform: list[list[Segment]]
    deploy: float
    courses: list[Course]
    sections: list[Section]
    convs: list[Conv]
    lessons: list[Lesson]
    assignments: list[Assignment]
    jobs: list[Job]
    exams: dict[int, Exam]


def tutoring(seed: int, scale: float = 1.0) -> Trace:
    """One replica behind an online tutoring platform for schools: class-period bursts on a
    teacher's activity, homework conversations resumed before deadlines, weekly readings and
    study guides many students cite, auto-grading batches, teacher tools, one-off questions.
    See the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace of ``int(REQUESTS * scale)`` requests and its metadata (see ``Run``): the
    requests sent from the clock's 0 on, the request indices of the objects shifted to
    match."""
    s = _State(random.Random(seed), int(REQUESTS * scale), scale)
    s.run()
    pre = s.pre
    for obj in [*s.convs, *s.jobs]:
        obj.sent = [i - pre for i in obj.sent]
    return Run(s.out[pre:], s.meta[pre:], s.times[pre:], s.heads, s.platform, s.deploy,
               s.courses, s.sections, s.convs, s.lessons, s.assignments, s.jobs, s.exams)


class _State(SchoolState):
    """SchoolState with the class meetings planned from Monday and the exams' review."""

    def __init__(self, rng: random.Random, size: int, scale: float) -> None:
        super().__init__(rng, size, scale)
        self.exams = self._exams()
        for day in range(-3, HORIZON):
            if (3 + day) % 7 < 5:
                for s in range(len(self.sections)):
                    self.at(self.period(s, day)[0], "meeting", (s, day))

    def _exams(self) -> dict[int, Exam]:
        """The courses with an exam (EXAMS of those with sections, at least one): its day,
        its study guide, posted at 15:00 on the clock POSTED days before."""
        rng = self.rng
        active = sorted({s.course for s in self.sections})
        out = {}
        for c in sorted(rng.sample(active, max(1, round(EXAMS * len(active))))):
            day = rng.choice(EXAM_DAYS)
            posted = clock(day - rng.randint(*POSTED), 15.0, 0.0)
            guide = self.new(clipped_length(rng, *STUDY_GUIDE))
            out[c] = Exam(c, day, posted, [self.heads["review"], guide])
            self.at(posted, "post", c)
        return out

    def _on_post(self, c: int) -> None:
        """A study guide is posted: REVIEWERS of each section's students review it (1..3
        sessions) in the REVIEW_LAG hours before their exam, by students' hours."""
        rng, exam = self.rng, self.exams[c]
        for s, sec in enumerate(self.sections):
            if sec.course != c:
                continue
            start = exam.starts[s] = self.period(s, exam.day)[0]
            for _ in range(round(sec.roster * REVIEWERS)):
                for _ in range(rng.choices([n for n, _ in REVIEWS], [w for _, w in REVIEWS])[0]):
                    t = self.student_time(self.now, start, REVIEW_LAG, sec.offset)
                    if t is not None:
                        self.at(t, "review", s)

    def _on_review(self, s: int) -> None:
        """A student reviews for the exam: review prompt + study guide + the practice."""
        sec = self.sections[s]
        exam = self.exams[sec.course]
        self.open(Conv("review", sec.course, sec.offset, s, exam.material, exam.starts[s],
                       clipped_length(self.rng, *REVIEW_TURNS)))

