"""bench.heldout's ``home_assist`` shape, the service's jobs: morning briefings that fire at the
round times users set (the zone's news and weather digest of the hour shared by every home
firing then), the camera event log summarised on request (the log grows through the local day,
so a later summary re-sends the earlier one's log and more), energy reports over a seven-day
table that slides at local midnight, the nightly digest walk over each zone's homes, and the
shadow evaluation that replays a fixed set of synthetic homes and utterances with a candidate
prompt and the fleet's before each rollout. See bench/heldout_home_assist.py's docstring for
the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_homea_voice import TURNS, Session, Voice
from bench.heldout_homea_world import (CLOCK, ENTITY_TOKENS, HOUR, Version, bounded, hour_of,
                                       local, utc)
from bench.heldout_meeting_parts import pick, poisson

BRIEF_TIMES = ((6.0, 0.25), (6.5, 0.25), (7.0, 0.25), (7.25, 0.05), (7.5, 0.15), (8.0, 0.05))
BRIEF_JITTER = 30.0  # seconds from the set time to the request (the scheduler, the queue)
BRIEF = {"system": 700, "template": 400, "cue": 20}  # tokens: fleet prompt, zone's, cue
NEWS = (1200, 0.25, 800, 1800)  # tokens of a zone's news and weather digest (one an hour)
HOME_BRIEF = (160, 0.5, 60, 400)  # tokens of a home's calendar and device notes
CAMERA_EVENTS = (40.0, 0.7, 8.0, 250.0)  # camera events a day per camera home
EVENT = (60, 0.4, 25, 160)  # tokens of an event's line (time, camera, what was seen)
CAMERA_HOURS = (0.2, 0.1, 0.1, 0.1, 0.1, 0.2, 0.5, 0.9, 1.0, 0.8, 0.7, 0.7, 0.8, 0.8, 0.9,
                1.0, 1.1, 1.2, 1.1, 0.9, 0.7, 0.5, 0.4, 0.3)
MAX_LOG = 12000  # tokens of the log a summary holds (the latest events when longer)
EVENING = (0.5, 0.8, 1.0, 1.2, 1.2, 1.0, 0.6)  # when reports are asked for, local 17..23
CAMERA_ASKS, ENERGY_ASKS = 0.6, 0.35  # a day per camera home, per energy home
SYSTEMS = {"camera": 500, "energy": 450, "digest": 700, "template": 260, "cue": 25}
ENERGY_DAY = (700, 0.4, 300, 1500)  # tokens of a home's day in the energy table
ENERGY_DAYS = 7
DIGEST_HOUR = 4.5  # local hour each zone's nightly digest walk starts (0..10 min late)
EVENTS_DAY = (900, 0.6, 300, 2500)  # tokens of a home's day of events for its digest
OUTPUT = {"digest": (250, 0.3, 120, 500), "shadow": (30, 0.4, 10, 80)}
PREFILL, DECODE = 8000.0, 45.0  # tokens a second a job stream reads and writes
EVAL_HOMES, EVAL_UTTERANCES = 20, 8  # the shadow evaluation's set (homes x scale)
EVAL_LEAD = (1.0, 3.0)  # hours from the evaluation to the candidate's canary


@dataclass
class Stream:
    """A job's walk, one request at a time at its pace: kind, owner (the zone or the
    evaluation), items (homes, (eval home, utterance)), the head it sends (shadow), how far
    it is and its request indices."""

    kind: str
    owner: int
    items: list
    head: list[Segment] = field(default_factory=list)
    pos: int = 0
    sent: list[int] = field(default_factory=list)


class HomeAssist(Voice):
    """The whole replica: the world, the homes' sessions (``Voice``) and the jobs."""

    def __init__(self, rng: random.Random, scale: float, seed: int) -> None:
        super().__init__(rng, scale, seed)
        self.system = {k: self.new(n) for k, n in {**SYSTEMS, **BRIEF}.items()}
        self.templates = {tz: self.new(BRIEF["template"]) for tz, _ in self.zones}
        self.news: dict[tuple[float, int], Segment] = {}
        self.energy_days: dict[tuple[int, int], Segment] = {}
        self.energy_size: dict[int, int] = {}
        self.logs: dict[int, list[tuple[float, Segment]]] = {}
        self.digests: list[Stream] = []
        self.evals: list[tuple[int, Stream, Stream]] = []  # (version, candidate, baseline)
        for h, home in enumerate(self.homes):
            self._features(h, home.features)
        for tz, _ in self.zones:
            for d in (0, 1):
                self.at_local(d, DIGEST_HOUR + rng.uniform(0, 10) / 60, tz, "digest", tz)
        self._eval_set()

    def _features(self, h: int, features: set[str]) -> None:
        """Schedule home ``h``'s briefings, camera events and asks, energy asks."""
        rng, tz = self.rng, self.homes[h].tz
        if "briefing" in features:
            at = pick(rng, BRIEF_TIMES)
            for d in (-1, 0, 1, 2):
                self.at_local(d, at + rng.uniform(0, BRIEF_JITTER) / HOUR, tz, "brief", h)
        if "camera" in features:
            rate, log = bounded(rng, *CAMERA_EVENTS), []
            for d in (-1, 0, 1, 2):
                for _ in range(poisson(rng, rate)):
                    log.append((utc(d, hour_of(rng, CAMERA_HOURS), tz),
                                self.new(clipped_length(rng, *EVENT))))
            self.logs[h] = sorted(log)
            self.daily(h, CAMERA_ASKS, EVENING, 17, "camera")
        if "energy" in features:
            self.energy_size[h] = clipped_length(rng, *ENERGY_DAY)
            self.daily(h, ENERGY_ASKS, EVENING, 17, "energy")

    def _eval_set(self) -> None:
        """The shadow evaluation's synthetic homes (profile, sections, satellite line) and
        utterances, and its runs: one before each rollout's canary."""
        rng, new = self.rng, self.new
        per = ENTITY_TOKENS[self.stack.states]
        self.eval_homes = [[new(clipped_length(rng, 150, 0.5, 60, 400)),
                            *(new(8 + rng.randint(2, 10) * per) for _ in range(rng.randint(3, 9))),
                            *([new(CLOCK)] if self.stack.clock else []), new(16)]
                           for _ in range(max(5, round(EVAL_HOMES * self.scale)))]
        self.eval_utterances = [[new(clipped_length(rng, 14, 0.5, 4, 60))
                                 for _ in range(EVAL_UTTERANCES)] for _ in self.eval_homes]
        for k, v in enumerate(self.versions[1:], 1):
            when = v.start - rng.uniform(*EVAL_LEAD) * HOUR
            if when >= 0:  # one before the clock's start is not in the trace
                self.at(when, "evaluate", k)

    def day_of(self, h: int) -> int:
        """Home ``h``'s local day now (0: Tuesday)."""
        return int(local(self.now, self.homes[h].tz) // 24)

    def log_now(self, h: int) -> list[Segment]:
        """Home ``h``'s camera events of its local day so far (the latest MAX_LOG tokens)."""
        start = utc(self.day_of(h), 0.0, self.homes[h].tz)
        out = [seg for t, seg in self.logs[h] if start <= t <= self.now]
        while sum(n for _, n in out) > MAX_LOG:
            out.pop(0)
        return out

    def table(self, h: int) -> list[Segment]:
        """Home ``h``'s energy table now: its last ENERGY_DAYS full local days."""
        d = self.day_of(h)
        for x in range(d - ENERGY_DAYS, d):
            if (h, x) not in self.energy_days:
                self.energy_days[(h, x)] = self.new(self.energy_size[h])
        return [self.energy_days[(h, x)] for x in range(d - ENERGY_DAYS, d)]

    def prompt_head(self, s: Session) -> list[Segment]:
        """Camera and energy sessions: their system prompt, the profile, the log or table
        (held fixed for the session); the others as ``Voice`` sends them."""
        if s.kind in ("camera", "energy"):
            return [self.system[s.kind], self.homes[s.home].profile, *s.fixed]
        return super().prompt_head(s)

    def _on_camera(self, h: int) -> None:
        """"What happened today?" over the camera log as it stands (none yet: not asked)."""
        log = self.log_now(h)
        if log:
            self.start(Session("camera", h, -1, pick(self.rng, TURNS["camera"]), log))

    def _on_energy(self, h: int) -> None:
        """An energy report over the table as it stands."""
        self.start(Session("energy", h, -1, pick(self.rng, TURNS["energy"]), self.table(h)))

    def _on_brief(self, h: int) -> None:
        """A morning briefing: the fleet's briefing prompt, the zone's template, the zone's
        digest of this hour, the home's calendar and device notes, the cue."""
        tz = self.homes[h].tz
        key = (tz, int(local(self.now, tz)))
        if key not in self.news:
            self.news[key] = self.new(clipped_length(self.rng, *NEWS))
        segs = [self.system["system"], self.templates[tz], self.news[key],
                self.new(clipped_length(self.rng, *HOME_BRIEF)), self.system["cue"]]
        self.emit("routine", h, self.day_of(h), segs)

    def _on_digest(self, tz: float) -> None:
        """Zone ``tz``'s nightly digest walk over its digest homes, in id order."""
        homes = [h for h in self.with_feature("digest") if self.homes[h].tz == tz]
        if homes:
            self.digests.append(s := Stream("digest", len(self.digests), homes))
            self.at(self.now, "stream", s)

    def _on_evaluate(self, k: int) -> None:
        """The shadow evaluation of version ``k``: the eval set with the candidate's head and
        with the fleet's, two walks at once."""
        fleet: Version = self.fleet_version()
        items = [(e, u) for e in range(len(self.eval_homes)) for u in range(EVAL_UTTERANCES)]
        v = self.versions[k]
        runs = [Stream("shadow", len(self.evals), items, head) for head in
                ([v.system, v.tools], [fleet.system, fleet.tools])]
        self.evals.append((k, *runs))
        for s in runs:
            self.at(self.now, "stream", s)

    def stream_prompt(self, s: Stream, item) -> list[Segment]:
        """A digest: its prompt, template, the profile, the day's events, the cue. A shadow
        request: the run's head, the eval home's context and lines, the utterance."""
        if s.kind == "digest":
            return [self.system["digest"], self.system["template"], self.homes[item].profile,
                    self.new(clipped_length(self.rng, *EVENTS_DAY)), self.system["cue"]]
        e, u = item
        return [*s.head, *self.eval_homes[e], self.eval_utterances[e][u]]

    def _on_stream(self, s: Stream) -> None:
        """The walk's next item; the next one after this one is read and written."""
        if s.pos >= len(s.items):
            return
        item = s.items[s.pos]
        segs = self.stream_prompt(s, item)
        s.sent.append(self.emit(s.kind, s.owner, s.pos, segs))
        s.pos += 1
        out = clipped_length(self.rng, *OUTPUT[s.kind])
        work = sum(n for _, n in segs) / PREFILL + out / DECODE
        self.at(self.now + work * self.rng.uniform(0.8, 1.25), "stream", s)
