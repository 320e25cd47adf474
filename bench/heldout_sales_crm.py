"""bench.heldout's ``sales_crm`` shape: one inference replica behind the LLM assistant built
into a B2B sales team's CRM, over two days. Written blind at e7f72c4: by someone who had not
read the policies, and no policy or hit rate was run on it (nor LRU, OPT, a replay or any
reuse statistic); the workload is modelled on how such an assistant builds its prompts, not
on any policy.

Where the numbers come from: the structure (a feature's fixed system prompt first, then the
CRM records it retrieves: an account's profile and activity history, an opportunity's record,
the playbook, product sheets and battlecards, the price book; call recordings transcribed and
run through several prompts; reply suggestions over the email thread; forecast reviews that
step through the pipeline deal by deal; enrichment and sequencing jobs over lead lists)
follows how sales-assistant and CRM vendors describe such features in public. Every rate,
size and share below is this writer's estimate, not a measurement; the replica is one of
several, the counts its share of the org.

Prompts are token segments cut into 16-token blocks by ``bench.heldout_fewshot.Blocks`` (one
model, one key space). Each feature has its own system prompt, so the same record read by two
features shares no blocks; within a feature, requests share the blocks of the segments they
start with.

Seeds differ in structure: seed s runs scenario (s - 1) mod 4 of normal (the clock starts
Monday 00:00 UTC), launch (Monday; a product launch on Tuesday), quarter_end (Thursday; the
quarter ends at the clock's end) and event (Wednesday; a trade show's badge scans arrive that
evening). Local weekends have no work.

World (bench/heldout_crm_world.py): 8 teams, each in a zone (UTC -7 35 %, -5 10 %, -4 30 %,
+1 15 %, +2 5 %, +10 5 %), selling to one segment (small business 35 %, mid-market 40 %,
enterprise 25 %), with its pipeline review on Monday (70 %), Wednesday or Thursday (15 %
each) and 6 outreach templates (120..700 tokens, median 300). 8 reps a team x scale x
0.8..1.2 (at least 2), a third SDRs, the rest AEs. An AE owns 30 / 20 / 10 accounts by
segment (x 0.7..1.3), each with an activity weight (lognormal, sigma 1), a profile (150..1000,
median 400) and a history of 2..60 entries (median 12, x 0.7 / 1 / 1.6 by segment; 40..800
tokens each, median 160; at most 12000 tokens at the start) that grows as emails, call
summaries and notes land; 0 (45 %), 1 (35 %), 2 (15 %) or 3 open opportunities, each a stage
1..6, 1..3 products and a record (150..900, median 350) the reps rewrite, closing 1..60 days
ahead (quarter_end: 45 % close before its end). 10 product sheets (700..3500, median 1600, in
400-token sections), a playbook per segment (3500..10000, median 6000, 600-token sections),
8 battlecards (700..3000) and a price book (1200..4000). The launch (day 1 09:00 UTC-7) adds
a product's sheet, rewrites 2..4 sheets and every playbook from a section on (a playbook
gains a section) and 3 battlecards: every block after the kept sections is new. quarter_end:
a promotion's addendum (200..900) joins the price book's end at 15:00 UTC on day 0.

Requests (bench/heldout_crm_jobs.py, bench/heldout_crm_desk.py), rates per rep and local
workday, office hours 08..19:

- brief: 4 per AE when opening an account (by weight): system (900), the profile, the whole
  history as it stands, a cue (40). A later brief re-sends the earlier one's history and adds
  what landed since.
- prep: 2.5 meetings per AE (local 09..16:30 on the half hour; 30, 45 or 60 minutes) with an
  account by weight, 80 % on one of its opportunities; 10..120 minutes (median 40) before:
  system (1100), the playbook's first and the stage's sections, the opportunity's product
  sheets, the profile, the whole history, the record, the agenda (60..500), a cue (45); 30 %
  regenerated 2..15 minutes later with another cue, 15 % prepped again by a second attendee
  (the same prompt).
- call: 70 % of meetings are recorded; 1..4 minutes after one ends, its tasks in a row at
  the job pace (reading 6000 tokens/s, writing 150..1200 at 40/s, x 0.8..1.25): system (800),
  the profile, the record (if on an opportunity), the transcript (180 tokens a minute of
  70..100 % of the meeting, 300..20000), a cue: summary, action items, fields (the last
  only on an opportunity). The summary joins the history, the fields rewrite the record. An
  SDR's 4 connected calls (2..25 minutes, median 6) with leads a campaign wrote to: the
  enriched lead instead of the profile, the summary, half the time the action items. Half
  the unrecorded meetings get the AE's note (30..600 tokens) 0.15..3 hours on, into the
  history.
- email: an AE starts with 2..15 (median 6) open threads of 1..5 messages (40..900, median
  180), half waiting on the AE; a thread gets 1..6 (median 2) more customer emails, each
  10 minutes..30 hours (median 4 h) after the AE's last; the AE asks 2 minutes..4 hours
  (median 30 min, moved into office hours) later for a reply suggestion: system (700), the
  AE's style (80..500), the profile, the thread, a cue (30); 25 % are asked again in another
  tone 0.5..2.5 minutes on (another cue); the reply 5..15 minutes on joins the thread, and
  both directions join the history. 2 new emails per AE: system, style, the profile, the
  last 5 history entries, an instruction (10..150), a cue (50); 35 % of them get answered.
- chat: 1.5 per rep, 45 % of AEs' on an account (its profile and history as it opened):
  system (1500), that, the chat so far, a message (5..600, median 40); 1..10 turns (median
  3), replies 30..1000 (median 200), turns 45 s (median) after the reply's decoding; a chat
  past 24000 tokens ends.
- enablement: 0.8 per rep (launch: 2 more in the 8 hours after it, moved into office hours):
  system (800), the segment's playbook and a battlecard (45 %, by 1 / rank) or product sheet
  (by 1 / rank; after the launch the new one half the time) as they stand at each turn, the
  chat so far, a question (8..400, median 50); 1..6 turns (median 2), replies 60..1200.
- proposal: 0.4 per AE (quarter_end 1.0 on day 0 and 3.0 on day 1) on an opportunity at stage
  3 or later: system (1000), the price book, the product sheets, the profile, the record (as
  they stand), the terms (80..600), a cue (40); revised 0..3 times (40 / 35 / 15 / 10 %)
  5..90 minutes apart (quarter_end 5..40), each with new terms.
- pipeline: each team's review at local 08:00..09:30 of its review day walks its AEs'
  opportunities closing within 45 days, by rep then close, at the job pace: system (900),
  the forecast methodology (1400), the profile, the last 5 history entries, the record, a cue
  (45). Half the AEs rewrite 1..3 of those records in the hour before; each AE's one-on-one
  (local 11..17, that day or 40 % the next) walks its own again. quarter_end: a forecast
  walk every workday morning over the deals closing by its end, a commit walk at 14:00..15:00
  on its last day, each AE rewriting such a record twice a day.
- enrich: 200 inbound leads a day x scale (quarter_end 140) by a US/EU daytime curve, each
  enriched by the next half-hourly batch: system (600), the ideal-customer profile
  (900..2500), the raw record (200..2500, median 700; one-off), a cue (40). A purchased list
  of 200 x scale (150..2000 each) at 01..02 UTC each night, not at a quarter's end. event: the
  show's 900..1500 x scale badge scans (80..900) at 19..20 UTC-7 on day 0, one walk.
- outreach: 1 campaign per SDR a workday (event: 2 on day 1), local 09..17: up to 10..80
  (median 30) enriched leads of the team's segment not yet written to (badges first, then the
  newest): system (700), a product sheet as it stands (by 1 / rank; after the launch the new
  one 60 %), the template, the enriched record, a cue (35).

At scale 1.0, seeds 1..4 (normal, launch, quarter_end, event): 5.3K..8.3K requests over two
days, 1.45M..1.71M blocks requested, 0.37M..0.42M distinct (24..27 %), generated in 2.0..3.4 s
each on a shared 2-core box (another job running). 61..69 reps, 820..1130 accounts, 590..890
opportunities, 290..440 meetings, 270..350 recorded calls, 290..2240 leads. Blocks by kind:
pipeline 6..18 % (the event week's reviews are only Wednesday's and Thursday's),
call 11..15 %, email 11..13 %, enablement 8..17 % (17 % at the launch), chat 9..10 %, prep
8..11 %, enrich 3..16 %, outreach 3..20 % (the show: 20 %), brief 6..8 %, proposal 1..10 %
(10 % at a quarter's end). At scale 0.2 (the tests): 1.0K..1.6K requests, 0.28M..0.37M
blocks, 25..27 % distinct.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_crm_desk import Desk
from bench.heldout_crm_world import SCENARIOS
from bench.heldout_fewshot import Segment

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, owner, step, segments (see ``Run``)
KINDS = ("brief", "prep", "call", "email", "chat", "enablement", "proposal", "pipeline",
         "enrich", "outreach")


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, owner, step, segments):
    brief has the account and the history entries it holds, prep the meeting and the attempt
    (0 first, 1 regenerated, 2 a second attendee), call the call (``state.calls``) and the
    task, email the thread and the cue (0 reply, 1..3 a rewrite, 4 a new email), chat and
    enablement the chat (``state.chats``) and the turn, proposal the proposal and the draft,
    pipeline the walk (``state.walks``) and the opportunity, enrich the batch and the lead,
    outreach the campaign and the lead. ``times``: seconds from the clock's start, 00:00 UTC.
    ``state``: the generator (its scenario, teams, reps, accounts, opportunities, documents,
    leads, and the meetings, calls, threads, chats, proposals and walks)."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    state: Desk


def scenario_of(seed: int) -> str:
    """Seed 1, 2, 3, 4 (and so on, in turn): normal, launch, quarter_end, event."""
    return list(SCENARIOS)[(seed - 1) % len(SCENARIOS)]


def sales_crm(seed: int, scale: float = 1.0) -> Trace:
    """A B2B sales team's CRM assistant: account briefs over growing histories, meeting prep
    re-reading the account's documents, recorded calls summarized, email reply suggestions in
    growing threads, quick chats, playbook and battlecard questions, proposals against the
    price book, pipeline reviews walking the deals, lead enrichment batches and SDR outreach
    campaigns; a normal week, a launch, a quarter's end or a trade show by seed. See the
    module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace and its metadata (see ``Run``)."""
    d = Desk(random.Random(seed), scale, scenario_of(seed))
    d.run()
    return Run(d.out, d.meta, d.times, d)
