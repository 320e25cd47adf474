"""bench.heldout's ``travel_agent`` shape: one inference replica behind an online travel
company's booking assistant and agent platform over two weekdays (UTC midnight to the second
midnight), with a hub's weather storm sending its rebookings through it. Written blind at
0e3f7c3: by someone who had not read the policies, and no policy or hit rate was run on it.
The workload is modelled on how such a platform builds its prompts, never on any policy.

Where the numbers come from: the structure (a planner behind a system prompt and tool
schemas whose search results are appended as JSON, a trip state the server rewrites when
the dates change, booking agents reading fare rules, service agents given the booking
record, disruption tooling that rebooks cancelled itineraries in bulk, saved-search price
alerts, itinerary emails) follows how travel companies and agent frameworks describe such
systems in public. Every rate, size and share below is this writer's estimate, not a
measurement. The replica is one of many behind a router; the counts are its share.

Prompts are token segments cut into 16-token blocks by ``bench.heldout_fewshot.Blocks`` (one
model, one key space). Travellers live in three regions (UTC-5 40 %, UTC+1 35 %, UTC+8 25 %):
consumers' sessions follow an evening curve of local hours, corporate ones office hours.
Shared text: system prompts per agent (plan 2400 tokens, book 1300, service 1800, rebook
1100, alert 800, digest 700, guide 900), the tool schemas (4800 in five parts), 150
destination guides (2500..14000, median 6000, in 800-token sections; Zipf(1.0)), 20
airlines (Zipf(1.0)) x 4 fare families' rules (1200..5000), 400 hotels' policies
(300..1500), 40 companies' travel policies (2000..9000, Zipf(1.0) traffic) with 5..200
traveller profiles (200..800). A booking record: travellers (200..600), flights
(300..1200), the hotel stay (60 %, 200..600), fare and payments (150..400); 1000 x scale
bookings exist before the trace, departing in the next five days.

Requests (rates a day at scale 1.0, each x 0.8..1.2 and x scale):

- plan: 16 consumer planning sessions: system prompt, tools as they stand, the trip state
  (100..300), the history, the message (6..400, median 35); 1..20 turns (median 5),
  replies 40..900, think times lognormal median 45 s (12 % away 5..90 minutes), the session
  ends at 40K tokens. 60 % of turns call a search (flight 50 %: JSON 800..7000, hotel 35 %:
  1000..8000, car 15 %: 300..2200; 1..6 s), read in a second request that appends the call
  and result; 25 % search again (two searches a turn at most). 15 % of later turns change
  the dates: a new trip state, the old search results dropped, a flight search follows
  (every block after the tools and the head is new). 25 % go on to book.
- corporate: 8 sessions in office hours of the company's region, the same with the
  company's policy and the traveller's profile before the trip state; 40 % book.
- book: after a session, 0.5..5 minutes later: the booking agent's system prompt, tools, the
  company's policy (corporate), the fare family's rules, the hotel's policy (60 %), the offer
  (500..2500), then four steps (details, price check, payment, ticket; 100..600 each)
  20..120 s apart, each request extending the last; the last makes a booking departing
  12 hours..120 days later (median 14 days).
- service: 30 customer-service chats: system prompt, tools, the booking record as it stands,
  the history; 1..12 turns (median 3). 20 % return to a booking chatted about in the last 24
  hours (the record re-sent exactly), else a booking departing from 12 hours ago on.
- storm: once, at a hub, from 11:00..17:00 local (day 0 or 1, ending 2 hours before the
  trace does), 4..8 hours of departures are cancelled: 600..1500 x scale itineraries booked
  before the trace (70 % from the hub's region). Advisories (400..1000 tokens, a new version
  each) come every 45..90 minutes, each cancelling the departures from 30 minutes after it
  to 30 minutes after the next. rebook: the rebooking job (four streams at 6000 tokens/s
  read and 35/s written, x 0.8..1.25 / scale) walks them in departure order: system prompt,
  the advisory and the record as they stand, an availability search (400..1800), a 50-token
  instruction. reoffer: 22 % of tries find the seat gone and try again 5..20 minutes later
  (three tries at most); a try that books writes new flights into the record, so later
  sends of it are new from the flights on. 10 % of the travellers open a service chat,
  exponential mean 40 minutes after their advisory.
- alert: 100 x scale saved searches (spec 120..400) re-run every 4, 6, 8 or 12 hours (30, 30,
  20, 20 %): on the hour the due ones join a two-stream job: system prompt, the spec, the
  last run's results exactly, the new results (400..1800), a 40-token instruction.
- digest: at 03:00 local each night, each region's bookings on this replica's shard (not the
  storm's) departing 6..30 hours later, in departure order, one stream: system prompt, the
  destination's brief for the day (250..800), the record as it stands, a 45-token cue.
- guide: 35 destination Q&A sessions: system prompt, the guide as it stands, the history, a
  question (6..120); 1..8 questions (median 2) 15..120 s apart. The content team rewrites 4
  guide sections a day (Poisson, 08..18 UTC): later blocks of that guide are new.
- deploy: on day 1 (60 % of seeds) at 13..18 UTC the hotel search's schema changes: every
  prompt with the tools is new from the second tool part on.

At scale 1.0, seeds 1..4: 3.2K..4.5K requests, 1.21M..1.71M blocks requested, 0.33M..0.48M
distinct (27..28 %), generated in 2.0..2.8 s each on a shared 2-core box. The storms (all
on day 0 for these seeds) cancel 638..1429 itineraries in 5..8 waves; the first tries span
5..7 hours. Blocks by kind: service 22..23 %, plan 13..21 %, rebook 15..22 %, corporate
9..14 %, alert 8..12 %, guide 5..7 %, reoffer 4..6 %, digest 4..6 %, book 2..4 %. At scale
0.2 (the tests): 0.26M..0.35M blocks.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.heldout_fewshot import Segment
from bench.heldout_travel_chat import Chat, Flow, Trip
from bench.heldout_travel_jobs import Alert, Replica, Storm
from bench.heldout_travel_parts import Booking

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, owner, step, segments (see ``Run``)
KINDS = ("plan", "corporate", "book", "service", "guide", "rebook", "reoffer", "alert",
         "digest")


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, owner, step,
    segments): plan and corporate have the trip (``trips``) and its request number; book the
    flow (``flows``) and the step; service and guide the chat (``chats``) and the turn;
    rebook and reoffer the booking and the try (1, 2, 3); alert the saved search
    (``alerts``) and its run; digest the booking and 0. ``times``: seconds from midnight UTC.
    The generator (``state``) holds the world, the storm, the digests, the deploy and the
    guide edits."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    state: Replica

    @property
    def trips(self) -> list[Trip]:
        return self.state.trips

    @property
    def flows(self) -> list[Flow]:
        return self.state.flows

    @property
    def chats(self) -> list[Chat]:
        return self.state.chats

    @property
    def bookings(self) -> list[Booking]:
        return self.state.bookings

    @property
    def storm(self) -> Storm:
        return self.state.storm

    @property
    def alerts(self) -> list[Alert]:
        return self.state.alerts


def travel_agent(seed: int, scale: float = 1.0) -> Trace:
    """An online travel company's replica: planning sessions with search results and date
    changes, corporate sessions behind travel policies, booking flows behind fare rules,
    service chats re-sending booking records, a hub's storm sending its rebookings, price
    alerts, nightly itinerary emails and destination Q&A. See the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace and its metadata (see ``Run``)."""
    r = Replica(random.Random(seed), scale)
    r.run()
    return Run(r.out, r.meta, r.times, r)
