"""bench.heldout's ``fewshot_lora`` shape: an evaluation harness running k-shot tasks against a
multi-LoRA chat server. Written after the eviction policies were frozen, by someone who had
not read them; the workload is modelled on how such traffic looks, not on any policy.

Content is laid out in tokens, then cut into 16-token blocks as a prefix cache hashes them:
a block's id stands for its tokens and everything before them, so a block that straddles two
pieces of text (an instruction's end and an exemplar's start) changes when either does. Only
full blocks are hashed (a trailing partial block is not cached, so it is left out). The model
a request is for (the base model or a LoRA adapter) is part of every block's hash, so the same
text under two adapters shares nothing.

What each part models:

- the eval harness: from 2..8 % of the trace on, it runs 3 tasks at once; when one finishes
  the next queued task starts, and a finished task never comes back. A task is run against
  the base model (half the time) or one adapter. Its requests are a fixed 24..400-token
  instruction, then k exemplars (k from 1, 3, 5, 8, 10, 25; fewer if they would pass 4000
  tokens) from the task's pool of 8..200 exemplars (30..600 tokens each), then a unique
  16..1500-token question. 40 % of tasks use one fixed exemplar set for every question (the
  first k of the pool); the rest sample k shots per question, so two questions share the
  instruction and share further only while their shot sequences agree. Tasks are planned
  until they add up to 42 % of the trace's requests; their question counts scale with the
  trace, so a scaled-down trace still sees tasks start and finish.
- self-consistency / best-of-n: 25 % of tasks send every question 2..16 times (10..60
  questions each, other tasks 40..250), and 5 % of chat turns ask for 2..4 samples. The copies
  are identical prompts that follow the first within a short burst (1..2 requests apart, later
  only when bursts overlap).
- multi-LoRA tenants: the base model and 5 adapters serve the same 5 products (system prompts
  of 100..3000 tokens, Zipf(1) popularity); a conversation keeps the model it started on.
  Model popularity for new conversations is fixed except for a launch: at 25..45 % of the
  trace a new adapter starts taking traffic, ramping over 10..25 % of the trace to the weight
  of the most popular adapter, which fades to a tenth of its weight over the same ramp.
- background chat: every request that is not a burst copy or an eval question is the next due
  turn of a conversation, else a new one. A turn re-sends system prompt + history + a new
  4..3000-token message (median 40); the 10..1200-token reply (median 120) then joins the
  history. 50 % of conversations have one turn, 35 % 2..5, 15 % 6..25; each has its own think
  time (lognormal, median 40 requests, a few of them thousands), and one whose context passes
  8192 tokens ends.

9000 requests at scale 1.0: 630k..850k blocks requested, 90k..240k distinct (10..30 %; sampled
shots make most of a question's blocks new), over seeds 1..30. The harness start, the task
sizes and the adapter launch are fractions of the trace, so a scaled-down trace has them.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from dataclasses import dataclass, field

Trace = list[list[int]]
Segment = tuple[int, int]  # (content id, tokens): a piece of text that never changes
Meta = tuple[str, int, int, int, object]  # (kind, task or conversation, model, send, detail)
BLOCK = 16  # tokens per KV block
MODELS = 6  # 0 is the base model, 1..5 are LoRA adapters
PRODUCTS = 5
CONCURRENT = 3  # tasks the harness runs at once
EVAL_SHARE = 0.45  # chance that a request which is not a burst copy is an eval question
EVAL_BUDGET = 0.42  # the planned tasks' requests, as a share of the trace
SHOTS = {1: 1.0, 3: 2.0, 5: 4.0, 8: 2.0, 10: 1.0, 25: 0.5}  # k -> weight
MAX_SHOT_TOKENS = 4000
MAX_CONTEXT = 8192  # tokens of a conversation's context that end it


@dataclass
class Task:
    """One k-shot eval task as the harness runs it; ``fixed`` is its shot set when every
    question gets the same one (the first k of the pool), else None."""

    model: int
    instruction: Segment
    pool: list[Segment]
    k: int
    fixed: tuple[int, ...] | None
    samples: int  # copies of each question (1 unless self-consistency)
    questions: int  # questions still to send


@dataclass
class Conversation:
    """A background chat: its model and product, its history and turns left."""

    model: int
    product: int
    turns: int
    think: float  # mean requests between turns
    history: list[Segment] = field(default_factory=list)


@dataclass
class Run:
    """A generated trace with what the tests need to check it. ``meta`` per request: (kind
    "eval" or "chat", task index or conversation id, model, index of the request it is a copy
    of (its own if none), shot indices into the pool for eval or product for chat).
    ``shift``: (fading adapter, rising adapter, launch, ramp), times as fractions."""

    trace: Trace
    meta: list[Meta]
    tasks: list[Task]
    prompts: list[Segment]
    shift: tuple[int, int, float, float]


class Blocks:
    """Token segments -> block ids as a prefix cache hashes them, one per (model, everything up
    to the block's end), interned in a table."""

    def __init__(self) -> None:
        self._table: dict[tuple, int] = {}

    def ids(self, model: int, segments: list[Segment]) -> list[int]:
        """The ids of the full blocks of ``segments`` under ``model``: each block's key is its
        parent's id and the (segment, offset, tokens) pieces it holds."""
        table, out = self._table, []
        parent: object = ("model", model)
        piece: list[tuple[int, int, int]] = []
        fill = 0
        for content, tokens in segments:
            at = 0
            while at < tokens:
                take = min(BLOCK - fill, tokens - at)
                piece.append((content, at, take))
                at, fill = at + take, fill + take
                if fill == BLOCK:
                    parent = table.setdefault((parent, tuple(piece)), len(table))
                    out.append(parent)
                    piece, fill = [], 0
        return out


def fewshot_lora(seed: int, scale: float = 1.0) -> Trace:
    """An eval harness running 3 k-shot tasks at once (shared instructions, fixed or sampled
    exemplars, self-consistency copies) beside multi-turn chat under 5 LoRA adapters and the
    base model, one adapter rising as another fades. See the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace of ``int(9000 * scale)`` requests and its metadata (see ``Run``)."""
    rng = random.Random(seed)
    state = _State(rng, int(9000 * scale), scale)
    for n in range(state.size):
        state.step(n)
    return Run(state.out, state.meta, state.tasks, state.prompts, state.shift)


def segment_tokens(segs: list[Segment]) -> int:
    """The tokens of ``segs``."""
    return sum(n for _, n in segs)


def clipped_length(rng: random.Random, median: float, sigma: float, lo: int, hi: int) -> int:
    """A length (tokens, turns, pages): lognormal around ``median``, rounded, clipped to
    lo..hi. The held-out shapes draw their lengths with it."""
    return max(lo, min(hi, round(rng.lognormvariate(math.log(median), sigma))))


def _task(rng: random.Random, new, scale: float) -> Task:
    """A planned task (see the module docstring): its model, instruction, exemplar pool, k,
    fixed shots or None, samples per question and question count (scaled)."""
    model = 0 if rng.random() < 0.5 else rng.randint(1, MODELS - 1)
    instruction = new(clipped_length(rng, 80, 0.8, 24, 400))
    k = rng.choices(list(SHOTS), list(SHOTS.values()))[0]
    size = max(k + 2, round(math.exp(rng.uniform(math.log(8), math.log(200)))))
    pool = [new(clipped_length(rng, 120, 0.6, 30, 600)) for _ in range(size)]
    mean = sum(t for _, t in pool) / size
    while k > 1 and k * mean > MAX_SHOT_TOKENS:
        k -= 1
    fixed = tuple(range(k)) if rng.random() < 0.4 else None
    consistency = rng.random() < 0.25
    samples = rng.randint(2, 16) if consistency else 1
    questions = rng.randint(10, 60) if consistency else rng.randint(40, 250)
    return Task(model, instruction, pool, k, fixed, samples, max(2, round(questions * scale)))


def _plan(rng: random.Random, new, size: int, scale: float) -> list[Task]:
    """Tasks in the order the harness will start them, until their requests (questions x
    samples) reach EVAL_BUDGET of the trace."""
    tasks: list[Task] = []
    planned = 0
    while planned < EVAL_BUDGET * size:
        tasks.append(_task(rng, new, scale))
        planned += tasks[-1].questions * tasks[-1].samples
    return tasks


def _shift(rng: random.Random) -> tuple[list[float], tuple[int, int, float, float]]:
    """Static chat weights per model (base 2, adapters 4, 2, 1.5, 1, 0.5 shuffled) and the
    launch: the most popular adapter fades while a random other one rises, from a launch at
    25..45 % of the trace over a ramp of 10..25 %."""
    weights = [4.0, 2.0, 1.5, 1.0, 0.5]
    rng.shuffle(weights)
    weights = [2.0, *weights]
    fading = weights.index(4.0)
    rising = rng.choice([m for m in range(1, MODELS) if m != fading])
    return weights, (fading, rising, rng.uniform(0.25, 0.45), rng.uniform(0.1, 0.25))


def _popularity(weights: list[float], shift: tuple, f: float) -> list[float]:
    """Chat weights per model at fraction ``f`` of the trace: the rising adapter has none before
    the launch and the fading adapter's weight after the ramp; the fading one keeps a tenth."""
    fading, rising, launch, ramp = shift
    r = min(1.0, max(0.0, (f - launch) / ramp))
    out = list(weights)
    out[rising] = weights[fading] * r
    out[fading] = weights[fading] * (1.0 - 0.9 * r)
    return out


class TraceState:
    """What a held-out generator walks the trace with: its rng, the request count it aims
    for, a source of unique content segments, the block-id builder, the trace so far and
    one metadata entry per request (bench/heldout_support.py builds on it too)."""

    def __init__(self, rng: random.Random, size: int) -> None:
        self.rng, self.size = rng, size
        fresh = itertools.count()
        self.new = lambda tokens: (next(fresh), tokens)  # a segment of unique content
        self.blocks = Blocks()
        self.out: Trace = []
        self.meta: list = []


class EventState(TraceState):
    """A TraceState driven by a clock (seconds) and an event heap: ``at`` schedules handler
    ``_on_<name>(payload)``, and ``run`` calls them in time order (ties in scheduling order)
    until the trace has its requests, each appended with its time (``times``; ``send``
    appends one in a single key space). The
    vision_mix, npc_world and api_gateway generators build on it."""

    def __init__(self, rng: random.Random, size: int, scale: float) -> None:
        super().__init__(rng, size)
        self.scale, self.now = scale, 0.0
        self.events: list[tuple[float, int, str, object]] = []
        self.seq = itertools.count()
        self.times: list[float] = []

    def at(self, when: float, name: str, payload: object) -> None:
        """Schedule handler ``_on_<name>(payload)`` at ``when``."""
        heapq.heappush(self.events, (when, next(self.seq), name, payload))

    def send(self, kind: str, key: int, step: int, segs: list[Segment]) -> None:
        """Append a request (one model, so one key space) and its metadata."""
        self.out.append(self.blocks.ids(0, segs))
        self.meta.append((kind, key, step, segs))
        self.times.append(self.now)

    def run(self) -> None:
        """Handle events in time order until the trace holds ``size`` requests."""
        while len(self.out) < self.size:
            self.now, _, name, payload = heapq.heappop(self.events)
            getattr(self, "_on_" + name)(payload)



class ClockedState(EventState):
    """An EventState whose trace ends at a time, not a size: ``run`` handles events in time
    order until ``END`` (seconds on its clock); ``emit`` is ``send`` returning the request's
    index. The blind shapes since media_pipeline build on it."""

    END = 0.0

    def run(self) -> None:
        """Handle events in time order until END."""
        while self.events and self.events[0][0] < self.END:
            self.now, _, name, payload = heapq.heappop(self.events)
            getattr(self, "_on_" + name)(payload)

    def emit(self, kind: str, owner: int, step: int, segs: list[Segment]) -> int:
        """``send``: a request (one model, one key space) and its metadata; its index."""
        self.send(kind, owner, step, segs)
        return len(self.out) - 1

    def turn(self, chat, head: list[Segment], msg: Segment, reply: tuple,
             req: tuple[str, int, object]) -> tuple[list[Segment], Segment]:
        """One turn of ``chat`` (its ``history``, ``sent`` and ``turns``): ``head``, the
        history and ``msg`` are emitted as request ``req`` = (kind, owner, step), its index
        joins ``sent``; the reply, its length drawn by ``clipped_length(rng, *reply)``,
        joins the history after ``msg``; one turn fewer. The segments sent and the reply."""
        segs = [*head, *chat.history, msg]
        chat.sent.append(self.emit(*req, segs))
        out = self.new(clipped_length(self.rng, *reply))
        chat.history += [msg, out]
        chat.turns -= 1
        return segs, out


@dataclass
class Chat:
    """A chat that ClockedState.turn plays: its kind, its owner (what it is about), turns
    left, what it holds fixed after its head (the owner and the fixed part are each shape's
    own, said where its desk makes chats), its history and its request indices."""

    kind: str
    owner: int
    turns: int
    fixed: list[Segment]
    history: list[Segment] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)


