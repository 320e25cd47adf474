"""bench.heldout's ``sports_live`` shape: one inference replica behind a sports media app's
assistant over a weekend of matches. Written blind at 7e802a6: by someone who had not read the
policies, and no policy or hit rate was run on it (nor LRU, OPT, a replay or any reuse
statistic); the workload is modelled on how such an app builds its prompts, not on any policy.
Every rate, size and share below is this writer's estimate of the domain, not a measurement.

Prompts are token segments cut into 16-token blocks by ``bench.heldout_fewshot.Blocks`` (one
model, one key space). The clock is the app's local time, Saturday 00:00 to Monday 00:00; fans
chat by a day curve (an evening peak, a trough at 03..05), fantasy managers mostly in the
morning before the fixtures, and everything else follows the matches.

Seeds differ in the app: seed s has layout (s - 1) % 4 of ``LAYOUTS``
(bench/heldout_sports_live_world.py): "football" (a soccer app with few big matches: 10..14
fixtures, most at Saturday 15:00, 3 betting regions, 2 preview templates), "us" (many
overlapping games: 24..40 gridiron, hockey and basketball games in waves, 195-minute gridiron
games, 4 regions, 3 templates), "cricket" (a Test match's two days of 7 h beside four T20s, 4
regions) and "betting" (a multi-sport betting companion: 19..33 tennis, soccer, hockey and
basketball fixtures, an odds section (250..1500 tokens) in every minute's live state, 4
regions, 3 templates).

The world: the app's system prompt (1400 tokens), each betting region's content rules
(300..2000) and the data provider's attribution rules (500): every fan prompt starts with
them (NOTE(sports-head)). Teams with dossiers (1200..5000); each fixture has a header
(80..300), a pre-match line (120..600), a head-to-head (200..1200), an audience weight
(lognormal(0, 0.8); 1..3 big matches at 8 x). On the clock each match ticks every minute
from kick-off to the final whistle (112 min soccer .. 420 min a Test day): the feed appends
log entries (Poisson 0.7..1.8 a minute, 8..140 tokens) and now and then a key event (goal,
touchdown, wicket: 2.7..10 a match, 50..300 tokens); each minute's version is the header, a
new score line (30..150), the odds, the box score (2..9 sections of 300..450, one rewritten
when anything happened) and the latest log entries up to 5000 tokens. Moments: kick-off, key
events, final whistle. Player stat tables for the fantasy sport (4..6 of 1200..5000).

Requests (bench/heldout_sports_live_desk.py):

- live: 750..850 live chats over the weekend (x scale), shared among the matches by weight x
  length, starting from 15 min before kick-off to 15 min after the whistle: head, the
  match's live state as it stands at each turn, the whole chat so far, a message (5..300);
  1..8 turns (median 2), replies 40..700 tokens at 45 tokens/s, then a pause (median 40 s).
- burst: a big match's moments bring fans at once (kick-off 25, key event 35, final 30; x
  the layout's 0.5..1 and x scale), an exponential delay (mean 45 s) after the moment; the
  same prompt as live, 1..3 turns.
- fantasy: 100..150 a day (x scale): head, the fantasy prompt (650), the scoring rules
  (700), the 1..3 stat tables the question is about (in table order) as they stand, the
  manager's roster (150..700), history; 1..8 turns. A fixture of the fantasy sport ending
  rewrites 1..2 tables (every later block new).
- chat: 60..110 a day (x scale): head, the dossier of a team playing this weekend (by its
  matches' weight), history; 1..6 turns.
- preview: at 06:00..06:30 each day a batch walks the day's fixtures in kick-off order, each
  with every template in turn: the writer's system prompt (900), the template (400..2000),
  both dossiers, the head-to-head, a cue; each after the last one's article (300..1500 tokens
  at 60 tokens/s).
- recap: 2..10 min after the final whistle: writer, recap template, header, the final score
  line and box score, the full log, a cue; a big match also gets player ratings (another
  template) a minute later.
- push: 5..20 s after each moment: the push prompt (700), header, that minute's score line,
  the latest 3 log entries, a cue.

The fixtures, their moments and so pushes, previews and recaps do not scale; the fans do.
At scale 1.0, seeds 1..4 (football, us, cricket, betting): 3.5K..3.9K requests, 1.57M..2.30M
blocks requested, generated in 1.1..3.0 s each on a shared 2-core box; 6..28 fixtures, 140..360
burst chats, 4..22 table rewrites. Blocks by kind: live 52..57 %, fantasy 23..31 %, chat
7..14 %, burst 4.6..11.3 %, preview, recap and push 1..4 % together. At scale 0.1 (the tests):
440..680 requests, 0.19M..0.30M blocks, 0.2..0.5 s each.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_fewshot import Segment
from bench.heldout_sports_live_desk import Desk
from bench.heldout_sports_live_world import LAYOUTS

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, owner, step, segments (see ``Run``)
KINDS = ("live", "burst", "fantasy", "chat", "preview", "recap", "push")


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, owner, step,
    segments): for a chat's turn (live, burst, fantasy, chat) the owner is the chat
    (``state.chats``) and the step its turn; for preview, recap and push the owner is the
    match (``state.matches``) and the step the template (preview, recap) or the moment
    (push). ``times``: seconds from Saturday 00:00, the app's local time. ``state``: the
    generator (layout, matches with their versions, chats, batches, tables)."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    state: Desk


def sports_live(seed: int, scale: float = 1.0) -> Trace:
    """A sports media app's assistant over a weekend of matches: fans' live chats behind the
    app's long head and each minute's match state, bursts at a big match's moments, fantasy
    advice behind player stat tables, preview batches, recaps behind the full play-by-play,
    push copy per moment. See the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace and its metadata (see ``Run``); seed s has LAYOUTS[(s - 1) % 4]."""
    d = Desk(random.Random(seed), scale, LAYOUTS[(seed - 1) % len(LAYOUTS)])
    d.run()
    return Run(d.out, d.meta, d.times, d)
