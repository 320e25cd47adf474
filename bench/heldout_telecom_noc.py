"""bench.heldout's ``telecom_noc`` shape: one inference replica behind a mobile operator's
network-operations-center (NOC) assistant over two days, midnight to midnight twice. Written
blind at 807be5d: by someone who had not read the policies, and no policy or hit rate was run
on it (nor LRU, OPT, a replay or a cache simulation); the workload is modelled on how such an
assistant builds its prompts, not on any policy.

Where the numbers come from: the structure (an alarm-triage agent that reads each alarm
behind the vendor's alarm dictionary and the site's topology record, alarm storms when a fiber
cut or a power outage takes down many sites at once, correlation cases re-summarized as they
grow, engineers' chats over runbooks and the incident timeline, change-management reviews of
each method of procedure against the change policy, a nightly KPI report per region, customer
care quoting the outage status page, configuration diffs explained over the vendor's
reference, a shift handover twice a day, log dumps pasted once) follows common NOC practice
(fault management, incident and change management, performance reports) as this writer knows
it; no source was searched. Every rate, size and share below is this writer's estimate, not
a measurement.

Prompts are token segments cut into 16-token blocks by ``bench.heldout_fewshot.Blocks`` (one
model, one key space). The clock starts at 00:00 operator time (one time zone) and ends two
midnights later.

World (bench/heldout_noc_parts.py): 1000 x scale cell sites (at least 80) in 6..10 regions (by
seed; sizes Zipf(0.7) by a random rank, at least 10 sites each), each region's sites cut in id
order into fiber aggregation rings of 8..60 sites (median 24), the first the hub. A site: a
topology record (200..1500 tokens, median 450) and an alarm propensity (lognormal, sigma 1.2: a
few noisy sites raise many alarms). Six platforms: 3 radio vendors (a region's by weights 1,
0.7, 0.4), 2 router vendors (one a region), the core. Each has a configuration reference
(2000..12000 tokens, median 4500, in 600-token sections); 1..2 platforms (by seed) get a
software release at 15..85 % of the clock that rewrites about 30..60 % of its sections
(reworded, inserted or struck). Each vendor has an alarm dictionary (90 codes for radio, 60 for
routers; entries 150..1500 tokens, median 450; steady-state frequency Zipf(1.1) by a random
rank), with 4 link codes and 3 power codes (mains failure, battery low, site down) that storms
raise. 40 runbooks (1200..9000 tokens, median 3500, in 500-token sections; Zipf(0.9)), 0 for
fiber cuts, 1 for power outages. A change policy (4000..12000, median 7000, in 500-token
sections), revised (1..3 sections) on day 1 at 10..16 in half the seeds. A KPI template per
region (400..2000, median 800). The status page as issued before the clock (150..800). Changes:
45 a day x scale submitted at 08..18 (as many the day before, approved already), on a radio
site (60 %), a ring's hub router (25 %) or the core (15 %), each with a method of procedure
(MOP, 1200..15000 tokens, median 4000, in 500-token sections) and a change-log line (30..120).
One submitted before 16:00 runs in that night's maintenance window (00:30..05:00 of the next
day), a later one the night after; 60 % of those at a site replace its topology record.

Requests (bench/heldout_noc_alarms.py, bench/heldout_noc_desk.py):

- triage: every alarm, 2..20 s after it is raised: system (1300), its code's dictionary
  entry, the site's record as it stands, the alarm (50..600, median 160), cue (40). Steady
  alarms: 1000 a day x scale by hour (the maintenance window a little busier), at a site by
  propensity, 15 % from the region's router at the ring's hub; 12 % of them flap: re-raised
  1..5 times 3..40 minutes apart (median 10), a case of their own (6 % of such cases get a
  minor incident). Storms (not scaled): 1..4 fiber cuts over the two days (70 % at 08..17),
  each isolating a ring (by size): every site raises 2..4 link alarms within 3 minutes and
  the hub's router 1..3; each site clears one within 10 minutes after the splice (1.5..10 h,
  median 4 h). 0 (40 %), 1 (45 %) or 2 (15 %) power outages at 13..23, each over a run of
  30..60 % of a region's sites (at least 10): mains failure at each within 5 minutes, the
  grid back after 0.7..10 h (median 3 h); where the batteries (1..8 h, median 3 h) run out
  first, battery low, then site down 20 minutes later; clears within 15 minutes of the grid.
- correlate: a case (a flapping alarm or a storm) re-summarized 1..3 minutes after an alarm
  joins it (one pending at a time): system (900), header (100..400), a line (30..120) per
  alarm triaged so far, cue (40).
- status: a storm or a minor case is an incident declared 3..8 minutes in, with a timeline
  entry (40..400, median 120) every 10..40 minutes until it closes 15..45 minutes after
  service returns; one of 10 or more sites is major. The first major one starts the status
  page's issues 5..15 minutes after its declaration, then every 30..60 minutes while any is
  open, and one more once none is; also one at 08:00..08:30 each day. System (600), the
  guide (800), each open major incident's timeline as it stands, the page as last issued,
  cue (35); the new page (200 tokens + 250 an open major incident) replaces it.
- care: 220 escalations a day x scale (09..18 busiest), and a surge with each major
  incident, 0.3 per site-hour of its span (at most 400; peaking a fifth in, thinned by the
  care centre's hours): system (700), the status page as last issued, the customer's
  account (100..400), the history, a message (the complaint 30..400, median 150, then
  5..200); 1..5 turns (median 2).
- engineer: 45 runbook chats a day x scale (by hour, day-heavy), and for each incident 0.8
  an hour of a major one's span (at least 1) or one for a minor one, starting over its span:
  system (1500), the runbook, the incident's timeline as it stands, the history, a message
  (10..600, median 80, then 6..400, median 45); replies 60..1000 (median 260); 1..14 turns
  (median 4).
- review: 1..5 minutes after a submission: system (1000), the policy as it stands, the MOP
  as it stands, cue (40); 45 % of reviews send the engineer back to edit 1..3 sections
  20 min..6 h later (median 1.5 h; at most 3 edits, none within an hour of the window),
  re-reviewed 1..5 minutes after.
- config: 30 diffs a day x scale (08..18; platform by a lognormal weight) and 60 % of
  executed changes at 07..11 that morning on the change's platform: system (900), the
  platform's configuration reference as it stands, the diff (200..6000, median 1000), the
  history, a message (8..300, median 40); replies 80..1200 (median 320); 1..8 turns (median 3).
- logs: 60 a day x scale (by hour): system (500), the log pasted (800..28000, median 6000),
  the history, a question (10..300, median 60); 1..4 turns (median 1).
- handover: at 06:45..07:00 and 18:45..19:00: system (1100), template (600), the timeline
  as it stands of each incident open in the last 12 hours, the change-log lines of the
  changes submitted or run in them, the outgoing lead's notes (200..1500, median 500), cue
  (40); re-drafted 0 (40 %), 1 (40 %) or 2 (20 %) times 5..20 minutes apart with new notes.
- shift: 5..15 minutes after the last draft the incoming lead talks it over: that draft,
  its summary (300..1500, median 700), the history, a message; 1..6 turns (median 3).
- kpi: each night at 01:00..03:00 each region's walk over its sites in id order, one
  stream: system (700), the region's template, the site's record as it stands, the day's
  counters (150..800, median 350), cue (30); each request after the last one's reading
  (8000 tokens/s) and its finding's writing (30..300, median 90, at 40/s) x 0.8..1.25.
- rollup: after a walk's last site: system (650), the template, the findings in site order,
  cue (40).

Chats (care, engineer, config, logs, shift) send the head, the history and a message; the
reply joins the history; the next turn follows the reply's decoding (40 tokens/s) and a
pause (lognormal, median 40..90 s by kind); a chat past 48000 tokens ends.

At scale 1.0, seeds 1..4: 8.4K..9.2K requests over the two days, 1.60M..1.85M blocks
requested, 0.38M..0.42M distinct (22..24 %), generated in 1.5..3.4 s each on a shared 2-core
box. 3.0K..3.5K alarms, 2..4 fiber cuts and 0..2 power outages (12..87 sites each), 2..6
major incidents, 130..145 changes. Blocks by kind: triage 29..30 %, kpi 17..20 %, engineer
11..15 %, config 9..14 %, care 7..9 %, review 5..8 %, correlate 5..6 %, logs about 5 %,
rollup about 1 %, shift, handover and status under 1 % each. At scale 0.2 (the tests):
1.8K..2.6K requests, 0.37M..0.48M blocks, 22..25 % distinct; the storms are not scaled (a
ring is a ring), so they weigh more there.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_fewshot import Segment
from bench.heldout_noc_desk import Desk

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, owner, step, segments (see ``Run``)
KINDS = ("triage", "correlate", "status", "review", "engineer", "care", "config", "logs",
         "handover", "shift", "kpi", "rollup")


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, owner, step, segments):
    triage has the site and the alarm (``state.alarms``), correlate the case and its lines so
    far, status the open major incidents and the issue, review the change and the round, kpi
    the region and the site, rollup the region and the night, handover the handover and the
    draft, the chats (engineer, care, config, logs, shift) the chat (``state.chats``) and the
    turn. ``times``: seconds from the first midnight. ``state``: the generator (regions,
    sites, platforms, alarms, cases, incidents, changes, chats, walks, handovers)."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    state: Desk


def telecom_noc(seed: int, scale: float = 1.0) -> Trace:
    """A mobile operator's NOC assistant: alarm triage behind the vendor's dictionary and the
    site's record (with storms from fiber cuts and power outages), correlation cases, the
    status page, engineers' incident and runbook chats, change reviews against the policy,
    customer-care escalations, configuration diffs, log dumps, shift handovers and each
    region's nightly KPI walk. See the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace and its metadata (see ``Run``)."""
    d = Desk(random.Random(seed), scale)
    d.run()
    return Run(d.out, d.meta, d.times, d)
