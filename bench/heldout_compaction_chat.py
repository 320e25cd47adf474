"""bench.heldout's ``compaction_chat`` shape: one deployment of a chat model over 4 days,
shared by a consumer chat product whose clients compact long conversations, a nightly
document translation job and a JSON-extraction API. Written after ``adaptive`` was frozen (at
5cf3f89), by someone who had not read the eviction policies; the workload is modelled on how
such traffic looks, not on any policy. Prompts are laid out in token segments and cut into
16-token blocks by ``bench.heldout_fewshot.Blocks``, so a block's id stands for everything up
to its end. Time: requests are spread evenly over the 4 days (9000 at scale 1.0, about 1.6 a
minute); the gaps below are in minutes, so they scale with the trace.

What each part models:

- chat apps: web, mobile and desktop clients (55/30/15 % of new conversations), each with a
  system prompt (a 20..60-token head, then a body of 150..2000, median 300) and a compaction
  threshold (5000, 3500 and 7000 tokens of context: cost-capped clients, as budget consumer
  and companion apps run). Web and mobile render today's date (12 tokens) right after the
  head, as consumer system prompts do, so from midnight on their prompt is new content from
  the date on, for live and resumed conversations alike; desktop's prompt has no date.
- users: 1500 (scaled) with Pareto(1.2) activity; 35 % have custom instructions (20..1500
  tokens, median 150) that follow the system prompt in every conversation of theirs.
- conversations: a turn re-sends system prompt, custom instructions, history and a message
  (2..2000 tokens, median 50; 5 % also paste a document, 200..8000, median 1200); the reply
  (10..2000, median 160) joins the history. A session has 1 turn (60 %), 2..4 (28 %) or
  5..15 (12 %), turns 0.2..30 minutes apart (lognormal, median 1.5). After a session, 30 % of
  conversations are resumed (up to 6 sessions): 55 % hours later (lognormal, median 2 h,
  20 min..20 h), 45 % 18..72 hours later (some past the trace's end: never seen again).
  About 3.5 sends per conversation.
- compaction: once the context after a reply passes its app's threshold, the client's next
  send is first a compaction request: the whole conversation + the app's summarize
  instruction (150..400 tokens). The model's summary (200..2000, median 700) then replaces
  the history, and the waiting turn is the next request: system prompt + custom instructions +
  summary + message, so it shares only the system prompt (and custom instructions) with
  anything before it; later turns build on the summary until the next compaction.
- translation: every night at 01:00 a job queues documents (1000..40000 tokens, median 6000,
  at most a night's budget) into 1..3 of 5 languages (fewer when the budget is nearly
  planned) until its chunks reach 10 % of a day's requests, and runs 4 (document, language)
  jobs at once; while it has work, 60 % of requests are its chunks (about 4 hours). A
  document is cut into 500-token chunks translated in order; a chunk's request is the
  language's instruction (150..500) + its glossary (300..4000, median 700) + the previous
  chunk's translation (source tokens x the language's 1.05..1.4 ratio, +-10 %: model output,
  so new content) + the chunk. 1..2 languages get a revised glossary at noon on one of the
  first three days: new content after the instruction from then on.
- extraction: 36 % of the other requests. One platform preamble (120..300 tokens), then one
  of 300 form templates' schema prompt (150..3000, median 500): Zipf(1.1) over a random
  ranking, 20 % of templates onboarded at 5..90 % of the trace and unused before. The form's
  content is unique (50..6000, median 300). 5 % of arrivals open a client batch of 5..50
  forms of one template, served in 70 % of extraction slots while batches are open (50..65 %
  of forms come in batches). 4 % of requests are retried (timeout, 5xx, invalid
  JSON) 0.5..5 minutes later as the identical request; a third of retries are retried again.

9000 requests at scale 1.0: 780k..980k blocks requested, 255k..275k distinct (27..34 %),
80..120 compactions, over seeds 1..20. Nights, the glossary revisions, template onboarding and gaps
are fractions of the trace, so a scaled-down trace has them.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
import random
from collections import deque
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, TraceState, clipped_length

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # (kind, key, detail, segments)
DAYS = 4
APP_SHARE = (0.55, 0.3, 0.15)  # web, mobile, desktop
APP_LIMIT = (5000, 3500, 7000)  # context tokens past which each app's client compacts
DATED = (True, True, False)  # the app's system prompt carries today's date
USERS, CUSTOM = 1500, 0.35  # users (scaled); share with custom instructions
PASTE = 0.05
RESUME, MAX_SESSIONS = 0.3, 6
LANGUAGES, WORKERS, JOB_SHARE = 5, 4, 0.6
JOB_BUDGET = 0.1  # planned chunk requests a night, as a share of a day's requests
CHUNK = 500
EXTRACT_SHARE = 0.36
TEMPLATES = 300
BATCH, BATCH_SLOTS = 0.05, 0.7  # arrivals that open a batch; extraction slots batches take
RETRY = 0.04


@dataclass
class App:
    """A chat client: its system prompt (head, [date], body), summarize instruction and
    compaction threshold in tokens."""

    head: Segment
    body: Segment
    compact: Segment
    limit: int
    dated: bool


@dataclass
class Conversation:
    """A chat: its user and app, turns left in this session, sessions so far, history (the
    last summary first once compacted) and whether its next send starts with a compaction."""

    user: int
    app: int
    turns: int
    sessions: int = 1
    history: list[Segment] = field(default_factory=list)
    compact: bool = False


@dataclass
class Language:
    """A target language: its instruction, token ratio to the source and glossary versions as
    (from request, glossary), oldest first."""

    instruction: Segment
    ratio: float
    glossaries: list[tuple[int, Segment]]

    def glossary(self, n: int) -> Segment:
        """The glossary in use at request ``n``."""
        return [g for start, g in self.glossaries if start <= n][-1]


@dataclass
class Job:
    """One document into one language: its source chunks, chunks sent, and the translation
    of the last chunk sent (None before the first)."""

    doc: int
    language: int
    chunks: list[Segment]
    done: int = 0
    previous: Segment | None = None


@dataclass
class Template:
    """A form template of the extraction API: its schema prompt, weight and first request."""

    schema: Segment
    weight: float
    birth: int


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, key, detail, segments):
    ("turn" or "compact", conversation (named by its first request), app), ("chunk", job,
    chunk index), ("extract", template, batch (its first request) or -1) or ("retry", the
    request it resends, attempt). ``owners``: conversation -> (user, app); ``nights``: the
    request each nightly job starts at; ``rpm``: requests per minute."""

    trace: Trace
    meta: list[Meta]
    apps: list[App]
    dates: list[Segment]
    custom: list[Segment | None]
    languages: list[Language]
    jobs: list[Job]
    templates: list[Template]
    preamble: Segment
    owners: dict[int, tuple[int, int]]
    nights: list[int]
    rpm: float


