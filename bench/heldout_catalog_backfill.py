"""bench.heldout's ``catalog_backfill`` shape: one inference replica behind a retail company's
LLM service, whose day opens with a bulk pass that shares no prefix. Written after
``adaptive`` was frozen (at 3c0364c), blind: by someone who had not read the eviction
policies, bench/baselines.py, bench/policies.py, docs/eviction.md, docs/benchmarks.md or any
results, and no policy, LRU, OPT or hit rate was run or computed on it; the workload is
modelled on how a retailer's catalog jobs and assistants build their prompts, not on any
policy.

Where the numbers come from: the structure (a nightly enrichment job over the PIM's export,
one completion prompt per product record; a price feed, stock changes, data fixes, launches
and retirements editing records; a shopping assistant behind its system prompt and the
store's policy pages that looks products up as tool calls; merchandisers rewriting product
copy behind a brand style guide; a pairwise recommendation job) follows how retailers
describe such systems in public. The rates, sizes and shares are this writer's estimates,
not measurements.

Prompts are laid out in token segments and cut into 16-token blocks by
``bench.heldout_fewshot.Blocks`` (one model, one key space). The clock starts at midnight,
store time; the trace ends when the second night's pass, its retries and sweep are done.

Catalog (bench/heldout_catalog_parts.py): 12000 records x 0.85..1.15 at scale 1.0, in 16
departments of Zipf(0.8) sizes, catalog order department by department, each department with
a length multiplier (lognormal, sigma 0.35). A record's sections: identity (title, brand, SKU;
18..90 tokens, median 34), offer (price, stock, promotion; 12..60, median 24), attributes
(30..600, median 110 x the multiplier), description (40..2500, median 200 x it), specs (65 %
of records; 30..1500, median 160 x it): about 35 blocks a record, varying 3..300. Shoppers and
jobs look items up by Zipf(0.9) popularity of a random rank.

Edits (each replaces one section, so a record is new content from that section on): the ERP's
nightly feed reprices 1..3 % of the items while the pass runs; at 06:00 a promotion
reprices 10..30 % of one or two departments, at 18:00..20:00 a flash sale 5..15 % of one;
stock lines change for 2 % of the items a day (popular ones, by the shoppers' clock); data
stewards fix the attributes or specs of 0.5 % a day and retire 0.3 % (09..18); the PIM
launches 0.5..1.2 % of the catalog as new items at 10:00..16:00 (placed in their departments);
accepted rewrites replace descriptions.

Requests:

- backfill: at 00:30..01:30 each night the job sends every live record once, in catalog
  order, at 3..6 records a second (x scale): the record, then a 10-token completion cue. No
  system prompt or template, so no two records share a first block. Records go in batches
  of 64, 128 or 256 (x scale); 2..5 batches fail on the first night (0..2 on the second) and
  are sent again exactly 10..45 minutes after they ended (retry); 5..20 minutes after the
  pass the change-feed sweep re-sends the records edited since the pass sent them (delta:
  new content from the edited section on). The second night's pass re-sends unchanged
  records exactly.
- chat: 320 conversations a day (x scale), Poisson by the shoppers' hour (lunch and evening
  peaks, a trickle at night); 1..20 turns (median 3). A turn is the system prompt (1400
  tokens), the 6 policy pages (300..2000 each, median 900; on 70 % of days one page is
  updated at 07:00..11:00), the history, the message (6..400 tokens) and the records looked
  up (a 10..30-token call, then the record as it stands): the first turn has the product
  page's item 70 % of the time, later turns look up 1..3 items 40 % of the time. The reply
  (30..700, median 140) joins the history; the next message follows the reply's decoding and
  a lognormal pause (median 50 s), 12 % of the time after 5..40 minutes away; a
  conversation past 12000 tokens ends.
- merch: 10 sessions a day (x scale x 0.6..1.4, at least 1) start at 09:00..17:00 on a run
  of 4..40 (median 14) consecutive items of a department: system prompt (900), the brand
  style guide (2000..4500 tokens in sections), the group's brief (60..500), the record as it
  stands, an instruction. A draft is done (55 %), regenerated (25 %, the same prompt) or
  revised (20 %, the prompt, the draft and a note), at most three tries; 85 % are accepted
  as the item's new description. 40..240 s between items.
- rec: at 08, 11, 14, 17, 20 and 23 h the recommendation job takes 28 anchors (x scale, at
  least 2) by popularity and compares each with 4..12 neighbours within 30 places in its
  department: system prompt (650), the anchor's record, the candidate's, a question; pairs
  0.3..2 s apart, an anchor's pairs back to back.

At scale 1.0, seeds 1..4: 20.8K..26.3K requests over 25.6..26.3 hours, 1.47M..1.82M blocks
requested, 0.44M..0.64M distinct (30..35 %), generated in 2.5..4.0 s each on a shared 2-core
box. The first pass: 8.9K..11.4K records, 0.31M..0.47M blocks (34..47 a record) in 30..49
minutes. Blocks by kind: backfill 42..52 %, chat 34..40 %, rec 8..9 %, merch 4..7 %, retry
1..3 %, delta under 1 %. At scale 0.2 (the tests): 1.8K..2.3K records, 0.33M..0.37M blocks.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_catalog_jobs import Pass, RecRun, Store
from bench.heldout_catalog_parts import Catalog
from bench.heldout_catalog_shop import Chat, Rewrite
from bench.heldout_fewshot import Segment
from bench.heldout_legal_parts import Versioned

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, owner, item or turn, segments (see ``Run``)
KINDS = ("backfill", "retry", "delta", "chat", "merch", "rec")


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, owner, step,
    segments): backfill, retry and delta have the night (index into ``passes``) and the item;
    chat the conversation (``chats``) and the turn; merch the session (``rewrites``) and the
    item; rec the run (``recs``) and the candidate item. ``times``: seconds from midnight.
    ``edits``: (time, item, section, why) for every edit and launch. The catalog, the policy
    pages and the style guide as they stand at the end (their versions inside)."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    catalog: Catalog
    edits: list[tuple[float, int, int, str]]
    system: dict[str, Segment]
    cue: Segment
    policies: Versioned
    guide: list[Segment]
    passes: list[Pass]
    chats: list[Chat]
    rewrites: list[Rewrite]
    recs: list[RecRun]


def catalog_backfill(seed: int, scale: float = 1.0) -> Trace:
    """A retailer's replica: a nightly backfill pass over every product record in catalog
    order (no shared prefix, retried batches, a change-feed sweep), shoppers' chats behind a
    system prompt and policy pages, merchandisers' rewrites behind a style guide, pairwise
    recommendations, and the next night's pass over the edited catalog. See the module
    docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace and its metadata (see ``Run``)."""
    s = Store(random.Random(seed), scale)
    s.run()
    return Run(s.out, s.meta, s.times, s.catalog, s.edits, s.system, s.cue, s.policies,
               s.guide, s.passes, s.chats, s.rewrites, s.recs)
