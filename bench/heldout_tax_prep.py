"""bench.heldout's ``tax_prep`` shape: one inference replica behind a tax-preparation firm's
assistant on the two busiest days of filing season (Monday and Tuesday, the deadline's eve).
Written blind at b2b0f8e: by someone who had not read the policies, and no policy or hit rate
was run on it (nor LRU, OPT, a replay or any reuse statistic); the workload is modelled on how
such a firm's tools build their prompts, not on any policy. Every rate, size and share below
is this writer's estimate of the domain, not a measurement.

Prompts are token segments cut into 16-token blocks by ``bench.heldout_fewshot.Blocks`` (one
model, one key space); the clock starts Monday 00:00 local and ends 48 h later. The office
works 06..23 (peak 09..17), the client portal has an evening peak, day 1 is 25 % busier.

The world (bench/heldout_taxp_world.py): 230 x scale returns in progress (35 % already
finished, with a draft), each with an organizer profile (200..1800 tokens), last year's
return (1800..12000, median 4000, in 500-token sections) and 2..18 source documents (median
6) of 13 form types (W-2, 1099-INT/DIV/B/NEC/R/G, 1098, 1098-T, K-1, SSA-1099, 1095-A,
receipts; 1..30 scanned pages of 150..1400 OCR tokens); 55 % of an unfinished client's
documents were uploaded and extracted before the trace, the rest arrive by the portal's
hours. A reference index of 40 IRS publication sections (900..7000 tokens, Zipf weight by a
random rank, 4 of them hot this season at the top weight), an internal guidance memo (7
sections of 300..1600 tokens) and 30 x scale amended-return files from earlier years (the
filed return, 3..9 records, the IRS notice).

Requests (bench/heldout_taxp_jobs.py, bench/heldout_taxp_desk.py):

- intake: one queue reads every uploaded page: system (650), the form type's fixed
  extraction prompt (300..1600), the page; each page's record (60..900 tokens) joins the
  client's file, the document's once its last page is read. 10..15 % of blocks.
- prep: 45 sessions a day (x scale, office hours) on a client in progress with records in:
  system (1800), profile, last year's return, every record extracted by then, the history,
  a message (8..1500, median 70); 2..25 turns (median 7), replies 60..1500 tokens, a pause
  of median 90 s. 45 % of sessions on a client with every document in finish its return
  (a draft: a summary worksheet of 500..2200 tokens, then 2000..11000 tokens). 37..49 %.
- review: 0.2..8 h after a return is finished a reviewer walks a 9-item checklist: system
  (900), the draft, the records, the item (120..700), a cue; 30 % are sent back, fixed
  0.2..5 h later (one section rewritten, every block from it on new) and reviewed again.
  12..17 %.
- email: after a passed review (5 min..4 h): system, one of 5 templates, profile, the
  summary worksheet, the preparer's note; 0..2 revisions change the note. About 1 %.
- recheck: at 01:00..01:30 each night every finished return, in client order: system (500),
  the memo as it stands, the summary worksheet, a cue. Every seed revises the memo on day 0
  at 17..20 h (one section and all after it rewritten), so night 1 is new from there on.
  4..10 %.
- extension: on day 1 at 19..20:30 one walk files Form 4868 for every return still open:
  system, the extension letter (500..1200), profile, the estimate (80..400). 1..2 %.
- rules: 70 sessions a day: system (900), 1..4 sections retrieved by weight (in retrieval
  order), 0..2 memo sections, history, a question; 1..5 turns. 6..9 %.
- amend: each amended file gets 1..3 sessions over the two days: system (1100), the whole
  file, history, a message; 2..10 turns. 9..12 %.
- walkin: 9 walk-in clients a day: 1..4 documents scanned at once, a session 25..45 min
  later over profile and records; 3..10 turns; 60 % finish. 2..6 %.
- oneoff: 260 single questions a day: system (350), a question (10..800). About 1 %.

Seeds differ in structure: seed s plays scenario (s - 1) % 4 of ``SCENARIOS``: "memo" (a
second memo revision on day 1 at 10..13 h and an immediate daytime re-check of every finished
return), "surge" (deadline-eve walk-ins x 8 on day 1 12..22 h), "outage" (the scanner
pipeline stops on day 0 at 09:30 for 3..5 h; the uploads pile up and are read in one burst),
"notice" (new IRS guidance on day 1 at 08..10 h: a new section at 3 x the top weight).

At scale 1.0, seeds 1..4: 4.1K..4.8K requests over two days, 1.46M..1.61M blocks requested,
0.24M..0.26M distinct (15..17 %), generated in 1.0..1.4 s each on a shared 2-core box; 250..300
clients, 1.4K..1.7K pages read, 40..62 e-mails. At scale 0.2 (the tests): 0.26M..0.39M
blocks, 15..19 % distinct.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_fewshot import Segment
from bench.heldout_taxp_desk import Desk

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, owner, step, segments (see ``Run``)
KINDS = ("intake", "prep", "rules", "review", "recheck", "email", "extension", "amend",
         "walkin", "oneoff")
SCENARIOS = ("memo", "surge", "outage", "notice")


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, owner, step,
    segments): intake has owner 0 and the page's place in the queue, review and recheck the
    client or night and the item's place, email the e-mail and its draft, chats the chat
    (``state.chats``) and the turn. ``times``: seconds from Monday 00:00. ``state``: the
    generator (clients, documents, queues, memo versions, chats)."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    state: Desk


def tax_prep(seed: int, scale: float = 1.0) -> Trace:
    """A tax-preparation firm's assistant on the two days before the filing deadline:
    page-by-page extraction, preparers' sessions over a client's file, checklist reviews,
    nightly re-checks against a revised memo, rules questions, amended returns, walk-ins and
    extensions. See the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace and its metadata (see ``Run``); seed s plays SCENARIOS[(s - 1) % 4]."""
    d = Desk(random.Random(seed), scale, SCENARIOS[(seed - 1) % len(SCENARIOS)])
    d.run()
    return Run(d.out, d.meta, d.times, d)
