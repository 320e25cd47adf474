"""bench.heldout's ``rl_rollout`` shape: one rollout replica of an RL post-training fleet
(the inference side of GRPO-style training of an LLM), shared with an internal evaluation
service and a debug chat tenant. Written after ``adaptive`` was frozen (at fee0aae), by
someone who had not read the eviction policies; the workload is modelled on how such traffic
looks, not on any policy. Prompts are laid out in token segments and cut into 16-token blocks
by ``bench.heldout_fewshot.Blocks``. Time is a clock in seconds (replies decode at 40 tokens a
second); requests are in arrival order, 5.1..5.4 hours and 58..61 steps at scale 1.0.

What each part models:

- the fleet: 128 replicas; the router hashes a training prompt (so its group and every turn
  of its episodes), an eval item or a chat to one replica, and the trace is one replica's
  stream. The dataset has 16384 prompts (this replica's shard: 128, scaled), 55 % math, 30 %
  code, 15 % tool use. Math prompts are one of 2 templates (60..200, 150..400 tokens) + a
  problem (30..1200, median 100); code: 1 template (250..600) + a problem (100..2500, median
  450); tool: one of 2 agent templates with tool schemas (700..1500, 400..900) + a task
  (30..800, median 120).
- steps and epochs: each step the fleet takes the next 1024 prompts of the epoch's shuffle of
  the whole dataset (16 steps an epoch; a new shuffle each epoch), so a shard prompt comes
  back once an epoch, 1..31 steps later, and the replica gets 8 of a step's prompts on
  average (hypergeometric). Every sample of every group sends its first turn at the step's
  start, in batch order: a group is G identical requests in a row (G = 16 for math, 8 for
  code and tool). Math and code samples are one request each (reply 200..8000 tokens, median
  1500, and 200..6000, median 1200, never re-sent).
- tool episodes: a sample makes 1..19 tool calls (lognormal, median 2) before answering; each
  turn's output (20..1500, median 200) and the tool's result (10..3000, median 120, 0.1..30 s
  later) are appended, and the whole episode is re-sent; samples of a group share only the
  first turn. An episode whose next turn would pass 8192 tokens of context is cut off.
- weight updates: synchronous on-policy training. 90..150 s (training + weight sync) after
  the step's last reply, and 200 s after its start at the earliest (the fleet's slowest
  sample, an 8000-token reply), the replica gets new weights and the next step starts. KV
  computed under old weights is wrong under new ones, so engines drop their prefix cache on
  an update (a reset or flush, or an engine asleep during training); prompts carry no version
  tag. The weights version is therefore part of every block's key (as an adapter is in
  ``fewshot_lora``), for every tenant: nothing computed under one version is requested under
  another, and a prompt coming back an epoch later is the same text as new blocks.
- eval: at step 0 and every 5 steps the eval service runs the suite under the new weights,
  beside the step's rollouts and holding the next update until it is done, 32 requests in
  flight. Its 6 benchmarks (5693 items fleet-wide; this replica gets 1/128 of each, at least
  one item) are gsm8k-like (8-shot header 700..1000 tokens, 1 sample), math500-like (4-shot,
  1200..1600, 4 samples), aime-like (short instruction, 16 samples), mmlu-like (57 subjects'
  5-shot headers 400..1200), code (4 samples) and function calling (tool schemas 600..1500):
  every run sends the same items in the same order, an item's samples one after another.
- debug chats: researchers chatting with the current policy, 36 new chats an hour (scaled):
  1 turn (40 %), 2..4 (40 %) or 5..10 (20 %), a message of 5..2000 tokens (median 60), a
  reply of 20..2000 (median 300) that joins the history, the next message 5..900 s (median
  40) after the reply. 70 % are behind one of 2 playground system prompts (50..300 tokens),
  30 % replay a training prompt (its template and problem). A chat that spans an update
  re-sends its history as new blocks.

9000 requests at scale 1.0: 440k..560k blocks requested, 90k..104k distinct (17..22 %) over
seeds 1..20; 45..48 % math, 22..25 % tool, 12..14 % code, 11 % eval and 5..8 % chat requests.
The shard, the eval items and the chat rate scale with the trace, so a scaled-down trace has
about as many epochs, steps and eval runs (at 0.25, eval is 17 % of it: every benchmark
keeps at least one item).
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
Meta = tuple[str, int, int, int, int, list[Segment]]  # kind, key, sample, turn, version, segments
Length = tuple[float, float, int, int]  # lognormal median and sigma, clipped to lo..hi
REPLICAS = 128  # rollout replicas; the router hashes a prompt, eval item or chat to one
DATASET, BATCH = 16384, 1024  # training prompts, fleet-wide, and prompts a step
EPOCH = DATASET // BATCH  # steps an epoch
RATE = 40.0  # tokens a second one sequence decodes at in a full batch
TRAIN = (90.0, 150.0)  # seconds from a step's last reply to the next weights (train + sync)
TAIL = 8000 / RATE  # seconds a step's rollouts last at least: the fleet's longest reply
TOOL_RESULT: Length = (120, 1.0, 10, 3000)
TOOL_LATENCY = (1.5, 1.0, 0.1, 30.0)  # seconds
MAX_CONTEXT = 8192  # tokens: a tool episode whose next turn would pass it is cut off
EVAL_EVERY, EVAL_CONCURRENCY = 5, 32  # steps between eval runs; requests it keeps in flight
CHATS_PER_HOUR = 36  # new debug chats (scaled)
THINK = (40.0, 1.0, 5.0, 900.0)  # seconds between a reply and the user's next message
PLAYGROUND = 0.7  # debug chats behind a playground system prompt; the rest replay a prompt


@dataclass(frozen=True)
class Kind:
    """A task kind of the training set: its share of prompts, group size G, its templates'
    token ranges, and the lengths of a problem, a reply (a tool turn's output for tool
    tasks) and, for tool tasks, the tool calls before the answer."""

    name: str
    share: float
    group: int
    templates: tuple[tuple[int, int], ...]
    problem: Length
    reply: Length
    calls: Length | None = None


KINDS = (Kind("math", 0.55, 16, ((60, 200), (150, 400)), (100, 0.7, 30, 1200),
              (1500, 0.8, 200, 8000)),
         Kind("code", 0.3, 8, ((250, 600),), (450, 0.6, 100, 2500), (1200, 0.7, 200, 6000)),
         Kind("tool", 0.15, 8, ((700, 1500), (400, 900)), (120, 0.7, 30, 800),
              (200, 0.8, 20, 1500), (2.0, 0.8, 1, 19)))


@dataclass(frozen=True)
class Bench:
    """A benchmark of the eval suite: items fleet-wide, few-shot headers (one per subject)
    and their token range, question length, samples per item and median reply tokens."""

    name: str
    items: int
    subjects: int
    header: tuple[int, int]
    question: Length
    samples: int
    reply: float


BENCHES = (Bench("gsm8k", 1319, 1, (700, 1000), (60, 0.5, 20, 300), 1, 200),
           Bench("math500", 500, 1, (1200, 1600), (80, 0.6, 20, 600), 4, 600),
           Bench("aime", 60, 1, (60, 120), (150, 0.4, 60, 400), 16, 3000),
           Bench("mmlu", 2850, 57, (400, 1200), (120, 0.6, 30, 800), 1, 300),
           Bench("code", 564, 1, (100, 250), (200, 0.6, 50, 1200), 4, 400),
           Bench("tools", 400, 1, (600, 1500), (60, 0.6, 15, 300), 1, 80))


@dataclass(frozen=True)
class Prompt:
    """A training prompt of this replica's shard: its kind (index into KINDS), template and
    problem."""

    kind: int
    template: Segment
    problem: Segment


@dataclass(frozen=True)
class Item:
    """An eval item on this replica: its benchmark (index into BENCHES), header, question."""

    bench: int
    header: Segment
    question: Segment


@dataclass
class Episode:
    """One sample of a group: its prompt, sample number, tool calls planned, the turns it has
    sent and its history (output, tool result, ...)."""

    prompt: int
    sample: int
    calls: int
    turn: int = 0
    history: list[Segment] = field(default_factory=list)


@dataclass
class Chat:
    """A debug chat: its system segments, turns planned, turns sent and history."""

    system: list[Segment]
    turns: int
    turn: int = 0
    history: list[Segment] = field(default_factory=list)


@dataclass(frozen=True)
class Step:
    """A training step: the weights version its rollouts run under, its epoch, its prompts
    (groups in batch order), the request it starts at and its start in seconds."""

    version: int
    epoch: int
    prompts: list[int]
    first: int
    start: float


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, key, sample, turn,
    weights version, segments): ("rollout", prompt, sample, turn), ("eval", item, sample, 0)
    or ("chat", chat (named by its first request), 0, turn). ``times``: seconds."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    prompts: list[Prompt]
    templates: list[list[Segment]]
    steps: list[Step]
    suite: list[Item]
    playground: list[Segment]
    chats: dict[int, Chat]


def rl_rollout(seed: int, scale: float = 1.0) -> Trace:
    """One rollout replica of an RL post-training fleet: GRPO groups of math, code and
    multi-turn tool prompts, epochs over the dataset, weight updates every step, a periodic
    eval suite and debug chats. See the module docstring."""
    return generate(seed, scale).trace


def rl_rollout_kept(seed: int, scale: float = 1.0) -> Trace:
    """``rl_rollout`` on an engine that keeps its prefix cache across weight updates (stale KV
    tolerated, as asynchronous off-policy rollouts do): the same requests, but a block's key
    leaves the weights version out, so a prompt back an epoch later, the eval suite's next
    run and a chat spanning an update reuse blocks computed under older weights."""
    return generate(seed, scale, flush=False).trace


def generate(seed: int, scale: float = 1.0, flush: bool = True) -> Run:
    """The trace of ``int(9000 * scale)`` requests and its metadata (see ``Run``); ``flush``
    False: block keys leave the weights version out (``rl_rollout_kept``)."""
    s = _State(random.Random(seed), int(9000 * scale), scale)
    s.flush = flush
    while len(s.out) < s.size:
        s.now, _, name, payload = heapq.heappop(s.events)
        getattr(s, "_on_" + name)(payload)
    return Run(s.out, s.meta, s.times, s.prompts, s.templates, s.steps, s.suite,
               s.playground, s.chats)



def _seconds(rng: random.Random, median: float, sigma: float, lo: float, hi: float) -> float:
    """A duration in seconds: lognormal around ``median``, clipped to lo..hi."""
    return max(lo, min(hi, rng.lognormvariate(math.log(median), sigma)))


def _suite(rng: random.Random, new, scale: float) -> list[Item]:
    """This replica's share of every benchmark (at least one item), in suite order."""
    out = []
    for b, bench in enumerate(BENCHES):
        headers = [new(rng.randint(*bench.header)) for _ in range(bench.subjects)]
        for _ in range(max(1, round(bench.items * scale / REPLICAS))):
            out.append(Item(b, rng.choice(headers), new(clipped_length(rng, *bench.question))))
    return out


