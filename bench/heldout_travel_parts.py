"""bench.heldout's ``travel_agent`` shape, its world: an online travel company's catalog
(destinations with their guides, airlines' fare families and their rules, hotels' policies,
corporate clients with travel policies, the hubs), the bookings the replica can be asked
about, the assistant's system prompts and tool schemas, three regions in their time zones,
the event clock and the base that sends requests. See bench/heldout_travel_agent.py's
docstring for the numbers."""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass

from bench.heldout_fewshot import ClockedState, Segment, clipped_length
from bench.heldout_legal_parts import Versioned

HOUR, DAY, MINUTE = 3600.0, 86400.0, 60.0
END = 2 * DAY  # the trace ends at the second midnight (UTC); both days are weekdays
REGIONS = ((-5.0, 0.40), (1.0, 0.35), (8.0, 0.25))  # (UTC offset, share of travellers):
# the Americas, Europe, Asia-Pacific
EVENING = (1, 0.5, 0.3, 0.2, 0.2, 0.3, 0.8, 1.5, 2, 2.2, 2.3, 2.4, 2.6, 2.5, 2.4, 2.4, 2.6, 2.9,
           3.2, 3.8, 4.2, 4.0, 3.0, 1.8)  # consumers' activity by local hour
OFFICE = (0, 0, 0, 0, 0, 0, 0.1, 0.6, 2.2, 3.5, 3.6, 3.2, 2.2, 2.8, 3.3, 3.1, 2.5, 1.3, 0.5,
          0.2, 0.1, 0, 0, 0)  # corporate travellers' and bookers' activity by local hour
SYSTEM = {"plan": 2400, "book": 1300, "service": 1800, "rebook": 1100, "alert": 800,
          "digest": 700, "guide": 900}  # tokens of each agent's system prompt
TOOLS = (1500, 1300, 600, 900, 500)  # tokens of the tool schemas: flight, hotel and car
# search, booking, misc (time zones, currency, visas); sent after the system prompt
DESTINATIONS = 150  # destinations with a guide; popularity Zipf(DEST_ZIPF) by a random rank
DEST_ZIPF = 1.0
GUIDE = (6000, 0.5, 2500, 14000)  # tokens of a destination guide
SECTION = 800  # tokens per section of a guide or a travel policy
AIRLINES = 20  # popularity Zipf(1.0) by a random rank
FAMILIES = (0.35, 0.35, 0.2, 0.1)  # fare families (basic, standard, flex, business): shares
FARE_RULES = (2500, 0.4, 1200, 5000)  # tokens of a fare family's rules text
HOTELS = 400
HOTEL_POLICY = (600, 0.5, 300, 1500)  # tokens of a hotel's cancellation and stay policy
COMPANIES = 40  # corporate clients: their bookers' traffic Zipf(1.0) by a random rank
POLICY = (4500, 0.4, 2000, 9000)  # tokens of a company's travel policy
PROFILES = (5, 200)  # travellers with a profile per company (log-uniform)
PROFILE = (400, 0.3, 200, 800)  # tokens of a traveller's profile (loyalty, seats, approvals)
HUBS = 8  # connecting hubs, each in a region
RECORD = ((350, 0.3, 200, 600), (600, 0.4, 300, 1200), (350, 0.3, 200, 600),
          (250, 0.3, 150, 400))  # a booking record's parts: travellers and contact, flights,
# the hotel stay (WITH_HOTEL of bookings), fare and payments
FLIGHTS = 1  # the index of the flights part in a record
WITH_HOTEL = 0.6
DB = 1000  # bookings that exist before the trace at scale 1.0, departing in AHEAD
AHEAD = (2 * HOUR, END + 3 * DAY)  # seconds from the trace's start


@dataclass
class Booking:
    """A booking: the region of its traveller, its hub, destination, airline, departure (UTC
    seconds), its record's versions (a rebooking changes the flights from its index on), when
    it was made (-inf before the trace), its company (None for a consumer) and whether a storm
    cancelled it; ``shard``: the nightly email job sends its
    summary on this replica (False for the storm's itineraries, which the rebooking job
    brings here from every shard)."""

    region: int
    hub: int
    destination: int
    airline: int
    depart: float
    record: Versioned
    made: float = float("-inf")
    company: int | None = None
    storm: bool = False
    shard: bool = True


