"""bench.heldout's ``call_center`` shape, its world: client brands served by one contact-center
AI platform, each with callers in its own time zone, queues whose standard operating procedure
(SOP) is edited now and then, a persona and compliance script, a knowledge base of articles,
a QA rubric and, for some, outbound campaigns over a lead list; the callers (a CRM record and
notes of earlier calls) and the calls themselves. See bench/heldout_call_center.py's docstring
for what each part models and its numbers."""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.heldout_bi_parts import local_hour, weekday
from bench.heldout_fewshot import Segment, clipped_length
from bench.heldout_legal_parts import Versioned
from bench.heldout_meeting_parts import pick

HOUR, DAY, MINUTE = 3600.0, 86400.0, 60.0
CLIENTS = 10  # at scale 1.0 (scaled, at least 3)
ZIPF = 1.1  # client size by a random rank
# (UTC offset of the client's callers, share of the clients)
ZONES = ((-5.0, 0.35), (-6.0, 0.15), (-8.0, 0.25), (0.0, 0.15), (1.0, 0.1))
# how many calls come in each local hour of a weekday (1.0 at the peak)
HOURS = (0.02, 0.01, 0.01, 0.01, 0.02, 0.05, 0.15, 0.45, 0.8, 1.0, 1.0, 0.95, 0.8, 0.85,
         0.95, 0.9, 0.8, 0.65, 0.5, 0.35, 0.25, 0.15, 0.08, 0.04)
WEEKEND = 0.35  # x a weekday's calls
CLOSED = 0.05  # x the calls outside 08..20 local for a client that is not open 24/7
CALLS = 1.1  # inbound calls an hour at the peak for a client of mean size
QUEUE_NAMES = ("billing", "support", "orders", "retention", "claims", "sales", "onboarding")
SECTION = 400  # tokens of an SOP, persona or rubric section
ARTICLE = (600, 0.6, 150, 2500)  # tokens of a knowledge-base article
CRM = (280, 0.5, 80, 900)  # tokens of a caller's CRM record
NOTE = (120, 0.4, 40, 400)  # tokens of an earlier call's summary note
AUTO_QA = 0.3  # clients whose QA scores every call
LEAD = (160, 0.5, 60, 500)  # tokens of an outbound lead's record


def busy(t: float, tz: float, always: bool) -> float:
    """How many calls a client at ``tz`` gets at ``t`` (1.0 at a weekday's peak)."""
    h = local_hour(t, tz)
    w = HOURS[int(h)] * (WEEKEND if weekday(t, tz) >= 5 else 1.0)
    return w if always or 8 <= h < 20 else w * CLOSED


