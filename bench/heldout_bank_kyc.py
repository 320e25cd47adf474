"""bench.heldout's ``bank_kyc`` shape: one inference replica behind a bank's compliance
operations assistant over two weekdays, Tuesday and Wednesday. Written blind at 807be5d: by
someone who had not read the policies, and no policy or hit rate was run on it (nor LRU, OPT,
a replay or any reuse statistic); the workload is modelled on how such an assistant builds
its prompts, not on any policy.

Where the numbers come from: the structure (an onboarding agent that reads each applicant's
documents behind the bank's KYC policy and the jurisdiction's rules, nightly periodic reviews
of the accounts that fall due, a transaction-monitoring agent whose tool loop re-sends the
case file as it grows, sanctions screening against a list that is re-issued during the day,
analysts' case chats, SAR narratives drafted from a regulator's template and revised after
review, adverse-media checks, a regulator's guidance note that everyone asks about, audit's
sampling of closed cases, a policy FAQ bot) follows how banks and compliance-software vendors
describe such tools in public. Every rate, size and share below is this writer's estimate,
not a measurement.

Prompts are token segments cut into 16-token blocks by ``bench.heldout_fewshot.Blocks`` (one
model, one key space). The clock starts Tuesday 00:00 bank time and ends Thursday 00:00.

World (bench/heldout_kyc_parts.py): the bank books customers in 4..9 jurisdictions (weight
Zipf(1) by a random rank), each with its rules (800..3500 tokens, median 1500, 600-token
sections) and a SAR template (1000..2500). The KYC policy: a chapter per customer type
(individual 70 %, sole trader 10 %, corporate 20 %; 1500..4000 tokens, median 2200), a
periodic-review chapter (800..3000) and a screening policy (1200..3000), all in 600-token
sections. 20000 x scale customers (risk low 60 %, medium 30 %, high 10 %): a profile
(250..1500, median 600), the last review memo (250..1500), a 90-day activity summary
(300..2500, median 900), the sanctions-list section their name falls in. The consolidated
sanctions list: a 120-token header and 26 sections by name (300..1600, median 700; weight
rank^-0.7), re-issued 2..4 times over the two days at 10:00..17:30 (a new header, 3..8
sections changed). Analysts work 08..18; on 55 % of seeds an offshore centre (40 % of them)
works the same local hours 5.5 h ahead (bank 02:30..12:30).

Requests (bench/heldout_kyc_jobs.py, bench/heldout_kyc_desk.py):

- onboard: 50 applications a day x scale (x 0.85..1.15), personal ones by an all-day curve
  with an evening bump, corporate 08..18; form 250..1500 (median 600). Documents: id
  (300..900) and proof of address (200..700) per holder (15 % of personal ones joint), a sole
  trader's registration, a corporate's incorporation (300..1000), ownership chart
  (400..2000) and articles (800..4000) plus id and address of 1..4 directors and owners.
  1..10 minutes after arrival the agent walks them, each request after the last one's
  reading (6000 tokens/s) and writing (35/s) x 0.8..1.25: system (1200), the type's policy
  chapter and the jurisdiction's rules as they stand, the form, the document, cue (40);
  then each party is screened (its id's finding as the party); then the assessment: the
  head, every document's finding (100..450), every screening result, cue (60). 15 % ask
  for a document again: it is uploaded 1..20 h later (median 5 h), read, and the assessment
  re-run. EDD (8 / 15 / 35 % by type) opens a case: an analyst's chat and a media check.
- screen: system (800), the screening policy, the list's header and the name's section as
  they stand, the party (a profile, an id finding or a payment message of 300..900), cue
  (40). Each re-issue's delta run walks 40..300 x scale (median 100) potential matches in
  the changed sections, section by section in id order; 120 payment hits a day x scale at
  06..20 are adjudicated as they come; and the onboarding parties.
- periodic: at 01:00..01:45 each night a walk over 240 x scale (x 0.8..1.2) due accounts
  (weight high 10, medium 3, low 1) and last night's deferred ones, in id order: system
  (1000), the periodic chapter, the jurisdiction's rules, profile, memo, activity, cue. 15 %
  are deferred (sent again, the same prompt, the next night); a completed review writes a
  new profile and memo, and 25 % of high-risk ones a media check.
- alert: at 04:30..05:30 each day the monitoring run lands 55 x scale (x 0.7..1.3) alerts,
  and 12 a day x scale come all day; 4 agent loops take them in order. A step sends system
  (1500), the scenario's playbook (12 scenarios, Zipf(1); 800..3000), the profile, the
  transactions window (800..5000, median 2000), 0..3 prior alerts (200..600), every tool call
  (30..120) and result (120..2000, median 400) so far, cue (50); 3..12 steps (median 5), each
  after the last's reading, its call's writing and the tool (1..20 s). The last writes the
  findings (250..900); 25 % are escalated (a case: the file is profile, window, prior
  alerts, the trail, the findings), the rest closed. 15 % of day-1 alerts are on an account
  alerted on day 0, whose findings join the prior alerts.
- chat: 75 % of new cases get an analyst's chat on duty 10..90 minutes later: system (900),
  the case file as it stands (a media summary joins it when done), the history, a message
  (6..400, median 40); 2..12 turns (median 4); replies 60..900.
- sar: 50 % of escalated alerts, 1..6 h later on duty: system (700), the jurisdiction's
  template, the case file as exported, the analyst's notes (200..800), cue; 0..3 revisions
  (40 / 35 / 20 / 5 %) 30..180 minutes apart add the last draft (800..2000) and the
  reviewer's comments (80..400).
- media: one check at a time: 3..25 articles (median 8; 400..3000 tokens, median 1100),
  each read once behind system (700) and the subject's profile, then a summary over the
  notes (40..300 each).
- guidance: a regulator's guidance note (3500..11000 tokens, median 6000, in 800-token
  sections) lands on day 0 or 1 at 09:30..15:00; 80..180 x scale analysts' sessions start
  5 min + Exp(1.2 h) after (moved to the next shift when off duty): system (900), the note
  as it stands, (50 %) one section of a policy chapter, history, message; 1..4 turns. On
  30 % of seeds a section of the note is corrected 1..3 h after it lands; when it lands on
  day 0, 60 % of seeds amend 2..4 policy sections at 08:00..09:30 on day 1 and add a
  section at the FAQ's end.
- gap: 30..60 minutes after the note lands a walk over every policy section as it stands:
  system (800), the note, the section, cue.
- audit: runs at 13..15 on day 0, 10..12 on day 1 and (half the seeds) 15..16 on day 1,
  each sampling 30..120 x scale (median 60) closed cases: those closed before the trace,
  then up to 30 % closed by the trace, walked with system (1000), the kind's checklist
  (1500..3000), the case file, the disposition memo (200..800), cue.
- faq: 130 sessions a day x scale in analysts' hours: system (600), the policy FAQ
  (2500..8000, median 4000, 500-token sections) as it stands, history, message; 1..5 turns.

Chats follow the reply's decoding (35 tokens/s) and a lognormal pause (median 40..60 s);
one past 32000 tokens ends.

At scale 1.0, seeds 1..4: 3.8K..4.8K requests over the two days, 1.40M..1.85M blocks
requested, 0.27M..0.36M distinct (17..21 %), generated in 1.2..2.4 s each on a shared 2-core
box. 96..123 applications (10..17 re-reviewed), 129..140 alerts (35..39 escalated), 16..21
SARs, 62..75 media checks, 115..152 guidance sessions, night walks of 201..302 accounts,
546..923 screenings; seed 1's note lands on day 1, seed 3's is corrected, seeds 2 and 4
land it on day 0 without an amendment. Blocks by kind: alert 19..23 %, onboard 12..18 %,
screen 10..16 %, periodic 9..14 %, guidance 9..13 %, faq 10..13 %, media 5..7 %, audit 4..6
%, chat 4..5 %, sar 1..2 %, gap under 1 %. At scale 0.2 (the tests): 0.86K..0.92K requests,
0.32M..0.38M blocks, 19..24 % distinct; the draws differ by scale (at 0.2 seeds 1 and 2 amend
the policy, seed 6 corrects its note).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_fewshot import Segment
from bench.heldout_kyc_desk import Desk

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, owner, step, segments (see ``Run``)
KINDS = ("onboard", "screen", "periodic", "alert", "chat", "sar", "media", "guidance", "gap",
         "audit", "faq")


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, owner, step, segments):
    onboard has the application and the document (-1 for the assessment), screen the list
    issue in force and its entry in ``state.screens``, periodic the night and the customer,
    alert the alert and the step, chat, guidance and faq the chat (``state.chats``) and the
    turn, sar the report and the draft, media the check and the article (the last is the
    summary), gap the walk and the section, audit the run and the case. ``times``: seconds
    from Tuesday 00:00. ``state``: the generator (policy, jurisdictions, customers, the list,
    applications, night walks, alerts, cases, chats, reports, media checks, the note)."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    state: Desk


def bank_kyc(seed: int, scale: float = 1.0) -> Trace:
    """A bank's compliance assistant: onboarding reviews of each applicant's documents behind
    the KYC policy and the jurisdiction's rules, nightly periodic reviews, a monitoring agent
    re-sending the growing case file, sanctions screening against a list re-issued during
    the day, case chats, SAR drafts and revisions, adverse-media reads, the burst after a
    guidance note, audit sampling and a policy FAQ bot. See the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace and its metadata (see ``Run``)."""
    d = Desk(random.Random(seed), scale)
    d.run()
    return Run(d.out, d.meta, d.times, d)
