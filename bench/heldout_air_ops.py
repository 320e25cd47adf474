"""bench.heldout's ``airline_ops`` shape, the operations side: disruptions (a mechanical
cancellation now and then, a hub's weather event, an airline-wide IT outage) with their
notices as reissued, schedule changes whose re-accommodation batch walks every affected PNR,
crew-legality checks over the duty rules and the hub's pairings as last published, the
maintenance summaries re-run every three hours for each tail with new write-ups, and the
nightly walk writing a briefing note for every flight of the next day. See
bench/heldout_airline_ops.py's docstring for the numbers."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from bench.heldout_air_world import HUBS, STATUS, World
from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_legal_parts import Versioned
from bench.heldout_lits_world import poisson
from bench.heldout_recruit_jobs import Stream  # a job's walk (owner: a run, night or change)
from bench.heldout_recruit_parts import DAY, HOUR, MINUTE, utc

SYSTEM = {"crew": 1500, "mx": 900, "brief": 1200, "reaccom": 900}  # system prompts
CUE = {"crew": 40, "mx": 40, "brief": 60, "reaccom": 45}  # the instruction at the end
OUTPUT = {"mx": (320, 0.3, 150, 700), "brief": (450, 0.3, 200, 900),
          "reaccom": (260, 0.3, 120, 500)}
PREFILL, DECODE = 8000.0, 40.0  # tokens a second the replica reads and writes for a walk
CREW = 75  # legality checks a day at scale 1.0 (by CREW_HOURS)
CREW_QUERY = (260, 0.5, 90, 800)  # tokens of a check's crew line and proposed change
CREW_STORM = 15.0  # extra checks an hour at scale 1.0 at a disrupted hub, to 3 h after
CREW_HOURS = (0.3, 0.2, 0.2, 0.5, 0.9, 1.0, 1.0, 0.9, 0.7, 0.6, 0.6, 0.6, 0.6, 0.7, 0.8,
              0.9, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.4, 0.3)
MX_RUN = (10 * MINUTE, 3 * HOUR)  # the maintenance summaries' run: first, then every
BRIEF_AT = (6.0, 6.5)  # UTC hours the nightly briefing walk starts (01:00 at HQ, UTC-5)
NOTAMS = (1800, 0.5, 600, 5000)  # tokens of a station's nightly notice digest
FORECAST = (600, 0.4, 250, 1400)  # tokens of a station's forecast for the day
NOTICE = (350, 0.4, 150, 800)  # tokens of a disruption notice or waiver (each issue)
CHANGE_NOTICE = (800, 0.4, 400, 1500)  # tokens of a schedule change's notice
MECHANICAL = (2.5, (1.0, 4.0), (10, 35), 35.0)  # cancellations a day (Poisson), hours before
# departure, passengers who write in (x scale), their mean delay (minutes)
WEATHER = ((13.0, 18.0), (2.0, 5.0), (0.35, 0.55), (600, 1000), (30.0, 90.0), 40.0)
# local start hour, hours, share of the hub's departures (start .. end + 2 h) cancelled,
# conversations (x scale), minutes between waivers, mean minutes after a cancellation
OUTAGE = ((12.0, 20.0), (60.0, 150.0), (0.7, 0.08), (350, 600), (20.0, 40.0))
# UTC start hour on day 1, minutes, shares delayed and cancelled of the departures
# (start .. end + 3 h), conversations (x scale), minutes between notices
REBOOK_CANCELLED = 0.8  # a weather conversation's flight is a cancelled one (else delayed)
CHANGES = ((5.0, 7.0), (2, 5), (15, 45))  # each day's schedule change: UTC hours, flights
# moved, PNRs per flight (x scale)
BIG_CHANGE = ((4.0, 6.0), (40, 70), (15, 45))  # the schedule-change day's, on day 0
FOLLOW_UP = (0.08, (0.5, 30.0))  # re-accommodated passengers who then ask the agent, hours


@dataclass
class Irrop:
    """A disruption: kind ("mechanical", "weather", "outage"), the hubs it hits, start, end,
    its notice's issues, the flights it cancelled or delayed, its conversations (chats)."""

    kind: str
    hubs: tuple[int, ...]
    start: float
    end: float
    notice: Versioned
    flights: list[int] = field(default_factory=list)
    chats: list[int] = field(default_factory=list)


