"""bench.heldout's ``city_311`` shape: one inference replica behind a mid-size city's 311
service (non-emergency requests) over two days, Monday 00:00 to Wednesday 00:00 local time.
Written blind at b2b0f8e: by someone who had not read the policies, and no policy or hit rate
was run on it (nor LRU, OPT, a replay or any reuse statistic); the workload is modelled on how
such a service's assistant and back office build their prompts, not on any policy. Every
rate, size and share below is this writer's estimate of the domain, not a measurement.

Prompts are token segments cut into 16-token blocks by ``bench.heldout_fewshot.Blocks`` (one
model, one key space). The world (bench/heldout_c311_world.py): 10 departments (streets,
sanitation, water, parks, noise, permits, animals, transit, housing, billing; weights 24, 20,
8, 7, 10, 9, 5, 5, 7, 5 % x 0.8..1.25), each with an FAQ (500..4500 tokens, median 1500, in
400-token sections) and a status-update template (150..600); a resident-assistant system
prompt per language (900; en 80 %, es 13 %, zh 3 %, vi 2 %, tl 2 %), a service catalog
(1600 in 4 sections); 1100 x scale (x 0.85..1.15) open tickets from the 20 days before the
clock (text 30..800, median 140; 0..12 history entries of 15..500, median 80); 40
neighborhoods; 8 policy documents (1500..12000, median 4000, in 600-token sections); each of 8
sweeping districts' next-day notice (300..1500) new each evening at 18:00; the holiday
collection schedule (800..2500), corrected once at 09..11 on day 0. Resident contacts follow
an hourly curve (peaks 09..11 and 18..19, low at night).

Requests (bench/heldout_c311_desk.py, bench/heldout_c311_jobs.py):

- chat / lang: 340 resident chats a day (x scale), 1..10 turns (median 3): the language's
  system prompt, the catalog, the department's FAQ, the history, a message (5..300, median
  35); replies 30..400 (median 110); "lang" is a chat not in English (its own system prompt,
  so no block is shared with English chats). Half of them end in a ticket.
- incident: the seed's incident (below): 70 % of its reports come through the assistant, 1..4
  turns behind the chat head plus the incident bulletin as it stands (120..500 tokens, a new
  version every 30..90 minutes while it lasts and 2 h after); 60 % of them file a ticket in
  the incident's neighborhoods, the rest file through the form or phone.
- intake: every new ticket (chats, incident reports, 420 a day x scale through the web form,
  app or phone line): the routing prompt (700), the department taxonomy (1800 in 300-token
  sections), the ticket's text, an instruction (30).
- dedup: after intake, a place-bound ticket (streets, sanitation, water, parks, animals) is
  compared with the latest 1..6 open tickets of its department and neighborhood: prompt (500),
  their texts oldest first, the new text, an instruction. 12 % are merged (45 % of incident
  reports): closed, and a note joins the older ticket's history.
- summary: 650 agents' case summaries a day (x scale; office hours 08..17; x 0.3 on the
  holiday seed's day 0, x 1.5 on the storm seed's day 1): prompt (650), the department's
  template, the text, the whole history, an instruction; 60 % on one of the 300 latest open
  tickets. The agent adds a note (80 %), and 20 % of those come back 5..60 minutes later (the
  prompt grows by the note); 25 % of the others are closed. 260 resident comments a day also
  join ticket histories.
- nightly: at 01:00..01:30 one stream walks every open ticket by department then id (8000
  tokens/s read, 40/s written): prompt (550), template, text, history, instruction. The draft
  is posted to the history only when the ticket changed since the last night, so a quiet
  ticket sends exactly the same prompt on the second night.
- notice: 220 questions a day (x scale; x 3 on the holiday seed): prompt (600), the district's
  sweeping notice of the moment or the holiday schedule (10 %; 70 % on the holiday seed), the
  history; 1..4 turns.
- policy: 120 questions a day (x scale) on a document by Zipf(1.2), 1..6 turns: prompt (800),
  the document's sections, the history. An ordinance (two on the quiet seed) revises one of
  the 3 most asked documents at 0.3..1.6 days: its sections from a random one on are new.
- oneoff: 120 a day (x scale): a short prompt (150) and pasted text (80..5000, median 600).

Seeds differ in structure by scenario, (seed - 1) % 4: quiet (a traffic-signal outage, 40..80
reports x scale over 3 h in 2 neighborhoods, two ordinances); storm (day 0 from 14..18 h,
450..700 reports of downed trees and flooded streets over 9 h in 24 neighborhoods, agents x
1.5 the next day); holiday (day 0 is a holiday: agents x 0.3, notice questions x 3, mostly
the holiday schedule, which is corrected mid-morning; on day 1 180..280 missed-pickup reports
over 10 h in 12 neighborhoods); watermain (day 1 from 05..08 h, 350..550 reports over 6 h in
3 neighborhoods, the bulletin revised every 40 minutes).

At scale 1.0, seeds 1..4: 10.3K..12.7K requests, 1.66M..2.00M blocks requested (quiet 1.66M,
storm 2.00M, holiday 1.96M, watermain 1.93M), 172K..214K distinct (9.6..11 %), generated in
1.3..2.0 s each on a shared 2-core box; 2.3K..2.8K tickets. Blocks by kind: chat 26..30 %,
intake 11..14 %, nightly 12..13 %, policy 9..18 %, summary 4..8 %, lang 6..8 %, dedup 4..6 %,
notice 5 % (19 % on the holiday seed), incident 2..12 %, oneoff about 1 %. At scale 0.2 (the
tests): 2.0K..2.6K requests, 0.31M..0.41M blocks.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_c311_desk import Desk
from bench.heldout_c311_world import SCENARIOS
from bench.heldout_fewshot import Segment

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, owner, step, segments (see ``Run``)
KINDS = ("chat", "lang", "incident", "notice", "policy", "oneoff", "intake", "dedup",
         "summary", "nightly")


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, owner, step, segments):
    chat, lang, incident, notice and policy have the chat (``state.chats``) and the turn,
    oneoff its own index, intake the ticket, dedup the ticket and how many open tickets it was
    compared with, summary the ticket and its history's length, nightly the ticket and the
    night. ``times``: seconds from Monday 00:00 local. ``state``: the generator
    (departments, tickets, policies, notices, the incident, the chats, the nightly walks)."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    state: Desk


def city_311(seed: int, scale: float = 1.0) -> Trace:
    """A city's 311 assistant and back office over two days: resident chats behind the
    catalog and department FAQs (in five languages), intake routing, duplicate checks,
    agents' case summaries, the nightly status batch, notice and policy questions, one-offs,
    and the seed's incident. See the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace and its metadata (see ``Run``); the scenario is SCENARIOS[(seed - 1) % 4]."""
    d = Desk(random.Random(seed), scale, SCENARIOS[(seed - 1) % len(SCENARIOS)])
    d.run()
    return Run(d.out, d.meta, d.times, d)
