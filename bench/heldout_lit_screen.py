"""bench.heldout's ``lit_screen`` shape: one inference replica behind an evidence-synthesis
group's systematic-review assistant (Covidence/Rayyan-style screening backed by an LLM), over
two days. Written blind at 17845c7: by someone who had not read the policies, and no policy or
hit rate was run on it (nor LRU, OPT, a replay or any reuse statistic); the workload is
modelled on how such a tool builds its prompts, not on any policy.

Where the numbers come from: the structure (a screening prompt holding the review's PICO
inclusion and exclusion criteria and a few worked examples before each title and abstract,
two independent reviewer prompts per record and an adjudicator for their conflicts as in
PRISMA dual screening, full texts read against the criteria in chunks, data extraction behind
a template, risk of bias with RoB 2 or ROBINS-I, living reviews whose search is re-run,
protocol amendments, de-duplication of database exports) follows public descriptions of
LLM-assisted review tools and of review methods. Every rate, size and share below is this
writer's estimate, not a measurement; the replica is one of several, the counts its share.

Prompts are token segments cut into 16-token blocks by ``bench.heldout_fewshot.Blocks`` (one
model, one key space). The clock starts Monday 00:00 UTC and ends two days later.

World (bench/heldout_lits_world.py): 4..8 reviews a seed, sizes Zipf(0.8) by a random rank,
each run by a team at UTC+0 (50 %), -5 (30 %) or +10 (20 %). A review has criteria of
600..3500 tokens (median 1300) in 350-token sections, 3..8 worked examples (150..650, median
300), reviewer variants A and B (100..450, median 200), an extraction template of 4..7 field
groups (150..800, median 350) with an ask each (50..300, median 120), and 4..15 % relevant
records. 1000 x scale (x 0.85..1.15) records are screened over the trace, split by weight (at
least 6 a review): title and abstract 60..900 tokens (median 300; 8 % title only, 30..90), 70 %
imported the day before, 30 % by day 0's hand search (local 09..17); 3 records screened before
the trace per record (the library: 82 % excluded, 10 % included, 8 % unsure). Half the reviews
(and every living one) fetch a record's full text as soon as it is included. How the
deployment builds prompts is drawn per seed (``Setup``): the reviewer variant right after the
system prompt or after the examples; A then B per record, or A's pass then B's; full-text
windows of 14000 or 3000 tokens; extraction one thread per paper or each field group alone.

Requests (bench/heldout_lits_jobs.py, bench/heldout_lits_desk.py). Walks keep 1..8 requests
in flight, each worker's next request after its last is read (8000 tokens/s) and written (40
tokens/s) x 0.8..1.25:

- screen: 1..3 runs (35/45/20 %) a local workday per review at local 08..17; a run takes its
  share of the records imported by then (the last takes the rest), A and B each, 4 workers:
  system prompt (450), criteria and examples with the variant before or after them, the
  record, a cue (40); 40..500 tokens written (median 160). A includes 96 % of relevant records
  and 8 % of the rest, B 88 % and 3 %.
- adjudicate: when a walk ends, its conflicts (10..18 % of records), one at a time: system
  prompt (600), criteria, examples, the record, A's and B's rationales, a cue (50); includes
  95 % of relevant records and 20 % of the rest, else leaves them unsure.
- update: 1..2 living reviews a seed get a search update at local 06..07: 40..450 (median
  130) x scale new records screened at once by 8 workers, a burst.
- recheck: after an update, a quarter as many unsure records (those left unsure during the
  trace first, then the library's); after an amendment, 20..250 (median 80) x scale included
  records; dual screened, 4 workers, with the prompts as they stand.
- amendments: 1..2 of the 4 largest reviews, once, at a local working time: one criteria
  section rewritten (x 0.8..1.4 tokens), half the time a worked example added, half the time
  a field group added; every later prompt of the review is new from that section on.
- dedup: each night at 01..02 UTC, every record imported in the day before midnight against
  0..4 (30/35/20/10/5 %) candidates from its review's library: system prompt (350), the
  record, the candidate, a cue (30); 2 workers.
- fulltext: a rolling review's included record 2..72 h (median 16 h) later, moved into local
  08..18, and 2..30 (median 8) x scale backlog papers a review at local working times: the
  paper (2500..20000 tokens, median 6500, 1200-token sections) in windows: system prompt
  (500), the criteria as they stand, the window, a cue (45); 3 workers; 70 % of relevant
  papers and 15 % of the rest go on.
- extract: 0.3..30 h (median 3 h) after, and 1..15 (median 4) x scale backlog papers a
  review: system prompt (550), the template, the paper, (the thread so far,) a group's ask;
  answers 100..900 (median 300).
- rob: 75 % of extracted papers 0.5..30 h (median 5 h) later, and 1..12 (median 3) x scale
  backlog papers a review: system prompt (500), the guidance shared by every review (RoB 2
  for 60 %: 4200 tokens, 6 domains with the overall call; ROBINS-I: 5200, 8), the paper, a
  domain's questions (40..200, median 90); 3 workers.
- chat: 50 a day (x scale, by review weight, local 08..17): about one of the review's last 20
  adjudicated records (45 %), a paper read (35 %: its sections) or any of its records: system
  prompt (700), the criteria as they stand, the record or paper, the history, a message
  (6..400, median 40); 1..12 turns (median 3), replies 60..800 (median 220) joining the
  history, the next after the reply's decoding and a pause (lognormal, median 60 s); a chat
  past 32000 tokens ends.
- adhoc: 70 a day (x scale, by site, local 08..19): system prompt (250), 20..4000 tokens of
  one-off text (median 300).

At scale 1.0, seeds 1..4: 5.2K..6.2K requests over two days, 1.18M..1.67M blocks requested,
0.20M..0.29M distinct (16.6..17.5 %), generated in 1.0..2.4 s each on a shared 2-core box.
875..1065 records screened, 126..186 adjudicated, 75..159 papers read at full text, 36..71
extracted, 39..53 assessed for bias, 409..920 dedup pairs a night, 75..110 chats, updates of
73..249 records. Blocks by kind: screen 27..40 %, extract 13..20 %, rob 15..19 %, update
3..11 %, chat 6..9 %, fulltext 4..8 %, recheck 4..7 %, dedup 5..7 %, adjudicate 2..3 %,
adhoc under 1 %. Setups: seed 1 criteria first, two passes, 3000-token windows, threaded, 7
reviews; seed 2 criteria first, paired, 14000, threaded, 5; seed 3 criteria first, paired,
3000, each group alone, 4; seed 4 variant first, paired, 14000, threaded, 4. At scale 0.2
(the tests): 0.25M..0.32M blocks, 1.04K..1.17K requests.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_fewshot import Segment
from bench.heldout_lits_desk import Desk

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, owner, step, segments (see ``Run``)
KINDS = ("screen", "adjudicate", "update", "recheck", "dedup", "fulltext", "extract", "rob",
         "chat", "adhoc")


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, owner, step, segments):
    screen, update, recheck and adjudicate have the review and the record; dedup the night
    and the new record; fulltext, extract and rob the review and the paper's record; chat the
    chat (``state.chats``) and the turn; adhoc the site and a count. ``times``: seconds from
    Monday 00:00 UTC. ``state``: the generator (setup, reviews, records, walks with their
    steps and request indices, amendments, updates, papers, chats)."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    state: Desk


def lit_screen(seed: int, scale: float = 1.0) -> Trace:
    """An evidence-synthesis group's screening assistant: dual title-and-abstract screening
    behind each review's criteria and examples, the adjudicator's conflicts, living reviews'
    search updates and re-checks, protocol amendments, the nightly de-duplication walk,
    full-text reading, data extraction and risk of bias over retrieved papers, reviewers'
    chats and ad-hoc queries, in three time zones. See the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace and its metadata (see ``Run``)."""
    d = Desk(random.Random(seed), scale)
    d.run()
    return Run(d.out, d.meta, d.times, d)
