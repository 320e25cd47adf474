"""bench.heldout's ``travel_agent`` shape, the platform's jobs: a disruption storm at a hub
(advisories in waves, the rebooking agent walking the cancelled itineraries in departure
order, seats gone and offered again, travellers' service chats), price alerts re-running
saved searches every few hours, the nightly itinerary-summary emails per region, a deploy of
the tool schemas and the content team's guide edits. See bench/heldout_travel_agent.py's
docstring for the numbers."""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_legal_parts import Versioned
from bench.heldout_meeting_parts import poisson
from bench.heldout_travel_chat import Desk
from bench.heldout_travel_parts import (DAY, END, FLIGHTS, HOUR, MINUTE, RECORD, REGIONS, TOOLS,
                                        tokens)

PREFILL, DECODE = 6000.0, 35.0  # tokens a second the replica reads and writes for a job stream
STORM = (600, 1500)  # itineraries the storm cancels at scale 1.0
STORM_START = (11.0, 17.0)  # the hub's local hour the storm hits, on day 0 or 1
STORM_HOURS = (4.0, 8.0)  # hours of cancelled departures
HUB_SHARE = 0.7  # affected travellers from the hub's region (the rest connect through it)
WAVE = (45.0, 90.0)  # minutes between two advisories (each cancels the next bank)
ADVISORY = (700, 0.3, 400, 1000)  # tokens of the disruption advisory (waivers, options)
AVAILABILITY = (900, 0.4, 400, 1800)  # tokens of an availability search's JSON
REBOOK_CUE = 50  # tokens of the rebooking instruction
REBOOK_OUT = (120, 0.3, 60, 250)  # tokens the rebooking agent writes
GONE = (0.22, (5.0, 20.0), 3)  # seat gone: chance, minutes to the next offer, tries in all
REBOOK_STREAMS = 4
STORM_CHAT = (0.1, 40.0)  # affected travellers who open a chat, mean minutes after the wave
ALERTS = 100  # saved searches with a price alert at scale 1.0
SPEC = (250, 0.4, 120, 400)  # tokens of a saved search (route, dates, filters)
INTERVALS = ((4.0, 0.3), (6.0, 0.3), (8.0, 0.2), (12.0, 0.2))  # hours between re-runs: share
SNAPSHOT = (800, 0.4, 400, 1800)  # tokens of a search's results JSON
ALERT_CUE, ALERT_OUT = 40, 90  # tokens of the alert instruction and of what it writes
ALERT_STREAMS = 2
DIGEST_HOUR = 3.0  # local hour of the nightly itinerary-summary emails
DIGEST_WINDOW = (6.0, 30.0)  # hours ahead: the bookings departing then get an email
BRIEF = (450, 0.3, 250, 800)  # tokens of a destination's brief for a day (weather, notices)
DIGEST_CUE, DIGEST_OUT = 45, 300
DEPLOY = (0.6, (13.0, 18.0))  # seeds whose day 1 has a tool-schema deploy; its UTC hours
GUIDE_EDITS = (4.0, (8.0, 18.0))  # guide sections rewritten a day (Poisson); UTC hours


@dataclass
class Storm:
    """A hub's weather event: the hub, when it hits, the advisory's versions, the waves as
    (time, bookings it cancels, in departure order) and each booking's rebooking requests."""

    hub: int
    start: float
    advisory: Versioned
    waves: list[tuple[float, list[int]]] = field(default_factory=list)
    tries: dict[int, list[int]] = field(default_factory=dict)


@dataclass
class Alert:
    """A saved search: its spec, hours between re-runs, next due time, the last results
    (the snapshot the next run compares with) and its request indices."""

    spec: Segment
    interval: float
    due: float
    last: Segment
    sent: list[int] = field(default_factory=list)


@dataclass
class Job:
    """A batch job: its name (``send_<name>`` sends an item and returns the seconds until
    the stream's next), its queue and its idle streams."""

    name: str
    idle: int
    queue: deque = field(default_factory=deque)


