"""bench.heldout's ``sports_live`` shape, its world: a sports media app over a weekend of matches
as one replica sees it. The fan assistant's head (app voice, each betting region's content
rules, the data provider's attribution rules), the teams' dossiers, the weekend's fixtures by
the seed's layout, and each match on the clock: a header, then every minute a new version of
its live state (a score line with the match clock, the odds on a betting app, the box score)
and the play-by-play log it appends to, with the moments (kick-off, key events such as goals
or wickets, the final whistle) that the desk reacts to. See bench/heldout_sports_live.py's
docstring for the numbers."""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import ClockedState, Segment, clipped_length
from bench.heldout_meeting_parts import poisson

HOUR, DAY, MINUTE = 3600.0, 86400.0, 60.0
END = 2 * DAY  # Saturday 00:00 to Monday 00:00, the app's local time
SYSTEM = 1400  # the app's voice and what the assistant may say
ATTRIBUTION = 500  # the data provider's attribution rules
BETTING = (900, 0.4, 300, 2000)  # a region's betting-content rules (ads, odds, age, help lines)
HEADER = (160, 0.3, 80, 300)  # a match's header: teams, competition, venue, officials
SCORE = (70, 0.3, 30, 150)  # the score line with the match clock (new every minute)
PRE = (300, 0.3, 120, 600)  # before kick-off: line-ups and the kick-off time
KEY = (110, 0.4, 50, 300)  # a key event's entry in the log (a goal, its scorer, the replay)
PBP_WINDOW = 5000  # tokens of the latest play-by-play a live prompt pastes
DOSSIER = (2600, 0.4, 1200, 5000)  # a team's dossier: form, squad, injuries, storylines
# NOTE(sports-head): a fan prompt is the app voice, then the fan's region's betting rules,
# then the attribution rules, then what the fan asks about: this writer's guess at how the app
# templates its prompt (the region is filled in where the product team wrote it, mid-prompt).
# The live state is header, score line, odds, box score, log: the score line changes every
# minute, so each minute's version is new content from its second part on.


@dataclass(frozen=True)
class Sport:
    """A sport as the data feed reports it: minutes from kick-off to the final whistle
    (breaks included), log entries a minute, an entry's tokens (median, sigma, lo, hi), box
    score sections and their tokens, key events a match."""

    name: str
    minutes: int
    events: float
    event: tuple[int, float, int, int]
    box: tuple[int, int]
    keys: float


SPORTS = {s.name: s for s in (
    Sport("soccer", 112, 0.7, (35, 0.4, 12, 120), (4, 380), 2.7),
    Sport("gridiron", 195, 0.9, (45, 0.4, 15, 140), (8, 420), 6.0),
    Sport("basketball", 140, 1.8, (28, 0.4, 10, 90), (6, 380), 3.0),
    Sport("hockey", 150, 0.7, (30, 0.4, 10, 100), (5, 330), 5.5),
    Sport("tennis", 150, 1.1, (22, 0.4, 8, 70), (2, 300), 3.0),
    Sport("test", 420, 1.3, (26, 0.4, 10, 90), (9, 450), 8.0),
    Sport("t20", 200, 1.3, (28, 0.4, 10, 90), (7, 420), 10.0))}


@dataclass(frozen=True)
class Layout:
    """The seed's app: its fixtures as slots (day, local hour, sport, (lo, hi) matches),
    the fans' shares by betting region, teams, big matches (lo, hi), the odds section of the
    live state (None: no odds), preview templates, the fantasy sport, live chats over the
    weekend, fantasy and general chats a day, the size of a big match's bursts (x)."""

    name: str
    slots: tuple[tuple[int, float, str, tuple[int, int]], ...]
    regions: tuple[float, ...]
    teams: int
    big: tuple[int, int]
    odds: tuple[int, float, int, int] | None
    previews: int
    fantasy: str
    live: float
    per_day: tuple[float, float]
    burst: float


