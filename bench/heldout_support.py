"""bench.heldout's ``support_desk`` shape: a customer-support AI service that several companies
(tenants) use. Written after the research policy ``ghostpair`` was frozen, by someone who had
not read the eviction policies; the workload is modelled on how such traffic looks, not on any
policy. Prompts are laid out in token segments and cut into 16-token blocks by
``bench.heldout_fewshot.Blocks``, so a block's id stands for everything up to its end.

What each part models:

- tenants: 6 companies with Zipf(0.8) shares of new tickets. Each has a front-line assistant
  prompt (120..1200 tokens, median 350), 2 specialist personas (billing, technical: 100..1000,
  median 300), a summarization instruction for its nightly job (150..500) and a knowledge base
  of 80..400 chunks (50..400 tokens, median 120) with Zipf(1) popularity.
- a request: persona prompt, then the 2..3 chunks retrieved when the ticket was opened (drawn
  by popularity without replacement, most relevant first), then the ticket's conversation.
- popularity drift: 70 % of tenants launch a product at 15..75 % of the trace; its 4..10
  chunks are three times as popular as the top chunk at launch, halving every 8 % of the trace
  down to 0.3 of it. Every tenant has 1..2 incidents (at 5..85 %, lasting 2..6 % of the trace)
  with 2..5 chunks six times as popular as the top chunk while the incident lasts and never
  retrieved after it; the tenant gets three times its share of new tickets meanwhile.
- tickets: 35 % one turn, 50 % 2..4, 15 % 5..8; a think time per ticket (lognormal, median 10
  requests, i.e. minutes). A turn re-sends the prompt, chunks and history plus a user message
  (5..1000 tokens, median 40); the reply (20..700, median 100) joins the history. 8 % of
  messages carry an attachment: a screenshot (500..1200 image tokens) or a log file (100..4000,
  median 800), unique content that later turns re-send. A ticket whose context passes 8000
  tokens closes.
- escalation: a front-line ticket's later turn is, 8 % of the time, a handoff to a specialist:
  the specialist's prompt, the same chunks, the full history and a handoff note (40..200
  tokens), so nothing is shared with the ticket's earlier blocks; 1..3 more turns follow there.
- reopening: 10 % of tickets are reopened once, 8..60 % of the trace after they closed (hours
  to days), re-sending their full history with a new message, for 1..3 more turns.
- nightly batches: the trace covers 3 days; 9 % of the trace before each day ends, every
  tenant's job (in a random order, one after another) summarizes each ticket closed since the
  last night: its summarization instruction + the ticket's history (new ids: another prefix).
  While the jobs run, 85 % of requests are summaries; live turns take the rest. About 24 % of
  the trace is summaries: every closed ticket is summarized (again after a reopening).

9000 requests at scale 1.0: 660k..820k blocks requested, 230k..250k distinct (30..36 %),
over seeds 1..10. Events are fractions of the trace, so a scaled-down trace has them.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, TraceState

Trace = list[list[int]]
Meta = tuple[str, int, int, int, list[Segment]]  # (kind, tenant, ticket, persona, segments)
TENANTS = 6
SPECIALISTS = 2
DAYS = 3
NIGHT = 0.09  # the nightly jobs start this share of the trace before each day ends
BATCH_SHARE = 0.85  # share of requests that are summaries while a nightly job has work
HANDOFF = 0.08  # chance that a front-line ticket's later turn is a handoff
REOPEN = 0.10
ATTACH = 0.08
MAX_CONTEXT = 8000


@dataclass
class Tenant:
    """A company: its prompts, knowledge base and the events that move the base's hot chunks.
    ``launch``: (request, first chunk) or None; ``incidents``: (start, end, first, last+1
    chunk); requests as indices into the trace, chunks as indices into ``kb``."""

    share: float
    prompts: list[Segment]  # 0 is the front-line assistant, then the specialists
    summarize: Segment
    kb: list[Segment]
    base: int  # chunks before the launch's and incidents' ones
    launch: tuple[int, int] | None
    incidents: list[tuple[int, int, int, int]]


@dataclass
class Ticket:
    """A support ticket: its tenant, retrieved chunks, history and turns left. ``persona`` is
    the prompt it is served under now; ``state`` is "open", "closed" or "reopening"."""

    tenant: int
    chunks: list[Segment]
    turns: int
    think: float
    persona: int = 0
    history: list[Segment] = field(default_factory=list)
    state: str = "open"
    reopened: bool = False


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind "turn", "handoff",
    "reopen" or "summary", tenant, ticket (named by its first request), persona (-1 for a
    summary), segments). ``attachments``: (request, ticket, segment); ``closes``: (request,
    ticket) per close; ``nights``: the requests at which each nightly batch starts."""

    trace: Trace
    meta: list[Meta]
    tenants: list[Tenant]
    tickets: dict[int, Ticket]
    attachments: list[tuple[int, int, Segment]]
    closes: list[tuple[int, int]]
    nights: list[int]


