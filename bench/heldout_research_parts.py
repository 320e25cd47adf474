"""The clock, the system prompts and their date line, the web (evergreen topics and news
stories), and the monitor and PDF parts of bench.heldout's ``deep_research`` shape;
bench/heldout_research.py's docstring states what each part models and its parameters, and
adds the answer threads and the research sessions. Every handler sends at most one request."""

from __future__ import annotations

import bisect
import itertools
import math
import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import EventState, Segment, clipped_length
from bench.heldout_gateway_parts import first_tokens
from bench.heldout_vision_parts import Length, Profile, lognormal, next_arrival

DAY = 86400.0
HOUR = 3600.0
START_HOUR = 6  # local hour at the trace's start
RATE = 50.0  # tokens a second a reply decodes at
# by local hour: the answer engine (work and evenings), research and uploads (office hours),
# news stories breaking
SEARCH: Profile = (0.35, 0.22, 0.15, 0.1, 0.1, 0.15, 0.35, 0.7, 1.1, 1.35, 1.45, 1.45, 1.4,
                   1.45, 1.5, 1.45, 1.35, 1.25, 1.15, 1.15, 1.15, 1.05, 0.85, 0.55)
WORK: Profile = (0.08, 0.05, 0.04, 0.04, 0.04, 0.06, 0.15, 0.45, 1.2, 1.8, 2.0, 1.9, 1.5,
                 1.8, 1.95, 1.85, 1.6, 1.2, 0.8, 0.6, 0.55, 0.5, 0.3, 0.15)
NEWS: Profile = (0.3, 0.2, 0.2, 0.2, 0.3, 0.5, 0.9, 1.3, 1.5, 1.5, 1.5, 1.4, 1.3, 1.3, 1.4,
                 1.4, 1.3, 1.2, 1.1, 1.0, 0.9, 0.8, 0.6, 0.4)
# system prompts: (head tokens lo, hi); each is followed by the day's date line
PROMPTS = {"answer": (600, 1500), "related": (250, 500), "orchestrator": (1500, 3500),
           "agent": (2500, 6000), "cite": (400, 900), "monitor": (600, 1200)}
DATE = (10, 20)  # tokens of "Current date: ..." (new content at local midnight)
# the web
EXCERPT: Length = (160, 0.6, 40, 1000)  # a retrieved page's excerpt
TOPICS, TOPIC_ZIPF = 3000, 0.9  # evergreen topics (scaled, at least 30) and their popularity
POOL = (8, 40)  # pages a topic's searches draw from, ranked
PAGE_ZIPF = 1.5  # a page's chance to be picked next by rank among those left
STORIES_PER_DAY, STORY_FLOOR = 26, 3.0  # news stories breaking a day (scaled, at least 3)
FIRST_ARTICLES, ARTICLE_GAP = (3, 6), (1800.0, 0.8, 300.0, 3 * HOUR)  # at birth; then apart
LIVE = (2 * HOUR, 10 * HOUR)  # how long new articles keep appearing
INTEREST: Length = (25, 0.9, 3, 500)  # a story's search threads (see _on_story)
RAMP, FADE = (0.3 * HOUR, 2 * HOUR), (3 * HOUR, 0.6, HOUR, 10 * HOUR)  # uniform; mean (exp)
# PDF uploads
PDFS_PER_DAY = 30  # scaled, at least 4 a day
PDF: Length = (12000, 0.9, 2000, 100000)  # the document's text
QUESTION: Length = (14, 0.9, 3, 250)  # a user's question to the answer engine or a PDF
ANSWER: Length = (250, 0.6, 60, 1500)
PDF_MORE, PDF_GAP = 0.5, (120.0, 1.0, 15.0, 1800.0)  # another question; seconds after reply
# monitors
MONITORS, HOURLY = 60, 0.25  # saved queries (scaled, at least 3, one hourly); hourly share
MORNING, MORNING_HOURS = 0.7, (5, 9)  # daily monitors that run in the morning digest window
WATCHED = (2, 6)  # pages a monitor tracks
WATCHED_PAGE: Length = (800, 0.7, 200, 4000)
VOLATILITY = {3600.0: (0.3, 1.0, 0.02, 3.0), DAY: (0.05, 1.2, 0.002, 1.0)}  # changes an hour
SAVED_QUERY: Length = (60, 0.7, 15, 300)
DIGEST: Length = (350, 0.5, 100, 1200)  # a run's digest, sent with the next run


def local_hour(t: float) -> float:
    """The local hour (0..24) at ``t`` seconds into the trace."""
    return (START_HOUR + t / HOUR) % 24


