"""bench.heldout's ``airline_ops`` shape: one inference replica behind an airline's LLM
assistants over two days, across five hub time zones. Written blind at d7675f4: by someone
who had not read the policies, and no policy or hit rate was run on it (nor LRU, OPT, a
replay or any reuse statistic); the workload is modelled on how such products build their
prompts, not on any policy.

Where the numbers come from: the structure (a customer-service agent whose system prompt
carries its tool schemas, with fare rules and policy sections retrieved by the passenger's
intent and the booking record fetched as a tool result; a disruption mode that renders the
travel waiver, the flight's status and the record live into the prompt; an operations
copilot over a hub's board; crew-legality checks that put the duty rules and the pairings
file in context; per-tail maintenance summaries; an after-call summarizer; a nightly
briefing batch; a loyalty bot over the program terms) follows public descriptions of airline
contact-center and operations-control assistants. Every rate, size and share below is this
writer's estimate, not a measurement; the replica is one of several, the counts its share.

Prompts are token segments cut into 16-token blocks by ``bench.heldout_fewshot.Blocks`` (one
model, one key space). The clock starts Friday 00:00 UTC and ends two days later. Seeds
differ in structure: seed % 4 picks the scenario, 1 a normal pair of days, 2 a weather event
at a hub, 3 a schedule-change day, 0 a holiday peak with an IT outage.

World (bench/heldout_air_world.py): hubs at UTC -5, -6, -8, 0, +9 (weights .30, .22, .16, .18,
.14), 40 stations (a hub, or an outstation of a hub's region, Zipf(1) by rank; 55 % of
departures leave a hub). 260 departures a local day (x scale x 0.9..1.1; holiday x 1.15) on
days 0..2 at local 05..22, each with a plan (300..1600 tokens, median 700) and a status line
(80..400) that gets a new version when the flight is delayed or cancelled. 60 tails (x scale,
at least 12) with a header (200..900) and maintenance write-ups (50..700, median 170), 4 a day
by ops hours, the log holding those of the last five days. Each hub: an ops board (a head of
900..3500 tokens and 5..9 row groups of 120..1000, re-rendered every 10..20 minutes, each
group changing with chance 0.3 at local 05..23, 0.08 at night, 0.75 in a disruption) and a
crew-pairings file (2500..9000 tokens in 700-token sections, republished every 2..4 h with a
quarter of the sections changed, every 20..40 minutes with half in a disruption); three duty
rule sets (2500..9000 tokens, 900 a section; the three US hubs share one). Six fare families
(.30 .. .05) with rules of 900..5000 tokens in 600-token sections; policies baggage (10
sections), change (8), refund (7), irrops (9), assist (6) of 200..1400 tokens; loyalty terms
(6000..18000 in 650-token sections) and a program summary (600..2400) whose new version, at
0.3..1.7 days, replaces the sections from 40..90 % of the document on (and the summary half
the time). A PNR is 180..1200 tokens; each rebooking makes a new version.

Requests (bench/heldout_air_ops.py, bench/heldout_air_desk.py):

- agent: 100 chats a day (x scale, holiday x 1.25) by the passengers' local hours: system
  prompt (2200), the sections the intent retrieves in score order (change: the fare rules
  and 2 change sections; baggage 3; refund: fare rules and 2; irrops 3; assist 2; upgrade 2
  loyalty-terms sections; status none; sections by Zipf(1)), then the history, whose first
  entry is the PNR (a new one on a departure of the next two days, 25 % one seen before),
  and a message (4..400); 1..10 turns, replies 30..600, 35 s pauses; 15 % of later turns
  change intent (the head retrieved again). A quarter of change, refund and irrops chats
  come back 20..180 minutes later after a rebooking with the new record as a tool result.
- rebook: the agent in disruption mode: system prompt, 2 irrops sections, the disruption's
  notice as last issued, the flight's status now, the PNR now, history, message; 1..4 turns;
  at the end the PNR is rebooked and 20 % come back 30..240 minutes later for 1..2 turns.
  Mechanical cancellations: 2.5 a day (Poisson), 1..4 h before departure, 10..35
  conversations each (x scale). Weather seeds: a hub by weight, day 0 or 1, from local
  13..18 for 2..5 h: 35..55 % of its region's departures from the start to 2 h after the end
  cancelled (3 h before departure, at most 1 h before the start), the rest delayed; a waiver
  issued 1..3 h before and reissued every 30..90 minutes; 600..1000 conversations (x scale),
  80 % on cancelled flights, a mean 40 minutes after the cancellation. Holiday seeds: an IT
  outage on day 1 from 12..20 UTC for 60..150 minutes over every hub: 70 % of the departures
  to 3 h after delayed, 8 % cancelled, a notice every 20..40 minutes, 350..600 conversations.
- reaccom: each day at 05..07 UTC a schedule change retimes 2..5 departures 12 h or more
  ahead onto other departures of the hub; one walk writes each PNR's notice (15..45 a
  flight, x scale): system (900), the change's notice (400..1500), old and new plans, the
  PNR, cue; the PNR is then rebooked, 8 % of them ask the agent 0.5..30 h later. On
  schedule-change seeds the day-0 change (04..06 UTC) moves 40..70 departures.
- ops: 20 controller sessions a day (x scale) by ops hours, 1.5 more an hour at a disrupted
  hub: system (1800), the board head, the board as rendered now, history, message (15..400);
  2..14 turns (median 5), replies 80..1000, 2-minute pauses; 30 % of later turns carry a tool
  result (120..2000).
- crew: 75 checks a day (x scale) by crew hours, 15 an hour more at a disrupted hub until 3 h
  after: system (1500), the duty rules, the pairings as published, the query (90..800), cue.
- mx: every 3 h from 00:10 UTC a walk over the tails with write-ups in the last 3 h, in tail
  order: system (900), header, the log's window, cue; its output (150..700) becomes the
  tail's summary.
- brief: at 06:00..06:30 UTC each night a walk over every departure of the next local day
  by station, then time: system (1200), the station's notice digest (600..5000) and forecast
  (250..1400), new each night, the plan, the tail's latest maintenance summary, cue.
- loyalty: 100 sessions a day (x scale, holiday x 1.25): system (800), the program summary
  and 2..3 terms sections (uniformly, in document order) as they stand, the member's profile
  (120..500), history, question (5..200); 1..5 turns.
- acw: 240 after-call summaries a day (x scale, holiday x 1.25), 30 an hour more at a
  disrupted hub until 3 h after: system (700), dispositions (1400), one of six call types'
  templates (200..500), the transcript (400..7000, median 1500), cue.
- complaint: 240 a day (x scale, holiday x 1.25), 12 an hour more for a day after a
  disruption: system (600), taxonomy (1100), text (150..3000), cue. email: 250 travel-agency
  emails a day (x scale) at local 09..17: system (500), the agency's profile (60 agencies,
  Zipf(1.1), 300..900 tokens), the email (200..4000), cue. Walks read at 8000 tokens/s and
  write at 40/s; chats end past 32000 tokens.

At scale 1.0, seeds 1..4 (normal, weather, schedule, holiday): 4.6K..7.1K requests over two
days, 1.37M..2.07M blocks requested, 0.34M..0.46M distinct (21..25 %), generated in
1.5..3.1 s each on a shared 2-core box (load about 3). Seed 2's weather event hit hub 3 at
13.8 h for 3 h: 5 of its region's 12 departures in the window cancelled, 898 conversations,
846 of them within two hours; seed 3's schedule change moved 46 departures and walked 1326
PNRs; seed 4's outage took 568 conversations over 104 departures. Blocks by kind: agent
14..24 %, rebook 5..29 %, reaccom 3..22 %, brief 8..13 %, acw 7..11 %, crew 6..10 %, mx
6..9 %, loyalty 7..8 %, ops 5..9 %, complaint 4..6 %, email 3..5 %. At scale 0.2 (the
tests): 0.26M..0.41M blocks, 880..1370 requests.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_air_desk import Desk
from bench.heldout_air_world import SCENARIOS
from bench.heldout_fewshot import Segment

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, owner, step, segments (see ``Run``)
KINDS = ("agent", "rebook", "reaccom", "ops", "crew", "mx", "brief", "loyalty", "acw",
         "complaint", "email")


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, owner, step,
    segments): agent, rebook, ops and loyalty have the chat (``state.chats``) and the turn;
    reaccom the change (``state.changes``) and the PNR; crew the hub and the pairings'
    version; mx the tail and the run; brief the flight and the night; acw the hub and the
    call type; complaint the hub and 0; email the agency and the hub. ``times``: seconds
    from Friday 00:00 UTC. ``state``: the generator (scenario, hubs, flights, tails, PNRs,
    disruptions, schedule changes, walks, chats)."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    state: Desk


def airline_ops(seed: int, scale: float = 1.0) -> Trace:
    """An airline's replica: a customer-service agent (and its disruption mode's bursts),
    re-accommodation after schedule changes, an ops copilot, crew-legality checks,
    maintenance summaries, the nightly briefing walk, a loyalty bot over versioned terms,
    after-call summaries, complaints and agency emails, in five hub time zones. See the
    module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace and its metadata (see ``Run``); seed % 4 picks the scenario."""
    d = Desk(random.Random(seed), scale, SCENARIOS[seed % len(SCENARIOS)])
    d.run()
    return Run(d.out, d.meta, d.times, d)
