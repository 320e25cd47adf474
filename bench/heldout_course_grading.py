"""bench.heldout's ``course_grading`` shape: one inference replica behind a university's
teaching assistant platform over two days around an assignment deadline: the day before and
the deadline day, midnight to midnight, one time zone. Written blind at 9af47aa: by someone
who had not read the policies, and no policy or hit rate was run on it (nor LRU, OPT, a
replay or any reuse statistic); the workload is modelled on how such a platform builds its
prompts, never on any policy.

Where the numbers come from: the structure (an autograder that puts the assignment statement
and the rubric before each submission, graded whole or question by question as grading tools
do; instant feedback that invites resubmission; regrade requests that re-send the graded
work with the grader's feedback; a similarity filter whose flagged pairs an LLM compares; a
course tutor that stuffs or retrieves the lecture notes; a TA-facing help queue in office
hours; a course FAQ bot; feedback emails by a course template; transcript summaries by
map-reduce) follows public descriptions of AI grading and course-assistant products. Every
rate, size and share below is this writer's estimate, not a measurement; the replica is one
of several, its courses a share of the university's.

Prompts are token segments cut into 16-token blocks by ``bench.heldout_fewshot.Blocks`` (one
model, one key space). Replies decode at 35 tokens/s; a job's lane reads at 6000 tokens/s.

World (bench/heldout_course_parts.py): 22 courses (x 0.85..1.15 per seed; at scale s, x the
root of s, and so is each enrollment, at least 6), enrollment 12..500 (median 55). Types:
code 30 % (1..4 questions, answers 100..5000 tokens, median 700), problems 35 % (3..8,
40..1500, median 260), essay 20 % (1, 800..8000, median 2200), lab 15 % (2..5, 80..2500,
median 450). A course: syllabus 900..7000 (median 2500), FAQ 800..8000 (median 2600) in
500-token sections, email template 250..1000, 6..14 lectures' notes (1200..6000, median
2800, 600-token sections), the assignment covering the latest 1..2 lectures, its statement
400..5000 (median 1500) and a rubric part per question (60..800, median 200), a record line
per student (50..250), meetings (55 %: 50 minutes on both days, else 75 minutes on one, at
08..16:30). Deadline (day, hour) by weights 0.2 (day 0 23:59), 0.08 (day 1 09:00), 0.1
(12:00), 0.17 (17:00), 0.45 (day 1 23:59), each x 0.4..1.6 per seed. A seed grades 25..50 %
of courses on submission ("instant"); the others after the deadline, by whole submission or
(half of those not essays) question by question. Students: 88 % submit on time (25 % of them
in the last hour, exponential, mean 25 minutes; the rest lognormal, median 7 h before, up to
150 h), 6 % late if the course takes late work (70 %; median 4 h after, up to 48 h), the rest
never. After instant feedback 30 % submit again 12 minutes..12 h later (median 1.5 h; at most
3 times, before the deadline), each answer rewritten with chance 0.5 (at least one).
Submissions before the clock's start are in the world, no request sent for them. Half the
seeds extend one of the 3 largest courses due on day 1 by 24 h, announced 2..10 h before:
its FAQ's first section is rewritten and those who had not submitted are planned again.

Requests (bench/heldout_course_jobs.py, bench/heldout_course_desk.py):

- grade: instant courses on submission: system (1100), statement, the rubric as it stands,
  the answers, cue (60). Batch courses: one walk (4 lanes) at 0.5..2 h after the deadline
  (half) or in the next staff hours (08..18, an hour on at least, + 0..2 h): every student's
  latest on-time submission in arrival order (question by question: per question in turn,
  system, statement, that question's rubric part, that answer, cue).
- late: the same prompt with a late cue (80): late work of instant courses; in a batch walk
  the late ones so far after the on-time ones, later ones graded as they come.
- rescore: 45 % of walks get a rubric edit at 10..50 % of the walk (after its first 4
  items; the current item's question, or any); later items see the new part; 60 % of them
  re-grade the items done (of that question) at the walk's end. Instant courses: 0.6
  edits (Poisson, staff hours) each, 40 % followed by a walk over every latest submission.
- regrade: 5 % of a walk's students (1.5 % on instant courses) 18 minutes..40 h (median 5 h)
  after the grades' release (0..2 h after the walk): the grading prompt (rubric as it
  stands), the feedback (120..900 whole, 40..400 a question), the request (30..600), cue
  (70); 20 % a second round 15 minutes..20 h later adding the TA's reply and a new request.
- similarity: after a walk (0.2..1.5 h) or 1..4 h after an instant course's deadline, the
  flagged pairs of latest on-time submissions (Poisson(n x 0.03..0.06 by type / 2) clusters
  of 2..4, all their pairs, and Poisson(n x 0.02) false positives), ordered by the first: system
  (700), statement, both submissions' answers, cue (50); 2 lanes.
- email: 70 % of courses, each night at 01..04, 2 lanes, student by student: system (450),
  template, record, content, cue (40): night 0 the last assignment's feedback (92 %,
  120..500); night 1 the feedback as it stands, else a status line (40..140) for those who
  submitted or are yet to before the deadline.
- lecture: 75 % of courses' meetings are recorded; 10..40 minutes after one ends its
  transcript (150 tokens a minute x 0.8..1.2) is summarized in 2000-token chunks (3 lanes:
  system 500, syllabus, chunk, cue 40), then reduced (the chunks' summaries, 150..500 each,
  cue 50); the summary (500..1600) is the tutor's newest material from then.
- tutor: 0.05 sessions a day per student, by student hour (peak 21..22, low 04..06), x (1 +
  3 e^(-lead / 6 h)) before the deadline and x 0.35 after: system (1600), syllabus,
  statement, then (60 % of courses) the covered lectures' notes and the newest summary, or
  (40 %) 3..6 sections retrieved per turn (70 % from the covered lectures); 1..16 turns
  (median 4), messages 5..1500 (median 45), replies 40..1200 (median 260).
- office: 0..2 office-hours sessions a course (30/45/25 %) before its deadline at 10..19 for
  1.5..2 h: 0.12 tickets a student (x 2 within 18 h of the deadline), most in the first
  minutes (triangular, mode at a tenth): system (700), statement, rubric as it stands, the
  pasted work (100..3000, median 500), history, message; 1..5 turns.
- faq: 0.05 sessions a day per student, as tutor: system (450), syllabus, the FAQ as it
  stands (35 % of courses get an announcement rewriting one section), history, question
  (5..150); 1..4 turns.
- essay: the writing center, 90 a day x scale by student hour: system (1200), the guide
  (2500), the upload (1200..25000, median 4500), history, request; 1..4 turns.

Chats end past 32000 tokens; the next turn follows the reply's decoding and a lognormal pause
(median 30..120 s by kind).

At scale 1.0, seeds 1..4: 4.6K..7.1K requests over the two days, 1.42M..1.99M blocks
requested, 0.31M..0.51M distinct (22..25 %), generated in 1.1..1.6 s each on a shared 2-core
box. 19..25 courses, 1.33K..1.79K students, 1.10K..1.65K submissions on the clock, 5..11
courses graded on submission, 6..11 grading walks; seed 3 extends a course of 97 students
(announced at 15:30 on day 1). Blocks by kind: tutor 23..37 %, grade 21..36 %, email
9..12 %, office 7..14 %, essay 8..11 %, faq 5..7 %, lecture 2..4 %, rescore 0.2..5 %,
similarity 1..2 %, late and regrade under 1 % each. At scale 0.2 (the tests): 662..1737
requests, 0.21M..0.44M blocks, 8..11 courses; three of the four seeds extend a course.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_fewshot import Segment
from bench.heldout_course_desk import Desk

Trace = list[list[int]]
Meta = tuple[str, int, object, list[Segment]]  # kind, owner, step, segments (see ``Run``)
KINDS = ("grade", "late", "rescore", "regrade", "similarity", "email", "lecture", "tutor",
         "office", "faq", "essay")


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, owner, step, segments):
    grade, late and rescore have the course and (submission, question; -1 for the whole),
    regrade the course and (submission, question, round), similarity the course and the
    pair, email the course and (student, night), lecture the course and the chunk (-1 for the
    reduce), tutor, office, faq and essay the course (-1 for essay) and (chat, turn).
    ``times``: seconds from midnight of the day before the deadline day. ``state``: the
    generator (courses, submissions, the jobs' walks, chats, sessions, announcements)."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    state: Desk


def course_grading(seed: int, scale: float = 1.0) -> Trace:
    """A university's teaching assistant platform around an assignment deadline: autograding
    walks behind each statement and rubric, rubric edits and rescoring, regrades, similarity
    checks, nightly feedback emails, lecture summaries, tutoring chats, office-hours bursts,
    course FAQ bots and essay feedback. See the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace and its metadata (see ``Run``)."""
    d = Desk(random.Random(seed), scale)
    d.run()
    return Run(d.out, d.meta, d.times, d)
