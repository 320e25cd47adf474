"""bench.heldout's ``news_desk`` shape: one inference replica behind a newsroom's LLM assistant,
serving one publisher (a regional daily with a national desk) over two days. Written blind
at b937759: by someone who had not read the policies, and no policy or hit rate was run on
it (nor LRU, OPT, a replay or any reuse statistic); the workload is modelled on how
newsroom tools build their prompts, never on any policy.

Where the numbers come from: the structure (a house style guide and desk system prompts, wire
services delivering stories in numbered versions whose write-throughs replace the top, a
coverage-priorities memo rewritten at each news meeting, headline and SEO variants generated
at publish time, top stories translated into language editions, claim-by-claim fact-checks
against source documents and the archive, newsletters walking the day's stories, live blogs
with a key-points box, one-click actions in an editors' tool, a readers' question bot over
the archive, comment moderation) follows how publishers and newsroom-software vendors
describe such tools in public. Every rate, size and share below is this writer's estimate,
not a measurement.

Prompts are token segments cut into 16-token blocks by ``bench.heldout_fewshot.Blocks`` (one
model, one key space). The clock starts Tuesday 00:00 in the newsroom's time zone and ends two
days later. Counts of a day are x scale; the event's own versions and blog are not.

World (bench/heldout_newsd_world.py): 8 desks (politics 18 %, business 15, world 15, metro 17,
sports 14, culture 9, tech 7, opinion 5), 90 topics (a desk each, Zipf(1.1) by a random rank).
The style guide (2400 tokens, 6 sections); the priorities memo (8 desk sections of 50..300
tokens) rewritten at the 09:30 and 16:00 meetings (3..8 sections each). An archive of 5000 x
scale articles (at least 400) by topic popularity, 1..8 chunks each (200..700 tokens). 3..6
language editions (30/35/20/15 %), a glossary each (700..3000 tokens). Paragraphs 20..300
tokens (median 75). Staff stories: 85 a day by newsroom hours, 4..45 paragraphs (median 13),
weight lognormal(0, 0.8); 160 x scale stories published the day before are still on the site.
Wire stories: 280 a day (a daytime-heavy 24-hour flow), 1..35 paragraphs (median 8), weight
lognormal(-0.6, 0.8), 0..6 further versions (45 % none) 5 min..6 h apart (median 40 min); 12 %
are picked up by the site 10..40 minutes after they arrive. A version is made by "add" (1..4
paragraphs appended), "top" (a write-through: the first 1..3 paragraphs replaced by 1..3 new)
or "edit" (1..3 paragraphs rewritten): wire 40/35/25 %, staff updates 40/45/15, event stories
35/55/10; every block from the first changed paragraph on is new. A story of weight 2.6 or
more is a top story; a published story's news value halves every 8 hours.

Requests (bench/heldout_newsd_jobs.py, bench/heldout_newsd_desk.py):

- wire: every wire version triaged: system (800), the memo as it stands, the version, a cue.
- headline: at publishing 2..8 variants (median 4), at each later version 1..3, fired 0.2..3 s
  apart: system (700), the headline and SEO guide (900), the version, one of 8 variant cues.
  Staff stories are edited 0..3 times (10..60 min apart) and published 5..30 min later; 35 %
  are updated 1..3 times 30 min..8 h apart (median 1.5 h).
- translate: a top story at publishing, and again at a new top (an event's story also every
  45 minutes), into each edition in turn: system (450), the glossary, the version, a cue.
- factcheck: 25 % of staff stories have 1..3 source documents (600..10000 tokens, median 2500,
  in 800-token sections) and 3..8 archive chunks; a pass at filing, after the edits (70 %), at
  an update (30 %): 2..12 claims (median 4) one after another, each system (1000), documents,
  chunks, the story as checked, the claim (25..200 tokens).
- newsletter: morning 06:00 (30 stories), politics 06:30 (12), business 06:45 (12), sports
  07:30 (10), evening 17:30 (25): the most newsworthy published stories in rank order, a blurb
  each (system 650, the letter's voice guide 300..2000, the story as it stands, a cue), then an
  assembly over the blurbs. Jobs walk at the replica's pace (6000 tokens/s read, 40/s written).
- liveblog: entries (20..500 tokens, median 110); a key-points summary after 2 entries or 10
  minutes (at least 2 minutes apart): system (800), header (200..1000), the recap, the entries
  of the window, a cue; past 16000 window tokens the oldest half goes into a new recap. Routine
  blogs each day (a game from 19:00..20:30 for 2.5 h, an entry every 4 min; a hearing from
  09:30..11:00 for 4 h, 6 min; the markets from 08:00..09:00 for 7 h, 12 min): all three on a
  quiet day, two of them otherwise.
- breaking: an event's editors, 2.2 a minute at intensity 1: system (1200), the guide as it
  stands, the main story (the flash wire story before it is filed) as it stands, history, a
  message; 40 % are one of 6 one-click actions (35/25/15/10/10/5 %), the same prompt for the
  same version; the others 1..4 turns.
- chat: 72 reporter chats a day (and 0.3 a minute per event at intensity 1): the desk's prompt
  (700..2500), the guide, 45 % an attachment (300..7000 tokens, median 1800), history, a
  message (5..800, median 50); 1..20 turns (median 3), replies 30..1500 (median 250) at 40
  tokens/s and a pause (median 90 s; 15 % 10..60 min more); a chat past 24000 tokens ends.
- ask: 300 readers' questions a day by reading hours (and 1.5 a minute at intensity 1): half
  on a topic by popularity, half on a story in the news; system (900), 3..5 chunks by rank
  (archive chunks by 1 / rank, 5-paragraph chunks of the topic's stories by news value),
  history, a question (5..150); 1..5 turns (median 1).
- moderate: 800 comments a day by reading hours on stories by news value (and 6 a minute on an
  event's stories at intensity 1), each once: the policy (1000), the story's headline and
  summary (50..180, new at each headline run), the comment (10..600, median 60), a cue.

Events (bench/heldout_newsd_desk.py), the scenario by seed % 3: 1 "breaking", a major event at
08..18 on either day (intensity 1 decaying over 2.5..4 h) and 1..3 small breaks; 2 "quiet",
4..6 small breaks only; 0 "scheduled", a planned big night on day 0 at 19..20 (a plateau of
0.5..0.65 for 3..5 h, then decaying over 1.5 h) and 2..3 small breaks. A small break: at
newsroom hours on either day, peak 0.12..0.25, decaying over 0.5..1.2 h. Each event sends a
flash wire story (one paragraph, versions every 5 min / relative intensity), a main staff
story (filed 10..25 min in, 3..5 paragraphs, weight 4, or 20 when major; versions every 6 min
/ relative intensity, x 0.5..1.5, at most 2 h apart; a planned night's is written 6 h ahead,
edited twice and published at the start, 6..25 paragraphs) and pulses of the kinds above, all
stopping below 5 % of the peak. A major event also puts a note at the top of the memo, opens a
blog (10..25 min in; 2 h before a planned night) whose entries come every 1.5 min /
max(relative intensity, 0.25), and brings 5..10 staff (weight 3..8, 30 % with documents) and
10..25 wire sidebars over 8 h; an unplanned one adds a style note (150..600 tokens) to the
guide 1..2 h in, so from then on every prompt holding the guide is new from the note on.

At scale 1.0, seeds 1..4: 7.4K..9.7K requests over two days, 1.45M..1.98M blocks requested
(quiet 1.45M; breaking 1.90M, 1.98M; scheduled 1.95M), 0.27M..0.35M distinct (17..19 %),
generated in 1.9..3.6 s each on a shared 2-core box (load about 2.5). 170..180 staff and
550..600 wire stories (1200..1370 wire versions); the major event's main story 33..58
versions, its blog 125..227 entries. Blocks by kind: chat 15..21 %, headline 14..18 %, wire
12..14 %, ask 11..13 %, factcheck 9..21 %, moderate 10..11 %, breaking 4 % (quiet) to 12..15
%, translate 2..5 %, liveblog 2..5 %, newsletter about 2 %. At scale 0.2 (the tests):
0.37M..0.67M blocks.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_fewshot import Segment
from bench.heldout_newsd_desk import Desk
from bench.heldout_newsd_world import SCENARIOS

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, owner, step, segments (see ``Run``)
KINDS = ("wire", "headline", "translate", "factcheck", "newsletter", "liveblog", "breaking",
         "chat", "ask", "moderate")


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, owner, step, segments):
    wire, headline, translate, factcheck and moderate have the story (``state.stories``) and
    the version, version, language, pass and comment number; newsletter the edition
    (``state.editions``) and the blurb (the assembly: the number of stories); liveblog the
    blog (``state.blogs``) and its entry count; breaking, chat and ask the chat
    (``state.chats``) and the turn. ``times``: seconds from Tuesday 00:00. ``state``: the
    generator (stories, events, blogs, chats, the jobs' walks, the style guide and memo)."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    state: Desk


def news_desk(seed: int, scale: float = 1.0) -> Trace:
    """A newsroom's assistant: wire versions triaged, headline and SEO variants, translations
    of top stories, fact-checks against documents and the archive, newsletters walking the
    day's stories, live-blog summaries, editors' bursts on breaking news, reporters' chats,
    readers' questions and comment moderation, on a quiet, breaking or planned big day (by
    seed). See the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace and its metadata (see ``Run``); the day's scenario is SCENARIOS[seed % 3]."""
    d = Desk(random.Random(seed), scale, SCENARIOS[seed % 3])
    d.run()
    return Run(d.out, d.meta, d.times, d)
