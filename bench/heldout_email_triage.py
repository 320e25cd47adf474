"""bench.heldout's ``email_triage`` shape: one inference replica behind a company's inbox
assistant (an email and calendar copilot), serving the employees routed to it over two
working days. Written blind at 87af25f: by someone who had not read the policies, and no
policy or hit rate was run on it (nor LRU, OPT, a replay or any reuse statistic); the workload
is modelled on how such an assistant builds its prompts, not on any policy.

Where the numbers come from: the structure (an org-wide assistant prompt, then the task's
prompt, then the user's preferences and signature profile; triage that sends only the new
message; thread summaries fed the thread oldest first; drafts that re-read the thread and its
attachments in the user's voice; a nightly digest of unread mail; meeting-prep briefs from
the calendar and the invite thread; a compliance (DLP) scan of outgoing mail against a policy
document; an inbound spam and newsletter screen) follows public descriptions of email
copilots and of people building them. Every rate, size and share below is this writer's
estimate, not a measurement.

Prompts are token segments cut into 16-token blocks by ``bench.heldout_fewshot.Blocks`` (one
model, one key space). The clock starts Tuesday 00:00 UTC and ends two days later; the mail
of the Monday before is generated too (inboxes, threads, files, invites), sending nothing.

World (bench/heldout_email_parts.py). A seed draws the company's structure, the same at every
scale: its style (sales: external mail x 1.8, list posts x 0.5, files x 1.3; engineering:
x 0.5, x 1.5, x 0.8; operations: x 1), 1..3 offices (40/35/25 %) in distinct zones of UTC -8,
-5, 0, +1, +5.5, +8 (the first is HQ, whose clock runs lists, newsletters, the digest and the
policy), the heavy users' share (8..35 %), the light users with auto-triage on (30..70 %;
heavy users all), 3..18 mailing lists (each 5..30 % of the users, at least 3) and 5..14
newsletters a day. The router balances replicas by load, so the replica gets 120..155 light
users' load (a heavy user counts 2.5), x scale, at least 20 users. Teams of 5..16 share an
office; 60 % of users file list mail into folders by a rule. A user's profile is 120..1200
tokens (median 350); they come in at 09:00 and back from lunch at 13:00 local (each +-15 min
sd, drawn per day) and leave at 18:30. Mail, per user a day (light, heavy): 0.8, 1.8 internal
threads started (local hours peaking at 9 and 13; 1..5 recipients, a team mate first); 1.0,
2.5 external threads reaching them (x style, flatter hours; 25 % copy a team mate); 2.5 spam.
A list gets lognormal 1.5 (0.3..6) new threads a day (x style) in HQ office hours; a
newsletter (800..6000 tokens, median 2000) goes out at HQ 05..08 to 10..50 % of the users.
Bodies: internal 30..2000 tokens (median 180), external 40..2500 (260), list 40..3000 (280),
invite 60..1200 (200), spam 80..1500 (300). No reply on 30 / 35 / 40 / 60 % of internal,
external, list and invite threads, else 1..12 (median 2), 1..8 (1.5), 1..25 (2), 1..6 (1);
each 2 min..20 h after the last (median 40 min), a user replying only while at work (else at
their next arrival); an external thread alternates between the outside party and the company.
Files start 22 / 30 / 12 / 40 % of those threads (x style; 1..2): PDFs of 1200..30000 tokens
(median 5000, 800-token sections) or sheets of 600..15000 (3000, 600), half each. A reply
carries a new version of one of its thread's files 20 % of the time (v2 of a contract: the
sections before a random first edited one kept, every later one new), else a new file 5 %.
A delivery is never read 10 / 15 / 55 / 10 / 70 % of the time (internal, external, list, invite,
newsletter), else 2 min..30 h later (median 1.5 h; out of office: at the next arrival).
Meetings: a user organizes 0.24 (light) or 0.6 (heavy) a day (1.4..1.8 attendances a user a
day in all), with 1..7 team mates (30 % also one other user), on the half hour 09:00..17:00
local, invited 0.5 h..5 days before (median 20 h) in an invite thread.

Requests (bench/heldout_email_jobs.py, bench/heldout_email_desk.py). The org's assistant
prompt is 900..3200 tokens (median 1600); each task has its own prompt after it (tokens:
triage 320, summary 260, draft 480, attach 300, ask 420, prep 380, digest 400) and most a
cue (25..40) at the end.

- triage: each delivery to a user with triage on (not list mail filed by a rule), at once:
  org, task, profile, the message, the cue.
- screen: every message from outside (external, newsletters, spam): its own prompt (700),
  the message, a cue (30).
- compliance: every message a user sends on an external thread or with a file, and 10 % of
  the rest: its own prompt (550), the policy document (3000..12000 tokens, median 6000, in
  700-token sections), the body, each file carried (its first 4000 tokens), a cue (35). On
  half of the seeds the policy gets a new version on day 1 (HQ 08..11) from a random section
  on.
- digest: each night at HQ 01..02 one walk over every user in id order: org, task, profile,
  their unread mail oldest first (at most 30 messages and 20000 tokens), the cue; users with
  none are skipped; each after the last one's reading (6000 tokens/s) and writing (100..800
  tokens, median 300, at 35/s) x 0.8..1.25. A user who read nothing re-sends the same start.
- prep: 5..30 minutes before each meeting, for attendees with briefs on (light 25 %, heavy
  90 %): org, task, profile, the day's agenda (60 + 90 tokens a meeting; rendered at first use,
  again when an invite for that day lands), the invite, its thread's latest 6 replies, its
  files (first 8000 tokens each), the cue.
- summary: org, task, the thread as it stands (the latest messages within 12000 tokens), the
  cue; no profile, so everyone on a thread (a list's members) sends the same prompt. 1.0
  (light) or 4.0 (heavy) a day at office hours on a thread that moved in the last day (by its
  length); on coming in 0..1 (50/50) or 1..3 (40/35/25 %) of the threads that moved in the last
  15 h, 20..120 s apart; back from lunch 30 % (light) or always (heavy) one more.
- draft: 20 % (light) or 55 % (heavy) of a user's replies: org, task, profile, the thread and
  its files (first 8000 tokens each) as they stand, the history, an instruction (6..150, median
  25); 1..4 turns (75 % one), drafts 50..700 tokens (median 180); the reply is sent 0.5..5
  minutes after the last draft.
- attach: 10 % (light) or 30 % (heavy) of the files a message brings get questions 2 min..40 h
  later (median 3 h; out of office: at the next arrival): org, task, the file at its version
  then (first 16000 tokens), the history, a question (8..150); 1..5 turns (median 2).
- ask ("ask my inbox"): 0.3 (light) or 1.5 (heavy) a day, plus 15 / 50 % on coming in and 5 /
  30 % back from lunch: org, task, profile, the user's latest 4..10 messages (newsletters
  aside), the history, a question (5..200); 1..6 turns (median 2).

A chat's next turn follows its reply's decoding (35 tokens/s) and a lognormal pause (median
35..45 s); a chat past 24000 tokens ends.

At scale 1.0, seeds 1..4: 5.1K..6.9K requests over two days, 1.26M..1.89M blocks requested,
0.36M..0.44M distinct (23..30 %), generated in 1.2..2.0 s each on a shared 2-core box. Seeds
1..4 are engineering, sales, operations, sales with 128, 94, 105, 107 users (a heavy share
of 13, 31, 15, 13 %), 12, 7, 10, 13 lists, 2, 3, 3, 2 offices, a policy update on seeds
1..3; 1.8K..2.4K messages and 300..700 files (50..120 revised). Blocks by kind: triage
27..32 %, compliance 11..25 %, digest 5..20 %, summary 6..10 %, ask 7..11 %, draft 6..10 %,
attach 5..9 %, screen 4..6 %, prep about 4 %. At scale 0.2 (the tests): 0.23M..0.34M blocks,
850..1570 requests, 20..26 users.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_email_desk import Desk
from bench.heldout_fewshot import Segment

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, owner, step, segments (see ``Run``)
KINDS = ("triage", "screen", "compliance", "digest", "prep", "summary", "draft", "attach",
         "ask")


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, owner, step, segments):
    triage has the user and the message, screen the thread and the message, compliance the
    author and the message, digest the user and the night, prep the meeting and the user,
    summary the user and the thread, draft, attach and ask the chat (``state.chats``) and the
    turn. ``times``: seconds from Tuesday 00:00 UTC. ``state``: the generator (users, lists,
    threads, messages, files, meetings, agendas, the digest walks, chats, summaries)."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    state: Desk


def email_triage(seed: int, scale: float = 1.0) -> Trace:
    """A company's inbox assistant: auto-triage behind the org's prompt and each user's
    profile, thread summaries, drafts over threads and attachments, file questions, inbox
    chats, meeting-prep briefs, the nightly digest, the compliance scan and the inbound
    screen, with 9 am and after-lunch bursts. See the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace and its metadata (see ``Run``)."""
    d = Desk(random.Random(seed), scale)
    d.run()
    return Run(d.out, d.meta, d.times, d)
