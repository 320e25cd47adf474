"""bench.heldout's ``localization`` shape: one inference replica behind a localization platform
(a TMS with LLM translation) used by software companies. Written after ``adaptive`` was frozen,
blind: by someone who had not read the eviction policies, bench/baselines.py or any results,
and no policy, LRU, OPT or hit rate was run or computed on it; the workload is modelled on how
such a platform builds its prompts and schedules its work, not on any policy.

Where the numbers come from: the structure (per-locale jobs in a project, continuous
localization from a repository integration or CLI, glossaries and translation memory looked up
per segment, automated QA checks after MT, string freezes before a release, post-editing by
linguists) follows how commercial TMS products (Crowdin, Phrase, Lokalise, Smartling) describe
their workflows in their public documentation; the locale tiers (FIGS, CJK and Brazilian
Portuguese first) are the usual order in which software companies add languages; the target
tokens a source token follow multilingual tokenizer studies (Petrov et al. 2023, "Language Model
Tokenizers Introduce Unfairness Between Languages"; Ahia et al. 2023); Zipf customer sizes
are the usual revenue concentration of a B2B SaaS. The rates, sizes and shares below are this
writer's estimates from those descriptions, not measurements.

Prompts are laid out in token segments and cut into 16-token blocks by
``bench.heldout_fewshot.Blocks`` (one model, one key space). The clock starts on a Monday
00:00 UTC; replies decode at 40 tokens/s, prompts prefill at 12000 tokens/s. Every prompt is a
role's system prompt (translate 650 tokens, review 520, assist 700), the customer's style guide
(general sections of ~400 tokens, 500..4000 in all, median 1200; then the target locale's
section, 150..1000, median 350), the termbase entries (10..60 tokens, median 24) of the
concepts the source text mentions in glossary order (one concept per 60 tokens, 2..40, Zipf(1)
popularity with the product name first; customers whose termbase is small, and 15 % of the
others, send the whole glossary; at most 4000 tokens), then the task's parts, then a closing
instruction (60..130 tokens) that names the locale.

Customers: 12 (scaled, at least 3), Zipf(1.0) sizes by a random rank, in San Francisco, New
York, London, Berlin, Tel Aviv, Bangalore, Tokyo and Sydney (30, 15, 15, 15, 8, 7, 5, 5 %);
writers and developers work office hours (peak 09..11 and 14..16 local, weekends 0.1 x). A
customer has 5..40 target locales (median 12 x size^0.3, tier-weighted), a termbase of 100..1500
concepts (median 300 x size^0.5), a corpus of 80 x size^0.7 documents (at least 12) in
repository order: UI string files (15 %, median 2400 tokens, sections of 40 strings of 18
tokens), documentation pages (60 %, median 1400) and marketing pages (25 %, median 900);
a scheduler order (55 % language-major: one locale's job after another, else document-major:
each unit into every locale), QA (35 % none, 40 % terminology, 25 % terminology and
consistency), a release cadence (7, 14 or 28 days; 15 % none). Linguists work in their
locale's time zone (weekends 0.3 x).

Requests (rates for a customer of mean size, scaled by its size; a job keeps 8 in flight for
pushes and releases, 4 for translation and QA, 2 for audits; a translation's reply is the text
x the locale's expansion, 1.1..2.4):

- push: a developer merges 1..60 new UI strings (median 8), 1.5 a weekday; the repository
  integration sends them into every locale at once: head, terms, 0..4 translation-memory
  matches (30..300 tokens), the strings, the instruction.
- translate: writers publish 1..8 pages (median 2, by Zipf popularity) 0.8 a weekday: 75 %
  edited (1..3 sections reworded, inserted or struck; only the changed sections are sent,
  each behind the section before it as context), 10 % rewritten, 15 % new (whole pages in
  chunks of at most 2500 tokens); a content drop 0.03 a weekday: a docs section (15..120
  pages, median 35, every locale) or a campaign (5..30 pages into the first 3..8 locales in
  tier order). A drop's job runs for hours.
- release: the string freeze at 09:00..10:00 local on a weekday every cadence (the first
  within one): 80..2500 changed strings (median 300 x size^0.5) in batches of 40 into every
  locale, language-major; linguists are 3 x busier for the next 24 h.
- qa: 1..20 min after a push, translation or release job ends, the customer's checks walk
  its items in order, each check right after the other: review head, terms, source text,
  its translation, the check's instruction (replies median 120).
- postedit: linguists open a chat over a document in their locale, 0.25 a locale a weekday x
  size^0.5: 70 % one translated there in the last three days, else one by popularity: head,
  the document's terms, its text (at most 4000 tokens) and translation, the thread, a question
  (median 50 tokens); replies median 120; 1..15 turns (25 % one), 3 min (median) think time;
  after half the chats the linguist's edits replace part of the translation.
- audit: for the 2 largest customers (scaled, at least 1) at 01:00..01:30 local after each
  working day, the next locale in turn: every corpus document in repository order behind
  the review head and the whole glossary, then the page (at most 4000 tokens) and its
  translation.

Termbase edits (0.5 a weekday x size: 40 % new terms, else 1..5 entries of one locale
rewritten) and style guide edits (0.06 a weekday: 60 % general sections, so every later
section is new content, else one locale's section) change prompts from the edit on.

9000 requests at scale 1.0 span 46..190 hours (2..8 days) over seeds 1..10, generated in
4.5..9.8 s each on a shared 2-core box: 2.67M..3.41M blocks requested, 0.87M..1.25M distinct
(26..39 %). Requests (share of blocks): push 6.5..24 % (3.7..13 %), translate 21..41 %
(16..38 %), release 0..13 % (0..8.5 %; none in seed 3's 46 hours), qa 15..57 % (13..56 %),
postedit 3.6..13 % (6.6..22 %), audit 3.7..20 % (7.9..35 %). At scale 0.25 (3 customers)
seeds 1..5: 41..183 hours, 0.71M..1.01M blocks, 29..38 % distinct.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_fewshot import Segment
from bench.heldout_localization_desk import Session
from bench.heldout_localization_jobs import Job, Jobs
from bench.heldout_localization_parts import Customer, Doc

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, customer, key, segments (see ``Run``)
KINDS = ("push", "translate", "release", "qa", "postedit", "audit")
REQUESTS = 9000  # at scale 1.0


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, customer, key,
    segments), the key a session (index into ``sessions``) for "postedit", a job (into
    ``jobs``) for the rest. ``times``: seconds from Monday 00:00 UTC. ``system`` holds each
    role's system prompt, ``instructions`` the closing instruction of each (kind, locale); the
    world as it stands at the end of the trace."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    system: dict[str, Segment]
    instructions: dict[tuple[str, str], Segment]
    customers: list[Customer]
    docs: list[Doc]
    sessions: list[Session]
    jobs: list[Job]


def localization(seed: int, scale: float = 1.0) -> Trace:
    """A localization platform's replica: CI string pushes, published edits, content drops
    and release freezes translated into 5..40 locales behind style guides and termbase
    excerpts, QA checks, post-editing chats, nightly audits. See the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace of ``int(REQUESTS * scale)`` requests and its metadata (see ``Run``)."""
    s = Jobs(random.Random(seed), int(REQUESTS * scale), scale)
    s.run()
    return Run(s.out, s.meta, s.times, s.system, s.instructions, s.customers, s.docs,
               s.sessions, s.jobs)
