"""bench.heldout's ``news_desk`` shape, its world: one publisher's newsroom (eight desks, their
ongoing topics, the house style guide, the coverage-priorities memo rewritten at each news
meeting, the archive), the stories (staff stories filed, edited, published and updated; wire
stories arriving in numbered versions; yesterday's stories still on the site), the news events
of the two days (a quiet day's small breaks, a major breaking event, a planned big night) and
the event clock. See bench/heldout_news_desk.py's docstring for the numbers."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.heldout_fewshot import ClockedState, Segment, clipped_length
from bench.heldout_legal_parts import Versioned
from bench.heldout_meeting_parts import pick, poisson

HOUR, MINUTE, DAY = 3600.0, 60.0, 86400.0
END = 2 * DAY  # the clock: seconds from Tuesday 00:00 in the newsroom's time zone
DESKS = ("politics", "business", "world", "metro", "sports", "culture", "tech", "opinion")
DESK_SHARE = (0.18, 0.15, 0.15, 0.17, 0.14, 0.09, 0.07, 0.05)
TOPICS = 90  # ongoing topics, a desk each; popularity Zipf(1.1) by a random rank
GUIDE = (2400, 6)  # tokens of the house style guide, in sections
NOTE = (320, 0.4, 150, 600)  # tokens of a style note added for a major breaking event
MEMO = (120, 0.4, 50, 300)  # tokens of each desk's section of the priorities memo
MEETINGS = (9.5, 16.0)  # local hours of the news meetings that rewrite the memo
REWRITTEN = (3, 8)  # memo sections a meeting rewrites
PARA = (75, 0.5, 20, 300)  # tokens of a paragraph
STAFF_PARAS = (13, 0.45, 4, 45)  # paragraphs of a staff story's first filed version
WIRE_PARAS = (8, 0.6, 1, 35)  # paragraphs of a wire story's first version
ARCHIVE = 5000  # archive articles at scale 1.0 (at least 400)
CHUNKS = (3, 0.5, 1, 8)  # retrieval chunks of an archive article
CHUNK = (420, 0.25, 200, 700)  # tokens of a chunk
DEK = (100, 0.3, 50, 180)  # tokens of a published headline and summary
HALF_LIFE = 8 * HOUR  # a published story's news value halves over it
TOP_WEIGHT = 2.6  # a story this newsworthy is a top story (translated)
LANGS = ((3, 0.3), (4, 0.35), (5, 0.2), (6, 0.15))  # languages of the translated editions
LANG_GUIDE = (1500, 0.4, 700, 3000)  # tokens of a language's glossary and style notes
SCENARIOS = ("scheduled", "breaking", "quiet")  # by seed % 3
# how busy each local hour is: the newsroom, the readers, the wire services
NEWSROOM = (0.05, 0.03, 0.03, 0.03, 0.05, 0.15, 0.35, 0.6, 0.85, 1.0, 1.0, 1.0, 0.9, 1.0,
            1.0, 1.0, 0.95, 0.8, 0.6, 0.45, 0.35, 0.3, 0.2, 0.1)
READERS = (0.3, 0.2, 0.1, 0.1, 0.1, 0.2, 0.5, 0.9, 1.0, 0.8, 0.7, 0.7, 0.9, 0.8, 0.7, 0.7,
           0.7, 0.8, 0.9, 1.0, 1.0, 1.0, 0.8, 0.5)
WIRE_HOURS = (0.3, 0.3, 0.3, 0.3, 0.35, 0.45, 0.6, 0.9, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0,
              1.0, 1.0, 1.0, 0.9, 0.75, 0.7, 0.6, 0.5, 0.4)
UPDATE_OPS = {"wire": (("add", 0.4), ("top", 0.35), ("edit", 0.25)),
              "staff": (("add", 0.4), ("top", 0.45), ("edit", 0.15)),
              "event": (("add", 0.35), ("top", 0.55), ("edit", 0.1))}


@dataclass
class Story:
    """A story: staff, wire or prior (published before the clock), its desk, topic, news
    weight, text (paragraphs per version) and how each version came ("file", "add", "top",
    "edit"); when it was published (inf: not, or a wire story not picked up), its headline
    and summary as (time, segment) per headline run, its event (-1: none), whether it is a
    top story, the source documents and archive chunks a fact-check reads."""

    source: str
    desk: int
    topic: int
    weight: float
    text: Versioned
    ops: list[str]
    published: float = math.inf
    deks: list[tuple[float, Segment]] = field(default_factory=list)
    event: int = -1
    top: bool = False
    docs: list[Segment] = field(default_factory=list)
    archive: list[Segment] = field(default_factory=list)


@dataclass
class Event:
    """A news event: ``major`` (a blog, a memo note) or a small break; its start, peak
    intensity, decay (seconds), plateau before decaying (a planned night), when its blog
    opens (seconds from the start, before it for a planned night), its topic, the style
    note it adds (None: none), its main staff story, flash wire story and blog (-1 until
    made)."""

    major: bool
    start: float
    peak: float
    tau: float
    plateau: float
    opens: float
    topic: int
    note: Segment | None = None
    story: int = -1
    wire: int = -1
    blog: int = -1

    def intensity(self, t: float) -> float:
        """How hard the newsroom is hit at ``t`` (0 before the start)."""
        if t < self.start:
            return 0.0
        x = t - self.start - self.plateau
        return self.peak if x <= 0 else self.peak * math.exp(-x / self.tau)


def paragraphs(rng: random.Random, new: Callable, n: int) -> list[Segment]:
    """``n`` new paragraphs."""
    return [new(clipped_length(rng, *PARA)) for _ in range(n)]


def revise(rng: random.Random, new: Callable, paras: list[Segment], op: str) -> list[Segment]:
    """A story's next version: "add" appends 1..4 paragraphs; "top" writes a new top (the
    first 1..3 paragraphs replaced by 1..3 new, 0..2 appended); "edit" rewrites 1..3
    paragraphs anywhere. Everything from the first changed paragraph on is new."""
    if op == "add":
        return paras + paragraphs(rng, new, rng.randint(1, 4))
    if op == "top":
        k = rng.randint(1, min(3, len(paras)))
        tail = paragraphs(rng, new, rng.randint(0, 2))
        return paragraphs(rng, new, rng.randint(1, 3)) + paras[k:] + tail
    out = list(paras)
    for k in rng.sample(range(len(out)), min(len(out), rng.randint(1, 3))):
        out[k] = new(clipped_length(rng, *PARA))
    return out


def zipf_weights(rng: random.Random, n: int, s: float) -> list[float]:
    """Weights 1 / rank^s for ``n`` items, ranks shuffled."""
    return [r ** -s for r in rng.sample(range(1, n + 1), n)]


class World(ClockedState):
    """The newsroom's content and clock; ``emit`` sends a request. bench.heldout_newsd_jobs'
    Jobs builds on it."""

    END = END

    def __init__(self, rng: random.Random, scale: float, scenario: str) -> None:
        super().__init__(rng, 0, scale)
        self.scenario = scenario
        new = self.new
        self.guide = Versioned([(-math.inf, [new(GUIDE[0] // GUIDE[1])
                                             for _ in range(GUIDE[1])])])
        self.memo = Versioned([(-math.inf, [new(clipped_length(rng, *MEMO)) for _ in DESKS])])
        self.topic_desk = [rng.choices(range(len(DESKS)), DESK_SHARE)[0] for _ in range(TOPICS)]
        self.topic_weight = zipf_weights(rng, TOPICS, 1.1)
        self.langs = [new(clipped_length(rng, *LANG_GUIDE)) for _ in range(pick(rng, LANGS))]
        self.archive: list[list[Segment]] = [[] for _ in range(TOPICS)]  # chunks per topic
        for t in rng.choices(range(TOPICS), self.topic_weight, k=max(400, round(ARCHIVE * scale))):
            self.archive[t] += [new(clipped_length(rng, *CHUNK))
                                for _ in range(clipped_length(rng, *CHUNKS))]
        self.stories: list[Story] = []
        self.news: list[Event] = []
        self._hot_key, self._hot = None, ([], [])
        for d in (0, 1):
            for h in MEETINGS:
                self.at(d * DAY + h * HOUR, "meeting", None)

    def arrivals(self, per_day: float, curve: tuple, name: str, payload: object,
                 days: tuple[int, ...] = (0, 1)) -> None:
        """``per_day`` x scale events (Poisson) each day, at local hours by ``curve``."""
        total = sum(curve)
        for d in days:
            for h, w in enumerate(curve):
                for _ in range(poisson(self.rng, per_day * self.scale * w / total)):
                    when = (d * 24 + h + self.rng.random()) * HOUR
                    if when >= 0:
                        self.at(when, name, payload)

    def topic_of(self, desk: int | None) -> int:
        """A topic by popularity (of ``desk`` if one is given and it has any)."""
        ts = [t for t in range(TOPICS) if desk is None or self.topic_desk[t] == desk]
        ts = ts or list(range(TOPICS))
        return self.rng.choices(ts, [self.topic_weight[t] for t in ts])[0]

    def story(self, source: str, topic: int, weight: float, paras: list[Segment],
              event: int = -1) -> int:
        """A new story filed now (its first version, "file")."""
        s = Story(source, self.topic_desk[topic], topic, weight,
                  Versioned([(self.now, paras)]), ["file"], event=event)
        s.top = weight >= TOP_WEIGHT
        self.stories.append(s)
        return len(self.stories) - 1

    def version(self, n: int, op: str) -> list[Segment]:
        """Story ``n``'s next version, made now by ``op`` (see ``revise``)."""
        s = self.stories[n]
        paras = revise(self.rng, self.new, s.text.current, op)
        s.text.versions.append((self.now, paras))
        s.ops.append(op)
        return paras

    def dek(self, n: int) -> Segment:
        """Story ``n``'s headline and summary as last written (a new one if none yet)."""
        s = self.stories[n]
        if not s.deks:
            s.deks.append((self.now, self.new(clipped_length(self.rng, *DEK))))
        return s.deks[-1][1]

    def score(self, n: int) -> float:
        """Story ``n``'s news value now: its weight, halving every HALF_LIFE since published."""
        s = self.stories[n]
        return s.weight * 0.5 ** ((self.now - s.published) / HALF_LIFE)

    def hot(self) -> tuple[list[int], list[float]]:
        """The published stories with their news value now (refreshed every 10 minutes), those
        of the last 36 hours."""
        key = int(self.now // (10 * MINUTE))
        if key != self._hot_key:
            ids = [n for n, s in enumerate(self.stories)
                   if s.published <= self.now and self.now - s.published < 36 * HOUR]
            self._hot_key, self._hot = key, (ids, [self.score(n) for n in ids])
        return self._hot

    def hot_story(self) -> int | None:
        """A published story by its news value now (None if there is none)."""
        ids, scores = self.hot()
        return self.rng.choices(ids, scores)[0] if ids else None

    def intensity(self) -> float:
        """The events' intensities now, summed."""
        return sum(e.intensity(self.now) for e in self.news)

    def _on_meeting(self, _: None) -> None:
        """A news meeting rewrites some desks' sections of the priorities memo."""
        secs = list(self.memo.current)
        for k in self.rng.sample(range(len(secs)), self.rng.randint(*REWRITTEN)):
            secs[k] = self.new(clipped_length(self.rng, *MEMO))
        self.memo.versions.append((self.now, secs))

    def memo_note(self) -> None:
        """A major event's note goes to the top of the priorities memo."""
        note = self.new(clipped_length(self.rng, *MEMO))
        self.memo.versions.append((self.now, [note, *self.memo.current]))

    def style_note(self, e: int) -> None:
        """The standards editor adds event ``e``'s style note to the guide."""
        ev = self.news[e]
        ev.note = self.new(clipped_length(self.rng, *NOTE))
        self.guide.versions.append((self.now, [*self.guide.current, ev.note]))
