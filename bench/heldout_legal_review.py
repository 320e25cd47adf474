"""bench.heldout's ``legal_review`` shape: one inference replica behind a legal document review
and contract drafting product used by law firms and in-house legal teams. Written after
``adaptive`` was frozen (at NOTE(cold)), blind: by someone who had not read the eviction
policies, and no policy, LRU, OPT or hit rate was run or computed on it; the workload is
modelled on how such a product builds its prompts, not on any policy.

Prompts are laid out in token segments and cut into 16-token blocks by
``bench.heldout_fewshot.Blocks`` (one model, one key space). The clock starts on a Monday
00:00 UTC; replies decode at 40 tokens/s, batch prompts prefill at 12000 tokens/s. Every prompt
starts with the product's system prompt (800 tokens); a lawyer's then has the firm's profile
(120..900 tokens: name, jurisdiction, house style), the task's instruction (120..300) and the
matter's header (150..1200: parties, posture); drafting and playbook reviews put the firm's
playbook for the matter's practice (corporate, litigation, commercial: 800..10000 tokens,
median 2000, in ~500-token sections) between the profile and the task. A knowledge lawyer
edits a playbook 0.3 times a firm a weekday (1..2 sections reworded, inserted or struck), and
every later section is new content from then on.

Firms: 14 (scaled, at least 3), Zipf(1.0) sizes by a random rank, 60 % law firms, 40 %
in-house teams, in New York, Chicago, San Francisco, London, Frankfurt, Singapore and Sydney
(30, 10, 15, 20, 10, 10, 5 %). Lawyers work 8..22 local (peaks 10..11 and 14..16), weekends
0.15 x; in the 48 h before one of a matter's deadlines there are no weekends and the nights
stay at half the peak, and the matter is 1 + 4 e^(-hours left / 18) times busier in the last
72 h (0.3 x once its last deadline passed: signed, filed). A firm has 4 matters per unit of
size (at least 1) and opens 0.06 more a size-unit weekday: deals 35 % / litigation 40 % /
contract negotiations 25 % at a law firm, 15 / 15 / 70 % in-house; 2..12 lawyers (median 5),
a negotiation 1..5 (median 2).

- a deal: the main agreement (2500..25000 tokens, median 6000) and 2..5 ancillaries (median
  2500) under negotiation, up to 2 versions from before the trace; a data room of 30..300
  documents (median 100): records (median 1200), forms on 2..5 templates (a shared 12..40-token
  title block, median 2000), the target's contracts (median 3500); signing 3..25 days on.
- a litigation: 5..30 filings (median 2500), 1..2 briefs (median 5000) due 2..15 days on; 40 %
  are in discovery, with a review protocol (800..5000 tokens, median 1500).
- a contract negotiation: 1..4 contracts (median 3500), 0..6 related uploads, a signing
  target 5..30 days on in 60 % (the others end after 3..8 counterparty rounds).

Requests (sections of ~500 tokens throughout; a version edit rewords 70 %, inserts 20 %,
strikes 10 %):

- ask: question sessions, 0.25 a lawyer a weekday (x the matter's boost), plus one after half
  the counterparty drafts and 40 % of uploads: the documents picked when it starts (0..8, 30 %
  none; by popularity: the main agreement 6, an ancillary or contract 1.5..4, a brief 3, a
  filing 2 r^-1, a data-room document 1.5 r^-0.9 by a random rank r, an upload or a hot
  discovery document 0.3..2; in workspace order, at most 24000 tokens), the thread, the
  question (8..400 tokens, median 45); replies median 250; 1..10 turns (40 % one), 90 s
  (median) think time after reading, 12 % resumed 0.5..3 days on.
- draft: drafting sessions, 0.05 a lawyer a weekday (half against a brief's or negotiated
  contract's current version), after 30 % of counterparty drafts and 15 % of brief revisions;
  each turn re-sends the thread with a new instruction (median 80) after the playbook as of
  now; replies median 450; 2..12 turns (median 4), 4 min think time, 25 % resumed.
- summary: a lawyer uploads a document (median 2000) to the matter, 0.12 a lawyer a weekday.
- redline: a counterparty draft (1..8 edits, 1..3 in a crunch) compared with our last version,
  2 min..4 h after it arrives (median 20 min): both versions in full, old then new. Our markup
  (1..6 edits) goes back 0.6 days (median) later, 30 % with a change-summary redline; their
  next draft 1.5 days after ours; a crunch cuts the gaps to a quarter; none after signing.
- issues: in the 60 % of firms that run them, the counterparty draft reviewed against the
  playbook right after its redline.
- cite: a brief is revised every 8 h (mean, 4 in a crunch; working hours) from 6 days before
  its deadline (1..6 edits); 35 % of revisions get a citation check, and there is a final one
  2..12 h before the deadline (a second 0.3..2 h before in 30 %): one request per 3000 brief
  tokens, each the whole brief then that group's citations, one after another.
- extract: a deal's review grid walks the data room in order, one request per document and
  group of 6 columns (60 tokens a column): system prompt, task, document, the group, 4 in
  flight; a new deal's grid within a day, 20 % of the older deals' within 6 days; 0.3 walks a
  deal (Poisson) of 1..2 added columns over every document again; 5..30 documents added to a
  data room 0.05 times a weekday, walked with the whole grid.
- review: a production (50..800 documents, median 120, Bates order: emails of median 400
  tokens each with 0..3 attachments, 30 % of those business records on one of the
  production's 1..3 templates sharing a 16..120-token head; 8 % another custodian's copy of a
  document produced earlier) reviewed one document a request behind the protocol as of now, 6
  in flight (a production takes minutes); the first within 5 days, then every 6 days
  (median); after 15 % of productions the case team amends one protocol section 10..90 min
  on, so the QC sample and later productions are reviewed behind the new version (every
  section from the change on is new); 3 % of reviewed documents join the workspace.
- qc: 2..24 h after a review ends (in working hours), a 10 % sample (at least 5) in Bates
  order: the review prompt, the QC task and the first pass's coding.

9000 requests at scale 1.0 span 140..258 hours (6..11 days) over seeds 1..10, generated in
5..9 s each on a shared 2-core box: 3.06M..3.94M blocks requested, 0.94M..1.18M distinct
(28.3..33.4 %: the system prompt, profiles, playbooks, popular documents and a session's
thread come back; every production, new version and upload is new once). Requests (share of
blocks): ask 20..30 % (25..33 %), draft 9.7..18 % (17..27 %), summary 1.9..3.4 % (1.6..2.5
%), redline 3.9..7.0 % (7.3..11 %), issues 1.4..4.1 % (1.7..5.0 %), cite 1.4..5.1 % (1.9..7.0
%), extract 11..41 % (5.7..28 %), review 9.4..26 % (6.5..17 %), qc 1.0..2.3 % (0.7..1.6 %);
58..65 matters, 10..24 extraction walks, 7..15 productions, 17..44 playbook edits, 767..1198
sessions. At scale 0.25 (4 firms) seeds 1..5: 147..305 hours, 0.80M..1.01M blocks,
28.8..33.3 % distinct.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_fewshot import Segment
from bench.heldout_legal_desk import Session
from bench.heldout_legal_jobs import Job, Jobs
from bench.heldout_legal_parts import Doc, Firm, Matter

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, matter, key, segments (see ``Run``)
KINDS = ("ask", "draft", "summary", "redline", "issues", "cite", "extract", "review", "qc")
LAWYER = ("ask", "draft", "summary", "redline", "issues", "cite")  # sent by a lawyer's action
BATCH = ("extract", "review", "qc")
REQUESTS = 9000  # at scale 1.0


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, matter, key, segments),
    the key a session (index into ``sessions``) for "ask" and "draft", a job (into ``jobs``)
    for the batch kinds, the document (into ``docs``) for the rest (the brief for "cite").
    ``times``: seconds from Monday 00:00 UTC. ``system`` and ``tasks`` are the fixed system
    prompt and task instructions; the world as it stands at the end of the trace."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    system: Segment
    tasks: dict[str, Segment]
    firms: list[Firm]
    matters: list[Matter]
    docs: list[Doc]
    sessions: list[Session]
    jobs: list[Job]


def legal_review(seed: int, scale: float = 1.0) -> Trace:
    """A legal review and drafting product: question sessions over matters' documents,
    drafting behind firm playbooks (edited now and then), redlines of negotiated versions,
    citation checks of briefs, data-room extraction walks, discovery review and QC, in firms'
    working hours with deadline bursts. See the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace of ``int(REQUESTS * scale)`` requests and its metadata (see ``Run``)."""
    s = Jobs(random.Random(seed), int(REQUESTS * scale), scale)
    s.run()
    return Run(s.out, s.meta, s.times, s.system, s.tasks, s.firms, s.matters, s.docs,
               s.sessions, s.jobs)