@dataclass
class Company:
    """A corporate client: its region, travel policy (sections) and its travellers'
    profiles."""

    region: int
    policy: list[Segment]
    profiles: list[Segment]


def zipf_cum(rng: random.Random, n: int, s: float) -> list[float]:
    """Cumulative Zipf(``s``) weights of ``n`` items by a random rank."""
    return list(itertools.accumulate(r ** -s for r in rng.sample(range(1, n + 1), n)))


def sections(new: Callable, total: int) -> list[Segment]:
    """``total`` tokens of new text in SECTION-token sections (the last one longer)."""
    k = max(1, total // SECTION)
    return [new(SECTION if i < k - 1 else total - SECTION * (k - 1)) for i in range(k)]


def tokens(segs: list[Segment]) -> int:
    return sum(n for _, n in segs)


class World(ClockedState):
    """The catalog, the bookings and the clock; ``emit`` sends a request. The desk
    (bench.heldout_travel_chat) and the jobs (bench.heldout_travel_jobs) build on it."""

    END = END

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, 0, scale)
        new = self.new
        self.system = {agent: new(n) for agent, n in SYSTEM.items()}
        self.tools = Versioned([(-1e18, [new(n) for n in TOOLS])])
        self.guides = [Versioned([(-1e18, sections(new, clipped_length(rng, *GUIDE)))])
                       for _ in range(DESTINATIONS)]
        self.dest_cum = zipf_cum(rng, DESTINATIONS, DEST_ZIPF)
        self.airline_cum = zipf_cum(rng, AIRLINES, 1.0)
        self.fares = [[new(clipped_length(rng, *FARE_RULES)) for _ in FAMILIES]
                      for _ in range(AIRLINES)]
        self.hotels = [new(clipped_length(rng, *HOTEL_POLICY)) for _ in range(HOTELS)]
        self.hub_regions = [self.region() for _ in range(HUBS)]
        self.companies = [self.company() for _ in range(COMPANIES)]
        self.company_cum = zipf_cum(rng, COMPANIES, 1.0)
        self.bookings: list[Booking] = []
        for _ in range(max(10, round(DB * scale))):
            self.add_booking(self.region(), rng.uniform(*AHEAD))

    @staticmethod
    def pick(rng: random.Random, cum: list[float]) -> int:
        return bisect.bisect_left(cum, rng.random() * cum[-1])

    def region(self) -> int:
        return self.rng.choices(range(len(REGIONS)), [w for _, w in REGIONS])[0]

    def company(self) -> Company:
        rng = self.rng
        n = round(PROFILES[0] * (PROFILES[1] / PROFILES[0]) ** rng.random())
        return Company(self.region(), sections(self.new, clipped_length(rng, *POLICY)),
                       [self.new(clipped_length(rng, *PROFILE)) for _ in range(n)])

    def record(self, hotel: bool) -> list[Segment]:
        """A new booking record: travellers, flights, the hotel stay (if any), the fare."""
        parts = [p for k, p in enumerate(RECORD) if hotel or k != 2]
        return [self.new(clipped_length(self.rng, *p)) for p in parts]

    def add_booking(self, region: int, depart: float, made: float = float("-inf"),
                    **known: int | None) -> int:
        """A booking made at ``made`` (-inf: before the trace): its id. ``known`` may fix its
        hub, destination, airline and company; the rest are drawn."""
        rng = self.rng
        rec = Versioned([(max(made, -1e18), self.record(rng.random() < WITH_HOTEL))])
        hub = known.get("hub")
        dest, airline = known.get("destination"), known.get("airline")
        self.bookings.append(Booking(
            region, rng.randrange(HUBS) if hub is None else hub,
            self.pick(rng, self.dest_cum) if dest is None else dest,
            self.pick(rng, self.airline_cum) if airline is None else airline,
            depart, rec, made, known.get("company"), shard=known.get("hub") is None))
        return len(self.bookings) - 1

    def arrival(self, day: float, curve: tuple, region: int) -> float:
        """A UTC time in the day starting at ``day`` whose local hour in ``region`` is drawn
        by ``curve``."""
        h = self.rng.choices(range(24), curve)[0]
        return day + (((h - REGIONS[region][0]) % 24) + self.rng.random()) * HOUR
