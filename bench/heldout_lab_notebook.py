"""bench.heldout's ``lab_notebook`` shape: one inference replica behind a biotech R&D lab's
electronic-lab-notebook assistant over two working days. Written blind at 87af25f: by someone
who had not read the policies, and no policy or hit rate was run on it (nor LRU, OPT, a replay
or any reuse statistic); the workload is modelled on how such an assistant builds its prompts,
not on any policy. Every rate, size and share below is this writer's estimate of the domain,
not a measurement.

Prompts are token segments cut into 16-token blocks by ``bench.heldout_fewshot.Blocks`` (one
model, one key space). The clock starts Monday 00:00 (one site) and ends 48 h later; the
scientists work 07..20 (peak 09..11 and 14..16, a lunch dip), instruments run around the
clock.

Seeds differ in how the lab is organised: seed s has layout (s - 1) % 4 of ``LAYOUTS``
(bench/heldout_lab_world.py): "core" (4..5 teams, 9..11 instruments, 65 % of protocol lookups
in the lab-wide SOPs, a sequencing core), "silo" (6..8 teams with their own SOP libraries,
15 % lab-wide, 12..15 instruments, qPCR- and HPLC-heavy), "startup" (2..3 teams, one shared
SOP library and no team SOPs, 5..7 instruments) and "screening" (3..4 teams, 45 % lab-wide, a
high-throughput campaign: plate readers and LC-MS, 2.5 x the plate-map reviews).

The world: 40 x scale scientists (x 0.9..1.1), split among the teams by Gamma(2) weights; a
lab system prompt (1300 tokens); 50 lab-wide protocols and 10..30 per team (400..8000 tokens,
median 1800, 500-token sections; Zipf(1.2) popularity by a random rank), each library with an
index (40 tokens a protocol) that chats send after the system prompt; per team an entry
template (250..900), plate-map conventions (600..1800) and 2..4 projects with grant aims
(1500..4500) sharing an archive of 30..80 past entries (600..6000, median 2000). Instruments:
a plate reader, an LC-MS and the rest by the layout's weights over 8 types, each type with a
parsing guide (1500..5000) and a QC spec (600..1600). A unit starts runs by the lab's hours
(0.5..7 a day by type, x scale, at least one a day); a run lasts 0.2..1 h (plate reader) to
10..30 h (sequencer) and leaves a one-off log: a header (300..2500) and either sections of the
type's log (800..24000) or, for 30 % of plate-reader, 50 % of LC-MS and every sequencer run, a
sample sheet of 8..96 samples (120..1200 tokens each). A shared set of 120 papers
(2500..16000, median 7000; Zipf(1) by a random rank, 4 hot this week at twice the top). The
reagent inventory table: 8 + 3 per team rows of 450 tokens.

Requests (bench/heldout_lab_jobs.py, bench/heldout_lab_desk.py):

- run: the moment a run finishes the pipeline reads it: system (700), the type's parsing
  guide, the whole log, cue (40).
- burst: a run with a sample sheet then sends one request per sample 0.3..1.5 s apart:
  system, guide, the log's header, the sample, cue (35).
- followup: 0..2 scientists of the run's team (55 % none, 35 % one) ask about the analysis
  2..30 min after it finished (outside 08..19, at 08..10 the next morning): the run request
  exactly, its summary (150..1200) as history, then 1..5 turns.
- qc: at 22:30..23:30 each day one stream walks every run finished since the last walk, unit
  by unit in finish order: system (600), QC policy (1500), the type's QC spec, the log, cue
  (50); each after the last one's reading (7000 tokens/s) and writing (40 tokens/s).
- writeup: 75 % of the scientists keep an entry with the assistant each day: 2..12 requests
  (median 5) by the lab's hours: system (1300), writer prompt (450), the team's template,
  the entry as it stands, an instruction (10..300). Before a request the scientist now and
  then (12 %) rewrites a section sent before (every block from it on new) and adds notes
  (60 %, 40..1200 tokens); 60 % of the drafts (120..1400) join the entry. A closed entry
  joins its project's archive.
- ask: 120 chats a day (x scale): system, the lab-wide SOP index, the team's index, history,
  a message (6..600); 1..10 turns (median 3).
- protocol: 200 lookups a day: system, protocol prompt (350), the protocol as it stands
  (the team's own or lab-wide by the layout's share, by popularity), history; 1..5 turns.
- lit: 90 sessions a day over 1 (70 %), 2 or 3 papers retrieved by weight: system, lit prompt
  (450), the papers, history; 1..6 turns. On day 1 at 09..11 the journal club's preprint joins
  the set at twice a hot paper's weight.
- inventory: 80 questions a day: system, inventory prompt (400), the table as it stands, the
  history; 1..3 turns. The LIMS syncs every 20 min over 07..20 and 60 % of the syncs rewrite
  1..3 rows: every block from the first of them on is new.
- platemap: 40 reviews a day (x the layout's factor): system, review prompt (500), the team's
  conventions, a 96-well (60 %, 800..3500 tokens) or 384-well map in one section per plate
  row, history; 1..4 turns; 35 % revise the map before the second turn (every row from one on
  rewritten).
- grant: 3 sessions a day (x scale, at least one in the trace), mostly in the afternoon:
  system, grant prompt (900), the project's aims and its latest entries that fit 60000 tokens
  (oldest first, the days' closed entries included), history; 3..16 turns (median 6),
  replies of 200..3000 tokens; a chat past 120000 tokens ends.

Versions: 2..4 protocol revisions approved over the two days (a protocol by popularity: one
section and its index's row rewritten, so its later blocks and every chat head after the
index's row are new), the inventory table's syncs, plate maps, entries. Chats: the next turn
follows the reply's decoding (40 tokens/s) and a lognormal pause (median 30..240 s by kind);
a chat past 32000 tokens ends (grant: 120000).

At scale 1.0, seeds 1..4 (core, silo, startup, screening): 3.4K..4.0K requests over two days,
1.32M..1.81M blocks requested, 0.19M..0.30M distinct (14..17 %), generated in 1.1..1.6 s each
on a shared 2-core box; 49..109 runs (10..20 with a sample burst, 270..670 samples), about 60
notebook entries, 43..49 inventory versions, 3..4 protocol revisions, 2..9 grant sessions.
Blocks by kind: lit 18..25 %, ask 14..19 %, protocol 13..19 %, inventory 8..10 %, burst
6..11 %, grant 4..15 %, platemap 4..11 % (screening the most), writeup 4..7 %, followup 3..5
%, qc and run 2..4 % each. At scale 0.2 (the tests): 0.27M..0.39M blocks, 19..23 % distinct,
0.2..0.3 s each.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_fewshot import Segment
from bench.heldout_lab_desk import Desk
from bench.heldout_lab_world import LAYOUTS

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, owner, step, segments (see ``Run``)
KINDS = ("run", "burst", "followup", "qc", "writeup", "ask", "protocol", "lit", "inventory",
         "platemap", "grant")


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, owner, step,
    segments): run has the run and 0, burst the run and the sample, qc the day and the run,
    writeup the entry (``state.entries``) and its request, the chats the chat
    (``state.chats``) and the turn. ``times``: seconds from Monday 00:00. ``state``: the
    generator (layout, teams, protocols, instruments, runs, papers, inventory, entries,
    chats)."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    state: Desk


def lab_notebook(seed: int, scale: float = 1.0) -> Trace:
    """A biotech lab's notebook assistant: team chats behind the lab's system prompt and SOP
    indexes, protocol lookups, instrument-run analysis with per-sample bursts and follow-up
    questions, a nightly QC walk, notebook entries that grow over the day, literature Q&A with
    hot papers, inventory questions over a table that changes, plate-map reviews and long
    grant-report sessions. See the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace and its metadata (see ``Run``); seed s has LAYOUTS[(s - 1) % 4]."""
    d = Desk(random.Random(seed), scale, LAYOUTS[(seed - 1) % len(LAYOUTS)])
    d.run()
    return Run(d.out, d.meta, d.times, d)