def _turns(rng: random.Random) -> int:
    """Turns of a debug chat: 1 (40 %), 2..4 (40 %) or 5..10 (20 %)."""
    u = rng.random()
    return 1 if u < 0.4 else rng.randint(2, 4) if u < 0.8 else rng.randint(5, 10)


class _State(TraceState):
    """The generator's state: a clock in seconds and a heap of events, each of which sends
    at most one request."""

    def __init__(self, rng: random.Random, size: int, scale: float) -> None:
        super().__init__(rng, size)
        new = self.new
        self.templates = [[new(rng.randint(*r)) for r in k.templates] for k in KINDS]
        self.shard = max(4, round(DATASET * scale / REPLICAS))
        cut = list(itertools.accumulate(kind.share for kind in KINDS))
        kinds = [bisect.bisect(cut, (i + 0.5) / self.shard) for i in range(self.shard)]
        rng.shuffle(kinds)
        self.prompts = [self._prompt(k) for k in kinds]
        self.suite = _suite(rng, new, scale)
        self.playground = [new(rng.randint(50, 300)) for _ in range(2)]
        self.chat_rate = CHATS_PER_HOUR * scale / 3600
        self.chats: dict[int, Chat] = {}
        self.events: list[tuple[float, int, str, object]] = []
        self.seq = itertools.count()
        self.now, self.version, self.finish = 0.0, 0, 0.0
        self.flush = True  # the weights version is part of every block's key
        self.steps: list[Step] = []
        self.plan: list[list[int]] = []  # this epoch's steps' prompts
        self.open = 0  # rollout samples and eval requests of this version still to send
        self.queue: deque[tuple[int, int]] = deque()  # eval run: (item, sample) to send
        self.times: list[float] = []
        self._at(0.0, "update", None)
        self._at(rng.expovariate(self.chat_rate), "chat", None)

    def _prompt(self, k: int) -> Prompt:
        """A training prompt of kind ``k``: one of its templates and a problem."""
        rng = self.rng
        template = rng.choice(self.templates[k])  # drawn before the problem's length
        return Prompt(k, template, self.new(clipped_length(rng, *KINDS[k].problem)))

    def _at(self, when: float, name: str, payload: object) -> None:
        heapq.heappush(self.events, (when, next(self.seq), name, payload))

    def _send(self, kind: str, key: int, sample: int, turn: int, segs: list[Segment]) -> None:
        """Append a request under the current weights version, and its metadata."""
        self.out.append(self.blocks.ids(self.version if self.flush else 0, segs))
        self.meta.append((kind, key, sample, turn, self.version, segs))
        self.times.append(self.now)

    def _sent(self, reply: int) -> None:
        """One of this version's rollout samples or eval requests has sent its last request,
        whose reply takes ``reply`` tokens; after the last, training and the next weights."""
        self.finish = max(self.finish, self.now + reply / RATE)
        self.open -= 1
        if not self.open:
            self._at(self.finish + self.rng.uniform(*TRAIN), "update", None)

    def _epoch(self) -> None:
        """Plan an epoch: the fleet shuffles the dataset and cuts it into EPOCH batches; the
        shard's prompts fall at random places of the shuffle."""
        d = self.shard * REPLICAS
        at = self.rng.sample(range(d), self.shard)
        self.plan = [[] for _ in range(EPOCH)]
        for p in sorted(range(self.shard), key=at.__getitem__):
            self.plan[at[p] * EPOCH // d].append(p)

    def _on_update(self, _: object) -> None:
        """New weights (the first event: the initial ones), then the next step: every sample
        of every group sends its first turn now, in batch order; every EVAL_EVERY steps
        (step 0 too) the eval service starts a run of the suite under these weights."""
        s = len(self.steps)
        self.version = s
        if s % EPOCH == 0:
            self._epoch()
        prompts = self.plan[s % EPOCH]
        self.steps.append(Step(s, s // EPOCH, prompts, len(self.out), self.now))
        self.finish = self.now + TAIL
        for p in prompts:
            kind = KINDS[self.prompts[p].kind]
            for g in range(kind.group):
                calls = clipped_length(self.rng, *kind.calls) if kind.calls else 0
                self.open += 1
                self._at(self.now, "turn", Episode(p, g, calls))
        if s % EVAL_EVERY == 0:
            self.queue.extend((i, k) for i, item in enumerate(self.suite)
                              for k in range(BENCHES[item.bench].samples))
            self.open += len(self.queue)
            for _ in range(EVAL_CONCURRENCY):
                self._at(self.now, "eval", None)
        if not self.open:
            self._at(self.finish + self.rng.uniform(*TRAIN), "update", None)

    def _on_turn(self, ep: Episode) -> None:
        """A rollout turn: template + problem + the episode so far. A tool sample with calls
        left gets its output and the tool's result, and sends again once both are back."""
        rng, prompt = self.rng, self.prompts[ep.prompt]
        kind = KINDS[prompt.kind]
        segs = [prompt.template, prompt.problem, *ep.history]
        self._send("rollout", ep.prompt, ep.sample, ep.turn, segs)
        reply = clipped_length(rng, *kind.reply)
        if ep.turn < ep.calls:
            result = clipped_length(rng, *TOOL_RESULT)
            if sum(t for _, t in segs) + reply + result <= MAX_CONTEXT:
                ep.history += [self.new(reply), self.new(result)]
                ep.turn += 1
                self._at(self.now + reply / RATE + _seconds(rng, *TOOL_LATENCY), "turn", ep)
                return
        self._sent(reply)

    def _on_eval(self, _: object) -> None:
        """The eval harness fills a free slot with the suite's next (item, sample)."""
        if not self.queue:
            return
        i, k = self.queue.popleft()
        item = self.suite[i]
        self._send("eval", i, k, 0, [item.header, item.question])
        reply = clipped_length(self.rng, BENCHES[item.bench].reply, 0.6, 5, 8000)
        self._at(self.now + reply / RATE, "eval", None)
        self._sent(reply)

    def _on_chat(self, c: int | None) -> None:
        """A debug chat's next turn (None: a new chat, and the next arrival): system + history
        + message; the reply joins the history; the user answers after a think time."""
        rng = self.rng
        if c is None:
            c = len(self.out)
            self.chats[c] = Chat(self._debug_system(), _turns(rng))
            self._at(self.now + rng.expovariate(self.chat_rate), "chat", None)
        chat = self.chats[c]
        message = self.new(clipped_length(rng, 60, 1.0, 5, 2000))
        self._send("chat", c, 0, chat.turn, [*chat.system, *chat.history, message])
        reply = clipped_length(rng, 300, 0.8, 20, 2000)
        chat.history += [message, self.new(reply)]
        chat.turn += 1
        if chat.turn < chat.turns:
            self._at(self.now + reply / RATE + _seconds(rng, *THINK), "chat", c)

    def _debug_system(self) -> list[Segment]:
        """A playground system prompt (PLAYGROUND), else a training prompt being replayed."""
        if self.rng.random() < PLAYGROUND:
            return [self.rng.choice(self.playground)]
        prompt = self.rng.choice(self.prompts)
        return [prompt.template, prompt.problem]
