"""The clock, the image tokens and the catalog, video and document tenants of bench.heldout's
``vision_mix`` shape; bench/heldout_vision.py's docstring states what each part models and
its parameters, and adds the consumer assistant. Every handler sends at most one request."""

from __future__ import annotations

import bisect
import itertools
import math
import random
from dataclasses import dataclass

from bench.heldout_fewshot import EventState, Segment, clipped_length

Length = tuple[float, float, int, int]  # lognormal median and sigma, clipped to lo..hi
Profile = tuple[float, ...]  # relative arrival rate for each local hour 0..23
TILE = 256  # tokens a 448x448 tile becomes (after pixel shuffle)
WRAP = 2  # the <img> and </img> tokens around an image's tiles
LABEL = 4  # a video frame's "Frame3: " label
START_HOUR = 18  # local time at the trace's start
DAY = 86400.0
RATE = 50.0  # tokens a second one sequence decodes at
MIN_PER_DAY = 4.0  # a stream's rate when scaled down, at least
REPLY: Length = (120, 0.8, 10, 800)  # a catalog, video or form answer (tokens)
# catalog
CATALOG = 800  # products in this replica's shard of the catalog at the start (scaled)
PRODUCT_TILES = ((1, 0.85), (4, 0.15))  # the service's 448-px variant, or a 2x2 lifestyle shot
PRODUCT_TEXT: Length = (60, 0.6, 15, 300)  # title, brand, bullet points
USER_Q: Length = (14, 0.6, 3, 120)  # a shopper's or a document reviewer's question
SHOP_PER_DAY = 2900  # shopper questions (scaled)
NEW_PER_DAY = 75  # new products a day, 08:00..24:00 (scaled)
ZIPF = 1.0  # product popularity by rank
DRIFT_EVERY, DRIFT_TOP, DRIFT_SWAPS = 3600.0, 100, 12  # an hour: 12 of the top 100 move
PROMOTE = 30  # a new product enters the ranking within the top 30
INGEST = ((600, 1100), (80, 200), (200, 500))  # tag (taxonomy), caption, attributes (schema)
QA_TEMPLATE = (150, 350)
REINDEX_AT, REINDEX_GAP = 1.0, 3.0  # local hour the re-index starts; seconds a request
# video
FRAME = TILE + WRAP + LABEL  # one 448-px tile a frame, no thumbnail
WINDOW, STRIDE = 6, 3  # frames a request, frames between window starts (1 fps sampling)
CLIP: Length = (45, 0.7, WINDOW, 300)  # clip seconds = frames
VIDEO_PER_DAY = 32  # clips (scaled)
VIDEO_SYSTEM = (100, 200)
VIDEO_TASKS = 8  # task prompts (20..80 tokens) a job asks every window of its clip
REANALYSE = 0.3  # clips analysed again with another task
REANALYSE_AFTER = (3600.0, 1.0, 600.0, 12 * 3600.0)  # seconds after the first job's end
# documents
DOCS_PER_DAY = 120  # scanned documents (scaled)
PAGES: Length = (4, 0.8, 3, 30)  # multi-page documents (the other 35 % 1 page, 25 % 2)
A4, RECEIPT = 6, 3  # tiles of a page: 2x3 (A4 scan, 70 % of documents) or 1x3 (receipt)
MAX_PAGES = 5  # pages a request holds; longer documents are split into 8-page parts
OCR_SYSTEM = (250, 600)  # extraction instructions and the fields' JSON schema
PAGE_Q: Length = (30, 0.4, 12, 80)
REVIEW, REVIEWS = 0.25, (1, 3)  # documents a reviewer asks about later, and how often
REVIEW_AFTER = (1800.0, 1.3, 120.0, DAY)
SHOPPING: Profile = (0.4, 0.25, 0.15, 0.1, 0.1, 0.15, 0.3, 0.6, 0.9, 1.0, 1.1, 1.3, 1.6, 1.3,
                     1.1, 1.0, 1.0, 1.2, 1.5, 1.8, 2.0, 1.8, 1.3, 0.8)
MERCHANT: Profile = (0.0,) * 8 + (1.0,) * 16
VIDEO: Profile = (0.8,) * 8 + (1.2,) * 12 + (0.8,) * 4
OFFICE: Profile = (0.05,) * 7 + (0.5, 1.5, 2.0, 2.0, 2.0, 1.5, 2.0, 2.0, 2.0, 1.5, 1.0, 0.5,
                                 0.3, 0.2, 0.1, 0.05, 0.05)


def image_tokens(tiles: int) -> int:
    """Tokens of an image cut into ``tiles`` tiles, a thumbnail tile more when over one."""
    return TILE * (tiles + (tiles > 1)) + WRAP


def local_hour(t: float, start_hour: float = START_HOUR) -> float:
    """The local hour (0..24) at ``t`` seconds into a trace that starts at ``start_hour``."""
    return (start_hour + t / 3600.0) % 24


