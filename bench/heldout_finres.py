"""bench.heldout's ``fin_research`` shape: one inference replica behind a buy-side investment
firm's research assistant in the peak week of an earnings season. Written after ``adaptive``
was frozen at 89b5b97, blind: by someone who had not read the policies, and no policy or hit
rate was run on it. The workload is modelled on how such a research platform builds its
prompts (a document pipeline, nightly jobs, analysts' chat tools), not on any policy.

Where the numbers come from: the structure (filings and call transcripts ingested as they
drop and run through several extraction prompts that each re-send the document; live notes
over a growing call transcript; a nightly screen of the coverage universe on one template;
morning notes; compliance review against a manual and a restricted list; analysts pasting a
company's and its peers' releases side by side; a portfolio risk bot over position
snapshots) is this writer's reading of how buy-side firms and research-tool vendors describe
such assistants in public, and the calendar follows the usual US pattern (releases before the
open or after the close, the call soon after, the 10-Q the same day or days later). Every
rate, size and share is this writer's estimate, not a measurement.

Prompts are token segments cut into 16-token blocks by ``bench.heldout_fewshot.Blocks`` (one
model, one key space). The clock starts on Tuesday 00:00 New York time; the trace ends at
Thursday 00:00.

Universe (bench/heldout_finres_parts.py): 320 x scale (x 0.85..1.15, at least 12) companies
in up to 11 sectors (random sizes, about 8 companies a sector or more), ordered by sector then
market cap; interest Zipf(0.9) by a global market-cap rank; core names: 60 % of a sector's
top third, 15 % of the rest. Each has a profile card (200..900 tokens, median 450), a KPI
sheet (500..2200, median 1100), last quarter's release (2500..12000, median 5500) and 10-Q
(8000..32000, median 16000) in sections of 800..3200 tokens, 3..6 peers (the nearest by
market cap in its sector, nearest first) and, for a core name, the analyst's model of 3..7
tabs (600..4000 tokens each). Each company reports on Tuesday with chance 7..11 % and on
Wednesday likewise (drawn per seed and day); 45..65 % (per seed) before the open (release at
06:00..08:00 on a 5-minute mark, the call on a half hour 35..120 minutes later), the rest
after the close (release 16:01..16:20, call 16:30..17:30); calls last 45..75 minutes; 45 %
change guidance; 8 % file a 10-K (25000..64000 tokens) instead of a 10-Q; the filing lands
0.5..3 h after the release (45 %), the next day at 07..18 (25 %) or after the trace. 5 %
reported on Monday after the close (their summaries feed Tuesday's notes).

Requests (bench/heldout_finres_filings.py, bench/heldout_finres_desk.py):

- press, transcript, filing: the ingest pipeline takes a document 5..40 s after it arrives
  (the release; the vendor's final transcript 1.5..4 h after the call ends, 170..230 tokens a
  minute of call; the filing) and runs four stages back to back, each after the last one's
  reading (5000 tokens/s) and writing (40 tokens/s): system prompt (1100), the card, the
  document, what the stage adds, an instruction (30..160). Releases: summary, KPI (the
  sector's KPI schema, 400..1600), guidance, compare (the KPI sheet before the release and
  the new one); transcripts: summary, guidance, Q&A themes, tone; filings: summary, KPI, risk
  (the previous filing's risk factors), compare. A document's stages share the head up to
  its end and part there. A KPI stage's output is the company's new KPI sheet.
- retry: 2 % of stage outputs fail validation; the request is sent again exactly 1..3 s
  after its output, before the next stage.
- call: a core name's call gets live notes every 4..6 minutes and at its end: system prompt
  (700), card, the KPI sheet at the call's start, every transcript chunk so far (170..230
  tokens a minute), an instruction; each extends the last.
- screen: at 01:00..01:40 each night one stream walks a template (700..2600) over the whole
  universe in its order: system prompt (900), template, card, the KPI sheet as it stands, an
  instruction; each after the last one's reading and writing (x 0.8..1.25 / scale, so as
  long at any scale); 12 % are hits. The second night re-runs the first night's template
  (40 %: exact re-sends but for companies whose KPI sheet changed) or a new one.
- news, digest: 3 bursts a day (x scale x 0.7..1.3, at least one) at 06..21 on a company
  reporting that day (60 %) or by interest, 4..40 articles (median 12; 200..1600 tokens)
  about 6 minutes apart: each tagged (system prompt 600, card, article, instruction); every
  third and the last, a digest re-sends the card and every article so far, in order.
- note: at 05:30..06:15 each sector with news drafts its morning note: system prompt (1000),
  house style (1200..3500 in 700-token parts), the summaries of its releases and transcripts
  since 16:00 the day before (in arrival order), last night's screen hits, the history, a
  message (10..500); 2..6 turns (median 3), replies 200..1600, about 3 minutes apart.
- compliance: 5..25 minutes after a note (morning or flash) is final: system prompt (1500),
  the manual (5000..12000 in 700-token parts), the restricted list (300..1800) as it stands,
  the note (500..2500), a cue; then a second check re-sending that, its finding and a cue.
  The restricted list changes 1..3 times over the trace (at 08..18).
- peer: 32 sessions a day (x scale x 0.8..1.2) at 08..19 (peaks at 10 and 14) on a company
  (60 % one that released in the last 24 h, else by interest) and 1..4 of its peers, in the
  peer list's order (half the sessions) or the analyst's: system prompt (1400), then each
  one's card and latest release, the company first; 1..12 turns (median 3), messages
  8..900, replies 60..1400, think times lognormal median 75 s.
- model: 20..120 minutes after a core name's guidance stage (a release that changes guidance,
  half of the transcripts) the analyst updates the model: system prompt (800), the model's
  tabs as they stand, the guidance output; 2..8 turns (median 4), think times median 120 s.
  Then 1..3 tabs are rewritten (the company's next update is new from the first of them on)
  and 70 % end in a flash note (to compliance).
- risk: 6..12 funds, each with a daily risk report (1500..4000, new at 06:00) and a
  positions snapshot (2000..8000) refreshed every half hour 09:30..16:00; 90 sessions a day
  (x scale x 0.8..1.2) at 08..17 (peaks at the open and the close): system prompt (1300),
  the fund's report and snapshot as they stand at each turn, the history, a question
  (8..300); 1..6 turns (median 2) about a minute apart. A macro shock (35 % of seeds,
  Wednesday 08:30) brings 1.6 x the day's risk sessions and 3 more news bursts at
  08:30..10:00.

In every session 8 % of the gaps add 5..40 minutes away, and a session ends past 60000
tokens of context. At scale 1.0, seeds 1..4: 2.2K..2.7K
requests over two days (285..364 companies, 41..70 reporters), 1.32M..1.67M blocks requested,
0.28M..0.39M distinct (21..24 %), generated in 1.0..1.8 s of CPU each (1.6..2.8 s wall on a
shared 2-core box). Blocks by kind: peer 19..27 %, risk 11..17 %, filing 10..17 %,
transcript 10..15 %, screen 9..13 %, call 8..10 %, press 6..9 %, model 3..4 %, compliance
about 3 %, digest 1..3 %, note 1..2 %, news about 1 %, retry 0.2..1.1 %. At scale 0.2 (the
tests): 460..660 requests, 0.26M..0.37M blocks.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_fewshot import Segment
from bench.heldout_finres_desk import Chat, Desk, Fund, Review
from bench.heldout_finres_filings import Burst, Call, Screen
from bench.heldout_finres_parts import Company, Doc, Report

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, owner, step, segments (see ``Run``)
KINDS = ("press", "transcript", "filing", "retry", "call", "screen", "news", "digest", "note",
         "compliance", "peer", "model", "risk")


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, owner, step,
    segments): press, transcript, filing and retry have the document (``docs``) and the
    stage's index; call the call (``calls``) and the chunk; screen the company and the night;
    news the burst (``bursts``) and the article, digest the burst and the articles it holds;
    note, peer, model and risk the session (``chats``) and the turn; compliance the review
    (``reviews``) and the step. ``times``: seconds from Tuesday 00:00. The generator
    (``state``) holds the universe, the calendar, the jobs and the sessions."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    state: Desk

    @property
    def companies(self) -> list[Company]:
        return self.state.companies

    @property
    def reports(self) -> list[Report]:
        return self.state.reports

    @property
    def docs(self) -> list[Doc]:
        return self.state.docs

    @property
    def calls(self) -> list[Call]:
        return self.state.calls

    @property
    def screens(self) -> list[Screen]:
        return self.state.screens

    @property
    def bursts(self) -> list[Burst]:
        return self.state.bursts

    @property
    def chats(self) -> list[Chat]:
        return self.state.chats

    @property
    def reviews(self) -> list[Review]:
        return self.state.reviews

    @property
    def funds(self) -> list[Fund]:
        return self.state.funds


def fin_research(seed: int, scale: float = 1.0) -> Trace:
    """A buy-side research replica over two days of an earnings season: releases,
    transcripts and filings ingested in stages, live call notes, the overnight screen, news
    bursts, morning notes, compliance review, peer comparisons, model updates and the risk
    bot. See the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace and its metadata (see ``Run``)."""
    d = Desk(random.Random(seed), scale)
    d.run()
    return Run(d.out, d.meta, d.times, d)