def compaction_chat(seed: int, scale: float = 1.0) -> Trace:
    """Consumer chat whose clients compact long conversations (users returning minutes to days
    later), a nightly chunk-by-chunk translation job behind per-language glossaries, and a
    JSON-extraction API over Zipf-popular templates with retries. See the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace of ``int(9000 * scale)`` requests and its metadata (see ``Run``)."""
    s = _State(random.Random(seed), int(9000 * scale), scale)
    for n in range(s.size):
        s.step(n)
    return Run(s.out, s.meta, s.apps, s.dates, s.custom, s.languages, s.jobs, s.templates,
               s.preamble, s.owners, sorted(s.nights), s.rpm)



def _session(rng: random.Random) -> int:
    """Turns in a session: 1 (60 %), 2..4 (28 %) or 5..15 (12 %)."""
    u = rng.random()
    return 1 if u < 0.6 else rng.randint(2, 4) if u < 0.88 else rng.randint(5, 15)


def _language(rng: random.Random, new) -> Language:
    """A language: instruction, ratio and its first glossary (from the start)."""
    return Language(new(rng.randint(150, 500)), rng.uniform(1.05, 1.4),
                    [(0, new(clipped_length(rng, 700, 0.5, 300, 4000)))])


def _templates(rng: random.Random, new, size: int) -> list[Template]:
    """TEMPLATES schema prompts, Zipf(1.1) over a random ranking, 20 % born mid-trace."""
    ranks = list(range(TEMPLATES))
    rng.shuffle(ranks)
    return [Template(new(clipped_length(rng, 500, 0.6, 150, 3000)), 1 / (r + 1) ** 1.1,
                     int(rng.uniform(0.05, 0.9) * size) if rng.random() < 0.2 else 0)
            for r in ranks]


