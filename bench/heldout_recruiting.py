"""bench.heldout's ``recruiting`` shape: one inference replica behind a staffing platform's
recruiting assistant, serving 36 employers in six time zones. Written blind at 12a029e: by
someone who had not read the policies, and no policy or hit rate was run on it (nor LRU, OPT,
a replay or any reuse statistic); the workload is modelled on how such a product builds its
prompts, not on any policy.

Where the numbers come from: the structure (a screening job that scores each applicant
against the requisition's job description and rubric, recruiters chatting over a shortlist,
summaries of interviewers' feedback, templated outreach, a scheduling assistant, an
applicant FAQ bot, offer letters, a nightly job-alert matcher, a virtual job fair) follows
public descriptions of applicant-tracking and recruiting-assistant products. Every rate, size
and share below is this writer's estimate, not a measurement.

Prompts are token segments cut into 16-token blocks by ``bench.heldout_fewshot.Blocks`` (one
model, one key space). The clock starts Tuesday 00:00 UTC and ends two days later. Employers
(bench/heldout_recruit_parts.py): UTC -8 (22 %), -6 (13 %), -5 (30 %), 0 (10 %), +1 (15 %),
+5.5 (10 %); weight Zipf(1) by a random rank; a company profile (400..2500 tokens, median
900), an applicant FAQ (800..7000, median 2000, in 500-token sections), an offer template
(600..2000) and 3 outreach templates (150..500). 260 x scale (x 0.85..1.15) requisitions by
weight, 10 % opening at local 09..17 on day 0 or 1: a job description (500..3000, median
1200), a rubric (200..1500, median 500), a summary (120..400), one of 12 job families. A
database of 9000 x scale candidates (resume 300..2500, median 900; parsed profile 120..700,
median 280; 8 % with job alerts on). Applications: 0.5..30 a day per requisition (lognormal,
median 2.5), by local hour with an evening peak (19..21 h); 70 % from new candidates (15 %
turn alerts on), else a database candidate of the family (40 % upload a new resume).

Requests (bench/heldout_recruit_jobs.py, bench/heldout_recruit_desk.py):

- screen: each employer's batch at local 05..07 takes every application its open
  requisitions got since the last batch (the first: since a day before the clock's start),
  requisition by requisition, in arrival order; one stream, each request after the last
  one's reading (6000 tokens/s) and writing (120..500 tokens at 35/s) x 0.8..1.25. Prompt:
  system (700), job description, rubric as it stands, resume, cue (40): the head is shared
  by a requisition's applicants, every block from the resume on is new.
- rescreen: 10 rubric edits a day (x scale, local 10..17), on a requisition by its screened
  applications: all of them screened again in order (the same head up to the rubric).
- fair: on day 1 one of the 6 largest employers opens 4..8 requisitions at 09:00 local and
  gets 250..450 (x scale) applications over local 10..16 (peak 12:30), each screened the
  moment it arrives; 30 % of those applicants then ask the employer's FAQ bot.
- match: at 02..03 UTC each night one stream walks every candidate with alerts on, in id
  order: system (900), profile, the summaries of the 5 open requisitions of its family
  nearest its seniority, cue (45). A candidate whose profile and picks did not change sends
  the second night exactly what it sent the first.
- outreach: 14 campaigns a day (x scale, local 09..17): 10..60 (median 25) database
  candidates of a requisition's family, one email each: system (500), company profile,
  template, requisition summary, profile, cue (30).
- feedback: 60 interview loops a day (x scale, starting local 09..16) for an employer's
  best-scored screened applicant not yet interviewed: 2..5 back-to-back 45..60-minute
  interviews; each interviewer's notes (150..800 tokens) land 0.3..6 h (median 1.5 h) after
  and the summary is re-run: system (600), job description, profile, the notes so far in the
  order they landed, cue (50).
- debrief: 60 % of a requisition's loop days, at local 16:30..18:00: system (900), job
  description, rubric, each loop's profile and latest summary, the history, a message.
- shortlist: 60 sessions a day (x scale, local 09..17) on a requisition with 3 or more
  screened applications: system (1400), job description, rubric, the 4..12 best-scored
  applicants' profiles sorted by score, recency or candidate, the history, a message; 25 %
  of later turns re-sort the list (the profiles re-sent in the new order).
- schedule: 150 chats a day (x scale, local 08..19): system (700), the employer's
  interviewer availability (300..1200 tokens, new every hour), the candidate and role
  (60..200), the history, a message (5..80).
- faq: 180 sessions a day (x scale, the applications' hours): system (500), company
  profile, FAQ, the history, a question (8..150).
- offer: 20 a day (x scale, local 09..17) for the best-scored screened application without
  one (interviewed ones first): system (500), offer template, job description, profile,
  terms (100..300), cue (30); 0..2 revisions 20..120 minutes apart change the terms only.

Chats (shortlist 1..12 turns, debrief 2..8, schedule 2..8, faq 1..5) send the head, the
history and a message; the reply (30..900 tokens by kind) joins the history; the next turn
follows the reply's decoding (35 tokens/s) and a lognormal pause (median 30..60 s); a chat
past 24000 tokens ends.

At scale 1.0, seeds 1..4: 7.8K..8.4K requests over two days, 1.53M..1.60M blocks requested,
0.37M..0.41M distinct (24..26 %), generated in 1.7..2.6 s each on a shared 2-core box.
232..290 requisitions, 2.4K..2.9K applications, 790..920 candidates in each night's
matching walk, 270..420 fair applications. Blocks by kind: screen 22..25 %, match 16..17 %,
faq 13..16 %, shortlist 13..14 %, schedule 8..9 %, outreach 5..9 %, fair 4..5 %, feedback
4..5 %, rescreen 2..5 %, debrief 2..3 %, offer about 1 %. At scale 0.2 (the tests):
0.26M..0.29M blocks.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_fewshot import Segment
from bench.heldout_recruit_desk import Desk

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, owner, step, segments (see ``Run``)
KINDS = ("screen", "rescreen", "fair", "match", "outreach", "feedback", "shortlist",
         "debrief", "schedule", "faq", "offer")


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, owner, step, segments):
    screen has the employer and the application, rescreen and fair the requisition and the
    application, match the candidate and the night, outreach the campaign and the candidate,
    feedback the loop and its notes so far, shortlist, debrief, schedule and faq the chat
    (``state.chats``) and the turn, offer the offer and its draft. ``times``: seconds from
    Tuesday 00:00 UTC. ``state``: the generator (employers, requisitions, candidates,
    applications, the jobs' walks, loops, chats, offers)."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    state: Desk


def recruiting(seed: int, scale: float = 1.0) -> Trace:
    """A staffing platform's recruiting assistant: resume screening batches behind each
    requisition's job description and rubric, recruiters' shortlist sessions, interview
    feedback summaries and debriefs, outreach from templates, scheduling chats, per-employer
    FAQ bots, offer letters, the nightly job-matching walk and a job fair's burst of
    applications, in six time zones. See the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace and its metadata (see ``Run``)."""
    d = Desk(random.Random(seed), scale)
    d.run()
    return Run(d.out, d.meta, d.times, d)
