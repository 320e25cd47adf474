"""bench.heldout's ``call_center`` shape: one inference replica behind a contact-center AI
platform (an outsourcer's voice agents, agent assist, after-call work, automated QA and an
outbound dialer) serving several client brands. Written after ``adaptive`` was frozen, blind:
by someone who had not read the eviction policies, bench/baselines.py, docs/eviction.md or any
results, and no policy, LRU, OPT or hit rate was run or computed on it; the workload is
modelled on how such a platform builds its prompts and schedules its work, not on any policy.

Where the numbers come from: the structure (an IVR routing the caller's opening words, a voice
agent behind a persona, compliance script and tool schemas, streaming ASR whose partial
transcripts feed speculative requests before the end of an utterance, hand-off to a human with
real-time suggestions and knowledge articles, after-call summaries and disposition codes,
automated QA scoring against a rubric, predictive dialers with answering-machine detection)
follows how contact-center AI products describe their pipelines in public documentation; hours
follow the usual intraday call curve (peaks late morning and mid-afternoon, weekends lower);
client sizes are Zipf, as an outsourcer's accounts usually are. The rates, sizes and shares
below are this writer's estimates, not measurements.

Prompts are laid out in token segments and cut into 16-token blocks by
``bench.heldout_fewshot.Blocks`` (one model, one key space). The clock starts on a Monday
00:00 UTC. Every live prompt is an application's system prompt (voice agent 1100 tokens,
assist 800), the client's persona, compliance script and tool schemas (800..5000, median
1800, in 400-token sections), the queue's SOP (500..8000, median 2200), an outage banner while
one is on (100..400), the caller's CRM record (80..900, median 280) and the notes of their last
two calls (40..400 each), then the transcript.

Clients: 10 (scaled, at least 3), Zipf(1.1) sizes by a random rank, callers at UTC-5, -6, -8,
0 and +1 (35, 15, 25, 15, 10 %); 30 % are open 24/7, the rest get 5 % of the calls outside
08..20 local; weekends 0.35 x. A client has 2..6 queues (support always; Pareto shares), voice
agents answering 40..90 % of inbound calls, 40..600 knowledge articles (Zipf(1)), a QA rubric
(1200..5000 tokens) with three criteria, auto-QA of every call (30 %) or a sample, and an
outbound script and campaigns (40 %).

Requests (a client of mean size gets 1.1 inbound calls an hour at the weekday peak):

- route: the IVR classifies the opening words (3..120 tokens) behind a router prompt and the
  client's menu; 10 % of calls come from a caller the client has seen before.
- voice: 1..30 exchanges (median 6). An utterance (median 22 tokens) is committed by the ASR
  in word groups of 2..7 tokens; 0..3 speculative requests (mean 0.9) send the words so far
  plus an unstable 2..8-token tail the final drops, then the final; a tool call and its result
  (40..1200 tokens) add a request in 25 % of turns; the agent's reply (median 45 tokens, cut
  short on a 12 % barge-in) joins the transcript. 8..30 % of a queue's voice calls are taken
  over by a human at a random turn.
- assist: each caller utterance of a human-handled call (median 10 exchanges) asks for a
  suggestion, a quarter with a retrieved article after the transcript.
- wrapup: 1..150 s after a call, summary, disposition and CRM note back to back over the whole
  transcript (behind the caller's record); the note joins the caller's notes, 15 % of the time
  the record is rewritten. A quarter of voice and a fifth of human calls are unresolved; 60 %
  of those callers call the same queue back 5..30 min (20 %), 1..8 h (40 %) or 1..5 days
  (40 %) later.
- qa: at 02:00..02:30 local, the calls that ended since the last run (all for auto-QA, else
  12 % and 40 % of transferred ones), in the order they ended: QA prompt, rubric, transcript,
  then each criterion right after the other.
- outbound: at 10:00 local on weekdays a campaign dials 10..800 new leads (median 20 x size)
  in list order, one every 45 s (mean); a dial reaches no one (45 %: answering-machine
  detection), voicemail (25 %: detection and a message) or a person (30 %: 1..10 voice turns
  behind the script and the lead's record, then a disposition); 60 % of leads not reached are
  dialled again 3..6 h later in open hours with the same record.

Edits (0.8 a day x size^0.5, in open hours: SOP 65 %, articles 15 %, persona 8 %, rubric 7 %,
script 5 %) reword, insert or strike 1..2 sections, so every later section is new content.
Outages (0.06 a day x size^0.5, 0.5..6 h) put a banner after the support queue's SOP, make
that queue 5 x likelier and bring 4 x the client's calls; when one ends the old head returns.

9000 requests at scale 1.0 span 64..90 hours over seeds 1..10, generated in 2.7..5.0 s each on
a shared 2-core box: 2.65M..3.51M blocks requested, 134K..163K distinct (4.5..5.9 %). Requests
(share of blocks): voice 30..45 % (40..55 %), assist 11..28 % (15..36 %), wrapup 13..16 %
(9..12 %), outbound 5..30 % (2..20 %), qa 3..10 % (3..8 %), route 4..5 % (1 %). At scale 0.25
(3 clients) seeds 1..5: 63..91 hours, 0.66M..0.87M blocks, 4.3..5.8 % distinct.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_call_center_jobs import Center, QAJob
from bench.heldout_call_center_parts import Call, Client
from bench.heldout_fewshot import Segment

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, client, call, segments (see ``Run``)
KINDS = ("route", "voice", "assist", "wrapup", "outbound", "qa")
REQUESTS = 9000  # at scale 1.0


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, client, call,
    segments), the call an index into ``calls`` (the scored call for "qa"). ``times``:
    seconds from Monday 00:00 UTC. ``system`` holds each application's system prompt,
    ``instructions`` each closing instruction; the world as it stands at the end."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    system: dict[str, Segment]
    instructions: dict[str, Segment]
    clients: list[Client]
    calls: list[Call]
    qa_jobs: list[QAJob]


def call_center(seed: int, scale: float = 1.0) -> Trace:
    """A contact-center AI platform's replica: IVR routing, voice-agent calls with
    speculative requests on partial transcripts, human take-overs with assist, after-call
    work, callbacks, nightly QA, outbound campaigns, SOP edits and outages. See the module
    docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace of ``int(REQUESTS * scale)`` requests and its metadata (see ``Run``)."""
    s = Center(random.Random(seed), int(REQUESTS * scale), scale)
    s.run()
    s.trim()
    return Run(s.out, s.meta, s.times, s.system, s.instructions, s.clients, s.calls,
               s.qa_jobs)