def support_desk(seed: int, scale: float = 1.0) -> Trace:
    """A multi-tenant customer-support service: retrieved knowledge chunks whose hot set moves
    with launches and incidents, multi-turn tickets with attachments, handoffs to specialists,
    reopened tickets and nightly summary batches. See the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace of ``int(9000 * scale)`` requests and its metadata (see ``Run``)."""
    state = _State(random.Random(seed), int(9000 * scale))
    for n in range(state.size):
        state.step(n)
    return Run(state.out, state.meta, state.tenants, state.tickets, state.attachments,
               state.closes, sorted(state.nights))


def _tokens(rng: random.Random, median: float, sigma: float, lo: int, hi: int) -> int:
    """A length in tokens: lognormal around ``median``, clipped to lo..hi."""
    return max(lo, min(hi, round(rng.lognormvariate(math.log(median), sigma))))


def _tenant(rng: random.Random, new, t: int, size: int) -> Tenant:
    """Tenant ``t``: prompts, knowledge base, a launch (70 %) and 1..2 incidents, with their
    chunks appended to the base after the ordinary ones."""
    prompts = [new(_tokens(rng, 350, 0.6, 120, 1200))]
    prompts += [new(_tokens(rng, 300, 0.6, 100, 1000)) for _ in range(SPECIALISTS)]

    def chunk() -> Segment:
        return new(_tokens(rng, 120, 0.4, 50, 400))

    kb = [chunk() for _ in range(rng.randint(80, 400))]
    base = len(kb)
    launch = None
    if rng.random() < 0.7:
        launch = (int(rng.uniform(0.15, 0.75) * size), len(kb))
        kb += [chunk() for _ in range(rng.randint(4, 10))]
    incidents = []
    for _ in range(rng.randint(1, 2)):
        start = int(rng.uniform(0.05, 0.85) * size)
        end = start + max(1, int(rng.uniform(0.02, 0.06) * size))
        first = len(kb)
        kb += [chunk() for _ in range(rng.randint(2, 5))]
        incidents.append((start, end, first, len(kb)))
    summarize = new(_tokens(rng, 250, 0.4, 150, 500))
    return Tenant(1 / (t + 1) ** 0.8, prompts, summarize, kb, base, launch, incidents)


def _weights(tenant: Tenant, n: int, size: int) -> list[float]:
    """Retrieval weights of the tenant's chunks at request ``n``: Zipf(1) over the ordinary
    chunks (the top one weighs 1), launch chunks from the launch on (3, halving every 8 % of
    the trace, at least 0.3), incident chunks 6 while their incident lasts, else 0."""
    out = [1 / (i + 1) for i in range(tenant.base)] + [0.0] * (len(tenant.kb) - tenant.base)
    if tenant.launch and n >= tenant.launch[0]:
        w = max(0.3, 3 * 0.5 ** ((n - tenant.launch[0]) / (0.08 * size)))
        for c in range(tenant.launch[1], tenant.incidents[0][2]):
            out[c] = w
    for start, end, first, last in tenant.incidents:
        if start <= n < end:
            out[first:last] = [6.0] * (last - first)
    return out


