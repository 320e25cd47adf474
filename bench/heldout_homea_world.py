"""bench.heldout's ``home_assist`` shape, its world: the deployment's stack (where the fleet's
homes are, whether device states are rendered into the prompt or fetched by a tool, whether a
clock line is), the assistant's system prompt and tool schemas with the versions rolled out
during the two days (staged by a home's bucket, some rolled back), and the homes: each with a
profile, its exposed devices grouped by area (a section per area, replaced when a state in it
changes), its voice satellites and its features. See bench/heldout_home_assist.py's
docstring for the numbers."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import ClockedState, Segment, clipped_length
from bench.heldout_meeting_parts import pick, poisson
from bench.heldout_recruit_parts import hour_of, local, utc

HOUR, MINUTE, DAY = 3600.0, 60.0, 86400.0
END = 2 * DAY  # the clock starts Tuesday 00:00 UTC and ends Thursday 00:00 UTC
REGIONS = {"us": ((-5.0, 0.47), (-6.0, 0.29), (-7.0, 0.07), (-8.0, 0.17)),
           "eu": ((0.0, 0.14), (1.0, 0.62), (2.0, 0.24))}
VENDOR_TZ = {"us": -8.0, "eu": 1.0}  # where the team that rolls prompts out works
HOMES = 150  # homes this replica serves at scale 1.0 (x 0.85..1.15, at least 20)
SYSTEM = (1100, 0.2, 800, 1600)  # tokens of the assistant's system prompt
TOOLS = (2400, 0.15, 1700, 3400)  # tokens of its tool schemas (about 20 intent tools)
PROFILE = (150, 0.5, 60, 400)  # tokens of a home's profile (name, members, language, city)
SESSIONS = (2.0, 0.9, 0.2, 40.0)  # voice sessions a day per home (lognormal, clipped)
ENTITIES = (40, 0.6, 8, 250)  # devices a home exposes to the assistant
PER_AREA = 6  # devices in an area on average (2..16 areas)
ENTITY_TOKENS = {"inline": 28, "live": 18}  # an entity's line with or without its state
AREA_RATE = (0.5, 1.0, 0.02, 8.0)  # state changes an hour in an area's section at full activity
EDITS = 0.03  # device edits a day per home (an area's section replaced, in either stack)
SATELLITE = (16, 0.2, 10, 24)  # tokens of the "speaking from the <area> satellite" line
SPEAKERS = ((1, 0.35), (2, 0.3), (3, 0.2), (4, 0.1), (6, 0.05))  # voice satellites a home has
CLOCK = 22  # tokens of the "current time is 18:42, Tuesday ..." line (a minute's)
ROLLOUTS = ((2, 0.5), (3, 0.35), (4, 0.15))  # new (system, tools) versions over the two days
STAGES = (0.01, 0.1, 0.5, 1.0)  # the share of homes a version reaches, stage by stage
STAGE_HOURS = ((1.0, 3.0), (2.0, 6.0), (2.0, 8.0))  # hours from one stage to the next
FIRST_DAY = ((-1, 0.35), (0, 0.5), (1, 0.15))  # the local day of the first canary
ROLLBACK = 0.25  # versions rolled back at the 10 % stage, 0.5..2 h in
NEXT_ROLLOUT = (1.0, 6.0)  # hours from a version's last stage to the next version's canary
# how active a home is at each local hour (voice sessions, state changes)
ACTIVITY = (0.15, 0.08, 0.05, 0.04, 0.05, 0.15, 0.55, 0.9, 0.75, 0.5, 0.45, 0.45, 0.5, 0.45,
            0.45, 0.5, 0.65, 0.9, 1.2, 1.3, 1.25, 1.1, 0.8, 0.4)
PEAK = max(ACTIVITY)
FEATURES = {"briefing": 0.35, "goodnight": 0.15, "camera": 0.3, "energy": 0.25,
            "digest": 0.35, "alerts": 0.5}  # homes that use each feature


@dataclass
class Stack:
    """How this deployment builds its prompts: the region (time zones), ``states`` "inline"
    (each area's section lists its devices' states) or "live" (a static overview; states come
    from a GetLiveContext tool call), ``clock`` (a minute clock line after the home context,
    else a GetDateTime tool)."""

    region: str
    states: str
    clock: bool


@dataclass
class Version:
    """A (system prompt, tool schemas) version: what changed ("v0", "system" or "tools") and
    its rollout stages as (time, share of homes from then)."""

    system: Segment
    tools: Segment
    change: str
    stages: list[tuple[float, float]]

    def share(self, t: float) -> float:
        """The share of homes on this version (or a later one) at ``t``."""
        out = 0.0
        for when, f in self.stages:
            if when <= t:
                out = f
        return out

    @property
    def start(self) -> float:
        return self.stages[0][0]


@dataclass
class Area:
    """An area's section of the device overview: its tokens, state changes an hour at full
    activity, its versions as (time, segment) and when it was last rendered."""

    tokens: int
    rate: float
    versions: list[tuple[float, Segment]]
    checked: float = -1e18


@dataclass
class Home:
    """A household: UTC offset, rollout bucket, voice sessions a day, profile, areas, satellite
    lines, exposed devices and the features it uses."""

    tz: float
    bucket: float
    sessions: float
    profile: Segment
    areas: list[Area]
    satellites: list[Segment]
    entities: int
    features: set[str] = field(default_factory=set)


def bounded(rng: random.Random, median: float, sigma: float, lo: float, hi: float) -> float:
    """A rate: lognormal around ``median``, clipped to lo..hi (not rounded)."""
    return min(hi, max(lo, rng.lognormvariate(math.log(median), sigma)))


class World(ClockedState):
    """The stack, the versions and the homes on the event clock; ``emit`` sends a request.
    bench.heldout_homea_voice.Voice builds on it."""

    END = END

    def __init__(self, rng: random.Random, scale: float, seed: int) -> None:
        super().__init__(rng, 0, scale)
        self.stack = Stack(("us", "eu")[seed // 2 % 2], ("live", "inline")[seed % 2],
                           rng.random() < (0.7 if seed % 2 else 0.3))
        self.zones = REGIONS[self.stack.region]
        self.versions = self._versions()
        self.clocks: dict[tuple[float, int], Segment] = {}
        count = max(20, round(HOMES * scale * rng.uniform(0.85, 1.15)))
        self.homes = [self._home() for _ in range(count)]
        self.edits: list[tuple[float, int]] = []  # (time, home) of each device edit
        for h, home in enumerate(self.homes):
            for d in (-1, 0, 1, 2):
                for _ in range(poisson(rng, EDITS)):
                    self.at_local(d, rng.uniform(0, 24), home.tz, "edit", h)

    def _versions(self) -> list[Version]:
        """Version 0 (on every home before any rollout), then 2..4 staged rollouts, the first
        canary at the vendor's 09..14 on the day before the clock's start, day 0 or day 1,
        each next one 1..6 h after the last stage of the one before; a rollout not started 2 h
        before the end is dropped."""
        rng, new = self.rng, self.new
        system, tools = new(clipped_length(rng, *SYSTEM)), new(clipped_length(rng, *TOOLS))
        out, good = [Version(system, tools, "v0", [(-1e18, 1.0)])], (system, tools)
        day = pick(rng, FIRST_DAY)
        t = utc(day, rng.uniform(9.0, 14.0), VENDOR_TZ[self.stack.region])
        for _ in range(pick(rng, ROLLOUTS)):
            if t > END - 2 * HOUR:
                break
            if rng.random() < 0.5:
                system = new(clipped_length(rng, *SYSTEM))
                change = "system"
            else:
                tools = new(max(TOOLS[2], tools[1] + rng.randint(-150, 250)))
                change = "tools"
            stages = self._stages(t)
            out.append(Version(system, tools, change, stages))
            if stages[-1][1] == 0.0:  # rolled back: the next one builds on the last good one
                system, tools = good
            good = system, tools
            t = stages[-1][0] + rng.uniform(*NEXT_ROLLOUT) * HOUR
        return out

    def _stages(self, t: float) -> list[tuple[float, float]]:
        """A rollout's stages from its canary at ``t``; a rollback drops it to no home."""
        rng = self.rng
        stages = [(t, STAGES[0])]
        for share, gap in zip(STAGES[1:], STAGE_HOURS):
            t += rng.uniform(*gap) * HOUR
            stages.append((t, share))
            if share == STAGES[1] and rng.random() < ROLLBACK:
                stages.append((t + rng.uniform(0.5, 2.0) * HOUR, 0.0))
                break
        return stages

    def _home(self) -> Home:
        """A home: zone, bucket, activity, profile, devices by area, satellites, features."""
        rng, new = self.rng, self.new
        entities = clipped_length(rng, *ENTITIES)
        k = max(2, min(16, round(entities / PER_AREA * rng.uniform(0.7, 1.3))))
        cuts = sorted(rng.sample(range(1, entities), k - 1)) if entities > k else []
        sizes = [b - a for a, b in zip([0, *cuts], [*cuts, entities])] if cuts else [1] * k
        per = ENTITY_TOKENS[self.stack.states]
        areas = [Area(8 + n * per, bounded(rng, *AREA_RATE), []) for n in sizes]
        for a in areas:
            a.versions.append((-1e18, new(a.tokens)))
        sats = [new(clipped_length(rng, *SATELLITE)) for _ in range(pick(rng, SPEAKERS))]
        home = Home(pick(rng, self.zones), rng.random(),
                    bounded(rng, *SESSIONS),
                    new(clipped_length(rng, *PROFILE)), areas, sats, entities)
        home.features = {f for f, p in FEATURES.items() if rng.random() < p}
        return home

    def version_at(self, h: int) -> Version:
        """The version home ``h`` runs now: the newest whose share passes the home's bucket."""
        bucket = self.homes[h].bucket
        return next(v for v in reversed(self.versions) if v.share(self.now) > bucket)

    def fleet_version(self) -> Version:
        """The version every home is on now (the newest at a 100 % share)."""
        return next(v for v in reversed(self.versions) if v.share(self.now) >= 1.0)

    def head(self, h: int) -> list[Segment]:
        """The system prompt and tool schemas home ``h`` gets now."""
        v = self.version_at(h)
        return [v.system, v.tools]

    def activity(self, tz: float) -> float:
        """A home's activity now (1.0 at its evening peak)."""
        return ACTIVITY[int(local(self.now, tz) % 24)] / PEAK

    def context(self, h: int) -> list[Segment]:
        """Home ``h``'s context as rendered now: the profile, then each area's section. Inline
        states: an area changed since its last rendering (Poisson at its rate x the activity)
        gets a new version now."""
        home, rng = self.homes[h], self.rng
        inline = self.stack.states == "inline"
        act = self.activity(home.tz)
        for a in home.areas:
            if inline and self.now > a.checked > -1e18:
                gone = a.rate * act * (self.now - a.checked) / HOUR
                if rng.random() < 1.0 - math.exp(-gone):
                    self.renew(a)
            a.checked = self.now
        return [home.profile, *(a.versions[-1][1] for a in home.areas)]

    def touch(self, h: int) -> None:
        """An intent tool changed a device of home ``h``: inline, its area's section changes."""
        if self.stack.states == "inline":
            self.renew(self.rng.choice(self.homes[h].areas))

    def _on_edit(self, h: int) -> None:
        """A device added or renamed: one area's section is new in either stack."""
        self.edits.append((self.now, h))
        self.renew(self.rng.choice(self.homes[h].areas))

    def clock(self, tz: float) -> Segment:
        """The clock line of zone ``tz`` this minute."""
        key = (tz, int(self.now // MINUTE))
        if key not in self.clocks:
            self.clocks[key] = self.new(CLOCK)
        return self.clocks[key]

    def tail(self, h: int, sat: int) -> list[Segment]:
        """After the home context: the clock line (if the stack has one), the satellite's."""
        home = self.homes[h]
        clock = [self.clock(home.tz)] if self.stack.clock else []
        return [*clock, home.satellites[sat]]

    def at_local(self, day: int, hour: float, tz: float, name: str, payload: object) -> None:
        """Schedule ``name`` at a local time if it falls on the clock (0..END)."""
        t = utc(day, hour, tz)
        if 0 <= t < self.END:
            self.at(t, name, payload)

    def daily(self, h: int, rate: float, hours: tuple, first: int, name: str,
              payload: object = None) -> None:
        """Each local day, Poisson(``rate``) events ``name`` of home ``h`` (the payload, else
        ``h``) at local hours by ``hours`` from ``first``."""
        tz = self.homes[h].tz
        for d in (-1, 0, 1, 2):
            for _ in range(poisson(self.rng, rate)):
                self.at_local(d, hour_of(self.rng, hours, first), tz, name,
                              h if payload is None else payload)

    def renew(self, a: Area) -> None:
        """Area ``a``'s section changes now (a new version)."""
        a.versions.append((self.now, self.new(a.tokens)))
        a.checked = self.now

    def with_feature(self, name: str) -> list[int]:
        """The homes that use feature ``name``, in id order."""
        return [h for h, home in enumerate(self.homes) if name in home.features]
