"""bench.heldout's ``marketplace`` shape: one inference replica of the LLM service behind a
large online retail marketplace. Written after ``adaptive`` was frozen (at 395a810), by
someone who had not read the eviction policies; the workload is modelled on how such traffic
looks, not on any policy. Prompts are laid out in token segments and cut into 16-token blocks
by ``bench.heldout_fewshot.Blocks`` (one model, one key space). The clock starts on a
Wednesday 00:00 UTC; replies decode at 50 tokens/s; rates are a weekday's at scale 1.0
(Poisson, weekends 1.2 x) and follow the local hour of each storefront (a night trough of
0.08 at 04..05, a lunch bump of 1.3, an evening peak of 1.85..1.9 at 20..22).

The replica serves one shard of the catalog (the router keeps a product's pages and a
session's requests on one replica), so its rates are a slice of the marketplace's: 3000
products at the start (scaled, at least 150), 70..150 new ones a day; the streams are scaled
too (at least 2 a day for each kind of conversation, 0.75 for batches, 1 for pastes). 7
storefronts, each its own language or currency, so the same product has different page text
in each: en-US (UTC-5, 31 % of shoppers), es-MX (-6, 7 %), pt-BR (-3, 8 %), en-GB (0, 12 %),
de-DE (+1, 14 %), fr-FR (+1, 10 %), ja-JP (+9, 18 %), in three regions. A product has a home region
(by those shares) and is listed in 85 % of its region's storefronts (at least one) and 25 %
of the others; its popularity is Zipf(0.95) by a random rank, 3 x in its home region's
storefronts, so what is hot moves round the world with the clock. A product page is head
(title, brand, bullets; 60..600 tokens, median 220), offer line (price, stock, delivery;
25..70), description and specifications (150..4000, median 800) and review summary
(100..600, median 250), per storefront. The offer line changes (so every later block of the
page is new) every 5 days (55 % of products), 20 hours (33 %) or 3 hours (12 %) on average.

- product questions: 1100 a day: the Q&A prompt (1800..2600) + the storefront line (20..40)
  + the product's page as it is now + the question (4..300, median 22); 15 % ask 1..2 more
  (8..300 s later, the page read again) after the answer (20..600, median 110).
- flash sales: 5 a day (scaled, at least 1): a deal of the hour in a region, starting at
  11..13 or 18..21 local in its first storefront, on 1..3 products ranked in the top
  0.5..20 %; each takes 3..20 % (median 8 %) of the region's product picks (questions and
  assistant searches and views) for the hour; its offer line changes at the start, every 15
  minutes ("% claimed") and at the end.
- viral items: 1.5 a day (scaled, at least 0.5): half of them a product launched in the last
  3 days, else one from the lower 90 % of the ranks; its share of the picks (in its home
  region 60 %, else everywhere) rises over 1..4 h to 2..20 % (median 6 %), then halves every
  3..30 h (median 8); its stock line changes 2..5 times over the first day.
- shopping assistant: 55 sessions a day: the assistant prompt with its tool schemas
  (2600..4000) + the storefront line + the shopper's profile (40..200), then the history;
  1..20 turns (median 4), 8..600 s apart (median 45). 90 % of turns call a tool, which sends
  the request again with the call (15..50) and its result: a search (45 %: 3..8 product
  cards, 60..140 tokens each, picked by popularity), a product's whole page (30 %, 60 % of
  them a product a search showed), or add a viewed product to the cart (15 %, the whole cart
  listed, 40 + 45 a product; a search when none is left to add); the reply (30..800, median
  150) joins the history. 30 % of sittings are followed by a return 3 min..4 h later (median
  25 min), 15 % by one 0.6..6 days later (median 1.5 days; half as often after a return), at
  an hour the shopper's storefront is awake, for 1..12 turns (median 3): the conversation is
  re-sent whole, the message after a note of the cart and viewed items (40 + 45 a cart item
  + 15 a viewed one). Conversations end past 32000 tokens.
- customer service: 45 chats a day: the support prompt (1400..2400) + the storefront line +
  the issue's policy for the region (where is my order 34 %, return 22 %, refund 15 %,
  damaged 11 %, cancel 10 %, payment 8 %; 400..3000, median 1200) + the order's details
  (120..1200, median 350, unique) + 1..14 turns (median 4); 15 % come back 1..48 h later
  (median 6 h) with a tracking update (40..150) for 1..12 more turns.
- seller listings: 200 sellers (scaled, at least 4; Pareto(1.2) sizes) list in their
  region's storefronts and 20 % of each other; 8 batches a day in the sellers' office hours:
  2..120 products (median 10) whose listings the tool writes one request after another, for
  every storefront the seller lists in: listing prompt (900..1800) + the seller's style
  guide (200..3000, median 800) + the product's attributes (60..900, median 220) + the
  storefront's instruction (10..25). The listing (250..1800, median 700; its first quarter
  the page head) is the product's page text there; each product goes on sale 0.25..12 h
  after the batch (moderation, median 2 h), at a random rank in the lower 90 % (4 % of
  launches in the top 50).
- review summaries: at 08:00 UTC (03:00 at the marketplace's home) a job walks the products
  on sale with new reviews since the last run (180 reviews a day, scaled, Poisson by
  popularity; at most 40 a product) in catalog order, one request after another: review
  prompt (500..1100) + the product's head and current summary in its first storefront + its
  new reviews (15..600 tokens each, median 90) + a storefront's instruction, for each
  storefront it is listed in; each reply is the product's summary there from then on (a
  page's last part, so only its last blocks change).
- bulk pastes: 15 a day: a seller pastes a catalog file into the seller assistant (prompt
  800..1500 + 3000..40000 tokens, median 10000 + an ask), once.

9000 requests at scale 1.0 span 67..80 hours (Wednesday into Saturday, 3..4 review runs)
over seeds 1..10: 2.27M..2.65M blocks requested, 295k..361k distinct (11.7..13.6 %: every
request repeats its prompt, popular pages come back until their offer line changes, while
the long tail of pages, the assistant's tool results and new reviews are new). Product
questions are 40..50 % of the requests (34..45 % of the blocks), assistant sessions 18..24 %
(34..43 %), support 6.6..9.5 % (6.5..11 %), listings 6.7..16 % (3.2..10 %), review summaries
11..14 % (4.0..5.5 %), bulk pastes 0.5..0.6 % (1.3..2.2 %); 17..31 flash-sale items and 2..8
viral items start in the trace. At scale 0.25 a trace spans 42..67 h (seeds 1..5); at scale
0.05 (150 products) 21..99 h, and of seeds 1..20 7 have no viral item, 4 no flash sale, 3 no
listing batch, 2 no bulk paste and 1 no assistant session.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_fewshot import Segment
from bench.heldout_marketplace_chat import Conv
from bench.heldout_marketplace_jobs import Batch, JobsState, Night, Seller
from bench.heldout_marketplace_parts import Boost, Catalog

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, key, step, segments (see ``Run``)
KINDS = ("qa", "assist", "support", "listing", "reviews", "upload")
REQUESTS = 9000  # at scale 1.0


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, key, step, segments):
    (kind, conversation, request) for the conversations (``convs``), ("listing", batch,
    request), ("reviews", night, request) and ("upload", paste, 0). ``times``: seconds from
    Wednesday 00:00 UTC. ``boosts``: the flash sales and viral items, in start order."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    heads: dict[str, Segment]
    lines: list[Segment]
    instructions: list[Segment]
    policies: dict[tuple[int, int], Segment]
    catalog: Catalog
    convs: list[Conv]
    sellers: list[Seller]
    batches: list[Batch]
    nights: list[Night]
    boosts: list[Boost]


def marketplace(seed: int, scale: float = 1.0) -> Trace:
    """One replica behind an online marketplace: product questions over pages whose price
    and stock change, storefronts in seven locales on a daily cycle, flash sales and viral
    items, shopping-assistant sessions with a growing cart, support chats, seller listing
    batches, a nightly review summarization in catalog order, bulk pastes. See the module
    docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace of ``int(REQUESTS * scale)`` requests and its metadata (see ``Run``)."""
    s = JobsState(random.Random(seed), int(REQUESTS * scale), scale)
    s.run()
    return Run(s.out, s.meta, s.times, s.heads, s.lines, s.instructions, s.policies,
               s.catalog, s.convs, s.sellers, s.batches, s.nights, s.boosts)
