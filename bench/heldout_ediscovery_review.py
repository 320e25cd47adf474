"""bench.heldout's ``ediscovery_review`` shape: one inference replica behind a law firm's
e-discovery platform during a litigation matter, Monday morning to Friday evening. Written after
``adaptive`` was frozen (at ec4e19e), blind: by someone who had not read the eviction policies,
bench/baselines.py, bench/policies.py, bench/policy_traces.py, bench/cold_start.py,
docs/eviction.md or docs/benchmarks.md, and no policy, LRU, OPT, replay or hit rate was run or
computed on it; the workload is modelled on how such a platform processes and reviews a
collection, not on any policy. The rates, sizes and shares are this writer's estimates.

Prompts are token segments cut into 16-token blocks by ``bench.heldout_fewshot.Blocks`` (one
model, one key space). The clock's 0 is Monday 00:00; people work weekdays, reviewers 09..18.

- the corpus: two collections, 2800 and 1100 documents at scale 1.0 (x scale x 0.85..1.15).
  The first: 5..8 custodians (Zipf sizes by a random rank), each a mailbox of threads (1..12
  messages, median 2; an email is its header (30..200 tokens), its body (15..3000, median 160)
  and the 6 messages before it quoted newest first; a quarter carry 1..3 attachments of
  60..12000 tokens, median 900) and a file share (18 % of the documents, 40..12000, median
  700). The second: 2..4 new custodians, and a later date range of the first custodians'
  mail continuing 15..30 % of the first collection's threads (1..4 replies each).
- ingest: the collection is processed one document at a time as a bare prompt, the document's
  text first, then a 30-token extraction cue: no system prompt or template, so no two requests
  share a first block and no block repeats. The first collection comes in on Monday at
  07:30..08:30 and opens the trace alone (1.2..2.5 documents a second x scale; about 2500..3200
  documents, 169K..221K blocks, 18..30 minutes at scale 1.0); the second on Wednesday at
  18:00..20:00. exception: 1..3 % of a collection's documents failed and are sent again
  exactly, in order, 5..20 minutes after the walk (the jobs below follow one another with such
  pauses, at 0.6..1.5 requests a second x scale).
- thread: email threading re-sends every thread the collection touched that has two messages
  or more: a 350-token system prompt, each collected message's own header and body in date
  order, a cue; the second collection's run extends the first's chain of a continued thread.
- first_pass: the AI first-level review over the collection's population: documents that
  survive thread de-duplication (no later collected message quotes them) and hit a live
  search term (30..50 terms, each hitting 0.2..15 % of the documents, median 1.5 %): a
  450-token system prompt, the review protocol (1000..3000 tokens in sections), the document,
  a 70-token coding instruction. The call: responsive 30 % (+12 % a further term hit, at most
  80 %), privileged 7 %, hot 6 % of the responsive; its 40..400-token rationale is kept.
- qc: 3 QC reviewers (x scale, at least 1) take every privileged or hot call, 15 % of the
  responsive and 5 % of the rest (and the re-run calls that changed), in order: the document's
  review prompt as it stands, the call, a question; 0..2 follow-ups (60/30/10 %) 20..120 s
  apart extend it; 150 s median a document; 12 % are overturned (privilege lifted, else
  responsiveness flipped).
- rereview: the protocol is revised on Tuesday at 11..15 (and on Thursday half the time): one
  section reworded, inserted or struck, so every later block of a review prompt is new; at
  19..21 that day half the responsive or privileged calls are re-run behind it (80 % keep).
- hits: search-term hit reports on Monday 14..16, Tuesday 16..18 and Thursday 10..12: per live
  term a sample of 8 hits (x scale, at least 1): the system prompt, the term, the document, a
  cue; an unchanged term re-sends its stored sample exactly plus a share of the hits processed
  since. On Tuesday 10..13 the meet-and-confer narrows 15..30 % of the terms (new text, a
  share of their hits) and adds 2..5.
- chat: attorneys' sessions (16 a day x scale, by the hour, mostly 08..21) behind a 700-token
  system prompt, the protocol and the case memo (2000..6000 tokens, revised most evenings),
  the history and a message (8..400 tokens; a quarter paste a responsive document); 1..14 turns
  (median 4), replies 40..1200 tokens, a lognormal pause (median 60 s), 15 % after 10..60
  minutes away; a context past 16000 tokens ends it.
- depo: on Thursday the 2..3 custodians with the most hot documents are deponents: a packet of
  10..24 of their responsive documents (x scale, at least 4; hot ones first, in date order)
  and an outline (1000..3500 tokens) after it; 2..3 prep sessions each, Thursday 09:00..Friday
  17:00, 2..16 questions (median 6); half the sessions end with the outline revised.
- prod_check / recheck / privlog: Friday 07:00..08:00 the production set (responsive, not
  privileged, Bates order) is checked: a 400-token system prompt, the 600-token designation
  guide, the document, a cue; 6 % get a redaction at 10..14 (a section after the header
  becomes new text); the re-check at 15..16 re-sends every produced document, the unredacted
  exactly; at 12..13 the privilege log walks the privileged calls with their rationale.

At scale 1.0, seeds 1..4: 8.3K..9.5K requests, 1.14M..1.35M blocks requested, 43..45 %
distinct, generated in 1.8..3.1 s each on a shared 2-core box. Blocks by kind: ingest
20..24 %, first_pass 22..27 %, chat 12..17 %, qc 6..8 %, hits 6..9 %, prod_check and recheck
5..6 % each, thread 4..5 %, rereview 3..7 %, depo 2..7 %, privlog and exception under 1 %.
The first repeated block comes after the opening walk (169K..221K blocks). At scale 0.2 (the
tests): 0.26M..0.31M blocks, an opening of 35K..46K blocks.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_ediscovery_desk import Desk
from bench.heldout_fewshot import Segment

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, owner, step, segments (see ``Run``)
KINDS = ("ingest", "exception", "thread", "first_pass", "rereview", "hits", "qc", "chat",
         "depo", "prod_check", "privlog", "recheck")


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, owner, step,
    segments): ingest, exception, thread and first_pass have the collection (0, 1) and the
    document (thread: the thread); rereview and hits the run and the document; qc the
    reviewer and the turn, chat the session and the turn, depo the deponent and the turn;
    prod_check, privlog (0) and recheck (1) the document. ``times``: seconds from Monday
    00:00. ``world``: the generator as it stands at the end (corpus, terms, protocol, memo,
    codings, its jobs' walks, sessions, QC sessions, deposition packets and outlines, the
    production)."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    world: Desk


def ediscovery_review(seed: int, scale: float = 1.0) -> Trace:
    """A law firm's e-discovery replica during a litigation matter: a custodian collection
    processed one bare document at a time, then threading, an AI first-level review behind
    the protocol, QC, hit reports, attorneys' chats, a second collection, deposition prep
    and Friday's production. See the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace of Monday 07:30..Friday 19:00 and its metadata (see ``Run``)."""
    w = Desk(random.Random(seed), scale)
    w.run()
    return Run(w.out, w.meta, w.times, w)
