"""bench.heldout's ``airline_ops`` shape, its world: the airline's five hubs (each in a time
zone, with an operations board re-rendered as flights move and a crew-pairings file
republished every few hours), its stations, the flights of three days (a plan and a status
line that changes), the fleet's tails (a maintenance log whose write-ups land through the day
and fall out of a five-day window), the passengers' booking records (PNRs, a new version at
each rebooking) and the documents the assistants read: fare rules, policies by section, duty
rules, the loyalty terms. The event clock and the local-time calendar. See
bench/heldout_airline_ops.py's docstring for the numbers."""

from __future__ import annotations

import bisect
import math
import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import ClockedState, Segment, clipped_length
from bench.heldout_legal_parts import Versioned
from bench.heldout_lits_world import poisson
from bench.heldout_recruit_parts import DAY, HOUR, MINUTE, hour_of, sections, utc

END = 2 * DAY  # the clock starts Friday 00:00 UTC; the trace ends at Sunday 00:00 UTC
SCENARIOS = ("holiday", "normal", "weather", "schedule")  # seed % 4 picks one
HUBS = ((-5.0, 0.30), (-6.0, 0.22), (-8.0, 0.16), (0.0, 0.18), (9.0, 0.14))  # (UTC, weight)
RULESETS = (0, 0, 0, 1, 2)  # the duty rules each hub's crews fly under
RULES = (5000, 0.3, 2500, 9000)  # tokens of a duty-rules document (regulation + contract)
STATIONS = 40  # the hubs and 35 outstations; outstation s belongs to hub s % 5
HUB_DEPARTURES = 0.55  # departures from a hub (the rest from outstations, Zipf(1) by rank)
FLIGHTS = 260  # departures a local day at scale 1.0, x 0.9..1.1 per seed (holiday x 1.15)
PLAN = (700, 0.35, 300, 1600)  # tokens of a flight's plan (route, times, aircraft, load)
STATUS = (180, 0.3, 80, 400)  # tokens of a flight's status line
TAILS = 60  # aircraft at scale 1.0 (at least 12)
TAIL_HEADER = (450, 0.3, 200, 900)  # tokens of a tail's header (type, config, MEL items)
ENTRY = (170, 0.5, 50, 700)  # tokens of a maintenance write-up
ENTRIES = 4.0  # write-ups a day per tail (Poisson, by OPS_HOURS of its hub)
WINDOW = 5 * DAY  # write-ups older than this fall out of the log the summary reads
BOARD_HEAD = (1800, 0.3, 900, 3500)  # tokens of an ops board's fixed part
BOARD_GROUPS = (5, 9)  # row groups of its live part (one per bank of departures)
BOARD_GROUP = (350, 0.5, 120, 1000)  # tokens of a row group
BOARD_TICK = (10.0, 20.0)  # minutes between a hub's board renders (by hub)
BOARD_CHANGE = (0.3, 0.08, 0.75)  # chance a group changes: 05..23 local, night, disrupted
PAIRINGS = (5000, 0.3, 2500, 9000)  # tokens of a hub's crew-pairings file, 700 a section
REPUBLISH = ((2.0, 4.0), 0.25, (20.0, 40.0), 0.5)  # hours apart, chance a section changes;
# in a disruption at the hub: minutes apart, chance
PNR = (420, 0.4, 180, 1200)  # tokens of a booking record
FARES = (0.3, 0.25, 0.18, 0.12, 0.1, 0.05)  # fare families' shares (basic .. first)
FARE_RULES = (2200, 0.35, 900, 5000)  # tokens of a fare family's rules, 600 a section
POLICIES = {"baggage": 10, "change": 8, "refund": 7, "irrops": 9, "assist": 6}  # sections
POLICY_SECTION = (550, 0.4, 200, 1400)  # tokens of a policy section
TERMS = (11000, 0.25, 6000, 18000)  # tokens of the loyalty terms, 650 a section
TERMS_SUMMARY = (1200, 0.3, 600, 2400)  # tokens of the program summary sent with them
TERMS_CHANGE = ((0.3, 1.7), (0.4, 0.9), 0.5)  # new version at (days), from (share of the
# sections) on, chance the summary is rewritten too
PAX_HOURS = (0.25, 0.15, 0.1, 0.08, 0.1, 0.2, 0.45, 0.75, 0.95, 1.0, 1.0, 1.0, 0.95, 0.95,
             0.9, 0.9, 0.9, 0.95, 1.0, 1.0, 0.95, 0.8, 0.6, 0.4)  # passengers, local 00..23
