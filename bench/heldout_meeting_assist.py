"""bench.heldout's ``meeting_assist`` shape: one inference replica behind a meeting assistant.
Written after ``adaptive`` was frozen (at 395a810), by someone who had not read the eviction
policies (blind: no policy, LRU, OPT or hit rate was run or computed on it); the workload is
modelled on how such a product builds its prompts, not on any policy.

Prompts are laid out in token segments and cut into 16-token blocks
by ``bench.heldout_fewshot.Blocks`` (one model, one key space). The clock starts on a Monday
00:00 UTC; replies decode at 40 tokens/s. Every prompt starts with the assistant's one system
prompt (900 tokens) and then the org's glossary (100..2500 tokens, median 400, in ~250-token
sections; an admin edits one section 0.25 times a weekday, in working hours, and everything
from that section on is new content; a meeting keeps the glossary it started with).

The customers: 18 orgs (scaled, at least 3), Zipf(0.7) sizes by a random rank, in seven time
zones (UTC-8 .. +10); 56 teams (scaled), one an org and the rest by size. Meetings start on
the hour (60 %), half hour (25 %), quarters or any minute, the bot joining 0..2 minutes late,
in each org's working hours (peaks 09..10 and 14 local, weekends 0.04 x), so the starts come
in waves as the day moves west. A transcript line is an utterance (4..900 tokens, median 40,
a presenter's 110) plus an 8-token speaker/time head, spoken at 2.6 tokens/s with 2.5 s
pauses (about 160 tokens a minute), in the transcript 4 s after it ends. Meetings:

- ad-hoc (1.0 a team a weekday, booked 15..90 min, most 30, lasting 0.6..1.1 of it): the
  header after the glossary is the invite (40..900 tokens).
- weekly series (0..2 a team) and standups (45 % of teams, every weekday at 09..10 local,
  15 min): the header is the series' fixed head (60..900), then the last instance's final
  summary (a pre-trace one at first), then this week's agenda additions (none for standups);
  8 % of instances are cancelled.
- all-hands: the 3 largest orgs' (scaled, at least 1), every other week from the first,
  60..120 min, 100..3000 listeners; a presenter talks most of the time.

While a meeting runs: rolling summaries at the org's interval (5, 10 or 15 min, or off: 15,
40, 20, 25 %; an all-hands every 5 min) over system prompt + glossary + header + transcript
so far + a task; participants' questions (0.2..1.0 x minutes/30, more in bigger meetings, a
late joiner's catch-up 30 % of the time), the same plus the question, 25 % followed by a
follow-up that re-sends the side thread after the (grown) transcript; in an all-hands, bursts
of 6..80 listeners asking within 3 minutes after announcements (minutes/30 bursts) and a
trickle. Live highlights (a host's choice, 20..80 % of meetings in 60 % of orgs) every 3 min
over the last 5 minutes of transcript, and live captions into each language a participant
needs (25 % of orgs have 1..2, 15 % of their meetings need each, an all-hands all) every
90 s over the last 4 minutes: both are system prompt + glossary + instruction + the window.

After it: the final summary 3..15 s after the end, with the action items in the same
request, or (40 % of orgs) in a second one; it becomes the series' last summary and joins
the team's summaries; a summary translated into each caption language; a follow-up email
(40 % of meetings, standups 10 %, all-hands 30 %; 30 s..2 h later, median 5 min) after the
action items with the organizer's note, asked again with another note 20 % of the time.
Cross-meeting search (1.2 a team a weekday, in working hours): system prompt + glossary +
task + 60 % the team's 6 newest summaries oldest first, 40 % 3..5 of its 30 newest in
relevance order, + a question; 30 % ask follow-ups in the thread. At 04:00 UTC a nightly job
walks every meeting summarized since the last run, in orgs with digests on (60 %), in start
order, one at a time: the full transcript behind tonight's glossary + a digest task, then
each org's roll-up over those meetings' summaries.

9000 requests at scale 1.0 span 239..351 hours (10..15 days: weekly series come back,
27..51 of them) over seeds 1..10, generated in 3..5 s each: 2.30M..2.74M blocks requested,
530k..652k distinct (20.8..25.2 %: the system prompt, glossaries and a meeting's transcript so
far come back, while windows slide and every meeting's transcript is new once). Requests:
summaries 12..25 % (16..29 % of the blocks), questions 8.7..12 % (10..15 %), captions
1.2..16 % (0.5..8.7 %), highlights 18..36 % (8.5..21 %), final 7.9..11 % (12..16 %), action
items 1.7..5.9 %, emails 3.1..4.3 %, translations 0.1..0.9 %, search 8.6..11 % (7.9..10 %),
digests 2.1..8.0 % (3.5..11 %), roll-ups 0.7..1.6 %; 714..1021 meetings, 2..3 all-hands,
10..15 nights, 34..53 glossary edits. At scale 0.25 (4 orgs, 14 teams) seeds 1..5: 192..422
hours, 526k..839k blocks, 18.7..27.4 % distinct.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_fewshot import Segment
from bench.heldout_meeting_jobs import Jobs, Night, Search
from bench.heldout_meeting_parts import Meeting, Org, Series, Team

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, key, step, segments (see ``Run``)
KINDS = ("summary", "qa", "caption", "highlight", "final", "actions", "email", "translate",
         "search", "digest", "rollup")
LIVE = ("summary", "qa", "caption", "highlight")  # sent while the meeting runs
REQUESTS = 9000  # at scale 1.0


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, key, step, segments),
    the key a meeting (index into ``meetings``) for the meeting kinds, a search thread for
    "search", a night for "digest" and "rollup"; the step the request's place among its
    key's (a night's digests come first, in walk order). ``times``: seconds from Monday
    00:00 UTC. ``system`` and ``tasks`` are the fixed system prompt and task instructions."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    system: Segment
    tasks: dict[str, Segment]
    orgs: list[Org]
    teams: list[Team]
    series: list[Series]
    meetings: list[Meeting]
    searches: list[Search]
    nights: list[Night]


def meeting_assist(seed: int, scale: float = 1.0) -> Trace:
    """A meeting assistant: live transcripts behind the system prompt and an org glossary,
    re-sent by rolling summaries and participants' questions, live caption translation,
    post-meeting summaries, action items and emails, weekly series and standups carrying
    the last summary, cross-meeting search, time-zone waves, all-hands question bursts and
    a nightly digest walk. See the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace of ``int(REQUESTS * scale)`` requests and its metadata (see ``Run``)."""
    s = Jobs(random.Random(seed), int(REQUESTS * scale), scale)
    s.run()
    return Run(s.out, s.meta, s.times, s.system, s.tasks, s.orgs, s.teams, s.series,
               s.meetings, s.searches, s.nights)
