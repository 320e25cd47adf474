"""bench.heldout's ``travel_agent`` shape, the travellers' side: planning sessions behind the
assistant's system prompt and tool schemas (consumers, and corporate travellers behind their
company's travel policy and their profile), with flight, hotel and car searches whose JSON
results join the conversation and date changes that rewrite the trip state; booking flows
behind a fare family's rules; customer-service chats that re-send the booking record;
destination Q&A over the guides. See bench/heldout_travel_agent.py's docstring for the
numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_travel_parts import (DAY, EVENING, FAMILIES, HOUR, MINUTE, OFFICE, World,
                                        tokens)

PLANS = 16  # consumers' planning sessions a day at scale 1.0 (x 0.8..1.2)
CORPORATE = 8  # corporate travellers' sessions a day at scale 1.0 (x 0.8..1.2)
SERVICE = 30  # customer-service chats a day at scale 1.0 (x 0.8..1.2)
GUIDES = 35  # destination Q&A sessions a day at scale 1.0 (x 0.8..1.2)
TURNS = (5, 0.7, 1, 20)  # turns of a planning session
MESSAGE = (35, 1.0, 6, 400)  # tokens of a traveller's message
REPLY = (220, 0.6, 40, 900)  # tokens of the assistant's reply
STATE = (180, 0.3, 100, 300)  # tokens of the trip state (dates, travellers, places)
TOOL = (0.6, 0.25)  # chance a turn calls a search, and that a result calls another
SEARCH = {"flight": (0.5, (2500, 0.5, 800, 7000)), "hotel": (0.35, (3000, 0.5, 1000, 8000)),
          "car": (0.15, (900, 0.5, 300, 2200))}  # search: (share, tokens of its JSON result)
CALL = (60, 0.3, 30, 120)  # tokens of the assistant's tool call
LATENCY = (1.0, 6.0)  # seconds a search takes
CHANGE = 0.15  # turns (after the first) where the traveller changes the dates
THINK = (45.0, 1.0)  # seconds between a reply and the next message (median, sigma)
AWAY = (0.12, (5.0, 90.0))  # gaps where the traveller leaves and comes back (minutes)
MAX_CONTEXT = 40000  # tokens of a session's context that end it
CONVERT = {"plan": 0.25, "corporate": 0.4}  # sessions that go on to book
DECODE = 35.0  # tokens a second a reply decodes at
OFFER = (1100, 0.4, 500, 2500)  # tokens of the chosen offer's JSON
STEPS = ((250, 0.3, 150, 400), (400, 0.3, 200, 600), (180, 0.3, 100, 300),
         (350, 0.3, 200, 500))  # a booking flow's steps: details, price check, payment, ticket
STEP_GAP = (20.0, 120.0)  # seconds between two steps of a booking flow
LEAD = (14 * 24, 0.9, 12, 120 * 24)  # hours from booking to departure
CS_TURNS = (3, 0.6, 1, 12)  # turns of a customer-service chat
CS_MESSAGE = (40, 0.8, 6, 300)
CS_REPLY = (160, 0.5, 30, 600)
RETURN = (0.2, 24.0)  # service chats on a booking chatted about in the last this many hours
QUESTIONS = (2, 0.7, 1, 8)  # questions of a destination Q&A session
QUESTION = (25, 0.6, 6, 120)
ANSWER = (200, 0.5, 40, 700)
READ = (15.0, 120.0)  # seconds between two questions


@dataclass
class Trip:
    """A planning session: "plan" (a consumer) or "corporate"; its region, company, head
    (the company's policy and the traveller's profile; empty for a consumer), the trip
    state's versions, turns left, destination, history, the tool results in it, its request
    indices, those that changed the dates and those that read a search's result (their last
    segment)."""

    kind: str
    region: int
    company: int | None
    head: list[Segment]
    states: list[Segment]
    turns: int
    destination: int
    history: list[Segment] = field(default_factory=list)
    results: list[Segment] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)
    changes: list[int] = field(default_factory=list)
    searches: list[int] = field(default_factory=list)


@dataclass
class Flow:
    """A booking flow after a session: its trip, airline, fare family, parts (the company's
    policy, the fare rules, the hotel's policy, the offer), steps sent, request indices and
    the booking it made (-1 until the last step)."""

    trip: int
    airline: int
    family: int
    parts: list[Segment]
    steps: list[Segment] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)
    booking: int = -1


@dataclass
class Chat:
    """A customer-service chat ("service": ``subject`` a booking; ``cause`` "new", "return"
    or "storm") or a destination Q&A ("guide": ``subject`` a destination)."""

    kind: str
    subject: int
    cause: str
    turns: int
    history: list[Segment] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)


class Desk(World):
    """The travellers' work on the world (``World``): planning sessions, booking flows,
    service chats, destination Q&A."""

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, scale)
        self.trips: list[Trip] = []
        self.flows: list[Flow] = []
        self.chats: list[Chat] = []
        for day in (0.0, DAY):
            self.at(day, "desk_day", None)

    def daily(self, rate: float) -> int:
        return max(1, round(rate * self.scale * self.rng.uniform(0.8, 1.2)))

    def _on_desk_day(self, _: object) -> None:
        """The day's sessions at local hours by the regions' curves."""
        rng, day = self.rng, self.now
        for name, rate in (("trip", PLANS), ("service", SERVICE), ("guide", GUIDES)):
            for _ in range(self.daily(rate)):
                region = self.region()
                self.at(self.arrival(day, EVENING, region), name, region)
        for _ in range(self.daily(CORPORATE)):
            c = self.pick(rng, self.company_cum)
            self.at(self.arrival(day, OFFICE, self.companies[c].region), "corporate", c)

    def _on_trip(self, region: int) -> None:
        self.open_trip("plan", region, None, [])

    def _on_corporate(self, c: int) -> None:
        co = self.companies[c]
        self.open_trip("corporate", co.region, c, [*co.policy, self.rng.choice(co.profiles)])

    def open_trip(self, kind: str, region: int, company: int | None, head: list) -> None:
        rng = self.rng
        state = self.new(clipped_length(rng, *STATE))
        self.trips.append(Trip(kind, region, company, head, [state],
                               clipped_length(rng, *TURNS), self.pick(rng, self.dest_cum)))
        self.at(self.now, "turn", len(self.trips) - 1)

    def trip_prompt(self, n: int, pending: list[Segment]) -> list[Segment]:
        """The planner's prompt: system prompt, tool schemas as they stand, the head, the trip
        state, the history, this turn's message and tool calls and results so far."""
        trip = self.trips[n]
        return [self.system["plan"], *self.tools.at(self.now), *trip.head, trip.states[-1],
                *trip.history, *pending]

    def _on_turn(self, n: int) -> None:
        """The traveller's message; on a date change the trip state is rewritten and the
        old search results dropped (a flight search follows). A search may follow."""
        trip, rng = self.trips[n], self.rng
        change = bool(trip.sent) and rng.random() < CHANGE
        if change:
            trip.states.append(self.new(clipped_length(rng, *STATE)))
            trip.history = [s for s in trip.history if s not in trip.results]
            trip.results = []
        msg = self.new(clipped_length(rng, *MESSAGE))
        i = self.emit(trip.kind, n, len(trip.sent), self.trip_prompt(n, [msg]))
        trip.sent.append(i)
        if change:
            trip.changes.append(i)
        if change or rng.random() < TOOL[0]:
            wait = rng.uniform(*LATENCY) + CALL[0] / DECODE
            self.at(self.now + wait, "search", (n, [msg], "flight" if change else None))
        else:
            self.end_turn(n, [msg])

    def _on_search(self, arg: tuple[int, list[Segment], str | None]) -> None:
        """The tool call and its JSON result join the turn; the planner reads them (a
        request), then may search again or reply."""
        n, pending, what = arg
        trip, rng = self.trips[n], self.rng
        if what is None:
            what = rng.choices(list(SEARCH), [s[0] for s in SEARCH.values()])[0]
        result = self.new(clipped_length(rng, *SEARCH[what][1]))
        trip.results.append(result)
        pending = [*pending, self.new(clipped_length(rng, *CALL)), result]
        trip.sent.append(self.emit(trip.kind, n, len(trip.sent), self.trip_prompt(n, pending)))
        trip.searches.append(trip.sent[-1])
        if len(pending) < 5 and rng.random() < TOOL[1]:
            self.at(self.now + rng.uniform(*LATENCY) + CALL[0] / DECODE, "search",
                    (n, pending, None))
        else:
            self.end_turn(n, pending)

    def end_turn(self, n: int, pending: list[Segment]) -> None:
        """The reply joins the history; the traveller comes back, or the session ends (and
        may go on to book)."""
        trip, rng = self.trips[n], self.rng
        reply = self.new(clipped_length(rng, *REPLY))
        trip.history += [*pending, reply]
        trip.turns -= 1
        if trip.turns > 0 and tokens(self.trip_prompt(n, [])) < MAX_CONTEXT:
            gap = reply[1] / DECODE + rng.lognormvariate(0.0, THINK[1]) * THINK[0]
            if rng.random() < AWAY[0]:
                gap += rng.uniform(*AWAY[1]) * MINUTE
            self.at(self.now + gap, "turn", n)
        elif rng.random() < CONVERT[trip.kind]:
            self.at(self.now + reply[1] / DECODE + rng.uniform(30, 300), "book", n)

    def _on_book(self, n: int) -> None:
        """A booking flow for the trip: a fare family of an airline, a hotel (60 %)."""
        rng, trip = self.rng, self.trips[n]
        airline = self.pick(rng, self.airline_cum)
        family = rng.choices(range(len(FAMILIES)), FAMILIES)[0]
        parts = [*(self.companies[trip.company].policy if trip.company is not None else []),
                 self.fares[airline][family]]
        if rng.random() < 0.6:
            parts.append(rng.choice(self.hotels))
        parts.append(self.new(clipped_length(rng, *OFFER)))
        self.flows.append(Flow(n, airline, family, parts))
        self.at(self.now, "step", len(self.flows) - 1)

    def _on_step(self, f: int) -> None:
        """The flow's next step: the booking agent's system prompt, the tool schemas, the
        parts, the steps so far; after the last one the booking exists."""
        flow, rng = self.flows[f], self.rng
        flow.steps.append(self.new(clipped_length(rng, *STEPS[len(flow.steps)])))
        segs = [self.system["book"], *self.tools.at(self.now), *flow.parts, *flow.steps]
        flow.sent.append(self.emit("book", f, len(flow.sent), segs))
        if len(flow.steps) < len(STEPS):
            self.at(self.now + rng.uniform(*STEP_GAP), "step", f)
            return
        trip = self.trips[flow.trip]
        depart = self.now + clipped_length(rng, *LEAD) * HOUR
        flow.booking = self.add_booking(trip.region, depart, self.now, company=trip.company,
                                        destination=trip.destination, airline=flow.airline)

    def _on_service(self, region: int) -> None:
        """A traveller opens a service chat: on a booking chatted about lately (RETURN), else
        on one departing from 12 hours ago on, by chance."""
        rng, recent = self.rng, []
        if rng.random() < RETURN[0]:
            recent = [c.subject for c in self.chats[-300:] if c.kind == "service"
                      and self.times[c.sent[0]] > self.now - RETURN[1] * HOUR]
        if recent:
            self.open_chat("service", rng.choice(recent), "return")
            return
        while True:
            b = rng.randrange(len(self.bookings))
            if self.bookings[b].depart > self.now - 12 * HOUR:
                break
        self.open_chat("service", b, "new")

    def _on_guide(self, region: int) -> None:
        self.open_chat("guide", self.pick(self.rng, self.dest_cum), "")

    def open_chat(self, kind: str, subject: int, cause: str) -> None:
        turns = CS_TURNS if kind == "service" else QUESTIONS
        self.chats.append(Chat(kind, subject, cause, clipped_length(self.rng, *turns)))
        self.at(self.now, "chat", len(self.chats) - 1)

    def chat_head(self, c: int) -> list[Segment]:
        """A service chat's head: its system prompt, the tool schemas, the booking record as
        it stands; a guide chat's: its system prompt, the guide as it stands."""
        chat = self.chats[c]
        if chat.kind == "service":
            return [self.system["service"], *self.tools.at(self.now),
                    *self.bookings[chat.subject].record.at(self.now)]
        return [self.system["guide"], *self.guides[chat.subject].at(self.now)]

    def _on_chat(self, c: int) -> None:
        """A message or question after the head and the history; the reply joins it."""
        chat, rng = self.chats[c], self.rng
        service = chat.kind == "service"
        msg = self.new(clipped_length(rng, *(CS_MESSAGE if service else QUESTION)))
        segs = [*self.chat_head(c), *chat.history, msg]
        chat.sent.append(self.emit(chat.kind, c, len(chat.sent), segs))
        reply = self.new(clipped_length(rng, *(CS_REPLY if service else ANSWER)))
        chat.history += [msg, reply]
        chat.turns -= 1
        if chat.turns > 0:
            gap = reply[1] / DECODE
            gap += rng.lognormvariate(0.0, THINK[1]) * THINK[0] if service else rng.uniform(*READ)
            self.at(self.now + gap, "chat", c)