OPS_HOURS = (0.4, 0.3, 0.3, 0.4, 0.7, 1.0, 1.0, 1.0, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9,
             1.0, 1.0, 1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.45)  # operations control, 00..23
DEPARTS = (0.3, 1.0, 1.0, 0.9, 0.8, 0.8, 0.8, 0.9, 0.9, 0.8, 0.8, 0.9, 0.9, 0.8, 0.7, 0.6,
           0.4, 0.2)  # departures, local 05..22


@dataclass
class Hub:
    """A hub: its UTC offset, traffic weight, ops board (fixed head, row groups as versions),
    seconds between renders, crew pairings (sections as versions), duty-rules document."""

    tz: float
    weight: float
    head: Segment
    board: Versioned
    tick: float
    pairings: Versioned
    rules: list[Segment]


@dataclass
class Flight:
    """A departure: station, hub of its region, local day, time, tail, plan, status as
    versions, when it was cancelled (inf: never) and the PNRs made on it."""

    station: int
    hub: int
    day: int
    dep: float
    tail: int
    plan: Segment
    status: Versioned
    cancelled: float = math.inf
    pnrs: list[int] = field(default_factory=list)


@dataclass
class Tail:
    """An aircraft: its hub, header, write-ups as (time, text) in time order and the
    summary the last maintenance run wrote (the header until one has)."""

    hub: int
    header: Segment
    entries: list[tuple[float, Segment]]
    summary: Segment


@dataclass
class Pnr:
    """A booking record: its fare family, flight (the latest) and record versions."""

    fare: int
    flight: int
    record: Versioned


