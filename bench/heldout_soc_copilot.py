"""bench.heldout's ``soc_copilot`` shape: one inference replica behind the security-operations
(SOC) copilot of a managed security service provider (MSSP) serving several client
organisations. Written after ``adaptive`` was frozen (at 1ffdf37), blind: by someone who had
not read the eviction policies, bench/baselines.py, docs/eviction.md, docs/benchmarks.md or
any results, and no policy, LRU, OPT or hit rate was run or computed on it; the workload is
modelled on how such a product builds its prompts and schedules its work, not on any policy.

Where the numbers come from: the structure (a SOAR handing each alert to an LLM triage agent
whose prompt carries the client's environment and runbook and the detection rule, threat-intel
enrichment as tool calls, case management with notes and shift hand-offs, detection
engineering, scheduled hunts and client reports) follows how SOC copilots and MSSPs describe
their workflows in public; alert volume follows the clients' working hours, the SOC works three
shifts with thinner staffing at night, client sizes are Zipf. The rates, sizes and shares below
are this writer's estimates, not measurements.

Prompts are laid out in token segments and cut into 16-token blocks by
``bench.heldout_fewshot.Blocks`` (one model, one key space). The clock starts on a Monday
00:00 UTC. System prompts: triage 1300 tokens, investigation 1100, engineering 900, hunt 800,
report 700.

Clients: 12 (scaled, at least 3), Zipf(1.0) sizes by a random rank (mean 1), offices at UTC-5,
-6, -8, 0, +1, +10 (35, 15, 20, 15, 10, 5 %). A client has an environment profile (1000..6000
tokens, median 2200 x size^0.2, in 400-token sections), a runbook for each of 8 alert
categories (300..3000, median 900), a rule catalog of 25..400 rules (median 90 x size^0.5;
each 150..1000 tokens in three sections: header, logic, exclusions) firing by Zipf(1.1) of a
random rank, an asset inventory of 10..250 chunks of about 50 assets (median 40 x size^0.7,
250..600 tokens each) and a hunt checklist (300..1500); the largest client and half of the rest
buy the nightly hunt service. The SOC sits at UTC-5: shifts 07-15 (staffing 1.0), 15-23 (0.6),
23-07 (0.3).

Requests (a client of mean size raises 2 alerts an hour at its weekday peak, 0.25..0.35 of that
at night, half on weekends: about 29 a weekday):

- triage / enrich: the SOAR hands each alert to the triage agent: system prompt, the hourly
  threat-intel digest, the client's profile, the runbook of the rule's category, the rule, then
  the alert's raw events (120..4000 tokens, median 600). The agent makes 0..4 lookups (20, 30,
  30, 15, 5 %); each appends its call (20..60 tokens) and result (60..1200, median 250) and
  re-sends the prompt 1..6 s later. 6 % of normal alerts are escalated to a case.
- digest: on the hour the MSSP's feed digest (a 30-token header and 4..10 items of 60..180
  tokens) is rewritten, unless the hour brought nothing new (25 %); it sits right after the
  triage system prompt, so every later block of a triage prompt is new content after a change.
- campaigns (0.15 a day x size^0.5, thinned by the alert curve): 1..3 rules of one attack's
  categories fire 40..600 alerts (median 150 x size^0.3) within 4..30 minutes; after the first
  5..15 the SOAR puts an incident context (200..900 tokens, IOCs and related alerts) after the
  rule, rewritten every 40..80 alerts; their lookups (at most two) hit the campaign's 2..6
  shared IOCs. When it has passed, an incident case is opened and picked up in 1..5 minutes.
- storms (0.2 a day x size^0.5): one of the client's five noisiest rules fires 40..500 alerts
  (median 120) over 20..120 minutes, 30 % of them with one lookup; 0.5..3 h later, in the SOC's
  office hours (weekdays 08..18), a detection engineer takes the rule up.
- investigate / note / close: a case's prompt is the investigation system prompt, the profile,
  runbook and rule as they stand, the case file (incident context, events, lookups), the case
  notes, then the session's chat. An analyst picks it up after 1 minute + an exponential wait
  (mean 15 minutes / staffing) and works 2..30 turns (median 8) 30 s..20 min apart (median 3
  min), a quarter pasting query results (150..2500 tokens) before the question (8..300); the
  answer (60..900, median 220) joins the chat. A session ends after its turns (earlier if the
  next turn would fall after the shift's end) with a note request; the note (80..500 tokens)
  joins the case notes. Then 35 % of cases close (a closing summary request; the summary goes
  to the weekly report), the rest are resumed 0.5..6 h later in the same shift or handed off.
- handoff: at every shift change a live session is wrapped up with its note, every open case
  gets a hand-off note request, and the next shift resumes it 10..90 minutes / staffing later
  behind the case notes with the hand-off note added.
- engineer: a rule's session after a storm or as routine tuning (3 a day at scale 1.0, in the
  SOC's office hours, a client by size, a rule by firing rate): system prompt, profile, the rule,
  the events of its last 3..8 alerts, then 3..20 turns 1..6 minutes apart (30 % paste a draft
  rule); 75 % end with the rule rewritten (logic 50 %, exclusions 40 %, header 10 %), so its
  later triage and investigation prompts are new content from that section on.
- hunt: at 01:00..02:00 client time each night the CMDB sync rewrites 3 % of the inventory
  chunks, then the asset sweep walks every chunk in inventory order, 2..8 s apart: system
  prompt, profile, checklist, the chunk, the night's IOC excerpt (150..500 tokens); on 35 % of
  nights a rule review follows, walking the rule catalog in order behind a new hunt hypothesis
  (300..900 tokens).
- report: Monday 07:00 client time, five sections back to back 20..90 s apart over the MSSP's
  report template, the profile and the summaries of the cases closed in the last seven days.

Edits (0.5 a day x size^0.5, in the client's office hours: runbook 50 %, profile 35 %,
checklist 15 %) reword, insert or strike 1..2 sections, so every later section is new content.

9000 requests at scale 1.0 span 85..104 hours over seeds 1..5, generated in 3.0..4.4 s each on
a shared 2-core box: 4.11M..4.80M blocks requested, 464K..532K distinct (10.4..12.2 %).
Requests (share of blocks): triage 22..30 % (21..28 %), enrich 27..33 % (28..34 %), hunt
16..25 % (10..17 %), investigate 15..21 % (19..27 %), note 2 % (3..4 %), engineer 1..2 %,
handoff, close and report about 1 % each; the alerts of campaigns and storms make 14..28 % of
the requests. At scale 0.25 (3 clients, 2250 requests) seeds 1..5: 61..118 hours, 0.92M..1.29M
blocks, 10.4..12.4 % distinct.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_fewshot import Segment
from bench.heldout_legal_parts import Versioned
from bench.heldout_soc_cases import Case, Session
from bench.heldout_soc_jobs import Hunt, Report, Soc
from bench.heldout_soc_parts import Alert, Burst, Client

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, client, owner, segments (see ``Run``)
KINDS = ("triage", "enrich", "investigate", "note", "handoff", "close", "engineer", "hunt",
         "report")
REQUESTS = 9000  # at scale 1.0


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, client, owner,
    segments), the owner an index into ``alerts`` (triage, enrich), ``cases`` (investigate,
    note, handoff, close), ``sessions`` (engineer), ``hunts`` (hunt) or ``reports`` (report).
    ``times``: seconds from Monday 00:00 UTC. ``system`` holds each application's system
    prompt, ``instructions`` the closing instructions, ``sections`` the report's; ``digest``
    every version of the threat-intel digest; the world as it stands at the end."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    system: dict[str, Segment]
    instructions: dict[str, Segment]
    sections: list[Segment]
    digest: Versioned
    clients: list[Client]
    alerts: list[Alert]
    bursts: list[Burst]
    cases: list[Case]
    sessions: list[Session]
    hunts: list[Hunt]
    reports: list[Report]


def soc_copilot(seed: int, scale: float = 1.0) -> Trace:
    """An MSSP's SOC copilot replica: alert triage with threat-intel lookups behind an hourly
    digest, campaigns and alert storms, analysts' investigations over shifts with hand-offs,
    rule rewrites, nightly hunts walking inventories and rule catalogs, weekly reports. See
    the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace of ``int(REQUESTS * scale)`` requests and its metadata (see ``Run``)."""
    s = Soc(random.Random(seed), int(REQUESTS * scale), scale)
    s.run()
    s.trim()
    return Run(s.out, s.meta, s.times, s.system, s.instructions, s.sections, s.digest,
               s.clients, s.alerts, s.bursts, s.cases, s.sessions, s.hunts, s.reports)
