"""bench.heldout's ``vision_mix`` shape: one replica of a multimodal (vision-language) model
shared by four products: a consumer assistant, a product-catalog service, a video-analysis
tenant and a document-OCR tenant. Written after ``adaptive`` was frozen (at 50c6f47), by
someone who had not read the eviction policies; the workload is modelled on how such traffic
looks, not on any policy. Prompts are laid out in token segments and cut into 16-token blocks
by ``bench.heldout_fewshot.Blocks``; the router hashes a user, a product, a clip or a document
to a replica, and the trace is one replica's stream. Time is a clock in seconds from 18:00
local time; requests are in arrival order (replies decode at 50 tokens a second).

The model (InternVL-style): an image is cut into 448x448 tiles by its resolution and aspect
(1..6 tiles), each 256 tokens, plus a 448-px thumbnail tile when it takes more than one, and
<img></img> around them (258, 770, 1026, 1282 or 1794 tokens for 1, 2, 3, 4 or 6 tiles). The
same image bytes give the same tokens, so an image's blocks are shared only behind the same
prefix; an image that is re-encoded (a screenshot of it, a resize) is new content.

What each part models (rates are per day at scale 1.0, Poisson, shaped by local hour):

- consumer assistant: 900 new conversations a day (evening peak, night trough 0.2 of mean).
  Each is behind one of 2 system prompts (default 150..350 tokens, 75 %; a homework-helper
  mode 100..250). The first turn uploads a photo or screenshot (1 tile 50 %, 2 30 %, 4 15 %,
  6 5 %; two images in 8 % of first turns) with a message (2..400 tokens, median 15); each
  later turn re-sends system + every earlier image, message and reply + a new message (2..800,
  median 25), and attaches a new image 12 % of the time. Replies 10..1200 tokens (median 120).
  Turns: 1 (55 %), 2..3 (30 %), 4..8 (15 %); the user answers 3 s..30 min after the reply
  (lognormal, median 25 s), or 15 % of the time after a break of 5 min..6 h (median 40 min);
  a conversation whose next turn would pass 16384 tokens ends.
- viral images: 5 in the trace (a meme, a news photo: 1, 2 or 4 tiles), starting 0.5..22 h
  in (by the assistant's hourly traffic), each uploaded by 40..150 users (scaled, at least
  3), exponentially over 0.5..3 h (mean); every upload is a new default-mode conversation
  with its own question, and 25 % of uploads are re-encoded copies (new content). So the
  same system prompt + image recurs across users.
- product catalog: a shard of 800 products (scaled), an image each (1 tile, the service's
  448-px variant, 85 %; a 2x2 lifestyle shot 15 %) and a 15..300-token text. Shoppers ask
  2900 questions a day (a QA template 150..350 tokens + the product's image and text + a
  3..120-token question), the product drawn Zipf(1.0) by its rank; every hour 12 of the top
  100 ranks trade places with random ranks (trends). 75 new products a day arrive 08:00..24:00,
  enter the ranking within the top 30 and are ingested at once by 3 tasks in a row (tag with a
  taxonomy 600..1100 tokens, caption 80..200, attributes with a JSON schema 200..500; template
  + image + text). At 01:00 a re-index job walks the whole catalog once, in catalog order (new
  products last), one request every 3 s with the attributes template.
- video analysis: 32 clips a day (more by day), 6..300 s (median 45), sampled at 1 fps into
  one-tile frames (256 tokens + a 4-token label). A job sends windows of 6 consecutive frames,
  a new window every 3 frames (so windows overlap by 3 frames but never start with the same
  one: neighbours share only the video system prompt, 100..200 tokens), one after another:
  system + frames + the job's task prompt (one of 8, 20..80 tokens). 30 % of clips are
  analysed again 10 min..12 h later (median 1 h) with another task: the same windows.
- document OCR: 120 scanned documents a day, office hours: 1 page (35 %), 2 (25 %) or 3..30
  (median 4); pages are A4 scans (2x3 tiles, 60 % of documents) or receipts (1x3). The
  extraction job asks about page 1, 2, ... in turn, each question (12..80 tokens) re-sending
  the OCR system prompt (instructions + schema, 250..600 tokens) and the pages before it;
  documents over 5 pages are split into 5-page parts, each part starting again. 25 % of
  documents get 1..3 reviewer questions 2 min..1 day later (median 30 min), each re-sending
  the system prompt and the first part.

Catalog, video and document replies are 10..800 tokens (median 120). 9000 requests at scale
1.0 span 24.5..27.5 hours: 620k..725k blocks requested, 220k..266k distinct (31..39 %) over
seeds 1..10 (image tokens make most of a request's blocks, so this is above the 600k other
shapes aim for); 35..38 % chat, 34..41 % shopper questions, 9 % re-index, 3 % ingestion,
5..12 % video, 3..6 % OCR and under 1 % review requests.
Rates (each at least 4 a day), the catalog and viral uploads scale with the trace, so a
scaled-down trace spans about as many hours and has the night's re-index and every part.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_vision_parts import (RATE, Doc, Job, Length, Product, Profile,
                                        VisionState, image_tokens, local_hour, lognormal,
                                        next_arrival, pick)

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, key, step, segments (see ``Run``)
CHATS_PER_DAY = 900  # new conversations (scaled)
SYSTEMS = ((150, 350), (100, 250))  # default and homework-helper system prompts
DEFAULT = 0.75  # conversations in the default mode
CHAT_TILES = ((1, 0.5), (2, 0.3), (4, 0.15), (6, 0.05))  # an upload's tiles, by weight
TWO_IMAGES, NEW_IMAGE = 0.08, 0.12  # first turns with two images; later turns with one
FIRST_MESSAGE: Length = (15, 0.9, 2, 400)
FOLLOW_UP: Length = (25, 1.0, 2, 800)
CHAT_REPLY: Length = (120, 0.8, 10, 1200)
THINK = (25.0, 1.2, 3.0, 1800.0)  # seconds from a reply to the user's next message...
AWAY, BACK = 0.15, (2400.0, 1.2, 300.0, 6 * 3600.0)  # ...or, this often, after a break
MAX_CONTEXT = 16384
VIRALS = 5  # viral images in the trace (not scaled)
VIRAL_TILES = ((1, 0.4), (2, 0.3), (4, 0.3))
VIRAL_USERS = (40, 150)  # uploads of a viral image (scaled, at least 3)
VIRAL_SPREAD = (1800.0, 3 * 3600.0)  # mean seconds from a viral image's start to an upload
REENCODED = 0.25  # viral uploads that are re-encoded copies (new content)
CONSUMER: Profile = (0.5, 0.35, 0.25, 0.2, 0.2, 0.25, 0.4, 0.6, 0.8, 0.9, 1.0, 1.1, 1.2,
                     1.1, 1.0, 1.0, 1.1, 1.2, 1.4, 1.6, 1.8, 1.8, 1.5, 0.9)
KINDS = ("chat", "shop", "ingest", "reindex", "video", "ocr", "review")


@dataclass
class Conversation:
    """A consumer conversation: its system prompt, turns planned and sent, the viral image it
    uploads (index into ``Run.virals``; None: the user's own), every image it uploaded and its
    history (images, messages and replies, in order)."""

    system: Segment
    turns: int
    viral: int | None
    turn: int = 0
    images: list[Segment] = field(default_factory=list)
    history: list[Segment] = field(default_factory=list)


@dataclass(frozen=True)
class Viral:
    """A viral image: its tokens, its start and its uploads' times (seconds)."""

    image: Segment
    start: float
    uploads: tuple[float, ...]


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, key, step, segments):
    ("chat", conversation (its first request), turn), ("shop", product, 0), ("ingest",
    product, task), ("reindex", product, position in the walk), ("video", job, window),
    ("ocr", document, page) or ("review", document, question). ``times``: seconds."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    systems: list[Segment]
    conversations: dict[int, Conversation]
    virals: list[Viral]
    catalog: list[Product]
    reindex: list[int]
    templates: dict[str, object]
    jobs: list[Job]
    docs: list[Doc]


