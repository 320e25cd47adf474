"""bench.heldout's ``media_pipeline`` shape, its world: a media company's archive of shows
(podcasts, TV series, daily news shows, short-form clip channels), each with a show bible, a
glossary of names and the languages it is subtitled in, and episodes whose transcripts come
in sections; episodes published through the day join it. The event clock and the generator's
base that sends requests. See bench/heldout_media_pipeline.py's docstring for the numbers."""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.heldout_fewshot import ClockedState, Segment, clipped_length
from bench.heldout_legal_parts import Versioned
from bench.heldout_meeting_parts import poisson

HOUR, DAY, MINUTE = 3600.0, 86400.0, 60.0
END = 2 * DAY  # the trace ends at the second midnight
SHOWS = 30
ARCHIVE = 1800  # back-catalog episodes at scale 1.0 (x 0.85..1.15 by seed, at least 30)
# kind -> (share of shows, weight of its shows' back catalogs, transcript tokens (median,
# sigma, lo, hi), new episodes a day per show at scale 1.0, release hours)
KINDS = {"podcast": (0.35, 1.0, (9000, 0.35, 2500, 22000), 0.3, (5.0, 9.0)),
         "series": (0.2, 0.6, (6000, 0.25, 2000, 11000), 0.15, (6.0, 8.0)),
         "news": (0.15, 2.0, (3500, 0.3, 1200, 8000), 1.5, (5.0, 19.0)),
         "clips": (0.3, 3.0, (600, 0.5, 120, 2500), 4.0, (8.0, 21.0))}
SECTION = (1200, 0.25, 600, 2000)  # tokens of a transcript section (the ASR's parts)
BIBLE = (4000, 0.5, 1200, 12000)  # tokens of a show bible (characters, canon, tone)
BIBLE_SECTION = 600  # tokens per section of a show bible
GLOSSARY = (500, 0.5, 120, 1500)  # tokens of a show's glossary (names, places, terms)
LANGUAGES = 8  # subtitle languages; a show is subtitled in 2..6 of them
AUDIENCE = 1.0  # Zipf exponent of the shows' audiences (by a random rank)
EPISODE_SPREAD = 1.3  # Pareto shape of an episode's popularity within its show
NEW_BOOST = 10.0  # a new episode's popularity x this


@dataclass
class Show:
    """A show: its kind, audience weight, bible (versions as writers edit it), glossary,
    subtitle languages and episodes (ids, oldest first)."""

    kind: str
    audience: float
    bible: Versioned
    glossary: Segment
    languages: list[int]
    episodes: list[int] = field(default_factory=list)


@dataclass
class Episode:
    """An episode: its show, transcript (its versions as corrections land; sections), when
    it was published (-inf for the back catalog), the chapters clip search reads as
    (since, chapters) versions (the old metadata's, then each chapters run's) and, per stage,
    the cue version of its last run."""

    show: int
    text: Versioned
    published: float = float("-inf")
    chapters: list[tuple[float, Segment]] = field(default_factory=list)
    last: dict[int, int] = field(default_factory=dict)

    def chapters_at(self, t: float) -> Segment | None:
        """The chapters as they stood at ``t`` (None before the first run)."""
        got = [c for since, c in self.chapters if since <= t]
        return got[-1] if got else None


def cut(rng: random.Random, new: Callable, total: int,
        section: tuple = SECTION) -> list[Segment]:
    """``total`` tokens of new content in sections of about ``section`` tokens
    (clipped_length's median, sigma, low, high)."""
    out = []
    while total > 0:
        n = clipped_length(rng, *section)
        n = total if total - n < section[2] // 2 else n
        out.append(new(n))
        total -= n
    return out


