"""bench.heldout's ``telecom_noc`` shape, the alarm side: steady alarms from the whole network
(noisy sites more often), flapping alarms re-raised at one site, alarm storms (a fiber cut
isolating a ring, a power outage over part of a region with batteries running out hours in),
each alarm triaged behind its vendor's dictionary entry and its site's topology record; the
correlation cases re-summarized as their alarms join, incidents with a timeline that grows
as the NOC works them, and the outage status page re-issued every 30..60 minutes while a
major one is open. See bench/heldout_telecom_noc.py's docstring for the numbers."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_noc_parts import ALARM_HOURS, DAY, HOUR, MINUTE, World, count

SYSTEM = {"triage": 1300, "correlate": 900, "status": 600}  # system prompts
CUE = {"triage": 40, "correlate": 40, "status": 35}  # instructions at the end
STATUS_GUIDE = 800  # tokens of the status page's style guide and templates
ALARM = (160, 0.6, 50, 600)  # tokens of an alarm as the fault manager sends it
LAG = (2.0, 20.0)  # seconds from an alarm's raise to its triage
STEADY = 1000  # steady alarms a day at scale 1.0
ROUTER_SHARE = 0.15  # of steady alarms from the region's router at the ring's hub
FLAP = (0.12, (1, 5), (10 * MINUTE, 0.7, 3 * MINUTE, 40 * MINUTE))  # share, repeats, gaps
FLAP_INCIDENT = 0.06  # flapping cases the NOC opens a (minor) incident for
LINE = (60, 0.3, 30, 120)  # tokens of an alarm's line in a case
HEADER = (200, 0.3, 100, 400)  # tokens of a case's header
DEBOUNCE = (60.0, 180.0)  # seconds from an alarm joining a case to its re-summary
CUTS = (1, 4)  # fiber cuts over the two days (by seed); 70 % in 08..17
OUTAGES = ((0, 0.4), (1, 0.45), (2, 0.15))  # power outages over the two days, 13..23 h
AREA = (0.3, 0.6)  # of a region's sites a power outage takes (at least 10)
SPLICE = (4 * HOUR, 0.4, 1.5 * HOUR, 10 * HOUR)  # a fiber cut until its splice
GRID = (3 * HOUR, 0.6, 0.7 * HOUR, 10 * HOUR)  # a grid outage until mains return
BATTERY = (3 * HOUR, 0.35, HOUR, 8 * HOUR)  # a site's batteries
ENTRY_GAP = (10 * MINUTE, 40 * MINUTE)  # between timeline entries of an open incident
TIMELINE = (120, 0.5, 40, 400)  # tokens of a timeline entry
MAJOR = 10  # sites an incident takes down to be major (on the status page)
PAGE = (200, 250)  # tokens of a status page: base + each open major incident
STATUS_GAP = (30 * MINUTE, 60 * MINUTE)


@dataclass
class Alarm:
    """An alarm: raised at ``time`` at ``site`` (the hub for a router's), its platform and
    code, the case it joins (or None), its text and where it came from ("steady", "flap",
    "fiber", "power", "clear")."""

    time: float
    site: int
    platform: int
    code: int
    case: int | None
    text: Segment
    origin: str


@dataclass
class Case:
    """A correlation case: kind ("flap", "fiber", "power"), header, the alarms' lines in the
    order they joined, its summaries' request indices, whether one is pending."""

    kind: str
    header: Segment
    lines: list[Segment] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)
    due: bool = False


@dataclass
class Incident:
    """An incident the NOC works: kind ("fiber", "power", "site"), region, sites, when it
    starts and is restored, its runbook and case, whether major, and its timeline (time,
    entry) as it grows; ``closed`` once the last entry is in."""

    kind: str
    region: int
    sites: list[int]
    start: float
    end: float
    runbook: int
    case: int
    major: bool
    timeline: list[tuple[float, Segment]] = field(default_factory=list)
    closed: bool = False

    def at(self, t: float) -> list[Segment]:
        """The timeline as it stands at ``t``."""
        return [s for when, s in self.timeline if when <= t]


