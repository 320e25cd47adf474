"""bench.heldout's ``patent_search`` shape: one inference replica behind an IP law firm's
assistant for prior-art search and patent prosecution, over two days. Written blind at
b937759: by someone who had not read the policies, and no policy or hit rate was run on it
(nor LRU, OPT, a replay or any reuse statistic); the workload is modelled on how such tools
build their prompts, not on any policy.

Where the numbers come from: the structure (a firm system prompt and a per-task instruction;
the matter's claim set at the head of the requests about it; retrieved prior art read in
ranked pages against the claims; claim charts prompted one claim element at a time against
one reference; office-action responses drafted over the examiner's rejection and the cited
passages; amendments that rewrite the claims; family and citation walks; translation of
foreign references; attorneys' chats; landscape reports that classify an area's documents
under a client's taxonomy) follows public descriptions of patent search, claim-charting and
prosecution tools. Every rate, size and share below is this writer's estimate, not a
measurement; the replica is one of several, the counts its share.

Prompts are token segments cut into 16-token blocks by ``bench.heldout_fewshot.Blocks`` (one
model, one key space). Every request starts with the firm's system prompt (1400 tokens) and
its task's instruction (300..900); most end with a task cue (25..60). The clock starts
Tuesday 00:00 US Eastern and ends two days later; 30 % of matters are run from the Pacific
office (3 h behind), office hours 08..19 local with a lunch dip. Counts of a day are x scale.

World (bench/heldout_pats_world.py): 12 technology areas, weight Zipf(1) by a random rank,
each an index of 60000 documents whose ranks come up log-uniform (the popular ones often),
each made when first retrieved: a front page (abstract and claim 1; 200..1400 tokens, median
480) and 3..9 description passages (250..1600, median 700); 30 % are foreign (ja 12, zh 10,
de 5, ko 3 %) and show only a machine abstract (120..500) until the translator has done
them. A search shows the front page and the 3 best passages, a chart the whole document.
160 prosecution matters (at least 12) and 3..5 litigations (asserted patents, at any scale),
each in an area by weight with an activity weight (lognormal, sigma 1) and a claim set: 1..4
independent claims (15/35/40/10 %; a litigation asserts 2..5) of 100..700 tokens (median 280),
each followed by 2..9 dependents (litigation 3..10) of 20..180 (median 55); an independent
claim has 3..9 elements (12..160 tokens) as a chart row states them. A matter's key
references, 4..10 (litigation 12..30), come from its area's top 250 ranks. Each day is
prosecution-led or litigation-led: (pros, lit) 30 %, (lit, pros) 30 %, (pros, pros) 25 %,
(lit, lit) 15 % of seeds.

Requests (bench/heldout_pats_jobs.py, bench/heldout_pats_desk.py):

- screen: 16 prosecution searches a day (9 on a litigation-led day), a matter by weight, at
  its office hours: 1..4 pages (40/30/20/10 %) of 15 hits read in rank order, one stream
  (each request after the last one's reading at 6000 tokens/s and writing at 40/s, x
  0.8..1.25). Hits: the matter's key references (neighbours swapped 30 % of the time), then
  a tail half drawn again from its earlier searches' tails, else new from the index. Prompt:
  instruction (500), the claims as they stand, the document as shown, cue: a key reference
  re-read with unchanged claims and text is the same prompt again; the tail is mostly read
  once. Foreign hits in the top 5 go to the translator.
- invalidity: on a litigation-led day 2..3 litigations run 2..3 searches each of 2..6 pages
  (x scale, at least 1) of 25 hits, 60 % of the tail seen before; on a prosecution-led day
  one litigation runs one of 2..3 pages. The same prompt as screen (instruction 700) over the
  asserted claims, which never change.
- chart: after a prosecution search (30 %) its first translated key reference not yet
  charted against the first independent claim; after an invalidity search 2..4 of them (x
  scale, at least 1) against the first 1..2 asserted independent claims; 5..30 minutes
  later, one request a row: instruction (600), the claims as charted, the reference in full,
  the element, cue; 20 % of rows get a second pass with the attorney's note (15..250) after
  the element. The rows of a chart share everything up to the element.
- family: each night at 01..04 Eastern one walk: the first night 8 prosecution matters
  (x scale, searched before the clock), the second the matters searched on day 0 (every
  litigation, 30 % of the rest); for each matter's first 1..2 key references 8..80 (median
  25; litigation 30..200, median 80, x scale) family members and citations, 40 % index
  documents, the rest one-off front pages: instruction (300), the claims, the front page,
  cue.
- translate: one translator works its queue (top-5 foreign hits, a searched matter's first
  two key references, the art an office action cites, the references pinned to a chat)
  section by section: instruction (400), the language's glossary (300..1400, median 700),
  the source section, cue; after the last section the document reads in English (new text),
  so every later prompt showing it changes from there on.
- landscape: each night at 21:30..23:30 Eastern 1 (70 %) or 2 reports: an area by weight, a
  client's taxonomy (700..3000, median 1500), ranks 0..n-1 (n 200..500 x scale, at least 20)
  in order: instruction (600), taxonomy, front page, cue; then 6..12 cluster summaries over
  up to 30 of their documents' outputs (40..200 tokens each). Night 1's first report is a
  refresh of night 0's in half the seeds: the same taxonomy and documents (re-sent exactly
  unless translated since) plus 3..8 % more of the area's documents (the week's
  publications, drawn like search hits).
- triage: 20 office actions a day arrive 07..10 Eastern on prosecution matters by weight,
  each triaged at once: instruction (350), the rejection (2..6 sections of 200..1400, median
  600), cue. An action cites 1..3 references (30/45/25 %; 70 % a key reference) at two
  passages each.
- oa: a response session the same day 1..6 h after arrival (50 %), the next day (30 %),
  else after the clock; 20 actions (x scale, at least 2) pending from before get one on day
  0 or 1. A turn: instruction (900), the claims, the rejection, the cited art as shown (front
  page and the cited passages, or the machine abstract), the history, a message (15..700,
  median 90); replies 150..1800 (median 550); 3..16 turns (median 6) about 150 s apart, 15 %
  of turns followed by a 1..4 h break.
- amend: 65 % of responses, 5..40 minutes after the last reply: 1..4 turns (median 2) over
  instruction (500), the claims, the rejection, the history; when it ends a new version of
  the claims (an independent claim rewritten, the first 70 % of the time; 0..2 of its
  dependents cancelled; 0..2 new dependents at the end), so every prompt of the matter is new
  from the first changed claim on; half are re-screened 10..90 minutes later (15 hits).
- chat: 36 attorneys' chats a day (28 on a litigation-led day) in Eastern office hours, 5 %
  on a litigation (35 % on a litigation-led day, that day's ones): instruction (350), the
  claims, 0..2 of the top 5 key references pinned (40/40/20 %) as shown, the history, a
  message (5..600, median 50); replies 40..1200 (median 280); 1..20 turns (median 5) about
  90 s apart. A chat past 40000 tokens ends.

At scale 1.0, seeds 1..4: 4.0K..5.1K requests over two days, 1.51M..2.02M blocks requested,
0.31M..0.33M distinct (16..20 %), generated in 1.5..4.0 s each on the shared 2-core box
(load-dependent). Seeds 1, 3 and 4 are (pros, lit), seed 2 (lit, lit) (seeds 5 and 6: pros,
pros): 450..700 invalidity hits, 30..39 charts, 51..65 office actions, 52..64 documents
translated. Blocks by kind: screen 11..21 %, invalidity 14..17 %, landscape 6..17 %, oa
13..15 %, chart 8..15 %, family 8..13 %, chat 9..10 %, translate 4..6 %, amend 1..2 %,
triage under 1 %. On a litigation-led day invalidity and charts are about 40 % of its
blocks, on a prosecution-led day screens lead. At scale 0.2 (the tests): 1.1K..1.5K
requests, 0.40M..0.54M blocks.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_fewshot import Segment
from bench.heldout_pats_desk import Desk

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, owner, step, segments (see ``Run``)
KINDS = ("screen", "invalidity", "chart", "family", "translate", "landscape", "triage", "oa",
         "amend", "chat")


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, owner, step, segments):
    screen and invalidity have the search (``state.searches``) and the hit's rank, chart the
    chart (``state.charts``) and the row, family the walk (``state.walks``) and the position,
    translate 0 (the translator, ``state.translator``) and the position in its queue,
    landscape the report (``state.reports``) and the position (documents, then clusters),
    triage the office action (``state.oas``) and 0, oa, amend and chat the chat
    (``state.chats``) and the turn. ``times``: seconds from Tuesday 00:00 Eastern.
    ``state``: the generator (areas, documents, matters and their claim versions, office
    actions, the jobs' walks, the chats)."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    state: Desk


def patent_search(seed: int, scale: float = 1.0) -> Trace:
    """An IP law firm's assistant: prior-art screens and litigation invalidity searches read
    against each matter's claims, claim charts element by element, office-action responses
    and the amendments that follow, family and citation walks, translation of foreign
    references, attorneys' chats and nightly landscape reports, over two days some led by
    litigation. See the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace and its metadata (see ``Run``)."""
    desk = Desk(random.Random(seed), scale)
    desk.run()
    return Run(desk.out, desk.meta, desk.times, desk)
