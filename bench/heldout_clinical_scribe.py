"""bench.heldout's ``clinical_scribe`` shape: one inference replica behind a hospital network's
clinical documentation assistant, over two weekdays. Written after ``adaptive`` was frozen at
89b5b97, blind: by someone who had not read the policies, and no policy or hit rate was run on
it. The workload is modelled on how such a product builds its prompts (a tool's system prompt,
then its fixed texts, then the patient's context, then the new input), not on any policy.

Where the numbers come from: the structure (an ambient scribe drafting the note from the visit
transcript behind a specialty template and the chart summary, the clinician revising the draft
before signing it into the chart, AI-drafted replies in the patient-message inbox, nursing
hand-off summaries at shift change, discharge summaries, prior-authorization letters, coding
assistance, chart Q&A) follows public descriptions of ambient scribes and EHR-embedded
assistants. Every size, rate, share and time below is this writer's estimate, not a
measurement. Prompts are token segments cut into 16-token blocks by
``bench.heldout_fewshot.Blocks`` (one model, one key space); the clock is the network's
(Eastern) from midnight, the trace ends 48 hours later; both days are weekdays (day 0 Monday
to Thursday by seed).

The network (bench/heldout_clinic_parts.py): 3..5 sites, site 0 Eastern, the others 0..3 hours
behind it; site 0 and half the others have a hospital. A site has primary care and 1..3 of 8
other specialty clinics; 12..15 scribe-using clinicians x scale are routed to this replica,
spread over the clinics (primary care weighs twice, some clinics get none). Per specialty:
template 1000..2400 tokens, transcript medians 2500 (dermatology) .. 9000 (psychiatry), clipped
to 800..18000, 9..24 visits a clinician-day, signed notes 400..950 (150..2500). A chart summary
is problems (80..2000, median 500), medications (60..1500, 350), allergies (16..200, 40),
results (80..2500, 500), then the latest 8 note summaries (100..600, 250; 0..8 before the trace,
20 % full). System prompts: scribe 1100, chart 900, inbox 700, letters 500, hand-off 900,
discharge 700, coding 600, lookup 600 tokens; each tool's cue 30..50.

Requests (kind: prompt; sizes; rates and times):

- scribe: system, template, the chart as it stands, the transcript, cue. Clinicians see their
  day's patients in 08..12 and 13..17 local (x 0.75..1.1, 10 % no-shows, -2..10 min late,
  70..105 % of the slot); the draft comes 10..90 s after the visit. Emergency departments at
  hospitals draft around the clock: up to 1.2 x scale arrivals an hour (a third of that at
  02..05 local), the draft 30..180 min after arrival.
- revise: 55 % of drafts are revised 1..3 times (35/15/5 %), 1..6 min after the draft decodes
  (40 tokens/s): the last request, its draft and a new instruction (8..120), so it extends it.
  The note is signed 5..60 min later (60 %, and every emergency note) or at 18..22 local: its
  summary joins the chart (the oldest past 8 drops) and the problem list, medications and
  results are rewritten 15, 35, 30 % of the time: every chart block from the first changed
  section on is new.
- chart: 35 % of visits get a chart Q&A 2..20 min before: system, the chart, recent results
  (40 %, 200..3000); 1..8 turns (median 2), questions 8..200, answers 40..700, a lognormal 40 s
  think after each answer; each turn extends the last.
- lookup: 20 % of visits look up one of 300 formulary monographs and guidelines (Zipf 1.1,
  1200..12000 tokens) during the visit: 1..3 questions.
- inbox, regen: 10 patient messages a clinician-day, most in 07..22 local, plus those waiting at
  the start (1.2 days' worth on a Monday, 0.3 else) and follow-ups from 12 % of seen patients
  2..30 h after the signature; 40 % carry an earlier thread (2..6 messages, 30..500). Batches at
  07:30, 12:15, 16:45 local (+0..20 min) draft replies in arrival order, 40..180 s apart: system,
  the chart as it stands, thread, message (10..800), cue; 20 % are regenerated next (40..180 s
  later) with the draft and an instruction (regen: extends it).
- prior_auth: 3..30 % of signed notes by specialty (none in the emergency department) queue a
  letter; each site's desk drafts them at 10:00 and 14:00 local (+0..30 min), 2..6 min apart:
  system, one of 6 payer templates (900..2500), the chart as it stands, the signed note, the
  order (60..400), cue.
- handoff: 1..3 inpatient units a hospital, 70..90 beds x scale in all, 90 % taken at the start.
  A stay's record: the chart at admission, the H&P (1200..5000), then its latest 6 notes: each
  nurse's shift note (120..800) 60..35 min before 07:00 and 19:00 local, a progress note
  (400..1800) at 09..12. 20..30 min before each change the unit's job walks its beds in order
  (the prompt at 6000 tokens/s, 150..700 tokens out): system, the unit's protocol (600..1500),
  the record as it stands, cue. A stay's next hand-off extends its last one until the window
  drops a note, then everything after the H&P is new.
- reopen: 25 % of hand-offs are sent again, exactly, 0..45 min into the shift.
- discharge: 18 % of occupied beds a day at 10..15 local: system, template (1600), the record,
  cue; 0..2 revisions (50/35/15 %) extend it; the summary joins the chart and a new patient
  takes the bed 1..8 h later.
- oncall: 19..07 local, about 0.02 chart sessions an hour per occupied bed, on one of the unit's
  patients: the chart system prompt, the stay's record as it stands; 1..5 turns.
- coding: at 23:00..23:30 (network clock) each night one stream walks every note signed since
  its last run (visits and discharges), in signing order: system, the specialty's (or the
  inpatient) coding guideline (2000..7000 in 800-token sections), the note, cue; 40..300
  tokens out.

At scale 1.0, seeds 1..4: 2.5K..2.9K requests, 1.18M..1.32M blocks requested, 0.45M..0.54M
distinct (38..41 %), generated in 1.4..2.2 s of CPU each (2.1..3.4 s wall beside other agents'
work on the shared 2-core box). 450..540 drafted visits (76..164 in emergency departments),
290..490 messages, 13..36 letters, 21..29 discharges, 465..550 coded notes; requests median
6.1K..7.5K tokens, the longest 21.6K..23.8K. Blocks by kind: scribe 23..27 %, revise 18..25 %,
coding 10..17 %, handoff 12..17 %, chart 6..9 %, inbox 5..8 %, oncall 2.6..4.2 %, reopen 2..4 %,
discharge 1.7..2.5 %, lookup about 2 %, regen 1..2 %, prior_auth 0.4..1.2 %. At scale 0.2 (the
tests): 0.24M..0.30M blocks. Seeds differ in sites, zones, clinics, clinicians, hospitals,
units and the weekday.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_clinic_wards import Wards
from bench.heldout_fewshot import Segment

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, owner, step, segments (see ``Run``)
KINDS = ("scribe", "revise", "chart", "lookup", "inbox", "regen", "prior_auth", "handoff",
         "reopen", "discharge", "oncall", "coding")


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, owner, step,
    segments). ``times``: seconds from midnight on the network's clock. ``state``: the
    generator, with its sites, patients, encounters, sessions, messages, stays and jobs."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    state: Wards


def clinical_scribe(seed: int, scale: float = 1.0) -> Trace:
    """A hospital network's documentation assistant replica. See the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace and its metadata (see ``Run``)."""
    w = Wards(random.Random(seed), scale)
    w.run()
    return Run(w.out, w.meta, w.times, w)
