"""bench.heldout's ``insurance_claims`` shape: one inference replica behind a property and
casualty insurer's claims platform over two weekdays (a Monday and a Tuesday) in which a
storm makes landfall. Written blind at 0e3f7c3: by someone who had not read the policies, and
no policy or hit rate was run on it. The workload is modelled on how a claims platform builds
its prompts (intake scripts, claim files, policy wordings, rubrics, letter templates), not on
any policy.

Where the numbers come from: the structure (an intake assistant behind a line's script, an
adjuster's copilot over the claim file, coverage questions over the policy wording, batch
screens behind a rubric, letters from templates, a catastrophe bulletin added to intake and
triage once a CAT is declared) follows how insurers and their vendors describe such systems
in public. Every rate, size and share below is this writer's estimate, not a measurement.
The replica is one of about four behind the platform, which routes by claim, so it sees
about a quarter of the traffic (the storm opens about 1500..3400 claims on the platform).

Prompts are laid out in token segments and cut into 16-token blocks by
``bench.heldout_fewshot.Blocks`` (one model, one key space). The clock starts at midnight; the
trace ends at the second midnight. Customers' hours (CUSTOMER) peak at 08..09 and 17..18 and
are low at night; office hours are 08..18.

The world (bench/heldout_claims_parts.py): four lines of business, auto / home / commercial
/ liability, taking 50 / 30 / 12 / 8 % of everyday claims and 25 / 60 / 15 / 0 % of the
storm's; each has an intake script (median 1100 / 1300 / 1600 / 1400 tokens), 2 / 3 / 3 / 2
base policy forms (6000..26000 tokens, median 14000, in 1500-token sections, the first form
most used, Zipf(1.5)) and a pool of 14 / 24 / 30 / 18 endorsements (200..3000, median 900).
Every claim's policy is its own: a form, 0..6 endorsements (the pool's first ones most) in
form-number order, declarations (300..1500). At the start 450 x scale (x 0.85..1.15) claims
are open, opened 0.2..60 days before, each a notice of loss (200..1400, median 550) and 1..25
later entries (more the older it is): notes 65 % (40..900, median 180), photo captions 20 %
(120..1800, 500), estimates 15 % (600..5000, 1800). A claim's status summary (120..500) is
rewritten whenever a note or an estimate joins its file. No claim closes in the two days.
The storm lands at 12:00 on day 0 .. 06:00 on day 1, the CAT is declared 1..3 hours later
and its bulletin (400..1200 tokens) is rewritten 1..3 times 6..30 hours after that. Its
380..850 x scale claims come from the declaration to the trace's end by the hour: a ramp
over the 6 hours after landfall, then decaying with a 20-hour time constant, x CUSTOMER;
85 % in the storm's region, the rest in the next one.

Requests:

- fnol: 80 x scale everyday claims a day (x 0.85..1.15) at customer hours, 60 % reported in
  the intake chat (storm claims 30 %; the rest by phone or an agent, as a notice). A turn:
  the intake system prompt (700), the line's script, the bulletin as it stood when the chat
  began (storm claims), the declarations, the history, the message (4..200, median 30);
  replies 30..350 (110); 3..14 turns (median 6; storm 2..10, median 4); think time
  lognormal median 20 s after the reply (35 tokens/s). The claim opens when the chat ends.
- triage: every new claim, 5..60 s after it opens: system prompt (700), rubric (1800), the
  bulletin as it stands (storm claims), the notice.
- adjuster: 35 x scale sessions a day in office hours (40 % on a claim opened in the last 3
  days, else any open one) and the CAT team's 30 x scale on storm claims from 6 hours after
  the declaration: system prompt (1200), the line's guide (1000..3500), the claim file as it
  stood when the session opened, the history, the message (8..1200, median 60); replies
  40..1000 (250), 1..12 turns (median 3), think median 60 s; the adjuster's note joins the
  file 2..15 minutes after the last reply. The phone desk adds 90 x scale notes a day too.
- coverage: 16 x scale sessions a day in office hours on an open claim's policy (30 % on a
  storm claim once there are any): system prompt (800), the base form, the endorsements,
  the declarations, the history, a question (10..400, median 50); 1..6 questions (median 2),
  answers 50..700, think median 90 s.
- status: 80 x scale customers a day on any open claim at 07..22, and each new claim's
  customer comes back Poisson(0.8) times (storm 1.2) 4..36 hours later (a night-time return
  moves to 07..11 the next morning): system prompt (600), the claim's summary as it stood
  when the customer came, the history, a question (5..120); 1..4 questions; 6 % of
  questions are re-sent exactly 3..40 s later (a portal refresh).
- estimate: 40 % of new claims get a contractor's estimate 10..40 hours later, and 30 x
  scale a day land on the book in office hours: system prompt (600), rubric (1500), the file
  as it stood, the estimate (600..5000, median 1800), which then joins the file. 60 % of new
  claims not on liability get photo captions 0.5..20 hours later (no request).
- ack: at hh:05 for hh in 08..20 a batch acknowledges, oldest first, the claims opened since
  the last batch: letter system prompt (400), the line's acknowledgement template (the
  storm's CAT template for storm claims; 400..2500), the claim's summary, a 30-token cue.
- letter: 40 x scale letters a day in office hours on an open claim (half on one opened in
  the last 3 days): letter system prompt, one of 20 templates (Zipf(1.0)), the summary, an
  instruction (10..300, median 60); 20 % redrafted 30..300 s later with a new instruction.
- subro, fraud, audit, reserve: each night a walk in claim order (oldest first), one stream,
  each request after the last one's reading (6000 tokens/s) and writing (30..400 tokens at
  35/s) x 0.8..1.25 / scale: the kind's system prompt and rubric, the file as it stands, a
  cue. subro at 01:00..01:30 over the open auto, home and commercial claims whose file
  changed in the last 24 hours (rubric 2800); fraud at 02:00..02:30 over the claims opened in
  the last 24 hours (rubric 3200), 4 % flagged and followed by a deep dive (the screen's
  prompt, its output of 40..300 tokens, a cue); audit at 03:30..04:00 over 36 x scale of the
  changed claims, three checklist cues per claim (checklist 3000); reserve at 05:30..06:00
  over the claims whose weekly review falls that day, opened over a day before (guidelines
  2200).
- cat_reserve: on day 1 at 15:00..17:00 the CAT team reviews the reserves of every storm
  claim so far, oldest first: the reserve prompt and guidelines, the bulletin as it stands,
  the file, a cue; at the nightly walks' pace.

At scale 1.0, seeds 1..4: 5.1K..6.8K requests over two days, 1.35M..1.71M blocks requested,
0.30M..0.39M distinct (21..23 %), generated in 1.5..3.0 s each on a shared 2-core box. Storms
land at 13.8 / 19.9 / 26.4 / 23.1 hours with 568..757 storm claims, 742..916 new claims in
all beside 421..501 open at the start. Blocks by kind: fnol 22..25 %, triage 12..15 %, subro
10..13 %, cat_reserve 8..10 %, adjuster 7..11 %, ack 6..9 %, audit 6..8 %, coverage 4..7 %,
fraud 2..7 %, reserve about 4 %, estimate 3..4 %, status 2..3 %, letter about 1 %. At scale
0.2 (the tests): 0.28M..0.34M blocks.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_claims_desk import Session
from bench.heldout_claims_jobs import Platform, Walk
from bench.heldout_claims_parts import Claim, Storm
from bench.heldout_fewshot import Segment

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, owner, step, segments (see ``Run``)
KINDS = ("fnol", "triage", "adjuster", "coverage", "status", "estimate", "ack", "letter",
         "subro", "fraud", "audit", "reserve", "cat_reserve")


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, owner, step,
    segments): fnol, adjuster, coverage and status have the session (``sessions``) and the
    turn; the rest the claim (``claims``) and the step: the cue of a walk's claim, 1 for a
    fraud deep dive or a letter's redraft, else 0. ``times``: seconds from midnight. The
    generator (``state``) holds the lines, the book, the storm, the walks, the refreshes,
    redrafts and deep dives."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    state: Platform

    @property
    def claims(self) -> list[Claim]:
        return self.state.claims

    @property
    def sessions(self) -> list[Session]:
        return self.state.sessions

    @property
    def walks(self) -> list[Walk]:
        return self.state.walks

    @property
    def storm(self) -> Storm:
        return self.state.storm


def insurance_claims(seed: int, scale: float = 1.0) -> Trace:
    """An insurer's claims replica over two weekdays: intake chats, a storm's claims,
    adjusters' and coverage sessions, status questions, letters, estimate reviews and the
    nightly walks behind their rubrics. See the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace and its metadata (see ``Run``)."""
    p = Platform(random.Random(seed), scale)
    p.run()
    return Run(p.out, p.meta, p.times, p)