def make_show(rng: random.Random, new: Callable, kind: str, audience: float) -> Show:
    """A show of ``kind``: its bible in sections, glossary and 2..6 subtitle languages."""
    total = clipped_length(rng, *BIBLE)
    k = max(1, round(total / BIBLE_SECTION))
    bible = [new(total // k + (i < total % k)) for i in range(k)]
    langs = sorted(rng.sample(range(LANGUAGES), rng.randint(2, 6)))
    return Show(kind, audience, Versioned([(-1e18, bible)]), new(clipped_length(rng, *GLOSSARY)),
                langs)


@dataclass
class Archive:
    """Every show and episode (index = id), the back catalog in the order the re-processing
    job walks it (show by show in the backlog's order, oldest episode first) and the
    cumulative popularity by episode id."""

    shows: list[Show]
    episodes: list[Episode]
    backlog: list[int]
    cum: list[float]

    def popular(self, rng: random.Random, ok: Callable[[int], bool]) -> int:
        """An episode by popularity among those ``ok`` accepts (at least one must)."""
        while True:
            e = bisect.bisect_left(self.cum, rng.random() * self.cum[-1])
            if ok(e):
                return e

    def add(self, rng: random.Random, ep: Episode, boost: float = 1.0) -> int:
        """Add ``ep`` to its show (newest) with a popularity draw x ``boost``; its id."""
        e = len(self.episodes)
        self.episodes.append(ep)
        self.shows[ep.show].episodes.append(e)
        weight = self.shows[ep.show].audience * min(50.0, rng.paretovariate(EPISODE_SPREAD))
        self.cum.append((self.cum[-1] if self.cum else 0.0) + weight * boost)
        return e


def archive(rng: random.Random, new: Callable, scale: float) -> Archive:
    """SHOWS shows of random kinds and Zipf audiences, ARCHIVE x scale (x 0.85..1.15)
    back-catalog episodes among them (Zipf(0.8) sizes x their kind's weight), each with a
    transcript and the chapters the old metadata run made."""
    kinds = rng.choices(list(KINDS), [k[0] for k in KINDS.values()], k=SHOWS)
    ranks = rng.sample(range(1, SHOWS + 1), SHOWS)
    shows = [make_show(rng, new, kind, r ** -AUDIENCE) for kind, r in zip(kinds, ranks)]
    sizes = [r ** -0.8 * KINDS[kind][1] for kind, r in zip(kinds, rng.sample(ranks, SHOWS))]
    n = max(30, round(ARCHIVE * scale * rng.uniform(0.85, 1.15)))
    counts = [0] * SHOWS
    for s in rng.choices(range(SHOWS), sizes, k=n):
        counts[s] += 1
    arc = Archive(shows, [], [], [])
    for s in rng.sample(range(SHOWS), SHOWS):  # the backlog's order
        for _ in range(counts[s]):
            length = clipped_length(rng, *KINDS[kinds[s]][2])
            ep = Episode(s, Versioned([(-1e18, cut(rng, new, length))]),
                         chapters=[(-1e18, new(chapter_tokens(rng, length)))])
            arc.backlog.append(arc.add(rng, ep))
    return arc


def chapter_tokens(rng: random.Random, transcript: int) -> int:
    """Tokens of the chapters a run writes for a ``transcript``-token episode."""
    return clipped_length(rng, max(60.0, transcript / 25), 0.3, 40, 800)


def tokens(segs: list[Segment]) -> int:
    return sum(n for _, n in segs)


class World(ClockedState):
    """The archive and the shows' releases on the event clock; ``emit`` sends a request.
    bench.heldout_media_jobs.Pipeline builds on it (through the desk)."""

    END = END

    def __init__(self, rng: random.Random, scale: float) -> None:
        super().__init__(rng, 0, scale)
        self.archive = archive(rng, self.new, scale)
        for day in (0.0, DAY):
            self.at(day + 4 * HOUR, "releases", None)

    def show_of(self, e: int) -> Show:
        return self.archive.shows[self.archive.episodes[e].show]

    def _on_releases(self, _: object) -> None:
        """The day's new episodes: each show's count (Poisson, x scale) at random times in
        its kind's release hours."""
        rng, day = self.rng, self.now // DAY * DAY
        for s, show in enumerate(self.archive.shows):
            _, _, _, rate, hours = KINDS[show.kind]
            for _ in range(poisson(rng, rate * self.scale)):
                self.at(day + rng.uniform(*hours) * HOUR, "publish", s)

    def _on_publish(self, s: int) -> None:
        """A new episode of show ``s`` is published (popular at once); the ingest pipeline
        takes it (``_on_ingest`` in bench.heldout_media_jobs)."""
        rng = self.rng
        length = clipped_length(rng, *KINDS[self.archive.shows[s].kind][2])
        ep = Episode(s, Versioned([(self.now, cut(rng, self.new, length))]), self.now)
        e = self.archive.add(rng, ep, NEW_BOOST)
        self.at(self.now, "ingest", ("ingest", e, 1, None))