LAYOUTS = (
    Layout("football", ((0, 12.5, "soccer", (1, 1)), (0, 15.0, "soccer", (4, 6)),
                        (0, 17.5, "soccer", (1, 1)), (0, 20.0, "soccer", (1, 2)),
                        (1, 14.0, "soccer", (2, 3)), (1, 16.5, "soccer", (1, 1))),
           (0.7, 0.2, 0.1), 20, (1, 2), None, 2, "soccer", 800.0, (100.0, 110.0), 1.0),
    Layout("us", ((0, 12.0, "gridiron", (4, 6)), (0, 15.5, "gridiron", (4, 6)),
                  (0, 19.5, "gridiron", (3, 5)), (0, 19.0, "hockey", (2, 4)),
                  (1, 13.0, "gridiron", (6, 8)), (1, 16.25, "gridiron", (2, 4)),
                  (1, 20.33, "gridiron", (1, 1)), (1, 15.5, "basketball", (1, 3)),
                  (1, 19.0, "hockey", (1, 3))),
           (0.45, 0.2, 0.3, 0.05), 120, (2, 3), None, 3, "gridiron", 750.0, (150.0, 90.0),
           0.6),
    Layout("cricket", ((0, 10.0, "test", (1, 1)), (1, 10.0, "test", (1, 1)),
                       (0, 15.5, "t20", (1, 1)), (0, 19.5, "t20", (1, 1)),
                       (1, 15.5, "t20", (1, 1)), (1, 19.5, "t20", (1, 1))),
           (0.6, 0.15, 0.15, 0.1), 16, (2, 2), None, 2, "t20", 750.0, (130.0, 90.0), 0.5),
    Layout("betting", ((0, 13.0, "tennis", (3, 5)), (0, 15.0, "soccer", (4, 7)),
                       (0, 17.5, "soccer", (1, 2)), (0, 19.0, "hockey", (2, 3)),
                       (0, 20.0, "basketball", (1, 2)), (1, 13.0, "tennis", (2, 4)),
                       (1, 14.0, "soccer", (3, 5)), (1, 16.5, "soccer", (2, 3)),
                       (1, 19.5, "basketball", (1, 2))),
           (0.35, 0.3, 0.2, 0.15), 100, (2, 3), (600, 0.4, 250, 1500), 3, "soccer", 850.0,
           (120.0, 60.0), 0.6))


@dataclass(frozen=True)
class Tick:
    """One minute's version of a match's live state: when, its score line, its odds (None
    without), its box score and how many log entries it holds."""

    time: float
    score: Segment
    odds: Segment | None
    box: tuple[Segment, ...]
    events: int


@dataclass
class Match:
    """A fixture: its sport, kick-off, the final whistle, the two teams, its audience weight
    (big: a marquee match that draws bursts), its header and pre-match line, the head-to-head
    a preview sends, the log, the minutes' versions and the moments (what, tick)."""

    sport: Sport
    kickoff: float
    end: float
    home: int
    away: int
    weight: float
    header: Segment
    pre: Segment
    h2h: Segment
    big: bool = False
    pbp: list[Segment] = field(default_factory=list)
    ticks: list[Tick] = field(default_factory=list)
    moments: list[tuple[str, int]] = field(default_factory=list)

    def tick_at(self, t: float) -> int | None:
        """The latest version at ``t`` (None before kick-off)."""
        k = bisect.bisect_right([x.time for x in self.ticks], t) - 1
        return None if k < 0 else k

    def state(self, k: int | None) -> list[Segment]:
        """Version ``k``'s live state as a prompt pastes it: the header, the score line, the
        odds, the box score, the latest log entries up to PBP_WINDOW tokens; before
        kick-off the header and the pre-match line."""
        if k is None:
            return [self.header, self.pre]
        tick, window, total = self.ticks[k], [], 0
        for seg in reversed(self.pbp[:tick.events]):
            if total + seg[1] > PBP_WINDOW:
                break
            window.append(seg)
            total += seg[1]
        odds = [tick.odds] if tick.odds else []
        return [self.header, tick.score, *odds, *tick.box, *reversed(window)]