class Alarms(World):
    """The world (``World``), the alarms and the incidents. bench.heldout_noc_desk.Desk
    builds on it."""

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, scale)
        self.system = {k: self.new(n) for k, n in SYSTEM.items()}
        self.cue = {k: self.new(n) for k, n in CUE.items()}
        self.guide = self.new(STATUS_GUIDE)
        self.alarms: list[Alarm] = []
        self.cases: list[Case] = []
        self.incidents: list[Incident] = []
        self.issues: list[int] = []  # status page issues' request indices
        self._issuing = False
        self._noise = list(itertools.accumulate(s.noise for s in self.sites))
        self.daily(STEADY, ALARM_HOURS, 0, "steady")
        for _ in range(rng.randint(*CUTS)):
            work = rng.random() < 0.7
            hour = rng.uniform(8, 17) if work else rng.uniform(0, 24)
            self.at(rng.choice((0, 1)) * DAY + hour * HOUR, "fiber", None)
        for _ in range(rng.choices([n for n, _ in OUTAGES], [w for _, w in OUTAGES])[0]):
            self.at(rng.choice((0, 1)) * DAY + rng.uniform(13, 23) * HOUR, "power", None)
        for d in (0, 1):
            self.at(d * DAY + rng.uniform(8, 8.5) * HOUR, "status", "daily")

    def raise_at(self, t: float, site: int, platform: int, code: int, case: int | None,
                 origin: str) -> None:
        """An alarm raised at ``t``; it is triaged LAG seconds after."""
        text = self.new(clipped_length(self.rng, *ALARM))
        self.alarms.append(Alarm(t, site, platform, code, case, text, origin))
        self.at(t + self.rng.uniform(*LAG), "alarm", len(self.alarms) - 1)

    def _on_alarm(self, a: int) -> None:
        """Triage: system prompt, the dictionary entry, the site's record as it stands, the
        alarm, the instruction; an alarm of a case then joins it as a line."""
        al = self.alarms[a]
        entry = self.platforms[al.platform].entries[al.code]
        segs = [self.system["triage"], entry, self.record(al.site), al.text, self.cue["triage"]]
        self.emit("triage", al.site, a, segs)
        if al.case is not None:
            case = self.cases[al.case]
            case.lines.append(self.new(clipped_length(self.rng, *LINE)))
            if not case.due:
                case.due = True
                self.at(self.now + self.rng.uniform(*DEBOUNCE), "correlate", al.case)

    def _on_correlate(self, c: int) -> None:
        """A case re-summarized: system prompt, header, every line so far, the instruction."""
        case = self.cases[c]
        case.due = False
        segs = [self.system["correlate"], case.header, *case.lines, self.cue["correlate"]]
        case.sent.append(self.emit("correlate", c, len(case.lines), segs))

    def open_case(self, kind: str) -> int:
        self.cases.append(Case(kind, self.new(clipped_length(self.rng, *HEADER))))
        return len(self.cases) - 1

    def code(self, p: int) -> int:
        """A steady-state code of platform ``p`` (by its weights)."""
        return self.rng.choices(range(len(self.platforms[p].entries)),
                                cum_weights=self.platforms[p].weights)[0]

    def _on_steady(self, _: None) -> None:
        """A steady alarm at a site by noise (the router's at its ring's hub); some flap."""
        rng = self.rng
        s = rng.choices(range(len(self.sites)), cum_weights=self._noise)[0]
        region = self.regions[self.sites[s].region]
        p = region.ran
        if rng.random() < ROUTER_SHARE:
            p, s = region.router, region.rings[self.sites[s].ring][0]
        code = self.code(p)
        if rng.random() >= FLAP[0]:
            self.raise_at(self.now, s, p, code, None, "steady")
            return
        c = self.open_case("flap")
        t = self.now
        self.raise_at(t, s, p, code, c, "flap")
        for _ in range(rng.randint(*FLAP[1])):
            t += clipped_length(rng, *FLAP[2])
            self.raise_at(t, s, p, code, c, "flap")
        if rng.random() < FLAP_INCIDENT:
            runbook = rng.choices(range(len(self.runbooks)), self.runbook_weights)[0]
            self.open_incident("site", self.sites[s].region, [s], t + HOUR, runbook, c)

    def _on_fiber(self, _: None) -> None:
        """A fiber cut isolates a ring (by size): each site raises 2..4 link alarms within
        3 minutes, the hub's router 1..3; each site clears one after the splice."""
        rng = self.rng
        rings = [(g, r) for g, reg in enumerate(self.regions) for r in reg.rings]
        g, ring = rng.choices(rings, [len(r) for _, r in rings])[0]
        region, c = self.regions[g], self.open_case("fiber")
        end = self.now + clipped_length(rng, *SPLICE)
        for code in rng.sample(self.platforms[region.router].tx, rng.randint(1, 3)):
            self.raise_at(self.now + rng.uniform(0, 30), ring[0], region.router, code, c,
                          "fiber")
        tx = self.platforms[region.ran].tx
        for s in ring:
            codes = rng.sample(tx, rng.randint(2, 4))
            for code in codes:
                self.raise_at(self.now + rng.uniform(5, 180), s, region.ran, code, c, "fiber")
            self.raise_at(end + rng.uniform(0, 600), s, region.ran, codes[0], c, "clear")
        self.open_incident("fiber", g, list(ring), end, 0, c)

    def _on_power(self, _: None) -> None:
        """A grid outage over a run of a region's sites: mains failure at each; where the
        batteries run out first, battery low 20 minutes before the site goes down; clears
        when mains return."""
        rng = self.rng
        g = rng.choices(range(len(self.regions)), [len(r.sites) for r in self.regions])[0]
        sites, p, c = self.regions[g].sites, self.regions[g].ran, self.open_case("power")
        n = max(10, round(len(sites) * rng.uniform(*AREA)))
        first = rng.randrange(len(sites) - n + 1) if n < len(sites) else 0
        area, end = sites[first:first + n], self.now + clipped_length(rng, *GRID)
        mains, low, down = self.platforms[p].power
        for s in area:
            self.raise_at(self.now + rng.uniform(0, 300), s, p, mains, c, "power")
            battery, back = clipped_length(rng, *BATTERY), end + rng.uniform(0, 900)
            if battery < end - self.now:
                self.raise_at(self.now + battery - 20 * MINUTE, s, p, low, c, "power")
                self.raise_at(self.now + battery, s, p, down, c, "power")
                self.raise_at(back, s, p, down, c, "clear")
            self.raise_at(back, s, p, mains, c, "clear")
        self.open_incident("power", g, area, end, 1, c)

    def open_incident(self, kind: str, g: int, sites: list[int], end: float, runbook: int,
                      c: int) -> None:
        """An incident declared 3..8 minutes in; entries every 10..40 minutes until it is
        closed 15..45 minutes after service returns."""
        rng = self.rng
        start = self.now + rng.uniform(3, 8) * MINUTE
        inc = Incident(kind, g, sites, start, end, runbook, c, len(sites) >= MAJOR)
        self.incidents.append(inc)
        n = len(self.incidents) - 1
        t = start
        close = max(end, start) + rng.uniform(15, 45) * MINUTE
        while t < close:
            self.at(t, "entry", n)
            t += rng.uniform(*ENTRY_GAP)
        self.at(close, "entry", n)
        self.at(close, "closed", n)
        self.at(start, "declared", n)

    def _on_entry(self, n: int) -> None:
        inc = self.incidents[n]
        inc.timeline.append((self.now, self.new(clipped_length(self.rng, *TIMELINE))))

    def _on_closed(self, n: int) -> None:
        self.incidents[n].closed = True
        self.incident_closed(n)

    def _on_declared(self, n: int) -> None:
        """A major incident starts the status page's issues; the desk's hook runs."""
        if self.incidents[n].major and not self._issuing:
            self._issuing = True
            self.at(self.now + self.rng.uniform(5, 15) * MINUTE, "status", "incident")
        self.incident_declared(n)

    def open_majors(self) -> list[Incident]:
        return [i for i in self.incidents if i.major and i.start <= self.now and not i.closed]

    def _on_status(self, why: str) -> None:
        """The status page re-issued: system prompt, the guide, each open major incident's
        timeline as it stands, the page as last issued, the instruction; the new page
        replaces it. While a major incident is open the next issue is 30..60 minutes on;
        after the last one closes one more issue says all is clear."""
        majors = self.open_majors()
        segs = [self.system["status"], self.guide, *(s for i in majors for s in i.at(self.now)),
                *self.status.at(self.now), self.cue["status"]]
        self.issues.append(self.emit("status", len(majors), len(self.issues), segs))
        page = self.new(PAGE[0] + PAGE[1] * len(majors))
        self.status.versions.append((self.now, [page]))
        if why == "incident":
            if majors:
                self.at(self.now + self.rng.uniform(*STATUS_GAP), "status", "incident")
            else:
                self._issuing = False

    def incident_declared(self, n: int) -> None:
        """A hook for the desk (engineers' chats, customer escalations)."""

    def incident_closed(self, n: int) -> None:
        """A hook for the desk."""