def local_day(t: float) -> int:
    """The local calendar day at ``t`` (0 is the trace's first)."""
    return int((START_HOUR * HOUR + t) // DAY)


@dataclass
class Story:
    """A news story: when it broke, its articles (publish time, excerpt) in publishing order
    and the times of its search threads."""

    birth: float
    articles: list[tuple[float, Segment]]
    threads: list[float]

    def pool(self, t: float) -> list[Segment]:
        """The articles published by ``t``, newest first (news search ranks by freshness)."""
        return [seg for at, seg in reversed(self.articles) if at <= t]


@dataclass
class Monitor:
    """A saved research query re-run every ``every`` seconds: its query, the pages it tracks
    (current version's segments) and their change rates (an hour), the last digest, and per
    run the request index, per page the tokens kept when it changed since the last run (None
    if not), and the pages as sent."""

    query: Segment
    every: float
    pages: list[list[Segment]]
    rates: list[float]
    digest: Segment | None = None
    runs: list[int] = field(default_factory=list)
    changes: list[list[int | None]] = field(default_factory=list)
    sent: list[list[list[Segment]]] = field(default_factory=list)


@dataclass
class Upload:
    """A PDF upload: the document and the questions and answers so far."""

    document: Segment
    history: list[Segment] = field(default_factory=list)


class ResearchBase(EventState):
    """The generator's clock, prompts, date lines, web, monitors and PDF uploads;
    bench/heldout_research.py's state adds the answer threads and research sessions."""

    def __init__(self, rng: random.Random, size: int, scale: float) -> None:
        super().__init__(rng, size, scale)
        self.heads = {k: self.new(rng.randint(*v)) for k, v in PROMPTS.items()}
        self.dates: dict[int, Segment] = {}
        n = max(30, round(TOPICS * scale))
        self.topic_cdf = list(itertools.accumulate(1 / (r + 1) ** TOPIC_ZIPF for r in range(n)))
        self.pools: dict[int, list[Segment]] = {}
        self.stories: list[Story] = []
        self.uploads: list[Upload] = []
        self.monitors = [self._monitor(m) for m in range(max(3, round(MONITORS * scale)))]
        self.at(self.arrive(STORIES_PER_DAY, STORY_FLOOR, NEWS), "story", None)
        self.at(self.arrive(PDFS_PER_DAY, 4.0, WORK), "pdf", None)

    def arrive(self, per_day: float, floor: float, profile: Profile) -> float:
        """The next arrival of a stream of ``per_day`` a day (scaled, at least ``floor``)."""
        return next_arrival(self.rng, self.now, max(floor, per_day * self.scale), profile,
                            START_HOUR)

    def system(self, kind: str) -> list[Segment]:
        """A system prompt as sent now: its head, then today's date line."""
        day = local_day(self.now)
        if day not in self.dates:
            self.dates[day] = self.new(self.rng.randint(*DATE))
        return [self.heads[kind], self.dates[day]]

    def excerpt(self) -> Segment:
        """A page excerpt never retrieved before."""
        return self.new(clipped_length(self.rng, *EXCERPT))

    def topic(self) -> int:
        """An evergreen topic, Zipf by popularity rank."""
        cdf = self.topic_cdf
        return min(len(cdf) - 1, bisect.bisect_left(cdf, self.rng.random() * cdf[-1]))

    def pool(self, topic: int) -> list[Segment]:
        """An evergreen topic's ranked pages (made when first searched)."""
        if topic not in self.pools:
            self.pools[topic] = [self.excerpt() for _ in range(self.rng.randint(*POOL))]
        return self.pools[topic]

    def retrieve(self, pool: list[Segment], k: int, fresh: float) -> list[Segment]:
        """``k`` search results in rank order: each a page never seen before with chance
        ``fresh`` (or when the pool is used up), else the next pick from the pool, Zipf by
        rank among the pages not yet picked."""
        rng, left, out = self.rng, list(range(len(pool))), []
        for _ in range(k):
            if not left or rng.random() < fresh:
                out.append(self.excerpt())
                continue
            i = rng.choices(range(len(left)), [1 / (r + 1) ** PAGE_ZIPF for r in left])[0]
            out.append(pool[left.pop(i)])
        return out

    def _on_story(self, _: object) -> None:
        """A news story breaks: its articles' publish times and its threads' times (see
        _news_time) are planned; each thread is a "news" event. Its threads
        scale as the trace does over the stories' (floored) rate, at least 2."""
        self.at(self.arrive(STORIES_PER_DAY, STORY_FLOOR, NEWS), "story", None)
        rng, birth = self.rng, self.now
        articles = [(birth, self.excerpt()) for _ in range(rng.randint(*FIRST_ARTICLES))]
        t, end = birth, birth + rng.uniform(*LIVE)
        while (t := t + lognormal(rng, *ARTICLE_GAP)) < end:
            articles.append((t, self.excerpt()))
        ramp, fade = rng.uniform(*RAMP), lognormal(rng, *FADE)
        share = self.scale * STORIES_PER_DAY / max(STORY_FLOOR, STORIES_PER_DAY * self.scale)
        count = max(2, round(clipped_length(rng, *INTEREST) * share))
        times = sorted(self._news_time(ramp, fade) for _ in range(count))
        self.stories.append(Story(birth, articles, times))
        for t in times:
            self.at(t, "news", len(self.stories) - 1)

    def _news_time(self, ramp: float, fade: float) -> float:
        """A story's thread: its birth (now) + a uniform share of the ramp + an exponential
        fade, drawn again until the search profile at that hour accepts it (thinning: news
        is read by day)."""
        rng, peak = self.rng, max(SEARCH)
        while True:
            t = self.now + ramp * rng.random() + rng.expovariate(1 / fade)
            if rng.random() * peak < SEARCH[int(local_hour(t))]:
                return t

    def _monitor(self, m: int) -> Monitor:
        """Monitor ``m`` (the first is hourly): its query, pages and schedule; its first run
        is planned (an hourly one at a minute of the hour, a daily one at a local hour)."""
        rng = self.rng
        every = HOUR if m == 0 or rng.random() < HOURLY else DAY
        pages = [[self.new(clipped_length(rng, *WATCHED_PAGE))]
                 for _ in range(rng.randint(*WATCHED))]
        rates = [lognormal(rng, *VOLATILITY[every]) for _ in pages]
        if every == HOUR:
            first = rng.uniform(0.0, HOUR)
        else:
            hour = rng.uniform(*MORNING_HOURS) if rng.random() < MORNING else rng.uniform(0, 24)
            first = (hour - START_HOUR) % 24 * HOUR
        self.at(first, "monitor", m)
        return Monitor(self.new(clipped_length(rng, *SAVED_QUERY)), every, pages, rates)

    def _on_monitor(self, m: int) -> None:
        """A monitor run: its pages that changed since the last run (each by its rate) keep
        their first tokens up to a uniform cut and are new from there; monitor prompt + query
        + pages + the last digest; the new digest is kept for the next run."""
        rng, mon = self.rng, self.monitors[m]
        self.at(self.now + mon.every, "monitor", m)
        cuts: list[int | None] = []
        for p, page in enumerate(mon.pages):
            cut = None
            if mon.runs and rng.random() < 1 - math.exp(-mon.rates[p] * mon.every / HOUR):
                total = sum(n for _, n in page)
                cut = rng.randrange(total)
                grown = max(16, round((total - cut) * rng.uniform(0.8, 1.25)))
                mon.pages[p] = first_tokens(page, cut) + [self.new(grown)]
            cuts.append(cut)
        mon.changes.append(cuts)
        mon.sent.append(list(mon.pages))
        mon.runs.append(len(self.out))
        digest = [mon.digest] if mon.digest else []
        self.send("monitor", m, len(mon.runs) - 1,
                  [*self.system("monitor"), mon.query, *itertools.chain(*mon.pages), *digest])
        mon.digest = self.new(clipped_length(rng, *DIGEST))

    def _on_pdf(self, _: object) -> None:
        """A PDF upload and the user's first question about it."""
        self.at(self.arrive(PDFS_PER_DAY, 4.0, WORK), "pdf", None)
        self.uploads.append(Upload(self.new(clipped_length(self.rng, *PDF))))
        self._on_ask(len(self.uploads) - 1)

    def _on_ask(self, u: int) -> None:
        """A question about an upload: answer prompt + document + earlier questions and
        answers + the question; another follows PDF_MORE of the time."""
        rng, up = self.rng, self.uploads[u]
        question = self.new(clipped_length(rng, *QUESTION))
        self.send("pdf", u, len(up.history) // 2,
                  [*self.system("answer"), up.document, *up.history, question])
        answer = clipped_length(rng, *ANSWER)
        up.history += [question, self.new(answer)]
        if rng.random() < PDF_MORE:
            self.at(self.now + answer / RATE + lognormal(rng, *PDF_GAP), "ask", u)