def next_hours(rng: random.Random, t: float, tz: float) -> float:
    """A time at or after ``t`` in the client's open hours (busy hours likelier)."""
    while rng.random() > busy(t, tz, False):
        t = (t // HOUR + 1) * HOUR
    return t + rng.uniform(0, HOUR - t % HOUR)


def sections(new: Callable, total: int) -> list[Segment]:
    """``total`` tokens as sections of about SECTION tokens, each new content."""
    k = max(1, round(total / SECTION))
    return [new(total // k + (i < total % k)) for i in range(k)]


@dataclass
class Queue:
    """A queue (billing, support, ...): its share of the client's calls, the share of its
    voice-agent calls that a human takes over, its SOP (sections, edited now and then), the
    banner of an outage while one is on, and every outage as (start, end or None, banner)."""

    name: str
    weight: float
    transfer: float
    sop: Versioned
    banner: Segment | None = None
    outages: list[list] = field(default_factory=list)


@dataclass
class Caller:
    """A caller known to the CRM: the versions of the record (an agent's update makes a new
    one; the prompt holds the last) and the summary notes of earlier calls (the last two go
    into the prompt)."""

    records: list[Segment]
    notes: list[Segment] = field(default_factory=list)

    @property
    def crm(self) -> Segment:
        return self.records[-1]


@dataclass
class Client:
    """A brand the contact center serves: callers' time zone, size (mean 1), whether it is
    open 24/7, the share of inbound calls its voice agent answers, persona and compliance
    script with its tool schemas (Versioned), the IVR menu, queues, knowledge-base articles
    (cumulative Zipf popularity), the QA rubric (Versioned), its three QA criteria
    instructions, whether QA scores every call (auto-QA) or a sample, the outbound script
    (Versioned) or None, its leads and its callers."""

    tz: float
    weight: float
    always: bool
    voice: float
    persona: Versioned
    menu: Segment
    queues: list[Queue]
    articles: list[Segment]
    cum: list[float]
    rubric: Versioned
    criteria: list[Segment]
    auto_qa: bool
    script: Versioned | None
    leads: list[Segment] = field(default_factory=list)
    callers: list[Caller] = field(default_factory=list)

    def article(self, rng: random.Random) -> int:
        """An article by Zipf(1) popularity (index into ``articles``)."""
        return bisect.bisect_left(self.cum, rng.random() * self.cum[-1])

    def queue(self, rng: random.Random) -> int:
        """A queue by its share of calls, an outage's queue 5 x likelier while it lasts."""
        w = [q.weight * (5.0 if q.banner else 1.0) for q in self.queues]
        return rng.choices(range(len(self.queues)), w)[0]


def make_queues(rng: random.Random, new: Callable, weight: float) -> list[Queue]:
    """2..6 queues (more for larger clients), support always among them; SOPs of
    500..8000 tokens (median 2200)."""
    n = max(2, min(6, round(rng.uniform(2, 4) * weight ** 0.25)))
    names = ["support", *rng.sample([q for q in QUEUE_NAMES if q != "support"], n - 1)]
    return [Queue(name, rng.paretovariate(1.5), rng.uniform(0.08, 0.3),
                  Versioned([(-1e18, sections(new, clipped_length(rng, 2200, 0.6, 500,
                                                                   8000)))]))
            for name in names]


def make_client(rng: random.Random, new: Callable, weight: float) -> Client:
    """A client of size ``weight``: persona 800..5000 tokens with tools, 40..600 articles,
    a rubric of 1200..5000 tokens, auto-QA for 30 %, outbound campaigns for 40 %."""
    persona = sections(new, clipped_length(rng, 1800, 0.5, 800, 5000))
    n = clipped_length(rng, 120 * weight ** 0.5, 0.5, 40, 600)
    cum, total = [], 0.0
    for r in range(1, n + 1):
        total += 1.0 / r
        cum.append(total)
    rubric = sections(new, clipped_length(rng, 2400, 0.4, 1200, 5000))
    script = None
    if rng.random() < 0.4:
        script = Versioned([(-1e18, sections(new, clipped_length(rng, 1400, 0.4, 600, 3500)))])
    return Client(pick(rng, ZONES), weight, rng.random() < 0.3, rng.uniform(0.4, 0.9),
                  Versioned([(-1e18, persona)]), new(clipped_length(rng, 350, 0.4, 150, 900)),
                  make_queues(rng, new, weight),
                  [new(clipped_length(rng, *ARTICLE)) for _ in range(n)], cum,
                  Versioned([(-1e18, rubric)]), [new(rng.randint(60, 140)) for _ in range(3)],
                  rng.random() < AUTO_QA, script)


def clients(rng: random.Random, new: Callable, scale: float) -> list[Client]:
    """CLIENTS (scaled, at least 3) of Zipf(ZIPF) sizes by a random rank, mean size 1."""
    n = max(3, round(CLIENTS * scale))
    sizes = [r ** -ZIPF for r in rng.sample(range(1, n + 1), n)]
    mean = sum(sizes) / n
    return [make_client(rng, new, s / mean) for s in sizes]


def utterance(rng: random.Random, new: Callable, median: float) -> list[Segment]:
    """A caller's utterance as the ASR commits it: word groups of 2..7 tokens, new content,
    about ``median`` tokens in all (3..180)."""
    total, out = clipped_length(rng, median, 0.7, 3, 180), []
    while total > 0:
        k = min(total, rng.randint(2, 7))
        out.append(new(k))
        total -= k
    return out


@dataclass
class Call:
    """One call: client, queue (-1 for outbound), the caller (index into the client's callers,
    or its leads for outbound), mode ("voice", "human" or "outbound"), exchanges left, the
    transcript so far, request indices, start and end time, whether a human takes it over
    from the voice agent and at how many exchanges left, whether it was resolved, and the
    call it is a callback to."""

    client: int
    queue: int
    caller: int
    mode: str
    turns: int
    transcript: list[Segment] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)
    start: float = 0.0
    end: float | None = None
    transferred: bool = False
    handoff: int = -1
    resolved: bool = True
    callback_of: int | None = None
