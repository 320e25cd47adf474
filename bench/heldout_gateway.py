"""bench.heldout's ``api_gateway`` shape: one replica behind a hosted LLM API (a provider's
prompt-caching API) serving some 400 customers at once: template calls from API backends,
chat apps, coding agents, one-off long documents, nightly batch jobs, an eval suite that runs
again a day later and a retry storm, while customers deploy new prompt versions. Written
after ``adaptive`` was frozen (at 395a810), by someone who had not read the eviction policies;
the workload is modelled on how such traffic looks, not on any policy. Prompts are laid out
in token segments and cut into 16-token blocks by ``bench.heldout_fewshot.Blocks``. The
provider isolates each organisation's cache, so the customer is part of every block's key
(the same text from two customers shares nothing). The gateway routes by prefix affinity: a
customer's traffic goes to its home replica (a hash of the customer and its prompt), and the
busiest spill over to a few more, so this replica is home to 400 of some 6000 customers and
sees their traffic. Time is a clock in seconds from Tuesday 06:00 UTC; requests are in
arrival order (replies decode at 50 tokens a second).

Customers (400, scaled, at least 12): chat apps 35 %, coding-agent products 15 % and API
backends making template calls 50 % (at least 2 of each); time zones UTC-8 25 %, UTC-5 22 %,
UTC+0 10 %, UTC+1 15 %, UTC+5:30 8 %, UTC+8 12 %, UTC+9 8 %; traffic weights Zipf(0.8) over
one shuffled ranking. Each has a system prompt with its tools or output schema (two segments
split at 30..70 %): chat apps 200..8000 tokens (lognormal, median 700), coding agents
3000..30000 (median 8000), backends 150..10000 (median 700) for each of 1..3 apps (endpoints;
weights 1, 1/2, 1/3). A stream's customer is drawn by weight times a profile at the
customer's local hour (office, consumer with an evening peak, or backend: flatter, a day
bump), so the day moves from Europe to America to Asia.

- deploys: a prompt gets a new version Poisson 0.3 times a day (1.5 for the top 10 % of
  customers by weight), starting 10:00..18:00 local. A version keeps the last one's first x
  tokens (x over its length Beta(2, 1); 10 % are rewrites from token 0) and rewrites the
  rest at 0.8..1.3 times its length, so later blocks are new content. Clients roll over
  2..30 min: each (a conversation, a session, a one-off request) switches at the start plus
  a uniform share of the rollout, so old and new versions are sent side by side. A chat
  app's prompt is on its server (a conversation switches mid-way, and its history behind the
  prompt becomes new); a coding agent's is in its client (a session keeps its version).
- template calls: 2400 a day (backend profile): an app's prompt + an input (5..4000 tokens,
  median 100): extraction, classification, routing.
- chat: 300 new conversations a day (consumer profile), 1 turn (50 %), 2..5 (38 %) or 6..20
  (12 %). A turn re-sends prompt + every earlier message and reply + a new message (2..4000,
  median 30); the reply (10..1500, median 150) joins the history. The user answers 4 s..10
  min after the reply (median 30 s, 79 %), after a break of 5..60 min (median 15 min, 15 %)
  or comes back 1..20 h later (median 3 h, 6 %); a context of 10000 tokens ends it.
- coding agents: 4 sessions a day (office profile; at least 1 a day when scaled down). A
  session starts with the user's task and repository context (200..8000, median 1500); each
  model call re-sends prompt + context. A run is 1..40 calls (median 6), 15..150 (median 40)
  in the 10 % of sessions that are long autonomous tasks; mid-run a call writes a tool call
  (30..1500, median 150) and the tool's output (20..20000, median 400) joins the context
  after the tool runs (0.2 s..3 min, median 2 s); the last call answers (50..1500, median
  300). 40 % of runs are followed by the user's next request (5..1500, median 80) after 10 s..
  15 min (median 90 s, 60 %), 5..90 min (median 20 min, 30 %) or 1..16 h (median 3 h, 10 %),
  across the 5-min and 1-h cache lifetimes clients count on. A context over the session's
  cap (30k..130k tokens, uniform: clients differ; at least 16k over the prompt) is compacted:
  the client asks for a summary (prompt + context + a 50..150-token ask) and the summary
  (2000..6000) replaces the context.
- one-off documents: 30 a day (office profile; chat and backend customers): prompt + a long
  document or PDF's text (3000..150000 tokens, median 12000) + an instruction; never reused.
- nightly batches: 3 backend customers (drawn by weight; scaled, at least 1) each run a job
  at a whole local hour in 01..03 every night: 300..1000 items (scaled, at least 10), each a
  new item (20..2000, median 120) behind the job's template (300..1200), one every 0.5..1.5 s
  on average (exponential); the next night the same template with new items.
- eval: a backend customer runs a suite 0.5..2.5 h into the trace (a morning in Europe) and
  its scheduler runs it again exactly a day later: 3..5 tasks, each an instruction (80..300)
  + 3..10 exemplars (80..250), over 50..150 questions a task (scaled, at least 3; 20..800
  tokens, median 150), task by task, a request every 0.25 s on average; the second run sends
  the same requests in the same order.
- retry storm: a busy backend customer (by weight) at local 11:00..16:00 on its first
  business day over an hour into the trace: its upstream fails 20..60 requests (scaled, at
  least 3) arriving over 3..10 min, and the client re-sends each until 3..8 sends in all, the
  k-th retry after min(30 s, 2^(k-1) s) times 0.5..1.5: bursts of identical requests.

9000 requests at scale 1.0 span 30..38 hours and reach 307..328 customers: 737k..1058k
blocks requested (mean 882k), 164k..196k distinct (18..24 %, mean 21 %) over seeds 1..10.
Template calls are 32..43 % of the requests (21..39 % of the blocks), batch items 28..39 %
(15..29 %), chat 13..18 % (15..29 %), eval 7..13 % (5..15 %), retries 1.5..4.6 % (1..11 %),
agent calls 0.02..2.1 % (0.1..33 %: one to eight sessions) and documents 0.4..0.6 % (5..8 %).
The live working set, with no cache policy: at a request, the blocks used before it and used
again after it number 17.4k..23.6k at the median request, 23.3k..32.3k at most, over 16000 at
60..80 % of the requests; counting only uses at most 1000 requests (about 4 h) apart, 2.1k..5.6k
at the median and 7.8k..12.1k at most; at most 100 apart, 2.2k..5.6k at most. Distinct blocks
touched in a clock hour: 7.7k..9.3k at the median hour, 16.2k..25.2k at most. The largest
agent context is 8k..79k tokens (115k at seed 16; contexts are compacted in 9 of seeds
1..20), the largest document 38k..120k. Rates (each with a floor), customers, jobs, the eval
suite and the storm scale with the trace, so a scaled-down trace spans about as many hours;
agent sessions keep their length, so one long session can make a scaled-down trace nearly as
large (in blocks) as the full one.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, clipped_length, segment_tokens
from bench.heldout_gateway_parts import Customer, GatewayState
from bench.heldout_vision_parts import Length, lognormal

Trace = list[list[int]]
Meta = tuple[str, int, int, int, list[Segment]]  # kind, customer, key, step, segments
KINDS = ("task", "chat", "agent", "doc", "batch", "eval", "retry")
REQUESTS = 9000  # at scale 1.0
RATE = 50.0  # tokens a second a reply decodes at
# chat conversations
MESSAGE: Length = (30, 1.1, 2, 4000)
REPLY: Length = (150, 0.8, 10, 1500)
THINK = (30.0, 0.9, 4.0, 600.0)  # seconds from a reply to the user's next message
BREAK, BREAK_AFTER = 0.15, (900.0, 0.8, 300.0, 3600.0)  # a pause of minutes
AWAY, AWAY_AFTER = 0.06, (3 * 3600.0, 1.0, 3600.0, 20 * 3600.0)  # back hours later
CHAT_CAP = 10000  # tokens of context a chat app sends at most (the conversation ends)
# agent sessions
AGENT_TASK: Length = (1500, 1.0, 200, 8000)  # the user's request + repository context
STEPS: Length = (6, 0.8, 1, 40)  # model calls in a run
LONG, LONG_STEPS = 0.1, (40, 0.5, 15, 150)  # sessions of long autonomous runs; their calls
CALL: Length = (150, 0.7, 30, 1500)  # a tool call the model writes
RESULT: Length = (400, 1.3, 20, 20000)  # the tool's output
TOOL_TIME = (2.0, 1.2, 0.2, 180.0)  # seconds a tool runs
ANSWER: Length = (300, 0.7, 50, 1500)  # the run's final answer
FOLLOW = 0.4  # runs followed by another request of the user
FOLLOW_AFTER = ((0.6, (90.0, 1.0, 10.0, 900.0)), (0.3, (1200.0, 0.7, 300.0, 5400.0)),
                (0.1, (3 * 3600.0, 1.0, 3600.0, 16 * 3600.0)))  # share, lognormal pause
FOLLOW_UP: Length = (80, 1.0, 5, 1500)  # the user's next request
COMPACT_AT = (30_000, 130_000)  # tokens of context at which the client compacts
ROOM = 16_000  # tokens the cap leaves after the prompt, at least
SUMMARY = (2000, 6000)  # tokens of the summary that replaces the history


@dataclass
class Conversation:
    """A chat app's conversation: customer, app prompt, rollout draw, planned and sent
    turns, the history (messages and replies) and the request index of each turn."""

    customer: int
    app: int
    u: float
    turns: int
    history: list[Segment] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)


@dataclass
class Session:
    """An agent session: customer, the prompt version its client started with (kept for the
    session), the context after it, model calls left in the current run, the request index
    of each call and of each compaction."""

    customer: int
    prompt: list[Segment]
    context: list[Segment]
    steps: int
    cap: int
    long: bool
    sent: list[int] = field(default_factory=list)
    compactions: list[int] = field(default_factory=list)


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, customer, key, step,
    segments): ("task", c, app, 0), ("chat", c, conversation, turn), ("agent", c, session,
    call), ("doc", c, request, 0), ("batch", c, job, item), ("eval", c, run, item) or
    ("retry", c, storm request, try). ``times``: seconds."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    customers: list[Customer]
    conversations: list[Conversation]
    sessions: list[Session]
    batches: list[tuple[int, Segment, list[float]]]
    evals: dict[str, object]
    storm: dict[str, object]


def api_gateway(seed: int, scale: float = 1.0) -> Trace:
    """One replica behind a hosted LLM API serving some 400 customers: template calls, chat
    apps, coding agents, one-off documents, nightly batches, an eval run repeated a day later
    and a retry storm, with prompt deploys. See the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace of ``int(REQUESTS * scale)`` requests and its metadata (see ``Run``)."""
    s = _State(random.Random(seed), int(REQUESTS * scale), scale)
    s.run()
    return Run(s.out, s.meta, s.times, s.customers, s.conversations, s.sessions, s.batches,
               s.evals, s.storm)


def _turns(rng: random.Random) -> int:
    """Turns of a conversation: 1 (50 %), 2..5 (38 %) or 6..20 (12 %)."""
    u = rng.random()
    return 1 if u < 0.5 else rng.randint(2, 5) if u < 0.88 else rng.randint(6, 20)


def _think(rng: random.Random) -> float:
    """Seconds before a user's next message: a pause of minutes BREAK of the time, hours
    AWAY of the time, else THINK."""
    u = rng.random()
    after = AWAY_AFTER if u < AWAY else BREAK_AFTER if u < AWAY + BREAK else THINK
    return lognormal(rng, *after)


def _steps(long: bool) -> Length:
    """The model calls of a run: LONG_STEPS in a long session, else STEPS."""
    return LONG_STEPS if long else STEPS


class _State(GatewayState):
    """GatewayState with the chat conversations and the agent sessions."""

    def __init__(self, rng: random.Random, size: int, scale: float) -> None:
        super().__init__(rng, size, scale)
        self.conversations: list[Conversation] = []
        self.sessions: list[Session] = []

    def _on_chat(self, _: object) -> None:
        """A new conversation with a chat app; its first turn."""
        self.at(self.arrival("chat"), "chat", None)
        c, rng = self.customer("chat"), self.rng
        self.conversations.append(Conversation(c, self.app(c), rng.random(), _turns(rng)))
        self._on_turn(len(self.conversations) - 1)

    def _on_turn(self, k: int) -> None:
        """A turn: the app's prompt (the version sent now) + the history + a message; the
        message and reply join the history; the next turn follows unless the context would
        pass CHAT_CAP."""
        rng, conv = self.rng, self.conversations[k]
        prompt = self.customers[conv.customer].prompts[conv.app].at(self.now, conv.u)
        message = self.new(clipped_length(rng, *MESSAGE))
        conv.sent.append(len(self.out))
        self.send_as("chat", conv.customer, k, len(conv.sent) - 1, [*prompt, *conv.history,
                                                               message])
        reply = clipped_length(rng, *REPLY)
        conv.history += [message, self.new(reply)]
        if len(conv.sent) < conv.turns and segment_tokens(prompt + conv.history) < CHAT_CAP:
            self.at(self.now + reply / RATE + _think(rng), "turn", k)

    def _on_agent(self, _: object) -> None:
        """A new agent session: the prompt version its client has now, the user's task; its
        first run starts."""
        self.at(self.arrival("agent"), "agent", None)
        c, rng = self.customer("agent"), self.rng
        prompt = self.customers[c].prompts[0].at(self.now, rng.random())
        task = self.new(clipped_length(rng, *AGENT_TASK))
        long = rng.random() < LONG
        cap = max(rng.randint(*COMPACT_AT), segment_tokens(prompt) + ROOM)
        self.sessions.append(Session(c, prompt, [task], clipped_length(rng, *_steps(long)),
                                     cap, long))
        self._on_step(len(self.sessions) - 1)

    def _on_step(self, k: int) -> None:
        """A model call: prompt + context. Mid-run the model calls a tool (the call and its
        result join the context); a run's last call answers, and the user follows up or the
        session ends. A context over the session's cap is compacted first."""
        rng, s = self.rng, self.sessions[k]
        if segment_tokens(s.prompt + s.context) > s.cap:
            self._compact(k)
            return
        s.sent.append(len(self.out))
        self.send_as("agent", s.customer, k, len(s.sent) - 1, [*s.prompt, *s.context])
        s.steps -= 1
        if s.steps > 0:
            call = clipped_length(rng, *CALL)
            s.context += [self.new(call), self.new(clipped_length(rng, *RESULT))]
            self.at(self.now + call / RATE + lognormal(rng, *TOOL_TIME), "step", k)
            return
        answer = clipped_length(rng, *ANSWER)
        s.context.append(self.new(answer))
        if rng.random() < FOLLOW:
            _, pause = rng.choices(FOLLOW_AFTER, [w for w, _ in FOLLOW_AFTER])[0]
            self.at(self.now + answer / RATE + lognormal(rng, *pause), "follow", k)

    def _on_follow(self, k: int) -> None:
        """The user's next request in a session: it joins the context and a run starts."""
        s = self.sessions[k]
        s.context.append(self.new(clipped_length(self.rng, *FOLLOW_UP)))
        s.steps = clipped_length(self.rng, *_steps(s.long))
        self._on_step(k)

    def _compact(self, k: int) -> None:
        """The client asks for a summary of the context (prompt + context + the ask), which
        then replaces the context; the run goes on after the summary is written."""
        s = self.sessions[k]
        s.compactions.append(len(self.out))
        s.sent.append(len(self.out))
        ask = self.new(self.rng.randint(50, 150))
        self.send_as("agent", s.customer, k, len(s.sent) - 1, [*s.prompt, *s.context, ask])
        summary = self.rng.randint(*SUMMARY)
        s.context = [self.new(summary)]
        self.at(self.now + summary / RATE, "step", k)