class World(ClockedState):
    """Hubs, stations, flights, tails, PNRs and documents on the clock; ``emit`` sends a
    request. bench.heldout_air_ops.Ops builds on it."""

    END = END

    def __init__(self, rng: random.Random, scale: float, scenario: str) -> None:
        super().__init__(rng, 0, scale)
        self.scenario = scenario
        self.irrops: list = []  # disruptions (bench.heldout_air_ops.Irrop), planned there
        rules = [sections(self.new, clipped_length(rng, *RULES), 900) for _ in range(3)]
        self.hubs = [self._hub(tz, w, rules[RULESETS[h]]) for h, (tz, w) in enumerate(HUBS)]
        ranks = rng.sample(range(1, STATIONS - len(HUBS) + 1), STATIONS - len(HUBS))
        self.station_weight = [HUB_DEPARTURES * w for _, w in HUBS] + [
            (1 - HUB_DEPARTURES) * r ** -1.0 / sum(k ** -1.0 for k in ranks) for r in ranks]
        self.tails = [self._tail(rng.choices(range(len(HUBS)), [w for _, w in HUBS])[0])
                      for _ in range(max(12, round(TAILS * scale)))]
        self.flights: list[Flight] = []
        busy = 1.15 if scenario == "holiday" else 1.0
        for day in (0, 1, 2):
            for _ in range(round(FLIGHTS * scale * busy * rng.uniform(0.9, 1.1))):
                self._flight(day)
        self.flights.sort(key=lambda f: f.dep)
        self.pnrs: list[Pnr] = []
        self._docs()
        for h, hub in enumerate(self.hubs):
            self.at(rng.uniform(0, hub.tick), "board", h)
            self.at(rng.uniform(0, 3) * HOUR, "pairings", h)

    def _hub(self, tz: float, weight: float, rules: list[Segment]) -> Hub:
        rng, new = self.rng, self.new
        groups = [new(clipped_length(rng, *BOARD_GROUP)) for _ in range(rng.randint(*BOARD_GROUPS))]
        pairings = sections(new, clipped_length(rng, *PAIRINGS), 700)
        return Hub(tz, weight, new(clipped_length(rng, *BOARD_HEAD)), Versioned([(-1e18, groups)]),
                   rng.uniform(*BOARD_TICK) * MINUTE, Versioned([(-1e18, pairings)]), rules)

    def _tail(self, hub: int) -> Tail:
        """A tail of ``hub``: its write-ups of the window before the clock and of the trace."""
        rng = self.rng
        mean = sum(OPS_HOURS) / 24
        times = [rng.uniform(-WINDOW, 0) for _ in range(poisson(rng, ENTRIES * WINDOW / DAY))]
        times += [t for t in (rng.uniform(0, END) for _ in range(poisson(rng, ENTRIES * 2 / mean)))
                  if rng.random() < OPS_HOURS[int(self.local(t, hub) % 24)]]
        entries = [(t, self.new(clipped_length(rng, *ENTRY))) for t in sorted(times)]
        header = self.new(clipped_length(rng, *TAIL_HEADER))
        return Tail(hub, header, entries, header)

    def _flight(self, day: int) -> None:
        rng = self.rng
        s = rng.choices(range(STATIONS), self.station_weight)[0]
        h = s % len(HUBS)
        dep = utc(day, hour_of(rng, DEPARTS, 5), HUBS[h][0])
        status = Versioned([(-1e18, [self.new(clipped_length(rng, *STATUS))])])
        self.flights.append(Flight(s, h, day, dep, rng.randrange(len(self.tails)),
                                   self.new(clipped_length(rng, *PLAN)), status))

    def _docs(self) -> None:
        """Fare rules, policies by section, the loyalty terms and their new version."""
        rng, new = self.rng, self.new
        self.fare_rules = [sections(new, clipped_length(rng, *FARE_RULES), 600) for _ in FARES]
        self.policies = {k: [new(clipped_length(rng, *POLICY_SECTION)) for _ in range(n)]
                         for k, n in POLICIES.items()}
        terms = sections(new, clipped_length(rng, *TERMS), 650)
        summary = new(clipped_length(rng, *TERMS_SUMMARY))
        when, share, rewrite = TERMS_CHANGE
        self.terms_cut = k = round(rng.uniform(*share) * len(terms))
        later = terms[:k] + [new(n) for _, n in terms[k:]]
        summary2 = new(clipped_length(rng, *TERMS_SUMMARY)) if rng.random() < rewrite else summary
        self.terms = Versioned([(-1e18, terms), (rng.uniform(*when) * DAY, later)])
        self.terms_summary = Versioned([(-1e18, [summary]), (self.terms.versions[1][0],
                                                             [summary2])])

    def local(self, t: float, h: int) -> float:
        """Hours since local midnight of day 0 at hub ``h``'s region."""
        return t / HOUR + HUBS[h][0]

    def at_local(self, day: int, hour: float, h: int, name: str, payload: object) -> None:
        """Schedule ``name`` at a local time of hub ``h``'s region if it is on the clock."""
        t = utc(day, hour, HUBS[h][0])
        if 0 <= t < self.END:
            self.at(t, name, payload)

    def daily(self, rate: float, hours: tuple, name: str, payload=None) -> None:
        """Each local day, each hub region's share (by weight) of ``rate`` x scale events at
        local hours by ``hours`` (00..23); the payload is the hub unless given."""
        for h, (_, w) in enumerate(HUBS):
            for d in (-1, 0, 1, 2):
                for _ in range(poisson(self.rng, rate * self.scale * w)):
                    self.at_local(d, hour_of(self.rng, hours), h, name,
                                  h if payload is None else payload)

    def spread(self, rate: float, lo: float, hi: float, name: str, payload: object) -> None:
        """``rate`` x scale ``name`` events an hour at uniform times in lo..hi (if on the
        clock)."""
        for _ in range(poisson(self.rng, rate * self.scale * (hi - lo) / HOUR)):
            t = self.rng.uniform(lo, hi)
            if 0 <= t < self.END:
                self.at(t, name, payload)

    def disrupted(self, h: int) -> bool:
        """Whether a weather event or an outage is on at hub ``h`` now."""
        return any(h in x.hubs and x.start <= self.now < x.end and x.kind != "mechanical"
                   for x in self.irrops)

    def _on_board(self, h: int) -> None:
        """A hub's board is rendered again: each row group changes by BOARD_CHANGE."""
        hub, rng = self.hubs[h], self.rng
        day, night, storm = BOARD_CHANGE
        p = storm if self.disrupted(h) else day if 5 <= self.local(self.now, h) % 24 < 23 else night
        groups = [self.new(clipped_length(rng, *BOARD_GROUP)) if rng.random() < p else g
                  for g in hub.board.current]
        if groups != hub.board.current:
            hub.board.versions.append((self.now, groups))
        self.at(self.now + hub.tick, "board", h)

    def _on_pairings(self, h: int) -> None:
        """Crew scheduling republishes a hub's pairings: sections change by REPUBLISH."""
        hub, rng = self.hubs[h], self.rng
        gap, p, storm_gap, storm_p = REPUBLISH
        if self.disrupted(h):
            gap, p = (storm_gap[0] * MINUTE, storm_gap[1] * MINUTE), storm_p
        else:
            gap = (gap[0] * HOUR, gap[1] * HOUR)
        secs = [self.new(n) if rng.random() < p else (c, n) for c, n in hub.pairings.current]
        if secs != hub.pairings.current:
            hub.pairings.versions.append((self.now, secs))
        self.at(self.now + rng.uniform(*gap), "pairings", h)

    def log(self, t: int) -> list[Segment]:
        """Tail ``t``'s maintenance log now: the header, then the write-ups of the window."""
        tail = self.tails[t]
        lo = bisect.bisect_left(tail.entries, (self.now - WINDOW,))
        hi = bisect.bisect_right(tail.entries, (self.now, (math.inf, 0)))
        return [tail.header, *(e for _, e in tail.entries[lo:hi])]

    def new_pnr(self, f: int) -> int:
        """A booking on flight ``f`` (a fare family by FARES)."""
        rng = self.rng
        fare = rng.choices(range(len(FARES)), FARES)[0]
        rec = Versioned([(self.now, [self.new(clipped_length(rng, *PNR))])])
        self.pnrs.append(Pnr(fare, f, rec))
        self.flights[f].pnrs.append(len(self.pnrs) - 1)
        return len(self.pnrs) - 1

    def rebook(self, p: int, f: int) -> None:
        """PNR ``p`` moves to flight ``f``: a new version of its record."""
        pnr = self.pnrs[p]
        pnr.flight = f
        pnr.record.versions.append((self.now, [self.new(clipped_length(self.rng, *PNR))]))

    def record(self, p: int) -> Segment:
        """PNR ``p``'s record as it stands now."""
        return self.pnrs[p].record.at(self.now)[0]

    def upcoming(self, lo: float, hi: float, hubs=None) -> list[int]:
        """Flights (not cancelled by now) departing in lo..hi, of ``hubs`` if given."""
        a = bisect.bisect_left(self.flights, lo, key=lambda f: f.dep)
        b = bisect.bisect_left(self.flights, hi, key=lambda f: f.dep)
        return [f for f in range(a, b) if self.flights[f].cancelled > self.now
                and (hubs is None or self.flights[f].hub in hubs)]