class _State(TraceState):
    """The generator's state while it walks the trace, one request per step."""

    def __init__(self, rng: random.Random, size: int, scale: float) -> None:
        super().__init__(rng, size)
        self.copies: list[tuple[int, int, int]] = []  # heap: (due, send, copy number)
        self.prompts = [self.new(clipped_length(rng, 400, 0.6, 100, 3000))
                        for _ in range(PRODUCTS)]
        self.weights, self.shift = _shift(rng)
        self.tasks = _plan(rng, self.new, size, scale)
        self.queue = list(range(len(self.tasks)))[::-1]  # popped from the end
        self.active: list[int] = []
        self.harness = int(rng.uniform(0.02, 0.08) * size)
        self.convs: dict[int, Conversation] = {}
        self.due: list[tuple[float, int]] = []  # heap: (due, conversation)

    def step(self, n: int) -> None:
        """Request ``n``: a burst copy that is due, else an eval question (EVAL_SHARE while a
        task is running), else a chat turn."""
        if self.copies and self.copies[0][0] <= n:
            send = heapq.heappop(self.copies)[1]
            self.out.append(list(self.out[send]))
            self.meta.append(self.meta[send])
            return
        while n >= self.harness and self.queue and len(self.active) < CONCURRENT:
            self.active.append(self.queue.pop())
        if self.active and self.rng.random() < EVAL_SHARE:
            self._question(n)
        else:
            self._turn(n)

    def _send(self, n: int, kind: str, key: int, model: int, segments: list[Segment],
              detail: object, copies: int) -> None:
        """Append request ``n`` and schedule its ``copies - 1`` burst copies, each 1..2
        requests after the one before."""
        self.out.append(self.blocks.ids(model, segments))
        self.meta.append((kind, key, model, n, detail))
        due = n
        for c in range(copies - 1):
            due += 1 + (self.rng.random() < 0.3)
            heapq.heappush(self.copies, (due, n, c))

    def _question(self, n: int) -> None:
        """The next question of a random running task; a task whose questions are all sent
        leaves the harness for good."""
        t = self.rng.choice(self.active)
        task = self.tasks[t]
        shots = task.fixed or tuple(self.rng.sample(range(len(task.pool)), task.k))
        question = self.new(clipped_length(self.rng, 100, 0.8, 16, 1500))
        segments = [task.instruction, *(task.pool[s] for s in shots), question]
        self._send(n, "eval", t, task.model, segments, shots, task.samples)
        task.questions -= 1
        if not task.questions:
            self.active.remove(t)

    def _conversation(self, n: int) -> Conversation:
        """A new conversation at request ``n``: model by the popularity of the moment, product
        Zipf(1), turns (50 %: 1, 35 %: 2..5, 15 %: 6..25), think time (lognormal)."""
        rng = self.rng
        weights = _popularity(self.weights, self.shift, n / self.size)
        model = rng.choices(range(MODELS), weights)[0]
        product = rng.choices(range(PRODUCTS), [1 / (p + 1) for p in range(PRODUCTS)])[0]
        u = rng.random()
        turns = 1 if u < 0.5 else rng.randint(2, 5) if u < 0.85 else rng.randint(6, 25)
        return Conversation(model, product, turns, rng.lognormvariate(math.log(40), 1.5))

    def _turn(self, n: int) -> None:
        """The next due turn of a conversation, else a new one: prompt + history + message
        (5 %: 2..4 samples); the message and reply then join the history."""
        rng = self.rng
        if self.due and self.due[0][0] <= n:
            c = heapq.heappop(self.due)[1]
        else:
            c = n  # a conversation is named by its first request
            self.convs[c] = self._conversation(n)
        conv = self.convs[c]
        message = self.new(clipped_length(rng, 40, 0.9, 4, 3000))
        segments = [self.prompts[conv.product], *conv.history, message]
        copies = rng.randint(2, 4) if rng.random() < 0.05 else 1
        self._send(n, "chat", c, conv.model, segments, conv.product, copies)
        conv.history += [message, self.new(clipped_length(rng, 120, 0.6, 10, 1200))]
        conv.turns -= 1
        context = sum(t for _, t in [self.prompts[conv.product], *conv.history])
        if conv.turns and context < MAX_CONTEXT:
            heapq.heappush(self.due, (n + 2 * copies + rng.expovariate(1 / conv.think), c))
        else:
            del self.convs[c]