class World(ClockedState):
    """The app's fixtures on the clock; ``moment(m, what)`` is called at a match's kick-off,
    key events and final whistle. bench.heldout_sports_live_desk.Desk builds on it."""

    END = END

    def __init__(self, rng: random.Random, scale: float, layout: Layout) -> None:
        super().__init__(rng, 0, scale)
        self.layout, new = layout, self.new
        self.system, self.attribution = new(SYSTEM), new(ATTRIBUTION)
        self.betting = [new(clipped_length(rng, *BETTING)) for _ in layout.regions]
        self.dossiers = [new(clipped_length(rng, *DOSSIER)) for _ in range(layout.teams)]
        self.matches: list[Match] = []
        for day, hour, sport, count in layout.slots:
            for _ in range(rng.randint(*count)):
                self.add_match(SPORTS[sport], (24 * day + hour) * HOUR)
        self.matches.sort(key=lambda m: m.kickoff)
        for m in rng.sample(self.matches, min(len(self.matches), rng.randint(*layout.big))):
            m.big, m.weight = True, 8.0 * max(1.0, m.weight)
        for i, m in enumerate(self.matches):
            self.at(m.kickoff, "tick", i)

    def add_match(self, sport: Sport, kickoff: float) -> None:
        """A fixture between two teams not playing that day (a Test match's second day
        continues the first's)."""
        rng, day = self.rng, int(kickoff // DAY)
        earlier = [m for m in self.matches if m.sport is sport and sport.name == "test"]
        if earlier:
            home, away = earlier[0].home, earlier[0].away
        else:
            busy = {t for m in self.matches if int(m.kickoff // DAY) == day
                    for t in (m.home, m.away)}
            home, away = rng.sample(sorted(set(range(self.layout.teams)) - busy), 2)
        new = self.new
        self.matches.append(Match(
            sport, kickoff, kickoff + sport.minutes * MINUTE, home, away,
            rng.lognormvariate(0.0, 0.8), new(clipped_length(rng, *HEADER)),
            new(clipped_length(rng, *PRE)), new(clipped_length(rng, 500, 0.4, 200, 1200))))

    def fan_head(self, region: int) -> list[Segment]:
        """What every fan prompt starts with (NOTE(sports-head))."""
        return [self.system, self.betting[region], self.attribution]

    def a_region(self) -> int:
        return self.rng.choices(range(len(self.layout.regions)), self.layout.regions)[0]

    def live_state(self, m: int) -> list[Segment]:
        """Match ``m``'s live state as it stands now."""
        match = self.matches[m]
        return match.state(match.tick_at(self.now))

    def _on_tick(self, m: int) -> None:
        """A minute of match ``m``: the feed's new log entries (maybe a key event), a new
        score line (and odds), the box score with a section rewritten if anything happened;
        the moment, if any, then the next minute."""
        match, rng, new = self.matches[m], self.rng, self.new
        sport, first = match.sport, not match.ticks
        last = self.now + MINUTE >= match.end
        before = len(match.pbp)
        for _ in range(poisson(rng, sport.events)):
            match.pbp.append(new(clipped_length(rng, *sport.event)))
        key = not (first or last) and rng.random() < sport.keys / sport.minutes
        if key:
            match.pbp.append(new(clipped_length(rng, *KEY)))
        box = list(match.ticks[-1].box) if match.ticks else [new(sport.box[1])
                                                             for _ in range(sport.box[0])]
        if len(match.pbp) > before:
            box[rng.randrange(len(box))] = new(sport.box[1])
        odds = new(clipped_length(rng, *self.layout.odds)) if self.layout.odds else None
        score = new(clipped_length(rng, *SCORE))
        match.ticks.append(Tick(self.now, score, odds, tuple(box), len(match.pbp)))
        what = "kickoff" if first else "final" if last else "key" if key else None
        if what:
            match.moments.append((what, len(match.ticks) - 1))
            self.moment(m, what)
        if not last:
            self.at(self.now + MINUTE, "tick", m)

    def moment(self, m: int, what: str) -> None:
        """A kick-off, key event or final whistle of match ``m`` (the desk reacts)."""
