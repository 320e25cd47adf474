"""bench.heldout's ``home_assist`` shape: one inference replica behind a smart-home voice
assistant fleet's LLM conversation agent, over two days (Tuesday 00:00 UTC to Thursday 00:00
UTC). Written blind at 17845c7: by someone who had not read the policies, and no policy or
hit rate was run on it (nor LRU, OPT, a replay or any reuse statistic); the workload is
modelled on how such an agent builds its prompts, never on any policy.

Where the numbers come from: the structure follows how public home-automation LLM agents
(Home Assistant's conversation agents and the integrations around them, vendors' cloud
assistants) build a request: a system prompt and intent tool schemas, then the home's exposed
devices grouped by area (with their states in older stacks; a static overview plus a
GetLiveContext tool in newer ones), a clock line (or a GetDateTime tool), the satellite the
user spoke to, the conversation so far, the utterance; an intent tool call sends the turn
again with the call and its result. Every rate, size and share below is this writer's
estimate, not a measurement. The fleet's homes are hashed onto many replicas; this one serves
150 homes at scale 1.0 (x 0.85..1.15 per seed, at least 20); the counts are its share.

Prompts are token segments cut into 16-token blocks by ``bench.heldout_fewshot.Blocks`` (one
model, one key space). Seeds differ in structure: odd seeds render device states into the
prompt ("inline"), even ones fetch them by tool ("live"); seeds 1, 4, 5, 8, ... serve a US
region (UTC -5 47 %, -6 29 %, -7 7 %, -8 17 %), the others a European one (0 14 %, +1 62 %,
+2 24 %); a clock line in 70 % of inline stacks and 30 % of live ones; and each seed draws
its own rollouts, homes, features and outages.

World (bench/heldout_homea_world.py): the system prompt (800..1600 tokens, median 1100) and
tool schemas (1700..3400, median 2400) have a version 0 and 2..4 rollouts (50 %, 35 %, 15 %),
each changing the system prompt (and so everything after it) or only the tools (a tool added:
-150..+250 tokens). The first canary is at the vendor's 09..14 local time on the day before
the clock (35 %), day 0 (50 %) or day 1 (15 %); stages reach 1 %, 10 %, 50 %, 100 % of homes
1..3, 2..6 and 2..8 hours apart, a home on a version when its share passes the home's bucket;
25 % are rolled back 0.5..2 h after the 10 % stage; the next starts 1..6 h after the last
stage; none starts in the last 2 hours. A home: a profile (60..400, median 150), 8..250
exposed devices (median 40) in 2..16 areas (about 6 to an area), each a section of 8 + 28
tokens a device inline (18 live); 1..6 satellites (a 10..24-token line each); 0.2..40 voice
sessions a day (lognormal, median 2). Inline, an area's section gets a new version when a
state in it changed since it was last rendered (0.02..8 changes an hour at full activity,
median 0.5, x the home's activity by local hour: 1 at the 19:00 peak, 0.03 at 03:00), and
when an intent action runs; in either stack a device edit (0.03 a day per home) replaces one
section. The clock line (22 tokens) is the zone's of the minute.

Requests (bench/heldout_homea_voice.py, bench/heldout_homea_jobs.py), the shares of blocks
at scale 1.0 over seeds 1..4:

- command (26..37 %): voice sessions by the activity curve; 1 turn 70 %, 2 15 %, 3 8 %, 4 4 %,
  6 3 %; each turn the system prompt, tools, profile, sections as rendered now, clock,
  satellite line, history, the utterance (4..60 tokens, median 14). Intents: action 55 %
  (15 % need two calls; live: 40 % read GetLiveContext first), query 35 % (live: 90 % through
  GetLiveContext), chat 10 %; no clock line: 5 % call GetDateTime first. The reply (6..200,
  median 30) joins the history after the utterance and the turn's calls and results; the
  next turn comes after the reply is spoken (3 tokens/s) and a 2..60 s pause (median 8); a
  session past 16000 tokens ends.
- tool_loop (24..40 %): each tool call re-sends the turn's last pass plus the call (18..90)
  and its result (actions 12..160, GetDateTime 15..30, GetLiveContext 10 tokens a device),
  0.4..5 s after the pass before.
- goodnight (about 1 %): 15 % of homes run a routine at 22:00, 22:30, 23:00 or 23:30 local
  (30/30/25/15 %) plus up to 20 s: the home's phrase through its first satellite, then 2..4
  actions (after a GetLiveContext call in the live stack).
- app_chat (8..15 %): the companion app's chat about the home's automations, 0.06 a day per
  voice session a day, local 08..24: the voice head with an app line, the automations YAML
  (300..6000, median 1500) as it stood, history, message (8..400); 2/4/7/12 turns (20/35/30/
  15 %), replies 40..900, 8..600 s pauses; 40 % end with a save (a new YAML version).
- automation (9..10 %): 0..5 LLM automations a home (45 % none), each fired 0.3..40 times a
  day (median 3) by the activity curve: a notify prompt (420), the profile, the automation's
  instruction (40..220), the event (25..200, new); 30 % of triggers repeat 1..5 times 10..120
  s apart. One or two power blips (60/40 %) at a random time hit one zone: inline, every
  section of its homes changes, and each of its homes with alerts on (50 %) words an alert
  within 10 minutes (exponential, mean 90 s): notify prompt, the fleet's outage text (130),
  the profile, the event.
- routine (about 1 %): 35 % of homes have a weekday briefing at 06:00, 06:30, 07:00, 07:15,
  07:30 or 08:00 local (25/25/25/5/15/5 %) plus up to 30 s: the briefing prompt (700), the
  zone's template (400), the zone's news and weather digest of that hour (800..1800), the
  home's calendar and device notes (60..400, new), a cue (20).
- camera (about 1.5 %): 30 % of homes log 8..250 camera events a day (median 40, 25..160
  tokens each, daytime-heavy); 0.6 asks a day at local 17..24: camera prompt (500), profile,
  the local day's log so far (the latest 12000 tokens), history, question; 1..3 turns.
- energy (1..2 %): 25 % of homes, 0.35 asks a day at local 17..24: energy prompt (450),
  profile, the last 7 local days of readings (300..1500 tokens a day), history, question;
  1..3 turns. The table slides at local midnight.
- digest (about 1 %): each zone's walk at local 04:30..04:40 over its digest homes (35 %) in
  id order, one request after the last one's reading (8000 tokens/s) and writing (120..500 at
  45/s): digest prompt (700), template (260), profile, the day's events (300..2500), cue (25).
- shadow (7..13 %): 1..3 hours before each canary (if on the clock), the eval set (20 synthetic
  homes x scale, at least 5, with 8 utterances each, a frozen clock) is walked twice at
  once, paced like the digest, with the candidate's head and with the fleet's (the newest
  version at 100 %): system prompt, tools, the eval home's sections and lines, utterance.

At scale 1.0, seeds 1..4: 6.6K..8.8K requests, 1.38M..1.61M blocks requested, 0.11M..0.25M
distinct (8..17 %: live stacks 8..12 %, inline 16..17 %), 138..170 homes, generated in
1.2..1.6 s each on a shared 2-core box. At scale 0.2 (the tests): 1.3K..2.0K requests,
0.23M..0.37M blocks.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_fewshot import Segment
from bench.heldout_homea_jobs import HomeAssist

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, owner, step, segments (see ``Run``)
KINDS = ("command", "tool_loop", "goodnight", "app_chat", "automation", "routine", "camera",
         "energy", "digest", "shadow")


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, owner, step,
    segments): command, goodnight, app_chat, camera and energy have the session
    (``state.sessions``) and the turn, tool_loop the session and the turn it continues,
    automation the home and the automation (-1 - n for outage n's alert), routine the home
    and its local day, digest the walk (``state.digests``) and the position, shadow the
    evaluation (``state.evals``) and the position. ``times``: seconds from Tuesday 00:00
    UTC. ``state``: the generator (stack, versions, homes, sessions, bursts, outages, logs,
    tables, walks, evaluations)."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    state: HomeAssist


def home_assist(seed: int, scale: float = 1.0) -> Trace:
    """A smart-home voice assistant fleet's replica: voice sessions behind a versioned system
    prompt and tool schemas and each home's device context, intent tool loops, the good-night
    and morning routines, the app's automation chats, sensor automations in bursts and a
    zone's outage alerts, camera log summaries, energy reports, the nightly digest walk and
    shadow evaluations before each rollout. See the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace and its metadata (see ``Run``)."""
    a = HomeAssist(random.Random(seed), scale, seed)
    a.run()
    return Run(a.out, a.meta, a.times, a)