def lognormal(rng: random.Random, median: float, sigma: float, lo: float, hi: float) -> float:
    """Lognormal around ``median``, clipped to lo..hi."""
    return max(lo, min(hi, rng.lognormvariate(math.log(median), sigma)))


def next_arrival(rng: random.Random, now: float, per_day: float, profile: Profile,
                 start_hour: float = START_HOUR) -> float:
    """The next arrival after ``now`` of a Poisson stream of ``per_day`` a day on average
    whose rate follows ``profile`` by local hour (thinning; the trace starts at
    ``start_hour``)."""
    peak, mean = max(profile), sum(profile) / len(profile)
    top = per_day / DAY * peak / mean
    t = now
    while True:
        t += rng.expovariate(top)
        if rng.random() * peak < profile[int(local_hour(t, start_hour))]:
            return t


def pick(rng: random.Random, table: tuple[tuple[int, float], ...]) -> int:
    """A value of ``table`` ((value, weight), ...) by weight."""
    return rng.choices([v for v, _ in table], [w for _, w in table])[0]


@dataclass(frozen=True)
class Product:
    """A catalog product: its image and text, and when it arrived (-1: in the catalog at the
    start)."""

    image: Segment
    text: Segment
    born: float


@dataclass(frozen=True)
class Job:
    """A video job: the clip (frames) it analyses with one task prompt; ``first`` is the job
    it analyses the clip again after (None for a clip's first job)."""

    frames: tuple[Segment, ...]
    task: Segment
    first: int | None

    def windows(self) -> list[tuple[Segment, ...]]:
        """The frames of each window: WINDOW consecutive frames, starting every STRIDE."""
        n = len(self.frames)
        return [self.frames[w:w + WINDOW] for w in range(0, n - WINDOW + 1, STRIDE)]


@dataclass(frozen=True)
class Doc:
    """A scanned document: its pages in parts of at most MAX_PAGES, and its arrival."""

    parts: tuple[tuple[Segment, ...], ...]
    born: float


