"""bench.heldout's ``logistics_dispatch`` shape: one inference replica behind a freight and
parcel carrier's operations assistant over two days (midnight to the second midnight):
dispatchers' chats over live regional boards, an exception agent, a weather storm's flood of
exceptions, customers' "where is my order" chats, translated driver threads, damage claims,
customs-document checks, rate-confirmation extraction and a nightly route-planning walk.
Written blind at 12a029e: by someone who had not read the policies, and no policy or hit
rate was run on it. The workload is modelled on how such an assistant builds its prompts,
never on any policy.

Where the numbers come from: the structure (a dispatch board rendered into the prompt and
re-rendered as loads move, an agent that reads a playbook and the tracking record then calls
tools, a storm advisory injected into exception handling, a tracking bot given the scan
history, customs checks retrieving the destination's rules and the goods' tariff chapter,
document extraction behind a schema, a planner fed each depot's manifest overnight) follows
how carriers and logistics-software vendors describe such systems in public. Every rate,
size and share below is this writer's estimate, not a measurement; the replica is one of
several, the counts its share.

Prompts are token segments cut into 16-token blocks by ``bench.heldout_fewshot.Blocks`` (one
model, one key space). Counts of a day are x scale and x 0.8..1.2 per seed and day.

World (bench/heldout_logi_parts.py): 8 regions, volumes Zipf(0.9) by a random rank. A region's
board: a fixed head (1000..4000 tokens, median 2000) and 6..11 row groups (150..1200, median
450); every 2..6 minutes (by region) a snapshot re-renders each row group with chance 0.3
(05..22; 0.08 at night), so every row from the first changed one on is new. Each region has
an exception policy (400..2000) and a roads text (1500..6000, 600-token sections); 80 depots
(x scale, at least 2 a region; profiles 600..2500). A shipment, when first asked about, was
picked up 0..3 days before: a header (120..600) and scans (20..120 tokens) every 10 min..20 h
(median 3 h) for five days; the record sent is the header and the scans up to then, so it
grows; an exception adds its scan (30..150) at that moment.

Requests (bench/heldout_logi_desk.py, bench/heldout_logi_jobs.py):

- board: 14 dispatcher sessions a day at 05..22: system prompt (1800), board head, the board
  as it stands, history, message (6..600, median 40); 2..30 turns (median 8), replies
  30..1000, 60..600 s apart (10 % of turns 10..40 minutes later); ends past 24000 tokens.
- exception: 90 a day, all hours (a daytime peak): a shipment of a region by volume (30 % one
  excepted before, whose grown record is re-sent), 12 % of them damage. A case is the agent's
  system prompt (1500), the playbook (1500..4000, median 2400), the region's policy, the
  record, a 40-token cue; 1..4 requests (45/30/15/10 %), each later one the case so far plus
  the tool call (30..200) and result (60..1200), a few seconds apart.
- weather: one storm a trace on a random day over a region by volume, from 10..20 h for 3..6
  h: 400..900 cases (x scale; 20 % of seeds also a second of 200..500 on the other day over
  another region), arrivals Beta(1.6, 3) over the window, 80 % on new shipments of the region.
  The same head plus the storm advisory as last issued (400..2000 tokens, reissued every
  30..60 minutes, the first 1..3 h before), the record, a 55-token cue; 30 % a second step.
- wismo: 120 customer chats a day at 06..24 (evening peak): 35 % on a shipment excepted in the
  last day, 15 % on one asked about 2 hours ago or more, else a new one; system prompt
  (1200), policies (1500..4500), the record as it stands, history, message (4..200); 1..6
  turns (median 2), 20..90 s apart.
- translate: 100 driver threads a day at 04..22 in 6 languages (45/20/12/10/8/5 %); 2..20
  messages (median 6, 4..200 tokens) 20..240 s apart, alternately the driver's and
  dispatch's; each: system prompt (500), the direction's prompt (400..900), the glossary
  (300..900), the thread's last 4 messages, the message, a 30-token cue.
- claim: 10 adjuster chats a day at 08..18 on a damage shipment (60 % one the agent marked,
  else one first seen, given its damage scan now): system prompt (1600), liability terms
  (3500..8000, 700-token sections), the record as opened, the form (300..1200), 1..4 photo
  notes (150..700), history, message; 2..12 turns 60..480 s apart; the file is re-sent exact.
- customs: 80 filings a day at 07..19: system prompt (900), the destination's rules (8
  countries, 2000..6000), the tariff chapter as it stands (24 chapters Zipf(1.0),
  3000..10000 in 800-token sections), 1..4 documents (300..900), a 45-token cue; 25 % are
  sent again 10..90 minutes later with one document fixed. Once a trace (at day 1's midnight
  on 60 % of seeds, else any time) 1..3 chapters have a section amended.
- rateconf: 150 a day at 07..19: system prompt (700), schema (900), the carrier's boilerplate
  (150 carriers Zipf(1.1), 1200..4000), the load's page (150..900), a 35-token cue.
- route: each night at 01..02 one stream walks every depot in order: a plan (system prompt
  1500, the region's roads, the depot's profile, that day's manifest 2000..12000 in
  800-token sections, a 60-token cue), then its check (the plan's prompt, the plan 300..1500,
  a 50-token cue), each after the last one's reading (6000 tokens/s) and writing (35/s).

At scale 1.0, seeds 1..4: 3.75K..4.69K requests over two days, 1.33M..1.72M blocks requested,
0.29M..0.32M distinct (18..23 %), generated in 1.6..2.3 s each on the shared 2-core box. One
storm each (none drew a second), on day 1: 428..874 cases. Blocks by kind: weather 16..33 %,
route 14..16 %, board 9..14 %, translate 9..13 %, wismo 8..13 %, customs 7..12 %, exception
7..10 %, rateconf 5..7 %, claim about 5 %. At scale 0.2 (the tests): 0.30M..0.33M blocks,
886..965 requests.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_fewshot import Segment
from bench.heldout_logi_jobs import Operations

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, owner, step, segments (see ``Run``)
KINDS = ("board", "exception", "weather", "wismo", "translate", "claim", "customs",
         "rateconf", "route")


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, owner, step, segments):
    board, wismo and claim have the chat (``state.chats[kind]``) and the turn; exception and
    weather the case (``state.cases``) and the step; translate the thread
    (``state.threads``) and the message; customs the filing (``state.filings``) and the
    sending; rateconf the carrier and 0; route the depot and 2 x night + stage - 1.
    ``times``: seconds from midnight. The generator (``state``) holds the regions, boards,
    shipments, storms, tariff amendments and the route walks."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    state: Operations


def logistics_dispatch(seed: int, scale: float = 1.0) -> Trace:
    """A carrier's operations replica: dispatchers' chats over live boards, an exception
    agent (and a storm's flood of exceptions), customers' tracking chats, translated driver
    threads, claims, customs checks, rate confirmations and a nightly route-planning walk.
    See the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace and its metadata (see ``Run``)."""
    ops = Operations(random.Random(seed), scale)
    ops.run()
    return Run(ops.out, ops.meta, ops.times, ops)