class _State(TraceState):
    """The generator's state while it walks the trace, one request per step."""

    def __init__(self, rng: random.Random, size: int, scale: float) -> None:
        super().__init__(rng, size)
        new = self.new
        self.rpm = size / (DAYS * 24 * 60)
        self.apps = [App(new(rng.randint(20, 60)), new(clipped_length(rng, 300, 0.6, 150, 2000)),
                         new(rng.randint(150, 400)), APP_LIMIT[a], DATED[a]) for a in range(3)]
        self.dates = [new(12) for _ in range(DAYS)]
        users = max(20, int(USERS * scale))
        self.custom = [new(clipped_length(rng, 150, 0.8, 20, 1500))
                       if rng.random() < CUSTOM else None for _ in range(users)]
        self.activity = list(itertools.accumulate(rng.paretovariate(1.2) for _ in range(users)))
        self.convs: dict[int, Conversation] = {}
        self.owners: dict[int, tuple[int, int]] = {}
        self.waiting: int | None = None  # a conversation whose turn follows its compaction
        self.due: list[tuple[float, int]] = []  # heap: (due, conversation)
        self.languages = [_language(rng, new) for _ in range(LANGUAGES)]
        for lang in rng.sample(self.languages, rng.randint(1, 2)):
            noon = int((rng.randrange(DAYS - 1) + 0.5) / DAYS * size)
            lang.glossaries.append((noon, new(clipped_length(rng, 700, 0.5, 300, 4000))))
        self.nights = {int((d + 1 / 24) / DAYS * size) for d in range(DAYS)}
        self.jobs: list[Job] = []
        self.queue: deque[int] = deque()
        self.active: list[int] = []
        self.preamble = new(rng.randint(120, 300))
        self.templates = _templates(rng, new, size)
        self.batches: list[list[int]] = []  # [template, forms left, first request]
        self.retries: list[tuple[float, int, int]] = []  # heap: (due, request, attempt)

    def step(self, n: int) -> None:
        """Request ``n``: the turn after a compaction, else a due retry, else a translation
        chunk (JOB_SHARE while the job has work), else an extraction (EXTRACT_SHARE), else
        chat."""
        rng = self.rng
        if n in self.nights:
            self._night()
        while self.queue and len(self.active) < WORKERS:
            self.active.append(self.queue.popleft())
        if self.waiting is not None:
            c, self.waiting = self.waiting, None
            self._turn(n, c)
        elif self.retries and self.retries[0][0] <= n:
            _, original, attempt = heapq.heappop(self.retries)
            self._send(n, "retry", original, attempt, self.meta[original][3])
            if attempt == 1 and rng.random() < 1 / 3:
                self._retry(n, original, 2)
        elif self.active and rng.random() < JOB_SHARE:
            self._chunk(n)
        elif rng.random() < EXTRACT_SHARE:
            self._extract(n)
        else:
            self._chat(n)

    def _send(self, n: int, kind: str, key: int, detail: int, segments: list[Segment]) -> None:
        """Append request ``n`` and its metadata."""
        self.out.append(self.blocks.ids(0, segments))
        self.meta.append((kind, key, detail, segments))

    def _retry(self, n: int, original: int, attempt: int) -> None:
        """Resend request ``original`` 0.5..5 minutes after request ``n``."""
        due = n + max(1.0, self.rng.uniform(0.5, 5) * self.rpm)
        heapq.heappush(self.retries, (due, original, attempt))

    def _night(self) -> None:
        """Queue tonight's translation jobs: documents into 1..3 languages each, until the
        night's chunk budget is planned."""
        rng, budget = self.rng, JOB_BUDGET * self.size / DAYS
        planned = 0
        while planned < budget:
            tokens = clipped_length(rng, 6000, 0.9, 1000, 40000)
            count = min(math.ceil(tokens / CHUNK), max(3, int(budget)))
            sizes = [CHUNK] * (count - 1) + [tokens - CHUNK * (count - 1)]
            chunks = [self.new(min(CHUNK, max(100, t))) for t in sizes]
            k = rng.choices((1, 2, 3), (5, 3, 2))[0]
            k = min(k, max(1, round((budget - planned) / count)))
            doc = len(self.jobs)
            for lang in rng.sample(range(LANGUAGES), k):
                self.queue.append(len(self.jobs))
                self.jobs.append(Job(doc, lang, chunks))
                planned += count

    def _chunk(self, n: int) -> None:
        """The next chunk of a running job: instruction + glossary + the previous chunk's
        translation + the chunk; its translation is kept for the next one."""
        j = self.rng.choice(self.active)
        job = self.jobs[j]
        lang = self.languages[job.language]
        chunk = job.chunks[job.done]
        context = [job.previous] if job.previous else []
        self._send(n, "chunk", j, job.done,
                   [lang.instruction, lang.glossary(n), *context, chunk])
        job.previous = self.new(round(chunk[1] * lang.ratio * self.rng.uniform(0.9, 1.1)))
        job.done += 1
        if job.done == len(job.chunks):
            self.active.remove(j)

    def _extract(self, n: int) -> None:
        """An extraction: the next form of an open batch (BATCH_SLOTS), else a new arrival (a
        template by weight among those born; BATCH of them open a batch); RETRY are retried."""
        rng = self.rng
        if self.batches and rng.random() < BATCH_SLOTS:
            b = rng.choice(self.batches)
            t, batch = b[0], b[2]
            b[1] -= 1
            if not b[1]:
                self.batches.remove(b)
        else:
            weights = [t.weight if t.birth <= n else 0.0 for t in self.templates]
            t, batch = rng.choices(range(TEMPLATES), weights)[0], -1
            if rng.random() < BATCH:
                batch = n
                self.batches.append([t, rng.randint(5, 50) - 1, n])
        form = self.new(clipped_length(rng, 300, 0.9, 50, 6000))
        self._send(n, "extract", t, batch, [self.preamble, self.templates[t].schema, form])
        if rng.random() < RETRY:
            self._retry(n, n, 1)

    def _system(self, n: int, conv: Conversation) -> list[Segment]:
        """The system prompt as rendered at request ``n`` (today's date for a dated app), then
        the user's custom instructions if any."""
        app = self.apps[conv.app]
        day = min(DAYS - 1, n * DAYS // self.size)
        out = [app.head, self.dates[day], app.body] if app.dated else [app.head, app.body]
        custom = self.custom[conv.user]
        return out + [custom] if custom else out

    def _chat(self, n: int) -> None:
        """The next due send of a conversation (a compaction if one is pending, else a turn),
        else a new conversation's first turn."""
        rng = self.rng
        if self.due and self.due[0][0] <= n:
            c = heapq.heappop(self.due)[1]
        else:
            c = n
            user = bisect.bisect_left(self.activity, rng.random() * self.activity[-1])
            user = min(user, len(self.custom) - 1)
            app = rng.choices(range(3), APP_SHARE)[0]
            self.convs[c] = Conversation(user, app, _session(rng))
            self.owners[c] = (user, app)
        if self.convs[c].compact:
            self._compact(n, c)
        else:
            self._turn(n, c)

    def _compact(self, n: int, c: int) -> None:
        """The client's compaction: the whole conversation + the summarize instruction; the
        summary replaces the history and the waiting turn is the next request."""
        conv = self.convs[c]
        app = self.apps[conv.app]
        self._send(n, "compact", c, conv.app, [*self._system(n, conv), *conv.history,
                                                app.compact])
        conv.history = [self.new(clipped_length(self.rng, 700, 0.4, 200, 2000))]
        conv.compact = False
        self.waiting = c

    def _turn(self, n: int, c: int) -> None:
        """A turn: system prompt + custom instructions + history + message (PASTE with a
        pasted document); the reply joins the history; compaction is pending past the app's
        threshold."""
        rng, conv = self.rng, self.convs[c]
        message = [self.new(clipped_length(rng, 50, 1.0, 2, 2000))]
        if rng.random() < PASTE:
            message.append(self.new(clipped_length(rng, 1200, 0.9, 200, 8000)))
        system = self._system(n, conv)
        self._send(n, "turn", c, conv.app, [*system, *conv.history, *message])
        conv.history += [*message, self.new(clipped_length(rng, 160, 0.7, 10, 2000))]
        context = sum(t for _, t in [*system, *conv.history])
        conv.compact = context > self.apps[conv.app].limit
        self._next(n, c)

    def _next(self, n: int, c: int) -> None:
        """Schedule conversation ``c``'s next turn: minutes later within the session; after
        it, RESUME of the time a new session hours or days later; else it ends."""
        rng, conv = self.rng, self.convs[c]
        conv.turns -= 1
        if conv.turns:
            minutes = max(0.2, min(30.0, rng.lognormvariate(math.log(1.5), 0.9)))
        elif conv.sessions < MAX_SESSIONS and rng.random() < RESUME:
            conv.sessions += 1
            conv.turns = _session(rng)
            hours = (max(1 / 3, min(20.0, rng.lognormvariate(math.log(2), 1.0)))
                     if rng.random() < 0.55 else rng.uniform(18, 72))
            minutes = 60 * hours
        else:
            del self.convs[c]
            return
        heapq.heappush(self.due, (n + minutes * self.rpm, c))
