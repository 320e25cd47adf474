"""bench.heldout's ``media_pipeline`` shape, the people's side: editors' chats behind the
editorial assistant's system prompt, the company style guide and a show's bible (often with
an episode's transcript pasted after it), writers editing the bibles, and the social team's
clip searches over popular and new episodes (the transcript as it stands and its current
chapters, then a question). See bench/heldout_media_pipeline.py's docstring for the
numbers."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_media_parts import DAY, HOUR, MINUTE, KINDS, World, tokens
from bench.heldout_meeting_parts import poisson

SYSTEM = {"editor": 1300, "clip": 700}  # tokens of each tool's system prompt
GUIDE = (2800, 0.3, 1800, 4500)  # tokens of the company style guide (sections of 600)
EDITORS = 40  # editors' sessions a day at scale 1.0 (x 0.8..1.2, at least 1)
EDITOR_HOURS = (0.5, 1.0, 1.0, 0.8, 0.6, 0.9, 1.0, 0.9, 0.7, 0.4)  # starts, 09:00..18:00
TURNS = (4, 0.8, 1, 16)  # turns of an editor's session
MESSAGE = (45, 1.0, 8, 800)  # tokens of an editor's message (pasted copy makes it long)
REPLY = (260, 0.6, 40, 1200)  # tokens of the assistant's reply
ATTACH = 0.5  # sessions that paste one of the show's 5 latest episodes after the bible
THINK = (90.0, 1.0)  # seconds between a reply and the next message (median, sigma)
AWAY = (0.1, (10.0, 60.0))  # gaps where the editor leaves and comes back (minutes)
MAX_CONTEXT = 30000  # tokens of a session's context that end it
RATE = 35.0  # tokens a second a reply decodes at
BIBLE_EDITS = (3.0, (10.0, 18.0))  # writers' bible edits a day (Poisson) and their hours
SEARCHES = 130  # the social team's clip-search sessions a day at scale 1.0 (x 0.8..1.2)
SEARCH_HOURS = (0.4, 0.7, 1.0, 1.0, 0.9, 0.8, 0.9, 1.0, 0.9, 0.8, 0.8, 0.9, 1.0, 0.8, 0.5)  # 07..
RECENT = (0.5, 36.0)  # searches on an episode published in the last this many hours
QUESTIONS = (3, 0.7, 1, 10)  # questions of a search session
QUESTION = (30, 0.6, 8, 120)  # tokens of a question ("where does the guest talk about ...")
BETWEEN = (20.0, 150.0)  # seconds between two questions (the producer cuts the clip)


@dataclass
class Session:
    """An editor's chat: its show, the episode pasted (None if none) and its transcript as
    pasted, the turns left, the history (messages and replies) and its request indices."""

    show: int
    episode: int | None
    pasted: list[Segment]
    turns: int
    history: list[Segment] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)


@dataclass
class Search:
    """A clip-search session on one episode: its questions left and request indices."""

    episode: int
    questions: int
    sent: list[int] = field(default_factory=list)


class Desk(World):
    """The people's work on the archive (``World``): editors' chats, bible edits, clip
    searches."""

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, scale)
        self.system = {tool: self.new(n) for tool, n in SYSTEM.items()}
        total = clipped_length(rng, *GUIDE)
        self.guide = [self.new(600) for _ in range(total // 600)] + [self.new(total % 600 + 8)]
        self.sessions: list[Session] = []
        self.searches: list[Search] = []
        self.bible_edits: list[tuple[float, int, int]] = []  # (time, show, section)
        for day in (0.0, DAY):
            self.at(day + 6 * HOUR, "desk_day", None)

    def _on_desk_day(self, _: object) -> None:
        """The day's editor sessions (09..19, by EDITOR_HOURS), clip searches (07..22, by
        SEARCH_HOURS) and bible edits."""
        rng, day = self.rng, self.now // DAY * DAY
        for _ in range(max(1, round(EDITORS * self.scale * rng.uniform(0.8, 1.2)))):
            h = rng.choices(range(9, 19), EDITOR_HOURS)[0]
            self.at(day + (h + rng.random()) * HOUR, "session", None)
        for _ in range(max(1, round(SEARCHES * self.scale * rng.uniform(0.8, 1.2)))):
            h = rng.choices(range(7, 22), SEARCH_HOURS)[0]
            self.at(day + (h + rng.random()) * HOUR, "search", None)
        for _ in range(poisson(rng, BIBLE_EDITS[0])):
            self.at(day + rng.uniform(*BIBLE_EDITS[1]) * HOUR, "bible", None)

    def busy_show(self) -> int:
        """A show by how much editing it needs (its release rate)."""
        shows = self.archive.shows
        return self.rng.choices(range(len(shows)), [KINDS[s.kind][3] + 0.2 for s in shows])[0]

    def _on_bible(self, _: object) -> None:
        """A writer rewrites a section of a show's bible (a character's arc, a new running
        gag): from it on, every editor prompt of the show is new content."""
        rng, s = self.rng, self.busy_show()
        bible = self.archive.shows[s].bible
        secs = list(bible.current)
        k = rng.randrange(len(secs))
        secs[k] = self.new(max(40, round(secs[k][1] * rng.uniform(0.8, 1.3))))
        bible.versions.append((self.now, secs))
        self.bible_edits.append((self.now, s, k))

    def _on_session(self, _: object) -> None:
        """An editor opens a chat on a show, pasting one of its latest episodes half the
        time."""
        rng, s = self.rng, self.busy_show()
        out = [e for e in self.archive.shows[s].episodes
               if self.archive.episodes[e].published <= self.now][-5:]
        e = rng.choice(out) if out and rng.random() < ATTACH else None
        pasted = list(self.archive.episodes[e].text.current) if e is not None else []
        self.sessions.append(Session(s, e, pasted, clipped_length(rng, *TURNS)))
        self.at(self.now, "turn", len(self.sessions) - 1)

    def _on_turn(self, n: int) -> None:
        """A turn: system prompt, style guide, the bible as it stands, the pasted transcript,
        the history, the message; the reply joins the history and the editor may come
        back."""
        ses, rng = self.sessions[n], self.rng
        msg = self.new(clipped_length(rng, *MESSAGE))
        segs = [self.system["editor"], *self.guide, *self.archive.shows[ses.show].bible.at(
            self.now), *ses.pasted, *ses.history, msg]
        ses.sent.append(self.emit("editor", n, len(ses.sent), segs))
        reply = self.new(clipped_length(rng, *REPLY))
        ses.history += [msg, reply]
        ses.turns -= 1
        if ses.turns <= 0 or tokens(segs) + reply[1] > MAX_CONTEXT:
            return
        gap = reply[1] / RATE + rng.lognormvariate(0.0, THINK[1]) * THINK[0]
        if rng.random() < AWAY[0]:
            gap += rng.uniform(*AWAY[1]) * MINUTE
        self.at(self.now + gap, "turn", n)

    def _on_search(self, _: object) -> None:
        """A producer picks an episode that has chapters: a recent one half the time, else
        any by popularity."""
        arc, rng, t = self.archive, self.rng, self.now

        def ok(e: int) -> bool:
            return arc.episodes[e].chapters_at(t) is not None and arc.episodes[e].published <= t

        recent = [e for s in arc.shows for e in s.episodes[-3:]
                  if ok(e) and t - arc.episodes[e].published < RECENT[1] * HOUR]
        e = rng.choice(recent) if recent and rng.random() < RECENT[0] else arc.popular(rng, ok)
        self.searches.append(Search(e, clipped_length(rng, *QUESTIONS)))
        self.at(t, "question", len(self.searches) - 1)

    def _on_question(self, n: int) -> None:
        """A question: the clip tool's system prompt, the transcript as it stands, the
        episode's current chapters, the question."""
        srch, rng = self.searches[n], self.rng
        ep = self.archive.episodes[srch.episode]
        segs = [self.system["clip"], *ep.text.current, ep.chapters_at(self.now),
                self.new(clipped_length(rng, *QUESTION))]
        srch.sent.append(self.emit("clip", n, len(srch.sent), segs))
        srch.questions -= 1
        if srch.questions > 0:
            self.at(self.now + rng.uniform(*BETWEEN), "question", n)