class _State(TraceState):
    """The generator's state while it walks the trace, one request per step."""

    def __init__(self, rng: random.Random, size: int) -> None:
        super().__init__(rng, size)
        self.tenants = [_tenant(rng, self.new, t, size) for t in range(TENANTS)]
        self.tickets: dict[int, Ticket] = {}
        self.attachments: list[tuple[int, int, Segment]] = []
        self.due: list[tuple[float, int]] = []  # heap: (due, ticket)
        self.closed: list[int] = []  # tickets closed since the last night, in order
        self.closes: list[tuple[int, int]] = []
        self.batch: deque[int] = deque()  # tickets the running nightly jobs still summarize
        self.nights = {int(((d + 1) / DAYS - NIGHT) * size) for d in range(DAYS)}

    def step(self, n: int) -> None:
        """Request ``n``: a summary while a nightly job has work (BATCH_SHARE), else the next
        due turn of a ticket, else a new ticket."""
        if n in self.nights:
            self._night()
        if self.batch and self.rng.random() < BATCH_SHARE:
            self._summary(n, self.batch.popleft())
        elif self.due and self.due[0][0] <= n:
            self._turn(n, heapq.heappop(self.due)[1])
        else:
            self._open(n)

    def _send(self, n: int, kind: str, t: int, persona: int, segments: list[Segment]) -> None:
        """Append request ``n`` of ticket ``t`` and its metadata."""
        self.out.append(self.blocks.ids(0, segments))
        self.meta.append((kind, self.tickets[t].tenant, t, persona, segments))

    def _night(self) -> None:
        """Queue the nightly jobs: tenants in a random order, each summarizing its tickets
        closed since the last night (once each; a ticket open again now waits for its next
        close)."""
        order = list(range(TENANTS))
        self.rng.shuffle(order)
        done = [t for t in dict.fromkeys(self.closed) if self.tickets[t].state != "open"]
        self.batch.extend(t for tenant in order for t in done
                          if self.tickets[t].tenant == tenant)
        self.closed = []

    def _summary(self, n: int, t: int) -> None:
        """A nightly summary of ticket ``t``: the instruction, then the ticket's history."""
        tk = self.tickets[t]
        self._send(n, "summary", t, -1, [self.tenants[tk.tenant].summarize, *tk.history])

    def _open(self, n: int) -> None:
        """A new ticket at request ``n`` (named ``n``): a tenant by share (tripled during its
        incidents), 2..3 chunks by popularity, a turn count and a think time; then its first
        turn."""
        rng = self.rng
        shares = [t.share * (3 if any(s <= n < e for s, e, _, _ in t.incidents) else 1)
                  for t in self.tenants]
        tenant = rng.choices(range(TENANTS), shares)[0]
        kb, weights = self.tenants[tenant].kb, _weights(self.tenants[tenant], n, self.size)
        chunks = []
        for _ in range(rng.randint(2, 3)):
            c = rng.choices(range(len(kb)), weights)[0]
            chunks.append(kb[c])
            weights[c] = 0.0
        u = rng.random()
        turns = 1 if u < 0.35 else rng.randint(2, 4) if u < 0.85 else rng.randint(5, 8)
        think = rng.lognormvariate(math.log(10), 0.9)
        self.tickets[n] = Ticket(tenant, chunks, turns, think)
        self._turn(n, n)

    def _message(self, n: int, t: int) -> list[Segment]:
        """A user message, with an attachment (a screenshot or a log file) ATTACH of the
        time."""
        rng = self.rng
        out = [self.new(_tokens(rng, 40, 0.9, 5, 1000))]
        if rng.random() < ATTACH:
            shot = rng.random() < 0.5
            out.append(self.new(rng.randint(500, 1200) if shot
                                else _tokens(rng, 800, 0.8, 100, 4000)))
            self.attachments.append((n, t, out[-1]))
        return out

    def _turn(self, n: int, t: int) -> None:
        """The next turn of ticket ``t``: a reopening, a handoff to a specialist (HANDOFF of a
        front-line ticket's later turns) or an ordinary turn; then schedule the next one or
        close the ticket."""
        rng, tk = self.rng, self.tickets[t]
        kind = "reopen" if tk.state == "reopening" else "turn"
        tk.state = "open"
        if kind == "turn" and tk.persona == 0 and tk.history and rng.random() < HANDOFF:
            kind, tk.persona = "handoff", rng.randint(1, SPECIALISTS)
            tk.turns += rng.randint(1, 3)
            new = [self.new(rng.randint(40, 200))]  # the front-line assistant's note
        else:
            new = self._message(n, t)
        prompt = self.tenants[tk.tenant].prompts[tk.persona]
        self._send(n, kind, t, tk.persona, [prompt, *tk.chunks, *tk.history, *new])
        tk.history += [*new, self.new(_tokens(rng, 100, 0.6, 20, 700))]
        tk.turns -= 1
        context = sum(s for _, s in [prompt, *tk.chunks, *tk.history])
        if tk.turns and context < MAX_CONTEXT:
            heapq.heappush(self.due, (n + 1 + rng.expovariate(1 / tk.think), t))
        else:
            self._close(n, t)

    def _close(self, n: int, t: int) -> None:
        """Close ticket ``t`` for tonight's batch; REOPEN of tickets (once) are reopened
        8..60 % of the trace later for 1..3 turns."""
        tk = self.tickets[t]
        tk.state = "closed"
        self.closed.append(t)
        self.closes.append((n, t))
        if not tk.reopened and self.rng.random() < REOPEN:
            tk.state, tk.reopened = "reopening", True
            tk.turns = self.rng.randint(1, 3)
            heapq.heappush(self.due, (n + self.rng.uniform(0.08, 0.6) * self.size, t))