class VisionState(EventState):
    """The generator's clock (seconds), event heap, and the catalog, video and document
    tenants; bench/heldout_vision.py's state adds the consumer assistant."""

    def __init__(self, rng: random.Random, size: int, scale: float) -> None:
        super().__init__(rng, size, scale)
        new = self.new
        self.ingest = [new(rng.randint(*r)) for r in INGEST]
        self.qa = new(rng.randint(*QA_TEMPLATE))
        self.catalog = [self.product(-1.0) for _ in range(max(20, round(CATALOG * scale)))]
        self.ranking = list(range(len(self.catalog)))
        rng.shuffle(self.ranking)
        self.cdf = list(itertools.accumulate(1 / (r + 1) ** ZIPF
                                        for r in range(len(self.ranking))))
        self.reindex: list[int] = []  # the products the night's walk visits, in order
        self.video_system = new(rng.randint(*VIDEO_SYSTEM))
        self.tasks = [new(rng.randint(20, 80)) for _ in range(VIDEO_TASKS)]
        self.jobs: list[Job] = []
        self.ocr_system = new(rng.randint(*OCR_SYSTEM))
        self.docs: list[Doc] = []
        self.at(DRIFT_EVERY, "drift", None)
        self.at((REINDEX_AT - START_HOUR) % 24 * 3600.0, "reindex", None)
        for name in ARRIVALS:
            self.at(self.arrival(name), name, None)

    def arrival(self, name: str) -> float:
        """The next arrival of stream ``name`` (see ARRIVALS)."""
        per_day, profile = ARRIVALS[name]
        return next_arrival(self.rng, self.now, max(MIN_PER_DAY, per_day * self.scale), profile)

    def product(self, born: float) -> Product:
        """A new product: a 1-tile or 2x2 image and its text."""
        rng = self.rng
        image = self.new(image_tokens(pick(rng, PRODUCT_TILES)))
        return Product(image, self.new(clipped_length(rng, *PRODUCT_TEXT)), born)

    def _on_shop(self, _: object) -> None:
        """A shopper asks about a product (Zipf by its current rank): QA template + the
        product's image and text + the question."""
        n = len(self.ranking)
        r = min(bisect.bisect(self.cdf, self.rng.random() * self.cdf[n - 1]), n - 1)
        p = self.catalog[self.ranking[r]]
        q = self.new(clipped_length(self.rng, *USER_Q))
        self.send("shop", self.ranking[r], 0, [self.qa, p.image, p.text, q])
        self.at(self.arrival("shop"), "shop", None)

    def _on_drift(self, _: object) -> None:
        """Trends: DRIFT_SWAPS of the top DRIFT_TOP ranks trade places with random ranks."""
        rng, ranking = self.rng, self.ranking
        for _ in range(DRIFT_SWAPS):
            a, b = rng.randrange(min(DRIFT_TOP, len(ranking))), rng.randrange(len(ranking))
            ranking[a], ranking[b] = ranking[b], ranking[a]
        self.at(self.now + DRIFT_EVERY, "drift", None)

    def _on_product(self, _: object) -> None:
        """A merchant adds a product: promoted into the top PROMOTE ranks, and ingested by
        its three tasks (tag, caption, attributes) one after another."""
        p = len(self.catalog)
        self.catalog.append(self.product(self.now))
        self.ranking.insert(self.rng.randrange(PROMOTE), p)
        self.cdf.append(self.cdf[-1] + 1 / (p + 1) ** ZIPF)
        self.at(self.now, "ingest", (p, 0))
        self.at(self.arrival("product"), "product", None)

    def _on_ingest(self, pt: tuple[int, int]) -> None:
        """An ingestion task: its template + the product's image and text."""
        p, task = pt
        product = self.catalog[p]
        self.send("ingest", p, task, [self.ingest[task], product.image, product.text])
        if task + 1 < len(INGEST):
            reply = clipped_length(self.rng, *REPLY)
            self.at(self.now + reply / RATE, "ingest", (p, task + 1))

    def _on_reindex(self, step: int | None) -> None:
        """The nightly re-index (once in the trace): the attributes task over every product
        in the catalog when it starts, in catalog order, one every REINDEX_GAP seconds."""
        if step is None:
            self.reindex, step = list(range(len(self.catalog))), 0
        p = self.catalog[self.reindex[step]]
        self.send("reindex", self.reindex[step], step, [self.ingest[2], p.image, p.text])
        if step + 1 < len(self.reindex):
            self.at(self.now + REINDEX_GAP, "reindex", step + 1)

    def _on_video(self, _: object) -> None:
        """A clip arrives: a job sends its windows one after another."""
        frames = tuple(self.new(FRAME) for _ in range(clipped_length(self.rng, *CLIP)))
        self.jobs.append(Job(frames, self.rng.choice(self.tasks), None))
        self.at(self.now, "window", (len(self.jobs) - 1, 0))
        self.at(self.arrival("video"), "video", None)

    def _on_window(self, jw: tuple[int, int]) -> None:
        """A window: the video system prompt + its frames + the job's task; after the last,
        a clip's first job may have it analysed again later with another task."""
        j, w = jw
        job = self.jobs[j]
        windows = job.windows()
        self.send("video", j, w, [self.video_system, *windows[w], job.task])
        after = self.now + clipped_length(self.rng, *REPLY) / RATE
        if w + 1 < len(windows):
            self.at(after + self.rng.uniform(0.2, 1.0), "window", (j, w + 1))
        elif job.first is None and self.rng.random() < REANALYSE:
            task = self.rng.choice([t for t in self.tasks if t != job.task])
            self.jobs.append(Job(job.frames, task, j))
            self.at(after + lognormal(self.rng, *REANALYSE_AFTER), "window",
                    (len(self.jobs) - 1, 0))

    def _on_doc(self, _: object) -> None:
        """A scanned document arrives: 1, 2 or PAGES pages, A4 or receipt tiles, split into
        parts; its extraction starts at once."""
        rng = self.rng
        u = rng.random()
        n = 1 if u < 0.35 else 2 if u < 0.6 else clipped_length(rng, *PAGES)
        tiles = A4 if rng.random() < 0.6 else RECEIPT
        pages = [self.new(image_tokens(tiles)) for _ in range(n)]
        parts = tuple(tuple(pages[i:i + MAX_PAGES]) for i in range(0, n, MAX_PAGES))
        self.docs.append(Doc(parts, self.now))
        self.at(self.now, "page", (len(self.docs) - 1, 0))
        self.at(self.arrival("doc"), "doc", None)

    def _on_page(self, dp: tuple[int, int]) -> None:
        """The question about page ``p`` of a document: OCR system + the pages of its part up
        to it + the question; after the last page a reviewer may come back."""
        d, p = dp
        doc = self.docs[d]
        part = doc.parts[p // MAX_PAGES]
        q = self.new(clipped_length(self.rng, *PAGE_Q))
        self.send("ocr", d, p, [self.ocr_system, *part[:p % MAX_PAGES + 1], q])
        after = self.now + clipped_length(self.rng, *REPLY) / RATE
        if p + 1 < sum(map(len, doc.parts)):
            self.at(after, "page", (d, p + 1))
        elif self.rng.random() < REVIEW:
            for k in range(self.rng.randint(*REVIEWS)):
                self.at(after + lognormal(self.rng, *REVIEW_AFTER), "review", (d, k))

    def _on_review(self, dk: tuple[int, int]) -> None:
        """A reviewer's question about a document: OCR system + its first part + question."""
        d, k = dk
        q = self.new(clipped_length(self.rng, *USER_Q))
        self.send("review", d, k, [self.ocr_system, *self.docs[d].parts[0], q])


ARRIVALS: dict[str, tuple[float, Profile]] = {
    "shop": (SHOP_PER_DAY, SHOPPING), "product": (NEW_PER_DAY, MERCHANT),
    "video": (VIDEO_PER_DAY, VIDEO), "doc": (DOCS_PER_DAY, OFFICE)}
