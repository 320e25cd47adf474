"""bench.heldout's ``moderation`` shape: one inference replica behind a social platform's
content-moderation service over two days. Written blind at be52c07: by someone who had not read
the policies, and no policy or hit rate was run on it (nor LRU, OPT, a replay or any reuse
statistic); the workload is modelled on how such a service builds its prompts, not on any
policy. Every rate, size and share below is this writer's estimate of the domain, not a
measurement.

Prompts are token segments cut into 16-token blocks by ``bench.heldout_fewshot.Blocks`` (one
model, one key space). The clock is UTC, Monday 00:00 to Wednesday 00:00. Users post by their
region's local hours (an evening peak at 19..21, a trough at 03..05): the Americas (UTC-5),
Europe (UTC+1), South Asia (UTC+5:30) and East Asia (UTC+9), each with its languages (13 in
all); spam bots and trends keep their own clocks.

Seeds differ in the platform: seed s has layout (s - 1) % 4 of ``LAYOUTS``
(bench/heldout_moderation_world.py): "short" (a short-post network: posts, 30 % with 1..4
images, and replies; 850 items a day, 2 trends a day with 60..220 echoes, 30 % of them
quote-posts; roots discussed for ~8 h; spam as replies), "forum" (long threads: openers of
100..4000 tokens and comments, 45 % of which also send the comment they answer; 650 a day; 1
trend a day; threads discussed for ~36 h; spam as new threads), "video" (videos: a title and
description, then 2..6 transcript chunks of 400..2500 tokens, and short comments; 650 a day;
spam as comments) and "market" (listings of 150..2500 tokens, 90 % with 1..5 image captions,
buyer messages and reviews under them; 500 a day; 0.75 trends a day; listings live ~72 h;
scam listings as spam). Region shares differ too (forum and market lean to the Americas, video
spreads the most).

The world: the classifier's system prompt (500 tokens); the community guidelines (9..12
policy areas of 450); per surface its rules (400..2500, 500-token sections) and 4..7 few-shot
examples (200..900 each); per language a guidance (250..1400); the senior reviewer's system
prompt (1100), playbook (3000..8000) and 8..14 hard cases (250..1200); the appeal system
prompt (700) and rubric (600). Roots from before the trace (150 x scale per root surface,
at least 30) and the trace's own, each with a lognormal(0, 1.2) popularity that fades with
age; 50000 users, 300 of them repeat offenders posting 15 % of the items; a user's history is
an account summary (100..500), their earlier strikes (mean 0.4, repeat offenders 2.5; 60..400
each) and the trace's removals.

Requests (bench/heldout_moderation_desk.py):

- classify: every organic item (Poisson per region and hour by the local activity, x scale),
  a root or a reply under a live root (by popularity and age): head = system, guidelines,
  the surface's rules, its examples, the language's guidance (NOTE(moderation-head)); then
  the root it sits under (and the reply it answers), the item, a cue (40). A root with parts
  (images, transcript chunks) sends one more request per part: the item and that part.
- viral: 2 x the layout's trends a day (x scale, at least one), started by the regions'
  activity; the trending root (40 x a root's popularity, so organic replies pile on too),
  then its echoes over an exponential tail (mean 20..90 min): replies under it, 40 % of them
  one of 2..4 copypasta variants (20..200 tokens) and a short tail (3..60).
- quote: the short network's quote-posts of a trend: the original resent, then the quote.
- spam: 2 x the layout's waves a day (x scale, at least one) at any hour, 40..200 items over
  5..60 min from fresh accounts: 80 % one of 1..3 templates (40..300) and a unique tail, in
  English (70 %) or one language; replies go under random recent roots.
- escalate: 6 % of first passes (spam 1 %, echoes 4 %) go 1..6 s later to the senior
  reviewer: its system prompt, the same guidelines version, the rules, the playbook, the hard
  cases, the language's guidance, the item with its parts, the first verdict (30..400), a cue
  (60); half of them end in a removal. A quarter of appeals go there too (step 1), with the
  appeal's material and its verdict.
- appeal: first passes remove 5 % of the items (echoes 8 %, quotes 6 %, repeat offenders'
  30 %, spam 90 %); 25 % of a person's removals (2 % of spam) are appealed 10 min..40 h later
  (median 3 h): the appeal system prompt, the guidelines, the rules, the rubric, the item
  with its parts, the decision, the user's history as it stands, their statement (20..1200).

Versions: 2..3 guidelines versions (one policy area rewritten, 30 % of the time a new one
after it) start in distinct slots at 14:00 or 18:00 UTC, go to 10 % of requests for a 1..3 h
canary, then to all; 1..2 surface-rule edits and 1..2 example refreshes (1..3 examples added
at the end) land at 14..23 UTC.

At scale 1.0, seeds 1..4 (short, forum, video, market): 1.9K..2.8K requests over two days,
1.34M..1.95M blocks requested, generated in 0.9..2.1 s each on a shared 2-core box; 1..5
trends, 1..3 spam waves, 2..3 guidelines versions, 73..155 escalations, 26..53 appeals.
Blocks by kind: classify 54..81 %, viral 4..20 %, escalate 7..10 %, spam 6..12 %, quote 8 %
(short only), appeal 1..2 %. At scale 0.2 (the tests): 520..650 requests, 0.34M..0.46M
blocks, 0.2..0.35 s each.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_fewshot import Segment
from bench.heldout_moderation_desk import Desk
from bench.heldout_moderation_world import LAYOUTS

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, owner, step, segments (see ``Run``)
KINDS = ("classify", "viral", "quote", "spam", "escalate", "appeal")


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, owner, step,
    segments): the owner is the item (``state.items``); step is the part for a first pass
    (0: the item itself), 0 or 1 for an escalation (from the first pass, from an appeal), 0
    for an appeal. ``times``: seconds from Monday 00:00 UTC. ``state``: the generator
    (layout, policy parts and versions, items, bursts, waves, escalations, appeals)."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    state: Desk


def moderation(seed: int, scale: float = 1.0) -> Trace:
    """A social platform's moderation service: every item classified behind the guidelines,
    the surface's rules and examples and the language's guidance; guidelines versions behind
    a canary, trending threads with near-duplicate echoes and quote-posts, spam waves,
    senior-reviewer escalations and appeals with the user's history. See the module
    docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace and its metadata (see ``Run``); seed s has LAYOUTS[(s - 1) % 4]."""
    d = Desk(random.Random(seed), scale, LAYOUTS[(seed - 1) % len(LAYOUTS)])
    d.run()
    return Run(d.out, d.meta, d.times, d)
