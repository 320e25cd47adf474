"""bench.heldout's ``manufacturing_qc`` shape: one inference replica behind the LLM assistant
of a manufacturer's quality and production engineering team, serving 3..5 plants in as many
time zones over two days. Written blind at e7f72c4: by someone who had not read the
policies, and no policy or hit rate was run on it (nor LRU, OPT, a replay or any reuse
statistic); the workload is modelled on how such an assistant builds its prompts, never on
any policy.

Where the numbers come from: the structure (a system prompt per tool, the station's work
instruction put in front of an operator's question, a shift log summarised at each shift
change, an SPC alarm explained from the characteristic's reaction plan and the chart, lot
travelers and inspection results summarised, NCRs drafted and dispositioned, 8D reports
worked on over days, PFMEA and control-plan reviews, supplier quality threads, audit
checklists walked clause by clause over the evidence, a containment team querying every
suspect lot) follows public descriptions of quality-management practice (IATF 16949 / ISO
9001 style documents, 8D, MRB, layered audits) and of retrieval assistants over controlled
documents. Every rate, size and share below is this writer's estimate, not a measurement.

Prompts are token segments cut into 16-token blocks by ``bench.heldout_fewshot.Blocks`` (one
model, one key space). The clock starts Monday 00:00 UTC and ends two days later. Seeds
differ in structure: seed 1, 4, 7, ... is a normal week, 2, 5, ... an audit week, 3, 6, ...
a recall; the plants' zones, lines and products are drawn per seed.

World (bench/heldout_mfg_parts.py): 3..5 plants at UTC -6, -5, +1, +2, +5.5 or +8, three
shifts (local 06, 14, 22). Each: 6..16 lines (x scale, at least 1; weight 0.6..1.6), 0.6
products a line (inspection plan and spec 1000..6000 tokens, median 2400; control plan
1800..9000, median 4000, in 600-token sections; PFMEA 4000..20000, median 9000, in 800-token
sections), an operator handbook (800..3000), 20..35 quality procedures (1200..10000, median
3500, 600-token sections, Zipf(1) popularity), a supplier quality agreement (2500..7000) and
12..30 suppliers (Zipf(1.1); a scorecard of 250..1400 tokens refreshed each local midnight).
A line: a profile (300..1000), 1..3 products (75 % of lots the main one), 5..14 stations with
a work instruction each (500..4000, median 1400; asked about by a Pareto(1.2) weight), 6..20
SPC characteristics (reaction plan 150..800), 4..16 lots a day. Document control, local
08..17: 0.5 work-instruction revisions a line a day (10 % an engineering change: 2..5
stations and the product's spec at once), 0.8 procedure revisions a plant a day (one
section). A revision makes the document's blocks new from the changed section on.

Requests (bench/heldout_mfg_floor.py, bench/heldout_mfg_office.py):

- operator: 12 chats a line a day x weight, by the floor's hours (night shift at half):
  system (700), handbook, the station's work instruction as it stands, history, question
  (6..150, median 25); 1..4 turns (three quarters 1), replies 30..400.
- handover: every line 2..35 minutes (mode 10) after each shift change, the plant's lines in
  one burst: system (800), line profile, the ending shift's log (800..5000, median 2200), a
  40-token cue; about a quarter get 1..3 follow-ups from the incoming supervisor.
- spc: 2.5 clusters a line a day x weight: 1..15 alarms (median 2.5) 20..600 s apart, 75 % on
  the cluster's characteristic: system (600), reaction plan, chart window (200..1500), alarm
  text (20..150). Everything after the reaction plan is new.
- lot: every lot as it completes: system (700), the product's spec as it stands, batch
  record (600..3500), inspection results (250..2000), cue (40); 7 % fail.
- ncr: 5..45 minutes after a failed lot: system (800), spec, results, defect (80..700), cue;
  1..3 turns about 40 minutes apart (the MRB's reviews); 25 % escalate to an 8D 1..6 h later.
- eightd: 0.6 investigations a line open at the start with 1..24 earlier turns of history,
  plus the escalations; 1.3 sessions a day (local 07..17), 2..10 turns each, 120..1400-token
  replies, messages 8..3000 (pasted data): system (1400), the 8D guide (2200), the case, the
  control plan and 2..3 PFMEA sections as they stand, history. Past 32000 tokens the history
  is replaced by a summary (500..1800); 12 % of sessions revise a PFMEA section or the
  control plan 0.5..4 h later.
- fmea: 0.25 reviews a line a day (x 2.5 at the audited plant): system (1000), PFMEA and
  control plan as they stand, history; 2..14 turns (median 5).
- sop: 3 chats a line a day (local 06..21; x 2.5 at the audited plant): system (800), the
  procedure as it stands, history; 1..6 turns.
- supplier: 2 emails a day per line of the plant (local 07..17), from a supplier by weight:
  65 % on its open thread (40 % of suppliers have one from before, 1..6 emails long), else a
  new thread: system (800), SQA, scorecard, thread so far, email (120..1800, median 400).
- audit: every seed, an internal audit walk (4 clauses, 6..12 documents each x scale) on day
  1 at local 09..11; an audit week adds the largest plant's preparation walk (14 clauses,
  10..30 documents each x scale, 70 % of the clause's own kind) at local 07..08, 20 (x scale)
  of its documents revised that afternoon, and the same walk again the next morning. Each:
  system (1100), clause (300..1500), the document as it stands, cue; one after another at
  6000 tokens/s read and 35/s written.
- containment: a quality hold on one line by weight (normal and audit weeks: 1..3 days of
  its lots of its main product, the brief revised 0..1 times), or a recall (day 0, 06..16
  UTC: a product of a plant picked by its lines, on every line that runs it, added to lines
  until 2..3 do; 1.5..3 days back, the brief revised every 3..6 h, 35 % widening the window
  by 0.5..1.5 days; lots from before the clock's start are made up as the window reaches
  them). Each revision appends an update (200..1200) to the brief (600..2500); the running
  walk stops and all suspect lots are walked again, line by line in time order: system
  (900), brief, spec, record, results, cue. A recall also runs a war-room 8D (sessions every
  1..2.5 h, any hour), the implicated supplier's thread (an email every 1..3 h) and a
  sorting instruction on each suspect line (as popular as its other stations together).

At scale 1.0, seeds 1..4 (normal, audit, recall, normal): 3.99K..5.03K requests over two
days, 1.43M..1.80M blocks requested, 0.30M..0.38M distinct (about 21 %), generated in 1.5..2.3
s each on the shared 2-core box; 4 plants, 28..40 lines (other seeds draw 3 or 5 plants).
Blocks by kind: eightd 23..30 %, operator 15..21 %, lot 11..18 %, sop 8..14 %, fmea 5..8 %,
handover 3..6 %, spc 3.5..5 %, supplier 3..4 %, ncr 1..1.5 %; audit 11 % in the audit week
(288 documents walked twice), under 1 % otherwise; containment 27 % in the recall (9 walks
over 4 lines), under 1 % otherwise. At scale 0.2 (the tests; lines scale, the plants, their
procedures and the containment's window do not): 0.28M..0.65M blocks, 877..1421 requests,
generated in 0.3..0.6 s; the recall's containment is 39 % of its blocks there.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_fewshot import Segment
from bench.heldout_mfg_office import Office
from bench.heldout_mfg_parts import SCENARIOS

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, owner, step, segments (see ``Run``)
KINDS = ("operator", "handover", "spc", "lot", "ncr", "eightd", "fmea", "sop", "supplier",
         "audit", "containment")


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, owner, step, segments):
    operator, handover, ncr, eightd, fmea, sop and supplier have the chat (``state.chats``)
    and the turn; spc the cluster (``state.clusters``) and the alarm; lot the lot
    (``state.lots``) and 0; audit and containment the walk (``state.walks``) and the item.
    ``times``: seconds from Monday 00:00 UTC. ``state``: the generator (its scenario, plants,
    lines, products, lots, document revisions, chats, walks, containment)."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    state: Office


def manufacturing_qc(seed: int, scale: float = 1.0) -> Trace:
    """A manufacturer's quality assistant: operators' questions over work instructions, shift
    handovers, SPC alarms, lot summaries, NCRs, 8D investigations, PFMEA reviews, procedure
    questions, supplier threads, audit walks and a containment (a recall in some seeds), in
    3..5 plants' time zones. See the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace and its metadata (see ``Run``); the seed picks the week's scenario."""
    office = Office(random.Random(seed), scale, SCENARIOS[(seed - 1) % len(SCENARIOS)])
    office.run()
    return Run(office.out, office.meta, office.times, office)
