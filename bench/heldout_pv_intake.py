"""bench.heldout's ``pv_intake`` shape: one inference replica behind a pharmaceutical company's
pharmacovigilance (drug-safety) LLM service for two days. Written blind at a5a8d48: by someone
who had not read the policies, and no policy or hit rate was run on it (nor LRU, OPT, a replay
or any reuse statistic); the workload is modelled on how such a service builds its prompts,
not on any policy.

Where the numbers come from: the structure (adverse-event intake from call-centre transcripts,
emails and web forms into structured case fields against a coding guide and MedDRA-style term
excerpts, duplicate-case checks, literature screening against a search protocol, case
narratives, PSUR drafting over a line listing, signal review, SmPC lookups, replies to
regulators) follows public descriptions of safety case-processing work. Every rate, size and
share below is this writer's estimate, not a measurement.

Prompts are token segments cut into 16-token blocks by ``bench.heldout_fewshot.Blocks`` (one
model, one key space; a request is the full blocks of its segments). The clock starts Tuesday
00:00 UTC and ends two days later. The world (bench/heldout_pv_world.py): 14 marketed
products, weight Zipf(1) by a random rank, each in one of 6 therapeutic areas, with an SmPC
label (3000..14000 tokens, median 6000, in 650-token sections), a literature search protocol
(700..3500, median 1600), a weekday its weekly literature search runs, and 20..600 (median
120) x scale prior case narratives (200..1400 tokens, median 550) in the safety database. One
intake coding guide (2600 tokens, 4 sections) and per area a term excerpt (900..3500, median
1700). Cases: 250 a day x scale (Poisson), by a UTC hour profile (EU call centre and mailbox
by day, the US one into the night: 13..17 UTC peak, 02..06 low): call transcripts 45 %
(400..6000 tokens, median 1500), emails 35 % (100..2500, median 450), forms 20 % (250..2000,
median 650); 22 % serious. Staffed hours (the chats below): EU 07..16 UTC, US 13..22 UTC.

What differs by seed besides noise: 1..3 products under a signal review; 1..2 PSUR projects;
1..2 products whose label changes at 20..80 % of the trace (every section from a random one
on is new); half the seeds have a coding-guide update at 30..70 % (a memo inserted at a
random section, every section after it new); 60 % have a surge (a media report, a quality
complaint): 40..120 x scale cases of one product over 3..8 hours (emails 60 %, 80..1500
tokens, forms 40 %); which products (so how many abstracts) are screened on the two days.

Requests (bench/heldout_pv_cases.py, bench/heldout_pv_desk.py):

- intake: on arrival, step 0 sends system (900), the guide as it stands, the area's excerpt,
  the source, a cue (80); the extraction (150..1200 tokens, median 420) written at 40
  tokens/s after reading at 6000/s, step 1 sends the same, the extraction and a cue (70),
  coding and seriousness (60..400). Every block from the source on is new.
- followup: 18 % of cases, 1..40 h (median 8 h) later: the intake head (the original source
  included), the follow-up document (80..2500, median 450), a cue (75).
- dupcheck: after coding: system (600), 3..8 candidates (up to half the product's 12 latest
  coded in-trace cases' extractions, the rest prior narratives, in case-number order), the
  new extraction, a cue (50).
- literature: at 04:00..04:30 UTC each day one walk, each request after the last one's
  reading and writing: for each product whose search runs that day, 40..900 (median 160)
  x scale abstracts (120..900 tokens, median 330): system (700), protocol, abstract, cue
  (50); 12 % are flagged and extracted at once (the screen, its verdict, a cue (60)).
- narrative: each serious case, 0.3..20 h (median 2 h) after coding, moved into staffed
  hours; a reviewer's chat over system (800), style guide (2200), the source, the
  extraction and coding; 1..8 turns (median 3), replies 250..1500 tokens.
- psur: 5 sessions a day x scale per project: system (1000), PSUR guidance (1500), the
  product's label as it stands, the line listing at the data lock point (40..250 cases,
  median 110, of 60..300 tokens); 2..12 turns, messages 30..1500, replies 250..1800.
- signal: 24 chats a day x scale on a product under review: system (700), its label, the
  dossier (background 1500..7000 tokens, then a case-series table 800..4000 renewed at
  01:00 UTC each night); 1..12 turns (median 4).
- regulator: 6 a day x scale: system (900), the query letter (400..5000, median 1500), the
  label, 8..25 of the product's cases (prior narratives or extractions); 2..6 turns.
- label: 180 SmPC lookups a day x scale by the intake hours: system (500), the label as it
  stands, a question (8..300); 1..3 turns.
- oneoff: 160 a day x scale: system (300), a message (10..4000, median 250); 1..4 turns.

Chats send the head, the history and a message; the reply joins the history; the next turn
follows the reply's decoding (40 tokens/s) and a lognormal pause (median 45..240 s by kind);
a chat past 48000 tokens ends.

At scale 1.0, seeds 1..4: 4.1K..4.9K requests, 1.50M..1.68M blocks requested, 0.27M..0.29M
distinct (16..19 %), generated in 1.2..2.1 s each on a shared 2-core box; 540..580 cases.
Blocks by kind: intake 28..32 %, literature 6..18 %, label 10..15 %, signal 9..15 %,
narrative 8..11 %, dupcheck 8..9 %, psur 4..22 %, regulator 3..4 %, followup 2..3 %, oneoff
about 2 %. At scale 0.2 (the tests): 920..1000 requests, 0.35M..0.37M blocks, 0.06M..0.07M
distinct (18..21 %), 0.3..0.4 s each.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_fewshot import Segment
from bench.heldout_pv_desk import Desk

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, owner, step, segments (see ``Run``)
KINDS = ("intake", "followup", "dupcheck", "literature", "narrative", "psur", "signal",
         "regulator", "label", "oneoff")


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, owner, step, segments):
    intake, followup and dupcheck have the case and the step (0 extraction, 1 coding, 2
    follow-up, 3 duplicate check), literature the product and the abstract's place in its
    walk, the chats (narrative, psur, signal, regulator, label, oneoff) the chat
    (``state.chats``) and the turn. ``times``: seconds from Tuesday 00:00 UTC. ``state``:
    the generator (products, cases, signals, PSUR projects, updates, walks, chats)."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    state: Desk


def pv_intake(seed: int, scale: float = 1.0) -> Trace:
    """A drug-safety LLM service: adverse-event intake and coding behind a coding guide and
    term excerpts, follow-ups, duplicate checks, literature screening walks, serious-case
    narratives, PSUR drafting over a line listing, signal chats over a nightly dossier,
    regulator replies, label lookups and one-off requests. See the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace and its metadata (see ``Run``)."""
    d = Desk(random.Random(seed), scale)
    d.run()
    return Run(d.out, d.meta, d.times, d)
