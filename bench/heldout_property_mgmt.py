"""bench.heldout's ``property_mgmt`` shape: one inference replica behind the assistant of a
residential property manager (several thousand units in 3..4 US cities and time zones) over
two days. Written blind at d7675f4: by someone who had not read the policies, and no policy
or hit rate was run on it (nor LRU, OPT, a replay or any reuse statistic); the workload is
modelled on how such a product builds its prompts, never on any policy.

Where the numbers come from: the structure (a resident assistant given the building's house
rules and the lease's abstract and retrieving handbook sections per question, a building
alert injected while an incident lasts, a maintenance assistant that re-reads the work order
as messages, photos, technicians' notes and quotes land, an e-mail drafter fed the whole
thread, a leasing assistant answering prospects over the listing and the building's texts,
listing copy written from a fact sheet and photo captions, screening summaries over the
application's documents, lease abstraction over the whole lease and its addenda, and batch
jobs for rent reminders, renewal offers and owner reports) follows how vendors and
integrators of property-management software describe such features in public. Every rate,
size and share below is this writer's estimate, not a measurement.

Prompts are token segments cut into 16-token blocks by ``bench.heldout_fewshot.Blocks`` (one
model, one key space). The clock starts at 00:00 UTC of day 0 and ends two days later; local
hours are each city's. Counts of a day are x scale (Poisson) and x the week's factor.

Seeds differ in structure: seed 1, 5, 9, ... is a normal mid-month week; 2, 6, ... move-in
season at a month's end (8 % vacant, listings x4, prospects x1.6, applications x3.5, new
leases x3, tickets x1.3, lease questions x1.5, a lease form revision, reminders on day 1);
3, 7, ... an incident-heavy week (4..6 incidents, tickets x1.6, tenants x1.2, emails x1.3);
4, 8, ... month-end (day 0 the month's last day, day 1 the 1st: every owner's report,
reminders to most tenants both days, a month of renewal offers, tenants x1.1, emails x1.2,
addenda x1.3). Cities, buildings and incidents are drawn per seed too.

World (bench/heldout_prop_world.py): 3..4 cities at UTC -7, -6, -5, -4 (each a local-rules
text of 400..1500 tokens and a lease form of 7000..14000, median 10000, in 600-token
sections, revised twice before the clock); 64 x scale buildings (x 0.85..1.15, at least 6),
the cities' shares uniform 0.5..1.5, of 8..600 units (median 65), 5 % vacant; 25 % condo
associations (their board the owner), the rest of 20 x scale investors (Zipf(1)). A building
has house rules and amenities (800..3500, median 1600, 300-token sections), a marketing text
(1000..3500), a maintenance profile (800..3000), a rent survey (600..2000, refreshed weekly).
A unit has a profile (150..450); its lease the form version in force when it began, a rider
(300..800), Poisson(1.2) addenda (250..1200), an abstract (400..1100), an end 20 days past to
345 ahead, autopay 45 %, the tenant's language (English 72 %, Spanish 24 %, other 4 %). The
portfolio's resident handbook has 1500..3500 tokens (median 2400) in 400-token sections,
Zipf(1) popular by a rank drawn per trace. Updates rewrite a document from a section k >= 1
on (the rest new content, 0.9..1.2 its tokens): the handbook on 60 % of seeds (local 10..16
of the largest city), 3 x scale + 0.5 house-rules edits a day (local 09..17), a lease form
at local 08:00 of day 0 (move-in always, else 20 %) for leases signed after. Incidents
(water, elevator where 40+ units, power, heat, leak), one a building, by units: 1..2 a trace,
4..6 in the incident week (the first a water main break or a leak in the largest building);
40 % but no leak planned work (noticed at local 15..18 the day before, reminded an hour
before, from local 09..13 for 3..6 h), else from local 06..20 for 2..10 h, noticed 5..20
minutes in; an update every 45..150 minutes and one at the end; notices of 250..900 tokens
are the building's alert until 2..6 h after the end.

Requests (bench/heldout_prop_desk.py, bench/heldout_prop_jobs.py):

- tenant: 130 chats a day, residents' hours (evening peak): system (1800), the city's rules,
  the house rules and the alert as they stand, the lease abstract, the history, 2..3
  handbook sections retrieved for the message (Zipf), the message (6..300, median 35); the
  sections, message and reply (40..500, median 140) join the history. 1..8 turns (median 2),
  each after the reply's decoding (35 tokens/s) and a pause (median 45 s); 25 % come back
  10..30 h later for 1..3 turns; a chat past 24000 tokens ends.
- incident: 12..35 % of the building's tenants ask, 70 % (unplanned 75 %) from the start
  (exponential, mean 50 minutes), the rest between the first notice (the start, unplanned)
  and the end: the tenant system prompt, the rules and the notice as they stand, the
  incident's 2 handbook sections, the question (6..120); 40 % of first questions are the
  portal's quick-reply button (the same 12 tokens: the same request until the next notice);
  1..3 turns.
- email: 75 threads a day (residents' hours; 4 days of them opened before the clock, played
  out to it): each tenant's e-mail (40..900, median 160) gets a draft: system (1000), the
  handbook, the city's rules, the house rules, the alert, the abstract, the thread, a cue
  (30); staff's reply (50..500) follows 10 min..8 h later (median 1.5 h), the tenant's
  answer with chance 0.55 20 min..36 h after that (median 6 h); at most 10 e-mails.
- ticket: 60 a day (all hours, mostly 07..23; 4 days of them open before the clock, played
  out to it): a report (20..500 and 0..4 photo captions of 60..300), dispatch (30..150), the
  technician's notes (100..600), 25 % a vendor quote (400..1500), 30 % a tenant follow-up
  (30..250), completion (80..300), 10 min..48 h apart (median 5 h; 10 % emergencies: median
  40 minutes); each step landing re-reads: system (1400), the maintenance profile, the
  unit's profile, the texts so far, a cue (30).
- prospect: 130 chats a day (prospects' hours, evening peak) on a listed unit: system
  (1500), the marketing text, the house rules, the listing text as the chat began, the
  history, a message (6..200, median 25); 1..10 turns (median 2); 20 % come back next day.
- lease: 24 staff chats a day (local 09..17) over a tenant's whole lease: system (1200), the
  form version, the rider, the addenda, the history, a question (10..300); 1..6 turns.
- screening: 45 applications a day (prospects' hours) for a listed unit: system (1300), the
  screening criteria (1800..3200), the city's rules, the form (300..800), 1..4 income
  documents (250..900), the credit and background summary (500..1300), a cue (40); 35 % add
  a document 2..20 h later and are screened again (new from the added document on).
- abstract: a new lease (12 a day, local 09..17, on a listed unit, vacant ones first, on the
  current form) or an addendum (18 a day) is abstracted: system (900), the whole lease, a
  cue (35); the lease's abstract is new from then (residents' prompts, renewals).
- listing: each city's job at local 10..11: 30 new listings a day (vacant units, or leases
  ending within 60 days) and re-listings (12 % of listed units a day, a new fact sheet),
  each a long and a short text: system (900), the marketing text, the fact sheet (150..600),
  4..14 photo captions (30..150), the long (45) or short (35) cue; the long text is what
  prospects then see.
- reminder: each city's job at local 08:00..08:30: past-due notices to 4 % of tenants, or
  the week's run (month-end: 85 % of tenants without autopay on day 0, 50 % on day 1;
  move-in: 60 % on day 1): system (500), the template of the tenant's language and the
  notice (250..550), a one-off note (60..260), a cue (20).
- renewal: each city's job at local 09..10 over the leases ending 90 days on (a day of them;
  month-end's day 1: 31 days of them): system (1100), the renewal policy (1500..3000), the
  rent survey as it stands, the abstract, a one-off payment history (120..400), a cue (40).
- report: month-end, every owner's at local 01..03 of day 1 (other weeks, a condo board's
  packet a day, at least one, local 09..17): each building's units' ledgers (80..700,
  median 220) 12 a request behind system (1500), the owner's template (600..1800) and the
  building's month summary (1500..4000), a cue (40); then the building's roll-up (a
  delinquency list of 150..1200, a cue of 45).

A job walks its items one request after another at the pace of reading (6000 tokens/s) and
writing its output (35/s) x 0.8..1.25, reminders 6 at once, renewals and listings 2.

At scale 1.0, seeds 1..4 (normal, move-in, incident, month-end): 3.2K, 6.7K, 4.2K, 6.9K
requests over two days; 1.19M, 1.96M, 1.50M, 1.83M blocks requested; 0.19M..0.35M distinct
(16, 16, 17, 19 %); generated in 1.0, 2.2, 2.0, 3.4 s on the shared 2-core box (another job
running beside it; the month-end's many distinct blocks cost the most). 4.3K..6.6K units in
55..73 buildings; 2, 2, 6 and 1 incidents (86 askers in the largest building's, of 478
units); month-end: 3.1K reminders, 350 renewal offers, 439 report requests.
Blocks by kind, seeds 1..4: tenant 21..31 %, prospect 17..22 %, ticket 8..14 %, email
8..10 %, lease 6..8 %, listing 3..9 %, screening 3..10 %, abstract 4..5 %, incident 0..6 %,
reminder 2..11 %, renewal 1..7 %, report 0..11 %. At scale 0.2 (the tests): 0.25M, 0.39M,
0.30M, 0.39M blocks, 670..1.6K requests, 17..22 % distinct.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_fewshot import Segment
from bench.heldout_prop_desk import Desk
from bench.heldout_prop_world import WEEKS

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, owner, step, segments (see ``Run``)
KINDS = ("tenant", "incident", "email", "ticket", "prospect", "lease", "screening",
         "abstract", "listing", "reminder", "renewal", "report")


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, owner, step, segments):
    tenant, incident, prospect and lease have the chat (``state.chats``) and the turn; email
    the thread (``state.threads``) and the e-mail it drafts for; ticket the ticket
    (``state.tickets``) and the step; screening the application (``state.apps``) and the
    run; abstract the unit and 0 for a new lease, else its addenda; listing, reminder,
    renewal and report the job's walk (``state.streams``) and the unit (the building for a
    report). ``times``: seconds from 00:00 UTC of day 0. ``state``: the generator (cities,
    buildings, units, owners, documents and their versions, incidents, walks, chats)."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    state: Desk


def property_mgmt(seed: int, scale: float = 1.0) -> Trace:
    """A property manager's assistant: residents' chats and e-mails behind the house rules
    and the lease abstract, an incident's burst of questions, maintenance tickets that grow,
    prospects' chats over a listing, lease questions and abstracts, screening summaries,
    listing texts, and the reminder, renewal and owner-report walks, in 3..4 time zones;
    each seed a week of its own kind. See the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace and its metadata (see ``Run``)."""
    d = Desk(random.Random(seed), scale, WEEKS[(seed - 1) % len(WEEKS)])
    d.run()
    return Run(d.out, d.meta, d.times, d)
