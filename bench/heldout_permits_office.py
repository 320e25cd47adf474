"""bench.heldout's ``permits_office`` shape: one inference replica behind a city's
building-and-permits office assistant over two weekdays, Wednesday and Thursday. Written blind
at 9af47aa: by someone who had not read the policies, and no policy or hit rate was run on it
(nor LRU, OPT, a replay or any reuse statistic); the workload is modelled on how such an
office's assistant builds its prompts, not on any policy.

Where the numbers come from: the structure (an applicant assistant grounded in the permit
guides and the building code, a plan-review agent that checks each sheet of a submitted plan
set against a discipline's checklist and the code, correction letters and re-review after a
resubmission, inspectors on phones in the field with the permit record, a zoning lookup over
the parcel record, a nightly digest of the day's applications, public-records searches, a
translation desk) follows how cities and permitting-software vendors describe such tools in
public. Every rate, size and share below is this writer's estimate, not a measurement.

Prompts are token segments cut into 16-token blocks by ``bench.heldout_fewshot.Blocks`` (one
model, one key space). The clock starts Wednesday 00:00 city time and ends Friday 00:00.

World (bench/heldout_permit_parts.py): a building code of 30 chapters (2000..16000 tokens,
median 6000, in 700-token sections), popularity Zipf(1.0) by a random rank, 5 owned by each
of 6 review disciplines (architectural, structural, mechanical, electrical, plumbing, fire);
each discipline's review prompt quotes 2..4 sections of its chapters. 14 zoning districts
(regulations 1200..8000, median 3200, 600-token sections), Zipf(0.8); 8000 x scale parcels
(records 150..1500, median 420). 8 permit types (residential 25 %, accessory 15 %, ADU 8 %,
tenant improvement 12 %, new commercial 5 %, trade 22 %, demolition 5 %, sign 8 %, each
weight x lognormal(0, 0.5) per seed: the city's mix), each with its disciplines, plan-set
size (trade 1..6 sheets, median 2; new commercial 20..160, median 50) and share needing plan
review (30..100 %), a guide (800..5000, median 2000), a fee-schedule section (150..800),
a checklist per discipline (400..2200, median 900), an inspection checklist (300..1800),
submittal requirements (500..2400), summary and letter templates. A permit: its form
(250..1800, median 600), a plan set (sheets 200..2000, median 650, bound in discipline
order: A 40 %, S 15 %, M 12 %, E 13 %, P 10 %, F 10 %), a file log (entries 40..600, median
160) that grows. At the start: 140 x scale permits awaiting resubmission (comments on a third
of their sheets), resubmitting uniformly over the next 10 days; 700 x scale issued permits
under inspection (2..12 log entries). New applications: 60 a day x scale (x 0.8..1.2 a day)
through the portal all day, peaking 08..16; Tuesday's came before the clock.

Requests (bench/heldout_permit_jobs.py, bench/heldout_permit_desk.py):

- intake: each new application as it arrives: system (700), the type's requirements, the
  form, the sheet index (8 tokens a sheet), cue (40). One without plan review is issued.
- review: staff accept a plan set in office hours (07:30..16:30; 10..120 minutes after it
  arrives or the office opens); the agent walks it sheet by sheet, each request after the
  last one's reading (6000 tokens/s) and writing (40..700 tokens, median 220, at 35/s) x
  0.8..1.25: system (1200), the type's checklist for the sheet's discipline, the code
  sections it quotes as they stand, the form, the sheet, cue (45). 30 % of sheets draw a
  comment (60..600 tokens).
- letter: after each walk, the correction letter (system 500, the type's template, the form,
  the comments in sheet order, cue) or the approval (a 600-token template); an entry joins
  the file; 25 % of corrections come back in the trace 2..20 h later (median 4 h). Each
  afternoon at 16:00..16:30 one walk sends notices to 60 x scale issued permits in id order:
  system, one of 3 notice templates (400..900), the form, cue.
- rereview: a resubmission replaces 85 % of the commented sheets and 5..30 % (per set) of
  the rest; accepted and walked like a new set, each commented sheet followed by its last
  comment; 12 % of sheets draw a new one. An unchanged sheet without a comment sends exactly
  what the last round sent while the code it quotes stands.
- nightly: at 01:00..01:30 each night, every application of the day before in id order
  (system 600, the type's summary template, the form, cue), then per type a roll-up of the
  summaries (60..250 tokens each) in order.
- records: 7 requests a day x scale at 08..17, each a walk over 10..300 archived documents
  (median 40; 300..5000 tokens, median 1200) read once: system (800), the request (80..600),
  the document, cue.
- applicant: 170 chats a day x scale, all hours (daytime plateau, an evening bump): system
  (1100), the type's guide, its fee section as it stands, (20 %) a permit's file, the
  history, 1..3 code sections retrieved for the turn (chapters of the type's disciplines by
  popularity, section k by 1/(k + 1)), the message (6..400, median 45); what was retrieved,
  the message and the reply (60..900, median 260) join the history; 1..10 turns (median 2).
- policy: at 09:30..14:00 on day 0 or 1 the fee schedule is re-issued (45 % of seeds: every
  type's fee section new), the code amended (35 %: 1..3 sections of 1..2 of the 8 most
  popular chapters replaced), or both (20 %), with a notice (400..2000, median 900); 150..300
  x scale sessions start 5 min + Exp(1.5 h) after: system (900), the notice as it stands,
  1..2 types' fee sections or the amended sections, history, message; 1..6 turns. On 30 % of
  seeds the notice is corrected 1..3 h later (a fee change re-issues one type's fees again).
- inspect: 20 inspectors x scale a day, first stop 07:30..08:15, 6..12 stops of 25..50
  minutes, 5..20 minutes apart: a re-inspection due that day, else an issued permit; a chat
  2..10 minutes in: system (900), the type's inspection checklist, the file as it stands,
  history, message (8..200, median 35), 1..5 turns; the result joins the file at the stop's
  end; 18 % are re-inspected the next day.
- zoning: 160 lookups a day x scale at 07..20: system (800), the district's regulations, the
  parcel record (35 % a permit's parcel), history, message; 1..5 turns. On half the seeds a
  contested project's staff report (2000..6000) is published on day 1 at 09..11 and 60..150
  x scale lookups on its parcel follow (Exp(3 h)), the report after the parcel record.
- translate: 110 a day x scale at 08..17 in 5 languages (45/20/15/10/10 %): system (450),
  the language's prompt (300..800) and glossary (600..1600), the text (50 % fresh, 60..2500;
  35 % a letter or notice template; 15 % a code section), cue; after the policy change its
  notice in every language within 20..180 minutes.

Chats follow each reply's decoding (35 tokens/s) and a lognormal pause (median 40..90 s by
kind); one past 20000 tokens ends.

At scale 1.0, seeds 1..4: 4.7K..6.2K requests over the two days, 1.30M..1.82M blocks
requested, 0.27M..0.36M distinct (19..23 %), generated in 1.0..1.4 s each on a shared 2-core
box. 110..123 new applications, 69..78 first reviews and 17..35 re-reviews (9..17 sheets a
walk on average), 187..297 policy sessions, 344..376 inspections, 12..17 records walks;
a fee change on seed 1 (its notice corrected), code amendments on seeds 2..4 (seed 4's on
Thursday); a contested project on seeds 2 and 4. Blocks by kind: applicant 20..25 %, review
19..23 %, zoning 9..15 %, inspect 11..14 %, policy 6..13 %, rereview 3..12 %, records
7..9 %, translate 2..3 %, letter about 2 %, intake and nightly about 1 % each. At scale 0.2
(the tests): 1.0K..1.2K requests, 0.29M..0.37M blocks; the draws differ by scale (at 0.2
seed 1 has a fee change and a contested project, seed 2 both changes, and seeds 7 and 12 a
corrected notice).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_fewshot import Segment
from bench.heldout_permit_desk import Desk

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, owner, step, segments (see ``Run``)
KINDS = ("applicant", "policy", "intake", "review", "rereview", "letter", "inspect", "zoning",
         "nightly", "records", "translate")


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, owner, step, segments):
    intake has the permit and 0, review and rereview the permit and the sheet, letter the
    permit and the review's round (-1 for a notice), nightly the night and the permit (or -1
    - type for a roll-up), records the request and the document, applicant, policy, inspect
    and zoning the chat (``state.chats``) and the turn, translate the language and the
    translation's number. ``times``: seconds from Wednesday 00:00. ``state``: the generator
    (code, districts, parcels, permit types, permits, the jobs' walks, chats, the change)."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    state: Desk


def permits_office(seed: int, scale: float = 1.0) -> Trace:
    """A city's building-and-permits assistant: applicants' questions over the permit guides
    and the building code, the plan-review agent's sheet-by-sheet walks and re-walks after
    resubmissions, correction and notice letters, inspectors' field chats over the permit
    file, zoning lookups, the nightly digest, records searches, translation, and the burst
    after a fee schedule or code amendment is re-issued. See the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace and its metadata (see ``Run``)."""
    d = Desk(random.Random(seed), scale)
    d.run()
    return Run(d.out, d.meta, d.times, d)