@dataclass
class Change:
    """A schedule change: when, its notice, the moves (old flight, new flight) and each
    walked PNR's move."""

    time: float
    notice: Segment
    moves: list[tuple[int, int]]
    move_of: dict[int, int] = field(default_factory=dict)


class Ops(World):
    """The world (``World``) and the operations jobs."""

    def __init__(self, rng: random.Random, scale: float, scenario: str) -> None:
        super().__init__(rng, scale, scenario)
        self.system = {k: self.new(n) for k, n in SYSTEM.items()}
        self.cue = {k: self.new(n) for k, n in CUE.items()}
        self.walks: list[Stream] = []
        self.changes: list[Change] = []
        self.station_notes: dict[tuple[int, int], list[Segment]] = {}
        self.daily(CREW, CREW_HOURS, "crew")
        self.at(MX_RUN[0], "mx", 0)
        for night in (0, 1):
            self.at(rng.uniform(*BRIEF_AT) * HOUR + night * DAY, "brief", night)
            big = scenario == "schedule" and night == 0
            hours, moves, per = BIG_CHANGE if big else CHANGES
            self.at(rng.uniform(*hours) * HOUR + night * DAY, "change", (moves, per))
        self.plan_irrops()

    def plan_irrops(self) -> None:
        """Mechanical cancellations every day; a hub's weather event on the weather seeds;
        an airline-wide IT outage on the holiday seeds."""
        rng = self.rng
        for d in (0, 1):
            for _ in range(poisson(rng, MECHANICAL[0])):
                flights = self.upcoming(d * DAY + 4 * HOUR, (d + 1) * DAY)
                if flights:  # none at a tiny scale (bench.heldout's test runs 0.002)
                    self.mechanical(rng.choice(flights))
        if self.scenario == "weather":
            self.weather(rng.choices(range(len(HUBS)), [w for _, w in HUBS])[0],
                         rng.choice((0, 1)))
        if self.scenario == "holiday":
            self.outage()
        for x in self.irrops:
            if x.kind != "mechanical":
                for h in x.hubs:
                    self.surge(x, h, 1.0 if len(x.hubs) == 1 else HUBS[h][1])

    def surge(self, x: Irrop, h: int, share: float) -> None:
        """What a weather event or an outage adds at hub ``h`` (``share`` of a hub's worth):
        crew checks from its start to 3 h after its end (the desk adds its own)."""
        self.spread(CREW_STORM * share, x.start, x.end + 3 * HOUR, "crew", h)

    def notices(self, first: float, last: float, gap: tuple[float, float]) -> Versioned:
        """A notice issued at ``first`` and reissued every ``gap`` minutes until ``last``."""
        out, t = [], first
        while t < last:
            out.append((t, [self.new(clipped_length(self.rng, *NOTICE))]))
            t += self.rng.uniform(*gap) * MINUTE
        return Versioned(out)

    def status(self, f: int, t: float, cancel: bool) -> None:
        """Flight ``f``'s status changes at ``t`` (delayed, or cancelled)."""
        flight = self.flights[f]
        if cancel:
            flight.cancelled = min(flight.cancelled, t)
        flight.status.versions.append((t, [self.new(clipped_length(self.rng, *STATUS))]))
        flight.status.versions.sort(key=lambda v: v[0])

    def mechanical(self, f: int) -> None:
        """A tail goes unserviceable: flight ``f`` is cancelled 1..4 h before departure and
        its passengers write in (mean MECHANICAL[3] minutes after)."""
        rng, flight = self.rng, self.flights[f]
        t = max(0.0, flight.dep - rng.uniform(*MECHANICAL[1]) * HOUR)
        x = Irrop("mechanical", (flight.hub,), t, t + 3 * HOUR, self.notices(t, t + 1, (1, 1)))
        self.irrops.append(x)
        self.status(f, t, True)
        x.flights.append(f)
        for _ in range(max(1, round(rng.randint(*MECHANICAL[2]) * self.scale))):
            self.rebook_at(t + rng.expovariate(MINUTE / MECHANICAL[3]), f)

    def rebook_at(self, t: float, f: int) -> None:
        """A passenger of flight ``f`` asks to be rebooked at ``t`` (the latest disruption)."""
        if t < self.END:
            self.at(t, "rebook", (len(self.irrops) - 1, f))

    def weather(self, h: int, day: int) -> None:
        """A weather event at hub ``h`` on ``day``: a share of its departures from the start
        to 2 h after the end cancelled (1 h before the start or 3 h before departure), the
        rest delayed; a travel waiver reissued through it; thousands of conversations."""
        rng = self.rng
        hours, length, share, convs, gap, mean = WEATHER
        start = utc(day, rng.uniform(*hours), HUBS[h][0])
        end = start + rng.uniform(*length) * HOUR
        notice = self.notices(start - rng.uniform(1, 3) * HOUR, end + 2 * HOUR, gap)
        x = Irrop("weather", (h,), start, end, notice, self.upcoming(start, end + 2 * HOUR, {h}))
        self.irrops.append(x)
        cut = rng.uniform(*share)
        when = {}
        for f in x.flights:
            cancel = rng.random() < cut
            when[f] = max(start - HOUR, self.flights[f].dep - 3 * HOUR) if cancel else \
                rng.uniform(start, min(end, self.flights[f].dep))
            self.status(f, when[f], cancel)
        gone = [f for f in x.flights if self.flights[f].cancelled < math.inf] or x.flights
        late = [f for f in x.flights if self.flights[f].cancelled == math.inf] or gone
        for _ in range(round(rng.randint(*convs) * self.scale) if gone else 0):  # (tiny scale)
            f = rng.choice(gone if rng.random() < REBOOK_CANCELLED else late)
            self.rebook_at(when[f] + rng.expovariate(MINUTE / mean), f)

    def outage(self) -> None:
        """An airline-wide IT outage on day 1: the departures of its window and 3 h after
        delayed or cancelled, a notice reissued through it, conversations over it."""
        rng = self.rng
        hours, minutes, (delayed, cancelled), convs, gap = OUTAGE
        start = DAY + rng.uniform(*hours) * HOUR
        end = start + rng.uniform(*minutes) * MINUTE
        x = Irrop("outage", tuple(range(len(HUBS))), start, end,
                  self.notices(start + 10 * MINUTE, end + 2 * HOUR, gap),
                  self.upcoming(start, end + 3 * HOUR))
        self.irrops.append(x)
        for f in x.flights:
            u = rng.random()
            if u < delayed + cancelled:
                self.status(f, rng.uniform(start, end), u < cancelled)
        for _ in range(round(rng.randint(*convs) * self.scale) if x.flights else 0):
            t = start + 10 * MINUTE + rng.betavariate(1.5, 3.0) * (end - start + 2 * HOUR)
            self.rebook_at(t, rng.choice(x.flights))

    def pace(self, segs: list[Segment], kind: str) -> float:
        """Seconds until a walk's next request: reading the prompt, writing the output."""
        out = clipped_length(self.rng, *OUTPUT[kind])
        work = sum(n for _, n in segs) / PREFILL + out / DECODE
        return work * self.rng.uniform(0.8, 1.25)

    def walk(self, kind: str, owner: int, items: list[int]) -> None:
        if items:
            self.walks.append(s := Stream(kind, owner, items))
            self.at(self.now, "stream", s)

    def prompt(self, s: Stream, item: int) -> tuple[int, int, list[Segment]]:
        """A walk's request for ``item``: (owner, step, segments)."""
        sys, cue = self.system[s.kind], self.cue[s.kind]
        if s.kind == "mx":
            return item, s.owner, [sys, *self.log(item), cue]
        if s.kind == "brief":
            flight = self.flights[item]
            notes = self.station_notes[(flight.station, s.owner)]
            return item, s.owner, [sys, *notes, flight.plan, self.tails[flight.tail].summary,
                                   cue]
        change = self.changes[s.owner]
        old, new = change.moves[change.move_of[item]]
        segs = [sys, change.notice, self.flights[old].plan, self.flights[new].plan,
                self.record(item), cue]
        return s.owner, item, segs

    def _on_stream(self, s: Stream) -> None:
        """The walk's next item; an mx summary becomes the tail's, a re-accommodation
        rebooks the PNR onto the new flight (some then ask the agent)."""
        if s.pos >= len(s.items):
            return
        item = s.items[s.pos]
        s.pos += 1
        owner, step, segs = self.prompt(s, item)
        s.sent.append(self.emit(s.kind, owner, step, segs))
        if s.kind == "mx":
            self.tails[item].summary = self.new(clipped_length(self.rng, *OUTPUT["mx"]))
        elif s.kind == "reaccom":
            change = self.changes[s.owner]
            self.rebook(item, change.moves[change.move_of[item]][1])
            if self.rng.random() < FOLLOW_UP[0]:
                self.at(self.now + self.rng.uniform(*FOLLOW_UP[1]) * HOUR, "follow", item)
        self.at(self.now + self.pace(segs, s.kind), "stream", s)

    def _on_mx(self, run: int) -> None:
        """Every three hours: a summary for every tail with write-ups since the last run."""
        last = self.now - MX_RUN[1]
        todo = [t for t, tail in enumerate(self.tails)
                if any(last < w <= self.now for w, _ in tail.entries)]
        self.walk("mx", run, todo)
        self.at(self.now + MX_RUN[1], "mx", run + 1)

    def _on_brief(self, night: int) -> None:
        """The nightly briefing walk: every flight of the next local day by station, then
        departure; each station's notice digest and forecast new that night."""
        rng = self.rng
        todo = sorted((f for f, x in enumerate(self.flights) if x.day == night + 1),
                      key=lambda f: (self.flights[f].station, self.flights[f].dep))
        for f in todo:
            key = (self.flights[f].station, night)
            if key not in self.station_notes:
                self.station_notes[key] = [self.new(clipped_length(rng, *NOTAMS)),
                                           self.new(clipped_length(rng, *FORECAST))]
        self.walk("brief", night, todo)

    def _on_change(self, arg: tuple) -> None:
        """A schedule change: flights departing 12 h on or later are retimed away, each
        one's PNRs (some made now) moved to another departure of the same hub."""
        rng, (moves, per) = self.rng, arg
        later = self.upcoming(self.now + 12 * HOUR, 1e18)
        old = rng.sample(later, min(len(later) // 2, rng.randint(*moves)))
        gone = set(old)
        change = Change(self.now, self.new(clipped_length(rng, *CHANGE_NOTICE)), [])
        self.changes.append(change)
        todo = []
        for f in old:
            hub = self.flights[f].hub
            same = [g for g in later if g not in gone and self.flights[g].hub == hub]
            change.moves.append((f, rng.choice(same or later)))
            self.status(f, self.now, True)
            pnrs = list(self.flights[f].pnrs)
            pnrs += [self.new_pnr(f) for _ in range(max(1, round(rng.randint(*per) * self.scale)))]
            change.move_of.update((p, len(change.moves) - 1) for p in pnrs)
            todo += pnrs
        self.walk("reaccom", len(self.changes) - 1, todo)

    def _on_crew(self, h: int) -> None:
        """A crew-legality check at hub ``h``: the duty rules, the pairings as published,
        the crew member's line and the proposed change."""
        hub = self.hubs[h]
        version = sum(t <= self.now for t, _ in hub.pairings.versions) - 1
        query = self.new(clipped_length(self.rng, *CREW_QUERY))
        segs = [self.system["crew"], *hub.rules, *hub.pairings.at(self.now), query,
                self.cue["crew"]]
        self.emit("crew", h, version, segs)
