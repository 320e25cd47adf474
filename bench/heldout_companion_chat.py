"""bench.heldout's ``companion_chat`` shape: one inference replica behind a consumer
character-chat platform (AI companions, role-play) over a weekend. Written blind at 5cfc54c: by
someone who had not read the policies, and no policy or hit rate was run on it (nor LRU, OPT, a
replay or any reuse statistic); the workload is modelled on how such a platform builds its
prompts, not on any policy. Every rate, size and share below is this writer's estimate of the
domain, not a measurement.

Prompts are token segments cut into 16-token blocks by ``bench.heldout_fewshot.Blocks`` (one
model, one key space). The clock runs from Saturday 00:00 UTC to Monday 00:00 UTC; each user
starts sessions by their own local hour (an evening peak at 20..23, after school and work at
15..19, a lunch bump, the small hours nearly empty), so the layout's time zones set the peaks.

Seeds differ in how the platform is set up: seed s has layout (s - 1) % 4 of ``LAYOUTS``
(bench/heldout_companion_world.py): "hits" (400 cards, Zipf 1.1 with the top 3 mega-popular
at 3 x the top rank's weight, memory on, an 8K context with "half" drops, sessions of median
12 user turns, 5 % group chats, 66 users in the Americas), "longtail" (3000 cards, Zipf 0.7,
none mega, no memory, 16K with "slide" drops, short sessions (median 6), 8 % groups, 130 users
around the world), "memory" (800 cards, Zipf 1.0, one mega, memory on, 24K with "half" drops,
long sessions (median 16), 10 % groups, 27 users in Europe and East Asia) and "groups" (1200
cards, Zipf 0.9, two mega, no memory, 12K with "slide" drops, median 10 turns, 30 % groups, 55
users in the US and Europe). Users are x scale x 0.9..1.1 (at least 8).

The world: the platform's system prompt (1200 tokens, 400-token sections) and a post-history
instruction (90) sent after the user's message. Character cards by a random popularity rank: a
definition (description, personality, scenario: 150..4000 tokens, median 900, 500-token
sections), example dialogues for 70 % (100..3000, median 600), a greeting (40..1200, median
250) that opens every chat with the character, a lorebook for 20 % (8..60 entries of
50..500). Users: a time zone by the layout's shares, a persona for 45 % (30..800), a memory
summary where the layout keeps one (100..1000 at the start, at most 1200), 0..4 chats from
before the trace (15 % none, 35 % one) whose histories (300..120000 tokens, median 5000) are
user messages (3..600, median 40) and replies (40..1000, median 250).

Requests (bench/heldout_companion_chats.py):

- chat: a turn of a one-character chat: the platform prompt, the card's definition, the
  lorebook entries the recent messages triggered (in the book's order), the example dialogues,
  the persona, the memory, the history the frontend keeps, the message, the post-history
  instruction; the reply then joins the history. At a turn of a chat with a lorebook the
  triggered entries change 30 % of the time (one added, up to 4, or one replaced); 4 % of the
  turns (past a few messages) the user first deletes their last 1..2 exchanges (a rewind).
- the context: a prompt leaves 400 tokens for the reply. Past that, "slide" drops the oldest
  history messages, just enough, at every turn that overflows; "half" drops the oldest down to
  half the room the head leaves, and where users have a memory the summarizer first folds the
  dropped messages into it (a memory request; the turn then sends the new memory).
- group: a group chat of 2..4 characters by popularity: the platform prompt, the user's
  scenario (60..600), each member's definition in order (no lorebook or examples), persona,
  memory, history, a line naming the speaker (20). Per user message 1 (50 %), 2 (30 %) or 3
  characters answer one after the other, each 1..3 s after the last reply streamed; each reply
  joins the history.
- swipe: 20 % of replies are swiped 1..6 times (mean 1.85): the prompt re-sent exactly once
  the reply has streamed (35 tokens/s) and been read (lognormal, median 12 s); the last reply
  is kept.
- memory: where users have a memory the summarizer runs 2 s after every 8..20 of a user's
  turns: its prompt (500), the persona, the memory as it stands, the chat's last 8..16
  messages, a cue (40); the memory gets a new version 10..120 tokens longer. The "half" folds
  are memory requests too (the dropped messages instead of the last ones).

Sessions: a user starts 1.1 sessions a day x their appetite (Gamma(2), mean 1), Poisson per
hour by their local hour; a session that finds the user still in one is dropped. It resumes
the user's last chat (65 %), another of theirs (15 %) or opens a new one (20 %, and always for a
user with none: a card by popularity, a group chat by the layout's share) and lasts the
layout's user turns, each after the last reply streamed and a lognormal pause (median 35 s).
So users come back hours later to the same chat and its whole history is sent again.

Changes: on Sunday at 10..16 UTC the platform deploys a new system prompt (one section
rewritten: from it on every prompt is new); 2..5 creators' edits of a card (by popularity)
rewrite one section of its definition; the memories' versions; rewinds; lorebook entries.

At scale 1.0, seeds 1..8 (hits, longtail, memory, groups, twice): 1.9K..4.3K requests over the
two days, 1.31M..2.47M blocks requested, generated in 1.2..2.8 s of CPU each on a shared
2-core box (seeds 1..4: 4298, 2650, 1884 and 2597 requests; 1.64M, 1.63M, 1.65M and 1.68M
blocks). Blocks by kind: chat 37..67 %, swipe 23..27 %, group 0..36 % (groups the most), memory
9 % (hits) and 2 % (memory). At scale 0.2, seeds 1..4 (the tests): 0.20M..0.39M blocks, 0.16..0.33
s each; users are at least 6, so a small "memory" run can be tiny (seed 7: 74 requests).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_companion_chats import Desk
from bench.heldout_companion_world import LAYOUTS
from bench.heldout_fewshot import Segment

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, owner, step, segments (see ``Run``)
KINDS = ("chat", "swipe", "group", "memory")


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, owner, step,
    segments): chat has the chat (``state.chats``) and its turn (the request's position in
    the chat's ``sent``), group the chat and the speaking card, swipe the chat and the index
    of the request it re-sends, memory the user and 0 (the periodic run) or 1 (a fold).
    ``times``: seconds from Saturday 00:00 UTC. ``state``: the generator (layout, platform
    prompt, cards, users, chats, the head length of each request, folds, deploy, edits)."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    state: Desk


def companion_chat(seed: int, scale: float = 1.0) -> Trace:
    """A character-chat platform's replica: long role-play chats behind the platform's prompt
    and Zipf-popular character cards, re-sent whole each turn and trimmed to the context,
    memory summaries rewritten now and then, swipes, group chats, users back hours later by
    their time zone's evening. See the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace and its metadata (see ``Run``); seed s has LAYOUTS[(s - 1) % 4]."""
    d = Desk(random.Random(seed), scale, LAYOUTS[(seed - 1) % len(LAYOUTS)])
    d.run()
    return Run(d.out, d.meta, d.times, d)