def vision_mix(seed: int, scale: float = 1.0) -> Trace:
    """One replica of a vision-language model: image conversations with viral uploads, a
    product catalog (skewed, drifting, nightly re-index), sliding video windows and multi-page
    OCR. See the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace of ``int(9000 * scale)`` requests and its metadata (see ``Run``)."""
    s = _State(random.Random(seed), int(9000 * scale), scale)
    s.run()
    templates = {"qa": s.qa, "ingest": s.ingest, "video": s.video_system, "ocr": s.ocr_system,
                 "tasks": s.tasks}
    return Run(s.out, s.meta, s.times, s.systems, s.conversations, s.virals, s.catalog,
               s.reindex, templates, s.jobs, s.docs)


def _turns(rng: random.Random) -> int:
    """Turns of a conversation: 1 (55 %), 2..3 (30 %) or 4..8 (15 %)."""
    u = rng.random()
    return 1 if u < 0.55 else rng.randint(2, 3) if u < 0.85 else rng.randint(4, 8)


class _State(VisionState):
    """VisionState with the consumer assistant and its viral images."""

    def __init__(self, rng: random.Random, size: int, scale: float) -> None:
        super().__init__(rng, size, scale)
        self.systems = [self.new(rng.randint(*r)) for r in SYSTEMS]
        self.conversations: dict[int, Conversation] = {}
        self.virals = [self._viral() for _ in range(VIRALS)]
        for v, viral in enumerate(self.virals):
            for t in viral.uploads:
                self.at(t, "chat", v)
        self.at(self._next_chat(), "chat", None)

    def _next_chat(self) -> float:
        return next_arrival(self.rng, self.now, CHATS_PER_DAY * self.scale, CONSUMER)

    def _viral(self) -> Viral:
        """A viral image: it starts 0.5..22 h into the trace, as the assistant's traffic by
        local hour; its uploads follow."""
        rng = self.rng
        while True:
            start = rng.uniform(1800.0, 22 * 3600.0)
            if rng.random() * max(CONSUMER) < CONSUMER[int(local_hour(start))]:
                break
        spread = rng.uniform(*VIRAL_SPREAD)
        users = max(3, round(rng.randint(*VIRAL_USERS) * self.scale))
        uploads = sorted(start + rng.expovariate(1 / spread) for _ in range(users))
        return Viral(self.new(image_tokens(pick(rng, VIRAL_TILES))), start, tuple(uploads))

    def _upload(self) -> Segment:
        return self.new(image_tokens(pick(self.rng, CHAT_TILES)))

    def _on_chat(self, v: int | None) -> None:
        """A new conversation (None: the user's own photo, and the next arrival; else an
        upload of viral image ``v``, possibly a re-encoded copy) and its first turn."""
        rng = self.rng
        if v is None:
            self.at(self._next_chat(), "chat", None)
            system = self.systems[0] if rng.random() < DEFAULT else self.systems[1]
            images = [self._upload() for _ in range(1 + (rng.random() < TWO_IMAGES))]
        else:
            system = self.systems[0]
            viral = self.virals[v].image
            images = [self.new(viral[1]) if rng.random() < REENCODED else viral]
        c = len(self.out)
        self.conversations[c] = Conversation(system, _turns(rng), v)
        self._turn(c, images, clipped_length(rng, *FIRST_MESSAGE))

    def _on_turn(self, c: int) -> None:
        """A later turn: a new message, with a new image NEW_IMAGE of the time; none (the
        conversation ends) if it would pass MAX_CONTEXT tokens."""
        conv = self.conversations[c]
        images = [self._upload()] if self.rng.random() < NEW_IMAGE else []
        message = clipped_length(self.rng, *FOLLOW_UP)
        context = sum(t for _, t in [conv.system, *conv.history, *images]) + message
        if context <= MAX_CONTEXT:
            self._turn(c, images, message)

    def _turn(self, c: int, images: list[Segment], message: int) -> None:
        """Send system + history + ``images`` + a message; the reply joins the history; the
        user answers after a think time unless the turns are done."""
        rng, conv = self.rng, self.conversations[c]
        conv.images += images
        conv.history += [*images, self.new(message)]
        self.send("chat", c, conv.turn, [conv.system, *conv.history])
        reply = clipped_length(rng, *CHAT_REPLY)
        conv.history.append(self.new(reply))
        conv.turn += 1
        if conv.turn < conv.turns:
            think = lognormal(rng, *(BACK if rng.random() < AWAY else THINK))
            self.at(self.now + reply / RATE + think, "turn", c)