class Replica(Desk):
    """The whole replica: the desk (``Desk``) and the jobs; ``run`` ends at END."""

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, scale)
        self.jobs = {n: Job(n, k) for n, k in (("rebook", REBOOK_STREAMS),
                                                ("alert", ALERT_STREAMS), ("digest", 1))}
        self.alerts = [self.alert() for _ in range(max(4, round(ALERTS * scale)))]
        self.digests: list[tuple[float, int, list[int]]] = []  # (time, region, bookings)
        self.briefs: dict[tuple[int, int], Segment] = {}
        self.guide_edits: list[tuple[float, int, int]] = []  # (time, destination, section)
        self.cues = {n: self.new(k) for n, k in (("rebook", REBOOK_CUE), ("alert", ALERT_CUE),
                                                 ("digest", DIGEST_CUE))}
        self.storm = self.plan_storm()
        for h in range(int(END // HOUR)):
            self.at(h * HOUR, "alerts", None)
        for day in (0.0, DAY):
            for r, (tz, _) in enumerate(REGIONS):
                self.at(day + (DIGEST_HOUR - tz) % 24 * HOUR, "digest", r)
            for _ in range(poisson(rng, GUIDE_EDITS[0])):
                self.at(day + rng.uniform(*GUIDE_EDITS[1]) * HOUR, "guide_edit", None)
        if rng.random() < DEPLOY[0]:
            self.at(DAY + rng.uniform(*DEPLOY[1]) * HOUR, "deploy", None)

    def alert(self) -> Alert:
        rng = self.rng
        every = rng.choices([h for h, _ in INTERVALS], [w for _, w in INTERVALS])[0]
        return Alert(self.new(clipped_length(rng, *SPEC)), every,
                     rng.uniform(0, every) * HOUR, self.new(clipped_length(rng, *SNAPSHOT)))

    def pace(self, segs: list[Segment], out: int) -> float:
        """Seconds until a job stream's next request: reading the prompt and writing the
        output, stretched by 1/scale so a job takes as long at any scale."""
        work = tokens(segs) / PREFILL + out / DECODE
        return work * self.rng.uniform(0.8, 1.25) / self.scale

    def feed(self, name: str, items: list) -> None:
        """Queue ``items`` for a job and wake its idle streams."""
        job = self.jobs[name]
        job.queue.extend(items)
        wake = min(job.idle, len(job.queue))
        job.idle -= wake
        for _ in range(wake):
            self.at(self.now, "job", job)

    def _on_job(self, job: Job) -> None:
        if not job.queue:
            job.idle += 1
            return
        wait = getattr(self, "send_" + job.name)(job.queue.popleft())
        self.at(self.now + wait, "job", job)

    def plan_storm(self) -> Storm:
        """The storm's hub, start (the hub's local afternoon on day 0 or 1, ending 2 hours
        before the trace does) and waves: wave k
        cancels the departures from 30 minutes after it to 30 minutes after the next (the
        last: the storm's end). Those itineraries were booked before the trace."""
        rng = self.rng
        hub = rng.randrange(len(self.hub_regions))
        tz = REGIONS[self.hub_regions[hub]][0]
        start = rng.choice((0.0, DAY)) + (rng.uniform(*STORM_START) - tz) % 24 * HOUR
        end = start + rng.uniform(*STORM_HOURS) * HOUR
        if end + 2 * HOUR > END:  # the day before, so that the rebooking ends in the trace
            start, end = start - DAY, end - DAY
        storm, t, bounds = Storm(hub, start, Versioned([(-1e18, [])])), start, []
        while t < end:
            bounds.append(t)
            t += rng.uniform(*WAVE) * MINUTE
        home = self.hub_regions[hub]
        n = max(2, round(rng.uniform(*STORM) * self.scale))
        got = sorted((rng.uniform(start, end) + 30 * MINUTE for _ in range(n)))
        got = [self.add_booking(home if rng.random() < HUB_SHARE else self.region(), d, hub=hub)
               for d in got]
        for k, t in enumerate(bounds):
            stop = bounds[k + 1] if k + 1 < len(bounds) else end
            storm.waves.append((t, [b for b in got if t <= self.bookings[b].depart
                                    - 30 * MINUTE < stop]))
            self.at(t, "wave", k)
        return storm

    def _on_wave(self, k: int) -> None:
        """An advisory (a new version) cancels the wave's itineraries: they join the
        rebooking queue in departure order, and some travellers open a chat."""
        rng = self.rng
        self.storm.advisory.versions.append((self.now, [self.new(clipped_length(rng,
                                                                                *ADVISORY))]))
        got = self.storm.waves[k][1]
        for b in got:
            self.bookings[b].storm = True
            if rng.random() < STORM_CHAT[0]:
                self.at(self.now + rng.expovariate(1 / STORM_CHAT[1]) * MINUTE, "storm_chat", b)
        self.feed("rebook", [(b, 1) for b in got])

    def _on_storm_chat(self, b: int) -> None:
        self.open_chat("service", b, "storm")

    def send_rebook(self, item: tuple[int, int]) -> float:
        """The rebooking agent: its system prompt, the advisory as it stands, the booking
        record as it stands, a fresh availability search, the instruction. The new flights
        enter the record, or the seat is gone and it is offered again minutes later."""
        b, tries = item
        rng, bk = self.rng, self.bookings[b]
        segs = [self.system["rebook"], *self.storm.advisory.at(self.now),
                *bk.record.at(self.now), self.new(clipped_length(rng, *AVAILABILITY)),
                self.cues["rebook"]]
        i = self.emit("rebook" if tries == 1 else "reoffer", b, tries, segs)
        self.storm.tries.setdefault(b, []).append(i)
        if rng.random() < GONE[0]:
            if tries < GONE[2]:
                self.at(self.now + rng.uniform(*GONE[1]) * MINUTE, "reoffer", (b, tries + 1))
        else:
            rec = list(bk.record.current)
            rec[FLIGHTS] = self.new(clipped_length(rng, *RECORD[FLIGHTS]))
            bk.record.versions.append((self.now, rec))
        return self.pace(segs, clipped_length(rng, *REBOOK_OUT))

    def _on_reoffer(self, item: tuple[int, int]) -> None:
        self.feed("rebook", [item])

    def _on_alerts(self, _: object) -> None:
        """On the hour: the saved searches now due, in order, join the alert job's queue."""
        due = [a for a, al in enumerate(self.alerts) if al.due <= self.now]
        for a in due:
            self.alerts[a].due += self.alerts[a].interval * HOUR
        self.feed("alert", due)

    def send_alert(self, a: int) -> float:
        """The alert agent: its system prompt, the saved search, the last results, the new
        results, the instruction; the new results become the last."""
        al, rng = self.alerts[a], self.rng
        fresh = self.new(clipped_length(rng, *SNAPSHOT))
        segs = [self.system["alert"], al.spec, al.last, fresh, self.cues["alert"]]
        al.sent.append(self.emit("alert", a, len(al.sent), segs))
        al.last = fresh
        return self.pace(segs, ALERT_OUT)

    def _on_digest(self, region: int) -> None:
        """At 03:00 local: the region's bookings departing in DIGEST_WINDOW, in departure
        order, get their itinerary-summary email."""
        lo, hi = (self.now + h * HOUR for h in DIGEST_WINDOW)
        got = sorted((b for b, bk in enumerate(self.bookings)
                      if bk.shard and bk.region == region and lo <= bk.depart < hi),
                     key=lambda b: self.bookings[b].depart)
        self.digests.append((self.now, region, got))
        self.feed("digest", got)

    def brief(self, d: int) -> Segment:
        """The destination's brief for today (weather, notices), written once a day."""
        key = (d, int(self.now // DAY))
        if key not in self.briefs:
            self.briefs[key] = self.new(clipped_length(self.rng, *BRIEF))
        return self.briefs[key]

    def send_digest(self, b: int) -> float:
        """The digest agent: its system prompt, the destination's brief for the day, the
        booking record as it stands, the instruction."""
        bk = self.bookings[b]
        segs = [self.system["digest"], self.brief(bk.destination), *bk.record.at(self.now),
                self.cues["digest"]]
        self.emit("digest", b, 0, segs)
        return self.pace(segs, DIGEST_OUT)

    def _on_deploy(self, _: object) -> None:
        """A deploy changes the hotel search's schema (the second tool): every prompt with
        the tools is new from there on."""
        tools = list(self.tools.current)
        tools[1] = self.new(TOOLS[1] + self.rng.randint(20, 200))
        self.tools.versions.append((self.now, tools))

    def _on_guide_edit(self, _: object) -> None:
        """The content team rewrites a section of a popular destination's guide."""
        rng = self.rng
        d = self.pick(rng, self.dest_cum)
        secs = list(self.guides[d].current)
        k = rng.randrange(len(secs))
        secs[k] = self.new(max(40, round(secs[k][1] * rng.uniform(0.8, 1.3))))
        self.guides[d].versions.append((self.now, secs))
        self.guide_edits.append((self.now, d, k))
