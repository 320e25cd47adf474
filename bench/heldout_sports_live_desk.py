"""bench.heldout's ``sports_live`` shape, the app on the clock: fans' live-match chats (each turn
re-sends the whole chat behind the match's state as it stands), bursts of fans at a big match's
kick-off, key events and final whistle, fantasy-league advice behind the player stat tables
(rewritten when a match of the fantasy sport ends), general chats behind a team's dossier, the
morning's preview batch over the day's fixtures, recaps behind the full play-by-play after the
final whistle and push-notification copy per moment. See bench/heldout_sports_live.py's
docstring for the numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Chat, Segment, clipped_length
from bench.heldout_lab_world import daily_times
from bench.heldout_legal_parts import Versioned
from bench.heldout_meeting_parts import pick, poisson
from bench.heldout_pv_desk import chat_turn
from bench.heldout_sports_live_world import HOUR, MINUTE, Layout, World

# kind -> (system tokens, turns, message tokens, reply tokens, pause (median s, sigma))
CHATS = {"live": (0, (2, 0.7, 1, 8), (30, 0.8, 5, 300), (180, 0.5, 40, 700), (40.0, 0.9)),
         "burst": (0, (1, 0.4, 1, 3), (15, 0.7, 3, 120), (120, 0.5, 30, 400), (30.0, 0.8)),
         "fantasy": (650, (3, 0.6, 1, 8), (60, 0.8, 8, 500), (280, 0.5, 60, 1000),
                     (60.0, 0.9)),
         "chat": (0, (2, 0.7, 1, 6), (35, 0.8, 5, 400), (220, 0.5, 40, 900), (50.0, 0.9))}
RATE = 45.0  # tokens a second a reply decodes at
MAX_CONTEXT = 24000  # tokens of a chat's context that end it
LIVE_EDGE = 15 * MINUTE  # live chats start this long before kick-off to after the whistle
BURSTS = {"kickoff": 25.0, "key": 35.0, "final": 30.0}  # fans per moment of a big match
BURST_TAU = 45.0  # seconds: mean delay of a burst's fans after the moment
# fans' activity by local hour (general chats), and fantasy managers' (before the fixtures)
FANS = (0.2, 0.1, 0.05, 0.03, 0.03, 0.05, 0.1, 0.25, 0.4, 0.5, 0.6, 0.7, 0.8, 0.8, 0.85,
        0.9, 0.9, 0.95, 1.0, 1.0, 0.95, 0.8, 0.55, 0.35)
FANTASY_HOURS = (0.1, 0.05, 0.02, 0.02, 0.02, 0.05, 0.2, 0.5, 0.9, 1.0, 1.0, 1.0, 0.9, 0.7,
                 0.5, 0.4, 0.35, 0.35, 0.3, 0.3, 0.3, 0.25, 0.2, 0.15)
SCORING = 700  # the fantasy league's scoring rules
TABLES = ((4, 6), (2500, 0.4, 1200, 5000))  # player stat tables (by position), tokens each
TABLES_READ = ((1, 0.5), (2, 0.35), (3, 0.15))  # tables a fantasy question is about
TABLE_EDITS = (1, 2)  # tables rewritten when a match of the fantasy sport ends
ROSTER = (350, 0.4, 150, 700)  # a manager's roster and league settings
WRITER = 900  # the article writer's system prompt
TEMPLATE = (900, 0.4, 400, 2000)  # a preview or recap template
ARTICLE = (700, 0.4, 300, 1500)  # tokens of an article (decoded before the next request)
WRITE_RATE = 60.0  # tokens a second the batch decodes at
PREVIEW_AT = (6.0, 6.5)  # local hours the morning's preview batch starts
RECAP_DELAY = (2 * MINUTE, 10 * MINUTE)
PUSH = 700  # the push writer's system prompt and style guide
PUSH_DELAY = (5.0, 20.0)  # seconds after the moment
PUSH_EVENTS = 3  # latest log entries a push prompt sends
CUE = {"preview": 40, "recap": 40, "push": 30}


@dataclass
class FanChat(Chat):
    """A Chat (owner: the match for live and burst, the team for chat, the chat itself for
    fantasy; fixed: a fantasy manager's roster), the fan's betting region and the stat tables
    a fantasy question is about (indices, in table order)."""

    region: int = 0
    tables: tuple[int, ...] = ()


@dataclass
class Batch:
    """A morning's preview batch: its day and (match, template) in the order it walks them,
    match by match in kick-off order, each match's templates in turn; its requests."""

    day: int
    jobs: list[tuple[int, int]]
    sent: list[int] = field(default_factory=list)


class Desk(World):
    """The whole replica: the world and the app's requests."""

    def __init__(self, rng: random.Random, scale: float, layout: Layout) -> None:
        super().__init__(rng, scale, layout)
        new = self.new
        self.chat_system = {k: new(v[0]) for k, v in CHATS.items() if v[0]}
        self.scoring, self.writer, self.push = new(SCORING), new(WRITER), new(PUSH)
        self.cue = {k: new(v) for k, v in CUE.items()}
        self.previews = [new(clipped_length(rng, *TEMPLATE)) for _ in range(layout.previews)]
        self.recaps = [new(clipped_length(rng, *TEMPLATE)) for _ in range(2)]  # recap, ratings
        n = rng.randint(*TABLES[0])
        self.tables = Versioned([(-HOUR, [new(clipped_length(rng, *TABLES[1]))
                                          for _ in range(n)])])
        self.edits: list[tuple[float, int]] = []  # (when, first table rewritten)
        self.chats: list[FanChat] = []
        self.batches: list[Batch] = []
        self.pushes: list[tuple[int, int, int]] = []  # (match, moment, request)
        self.recapped: list[tuple[int, int, int]] = []  # (match, template, request)
        self.plan_live()
        for t in daily_times(rng, layout.per_day[0] * scale, FANTASY_HOURS):
            self.at(t, "fantasy", None)
        for t in daily_times(rng, layout.per_day[1] * scale, FANS):
            self.at(t, "chat", None)
        for day in (0, 1):
            self.at((24 * day + rng.uniform(*PREVIEW_AT)) * HOUR, "batch", day)

    def plan_live(self) -> None:
        """The weekend's live chats, shared among the matches by audience x length, each
        starting while its match is on (or about to be, or just over)."""
        w = [m.weight * m.sport.minutes for m in self.matches]
        for i, m in enumerate(self.matches):
            mean = self.layout.live * self.scale * w[i] / sum(w)
            for _ in range(poisson(self.rng, mean)):
                t = self.rng.uniform(m.kickoff - LIVE_EDGE, m.end + LIVE_EDGE)
                self.at(t, "live", i)

    # NOTE(sports-live-turn): a live or burst chat's turn re-reads the match state as it
    # stands and sends it before the chat so far (this writer's guess at how the app keeps
    # answers current): a turn in a later minute than the last re-sends the whole chat as new
    # content behind the new version; fans in the same minute share it all up to the chat.
    def head(self, chat: FanChat) -> list[Segment]:
        """What a chat's turn sends before its history (NOTE(sports-head),
        NOTE(sports-live-turn))."""
        head = self.fan_head(chat.region)
        if chat.kind in ("live", "burst"):
            return [*head, *self.live_state(chat.owner)]
        if chat.kind == "fantasy":
            tables = self.tables.at(self.now)
            return [*head, self.chat_system["fantasy"], self.scoring,
                    *(tables[k] for k in chat.tables), *chat.fixed]
        return [*head, self.dossiers[chat.owner]]

    def start(self, kind: str, owner: int, when: float | None = None, **kw) -> FanChat:
        """A chat of ``kind`` about ``owner`` from a fan of a region by the layout's shares,
        its first turn at ``when`` (now if None)."""
        chat = FanChat(kind, owner, clipped_length(self.rng, *CHATS[kind][1]), [],
                       region=self.a_region(), **kw)
        self.chats.append(chat)
        self.at(self.now if when is None else when, "turn", len(self.chats) - 1)
        return chat

    def _on_turn(self, n: int) -> None:
        chat_turn(self, n, CHATS[self.chats[n].kind], MAX_CONTEXT, RATE)

    def _on_live(self, m: int) -> None:
        self.start("live", m)

    def _on_fantasy(self, _) -> None:
        """A manager asks for advice: the tables the question is about, their roster."""
        rng, n = self.rng, len(self.tables.current)
        k = min(n, pick(rng, TABLES_READ))
        chat = self.start("fantasy", len(self.chats),
                          tables=tuple(sorted(rng.sample(range(n), k))))
        chat.fixed = [self.new(clipped_length(rng, *ROSTER))]

    def _on_chat(self, _) -> None:
        """A fan asks about a team: one playing this weekend, by its matches' audience."""
        m = self.rng.choices(self.matches, [x.weight for x in self.matches])[0]
        self.start("chat", self.rng.choice((m.home, m.away)))

    def moment(self, m: int, what: str) -> None:
        """A match's kick-off, key event or final whistle: its push copy seconds later; a
        big match's burst of fans; after the final whistle the recap(s) and, for the fantasy
        sport, the stat tables rewritten."""
        match, rng = self.matches[m], self.rng
        self.at(self.now + rng.uniform(*PUSH_DELAY), "push", (m, len(match.moments) - 1))
        if match.big:
            for _ in range(poisson(rng, BURSTS[what] * self.layout.burst * self.scale)):
                self.start("burst", m, self.now + rng.expovariate(1.0 / BURST_TAU))
        if what != "final":
            return
        t = self.now + rng.uniform(*RECAP_DELAY)
        for v in range(1 + match.big):
            self.at(t + v * MINUTE, "recap", (m, v))
        if match.sport.name == self.layout.fantasy:
            self.rewrite_tables()

    def rewrite_tables(self) -> None:
        """The match's stats flow into 1..2 of the player stat tables."""
        rng, tables = self.rng, list(self.tables.current)
        ks = rng.sample(range(len(tables)), min(len(tables), rng.randint(*TABLE_EDITS)))
        for k in ks:
            tables[k] = self.new(clipped_length(rng, *TABLES[1]))
        self.tables.versions.append((self.now, tables))
        self.edits.append((self.now, min(ks)))

    def _on_push(self, arg: tuple[int, int]) -> None:
        """Push copy for a moment: the push prompt, the header, that minute's score line,
        the latest log entries, the cue."""
        m, j = arg
        match = self.matches[m]
        tick = match.ticks[match.moments[j][1]]
        latest = match.pbp[max(0, tick.events - PUSH_EVENTS):tick.events]
        segs = [self.push, match.header, tick.score, *latest, self.cue["push"]]
        self.pushes.append((m, j, self.emit("push", m, j, segs)))

    def _on_recap(self, arg: tuple[int, int]) -> None:
        """A recap (template 0) or, for a big match, player ratings (1): the writer, the
        template, the header, the final score line and box score, the full log."""
        m, v = arg
        match = self.matches[m]
        tick = match.ticks[-1]
        segs = [self.writer, self.recaps[v], match.header, tick.score, *tick.box,
                *match.pbp, self.cue["recap"]]
        self.recapped.append((m, v, self.emit("recap", m, v, segs)))

    def _on_batch(self, day: int) -> None:
        """The morning's previews: every match of the day still to kick off, by kick-off,
        each with every template."""
        todo = [i for i, m in enumerate(self.matches)
                if int(m.kickoff // (24 * HOUR)) == day and m.kickoff > self.now]
        self.batches.append(Batch(day, [(i, v) for i in todo
                                        for v in range(len(self.previews))]))
        self._on_preview(len(self.batches) - 1)

    def _on_preview(self, b: int) -> None:
        """The batch's next preview: the writer, the template, both teams' dossiers, the
        head-to-head, the cue; the next one after this one's article is written."""
        batch = self.batches[b]
        if len(batch.sent) == len(batch.jobs):
            return
        m, v = batch.jobs[len(batch.sent)]
        match = self.matches[m]
        segs = [self.writer, self.previews[v], self.dossiers[match.home],
                self.dossiers[match.away], match.h2h, self.cue["preview"]]
        batch.sent.append(self.emit("preview", m, v, segs))
        gap = clipped_length(self.rng, *ARTICLE) / WRITE_RATE
        self.at(self.now + gap, "preview", b)
