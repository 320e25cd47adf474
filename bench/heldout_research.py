"""bench.heldout's ``deep_research`` shape: one inference replica behind an answer engine
with a deep-research mode: single-shot search answers with follow-ups, research sessions that
fan out to parallel sub-agents, citation checks and revisions, scheduled monitors re-running
saved queries over pages that change, and PDF uploads. Written after ``adaptive`` was frozen
(at 395a810), by someone who had not read the eviction policies; the workload is modelled on
how such traffic looks, not on any policy. Prompts are laid out in token segments and cut
into 16-token blocks by ``bench.heldout_fewshot.Blocks`` (one model, one key space). Time is
a clock in seconds from 06:00 local (the region this replica serves); requests are in arrival
order, replies decode at 50 tokens/s. Rates are a day's at scale 1.0, Poisson, following a
profile by local hour: search (1.05..1.5 over 08..22, 0.1 at 03..05), work (office hours,
for research and uploads) and news (stories break by day).

Every system prompt (answer 600..1500 tokens, related questions 250..500, orchestrator
1500..3500, sub-agent with its tools 2500..6000, verifier 400..900, monitor 600..1200) is
followed by the day's date line (10..20 tokens), so at local midnight every block from the
date on is new while the prompt heads stay shared.

- answer engine: 1800 search threads a day (search profile), 55 % long-tail questions whose
  results are all pages never seen before, the rest on one of 3000 evergreen topics (scaled,
  at least 30; Zipf(0.9)), each with a ranked pool of 8..40 page excerpts. News: 26 stories a
  day (news profile, at least 3) each draw 3..500 threads (lognormal, median 25; scaled, at
  least 2, and fewer when the story floor applies, so news keeps its share) at its birth + a
  uniform 0.3..2 h ramp + an exponential fade (mean 1..10 h, median 3 h), thinned by the
  search profile (news is read by day: a story that breaks at night waits for the morning);
  a story has 3..6 articles at birth and one more every 5 min..3 h (median 30 min) for
  2..10 h, and its search ranks the newest first. A search returns 5 results (75 %) or 8
  (pro, 25 %); each is a page no other search returned 30 % of the time, else the next pick
  from the pool, Zipf(1.5) by rank among those left, so two searches share results (and
  blocks) only while their ranked lists agree. Excerpts are 40..1000 tokens (median 160). A
  turn sends answer prompt + the thread so far + results + the question (3..250, median 14);
  results, question and answer (60..1500, median 250) join the thread. 30 % of threads get a
  follow-up 10 s..30 min after the answer (median 90 s), each 40 % likely to get another,
  until the thread passes 16000 tokens. 60 % of answers are followed by a related-questions
  request: its prompt + the question + the answer.
- deep research: 8 sessions a day (work profile; at least 2 a day when scaled down). The
  orchestrator plans (its prompt + the question, 15..600 tokens, median 80; the plan is
  200..2000, median 700), then 3..8 sub-agents start within a second of each other. Each
  calls the model 4..20 times (median 7): sub-agent prompt + the plan + its sub-question
  (15..200) + its tool history; between calls it writes a tool call (15..200) and gets a web
  search's results (250..2000, median 700; 0.3..10 s) or a fetched page (300..6000, median
  1500; 0.5..30 s), half and half; its last call, or one past 48000 tokens, writes its
  findings (200..2000). When all have reported, the synthesis sends orchestrator prompt +
  question + plan + every sub-agent's findings (launch order); the report is 1000..8000
  tokens (median 3000). Then a verifier checks 5..15 claims, one request every 0.3..1.5 s:
  its prompt + the report + the claim (10..120) + the cited passage (100..1500). 35 % of
  users come back 20 min..20 h later (median 3 h; 25 % once more after a revision) with a
  revision request (10..400 tokens): orchestrator prompt + everything so far + the ask; 40 %
  of the time the orchestrator first sends 1..3 new sub-agents (its reply, 40..500 tokens,
  joins the context) and sends the context again with their findings, else it revises at
  once; the revised report joins the context.
- monitors: 60 saved queries (scaled, at least 3; the first and 25 % of the rest hourly, at
  a minute of the hour; the others daily, 70 % at 05..09, else any hour). A run sends monitor
  prompt + the query (15..300) + its 2..6 tracked pages (200..4000 tokens, median 800) + the
  last run's digest (100..1200, new each run). A page changes between runs with probability
  1 - exp(-rate x hours), its rate lognormal (hourly monitors median 0.3 an hour, daily ones
  0.05); a change keeps the page's first tokens up to a uniform cut and is new content from
  there on (0.8..1.25 times as long), so every later block of the run is new.
- PDF uploads: 30 a day (work profile, at least 4): answer prompt + the document's text
  (2000..100000 tokens, median 12000) + a question; 50 % of answers are followed by another
  question about it 15 s..30 min later (median 2 min), re-sending the document and the
  questions and answers so far.

9000 requests at scale 1.0 span 26.7..31.6 hours (a day and the next morning): 1.51M..1.83M
blocks requested, 574k..639k distinct (32..42 %) over seeds 1..10. Answers are 53..56 % of
the requests (49..61 % of the blocks), related questions 31..34 % (6..9 %), monitor runs
5..7 % (8..15 %), sub-agent calls 3.4..7.9 % (11..25 %: 6 to 16 sessions), PDF questions
0.6..1.3 % (3..9 %), citation checks 0.6..1.9 % (0.8..2.6 %), plans, syntheses and
revisions 0.2 % at most each (0.6 % of the blocks). Rates (each with a floor), topics,
stories' threads and monitors scale with the trace, so a scaled-down trace spans about as
many hours (scale 0.25: 25..33 h over seeds 1..5); research sessions keep their size, so at
scale 0.05 they are 0..60 % of the requests (seeds 1..20; 9..32 h), and 8 of those 20 small
traces have no revision.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.heldout_fewshot import Segment, clipped_length, segment_tokens
from bench.heldout_research_parts import (ANSWER, HOUR, QUESTION, RATE, SEARCH, WORK, Monitor,
                                          ResearchBase, Story, Upload)
from bench.heldout_vision_parts import Length, lognormal

Trace = list[list[int]]
Meta = tuple[str, int, int, list[Segment]]  # kind, key, step, segments (see ``Run``)
KINDS = ("answer", "related", "plan", "agent", "synth", "cite", "revise", "monitor", "pdf")
REQUESTS = 9000  # at scale 1.0
# answer threads
THREADS_PER_DAY = 1800  # search threads not about a news story (scaled, at least 4 a day)
TAIL = 0.55  # of those, long-tail questions whose pages are all new
RESULTS = ((5, 0.75), (8, 0.25))  # search results an answer cites: quick, pro search
FRESH = 0.3  # a result of a topic or news search that no other search returned
FOLLOW, MORE = 0.3, 0.4  # threads with a follow-up; chance of one more after each
FOLLOW_GAP = (90.0, 0.9, 10.0, 1800.0)  # seconds from an answer to the follow-up
THREAD_CAP = 16000  # tokens of a thread past which the product starts a new one
RELATED = 0.6  # answers followed by a related-questions request
# research sessions
SESSIONS_PER_DAY = 8  # scaled, at least 2 a day
RESEARCH_Q: Length = (80, 0.8, 15, 600)
PLAN: Length = (700, 0.5, 200, 2000)
AGENTS = (3, 8)
SUB_Q: Length = (50, 0.6, 15, 200)
STEPS: Length = (7, 0.5, 4, 20)  # model calls of a sub-agent
TOOL_CALL: Length = (50, 0.5, 15, 200)
FETCH = 0.5  # tool calls that fetch a page (else a web search)
SEARCH_RESULTS: Length = (700, 0.4, 250, 2000)
FETCHED: Length = (1500, 0.7, 300, 6000)  # a fetched page, as the fetch tool truncates it
SEARCH_TIME, FETCH_TIME = (1.5, 0.6, 0.3, 10.0), (4.0, 0.8, 0.5, 30.0)  # seconds
AGENT_CAP = 48000  # tokens of a sub-agent's context past which it reports
FINDINGS: Length = (700, 0.5, 200, 2000)
REPORT: Length = (3000, 0.4, 1000, 8000)
CLAIMS, CLAIM, CITED = (5, 15), (40, 0.4, 10, 120), (400, 0.6, 100, 1500)
CLAIM_GAP = (0.3, 1.5)  # seconds between the verifier's requests
REVISE, AGAIN = 0.35, 0.25  # sessions the user comes back to; to revise once more
BACK_AFTER = (3 * HOUR, 1.0, 1200.0, 20 * HOUR)
ASK: Length = (60, 0.8, 10, 400)  # the user's revision request
DIG, DIG_AGENTS = 0.4, (1, 3)  # revisions that send new sub-agents first
DIG_PLAN: Length = (150, 0.5, 40, 500)  # the orchestrator's reply that sends them


@dataclass
class Thread:
    """A search thread: its source ("tail", "topic" or "news") and topic or story, results
    per search, turns planned, what it re-sends (results, question, answer per turn) and
    the request index of each turn."""

    source: str
    key: int
    k: int
    turns: int
    history: list[Segment] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)


@dataclass
class Agent:
    """A sub-agent: its session, sub-question, tool-call history, model calls left and the
    request index of each call."""

    session: int
    question: Segment
    steps: int
    history: list[Segment] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)


@dataclass
class Session:
    """A research session: the user's question, the plan, its sub-agents (launch order) and
    their findings, the orchestrator's context after its system prompt (question, plan,
    findings, reports, asks), the report, agents still running, and the request index of
    the plan, the synthesis, each citation check and each revision request."""

    question: Segment
    plan: Segment | None = None
    agents: list[int] = field(default_factory=list)
    findings: dict[int, Segment] = field(default_factory=dict)
    context: list[Segment] = field(default_factory=list)
    report: Segment | None = None
    running: int = 0
    sent: dict[str, list[int]] = field(default_factory=dict)


@dataclass
class Run:
    """A trace with what the tests need. ``meta`` per request: (kind, key, step, segments):
    ("answer", thread, turn), ("related", thread, turn), ("plan", session, 0), ("agent",
    agent, call), ("synth", session, 0), ("cite", session, claim), ("revise", session, k),
    ("monitor", monitor, run) or ("pdf", upload, question). ``times``: seconds."""

    trace: Trace
    meta: list[Meta]
    times: list[float]
    heads: dict[str, Segment]
    dates: dict[int, Segment]
    pools: dict[int, list[Segment]]
    stories: list[Story]
    threads: list[Thread]
    sessions: list[Session]
    agents: list[Agent]
    monitors: list[Monitor]
    uploads: list[Upload]


def deep_research(seed: int, scale: float = 1.0) -> Trace:
    """One replica behind an answer engine with deep research: search answers over Zipf and
    news pages with follow-ups, research sessions fanning out to sub-agents, synthesis,
    citation checks and revisions, scheduled monitors over changing pages, PDF uploads. See
    the module docstring."""
    return generate(seed, scale).trace


def generate(seed: int, scale: float = 1.0) -> Run:
    """The trace of ``int(REQUESTS * scale)`` requests and its metadata (see ``Run``)."""
    s = _State(random.Random(seed), int(REQUESTS * scale), scale)
    s.run()
    return Run(s.out, s.meta, s.times, s.heads, s.dates, s.pools, s.stories, s.threads,
               s.sessions, s.agents, s.monitors, s.uploads)


class _State(ResearchBase):
    """ResearchBase with the answer threads and the research sessions."""

    def __init__(self, rng: random.Random, size: int, scale: float) -> None:
        super().__init__(rng, size, scale)
        self.threads: list[Thread] = []
        self.sessions: list[Session] = []
        self.agents: list[Agent] = []
        self.at(self.arrive(THREADS_PER_DAY, 4.0, SEARCH), "thread", None)
        self.at(self.arrive(SESSIONS_PER_DAY, 2.0, WORK), "session", None)

    def _on_thread(self, _: object) -> None:
        """A search thread not about a news story: a long-tail question or an evergreen
        topic's."""
        self.at(self.arrive(THREADS_PER_DAY, 4.0, SEARCH), "thread", None)
        if self.rng.random() < TAIL:
            self._start("tail", -1)
        else:
            self._start("topic", self.topic())

    def _on_news(self, story: int) -> None:
        """A search thread about a news story."""
        self._start("news", story)

    def _start(self, source: str, key: int) -> None:
        """A new thread: results per search and turns (1, or follow-ups, each MORE likely to
        have another); its first turn."""
        rng = self.rng
        k = rng.choices([k for k, _ in RESULTS], [w for _, w in RESULTS])[0]
        turns = 1
        if rng.random() < FOLLOW:
            turns += 1
            while rng.random() < MORE:
                turns += 1
        self.threads.append(Thread(source, key, k, turns))
        self._on_turn(len(self.threads) - 1)

    def _results(self, th: Thread) -> list[Segment]:
        """A search's results: all new for a long-tail question, else from the topic's pool
        or the story's articles published by now."""
        if th.source == "tail":
            return self.retrieve([], th.k, 1.0)
        pool = self.pool(th.key) if th.source == "topic" else self.stories[th.key].pool(self.now)
        return self.retrieve(pool, th.k, FRESH)

    def _on_turn(self, t: int) -> None:
        """A turn: answer prompt + the thread so far + the search's results + the question;
        results, question and answer join the thread; related questions and the next turn
        follow."""
        rng, th = self.rng, self.threads[t]
        results, question = self._results(th), self.new(clipped_length(rng, *QUESTION))
        th.sent.append(len(self.out))
        self.send("answer", t, len(th.sent) - 1,
                  [*self.system("answer"), *th.history, *results, question])
        answer = self.new(clipped_length(rng, *ANSWER))
        th.history += [*results, question, answer]
        done = self.now + answer[1] / RATE
        if rng.random() < RELATED:
            self.at(done, "related", (t, len(th.sent) - 1, question, answer))
        if len(th.sent) < th.turns and segment_tokens(th.history) < THREAD_CAP:
            self.at(done + lognormal(rng, *FOLLOW_GAP), "turn", t)

    def _on_related(self, payload: tuple[int, int, Segment, Segment]) -> None:
        """Related questions for an answer: their prompt + the question + the answer."""
        t, turn, question, answer = payload
        self.send("related", t, turn, [*self.system("related"), question, answer])

    def _on_session(self, _: object) -> None:
        """A research session: the orchestrator plans (its prompt + the question); the
        sub-agents start once the plan is written."""
        self.at(self.arrive(SESSIONS_PER_DAY, 2.0, WORK), "session", None)
        s = Session(self.new(clipped_length(self.rng, *RESEARCH_Q)))
        self.sessions.append(s)
        k = len(self.sessions) - 1
        self._record(k, "plan")
        self.send("plan", k, 0, [*self.system("orchestrator"), s.question])
        s.plan = self.new(clipped_length(self.rng, *PLAN))
        s.context = [s.question, s.plan]
        self._launch(k, self.rng.randint(*AGENTS), self.now + s.plan[1] / RATE)

    def _record(self, k: int, kind: str) -> None:
        """Note that the next request is session ``k``'s ``kind`` request."""
        self.sessions[k].sent.setdefault(kind, []).append(len(self.out))

    def _launch(self, k: int, n: int, when: float) -> None:
        """``n`` sub-agents of session ``k`` start at ``when`` (within a second)."""
        s = self.sessions[k]
        s.running += n
        for _ in range(n):
            a = Agent(k, self.new(clipped_length(self.rng, *SUB_Q)),
                      clipped_length(self.rng, *STEPS))
            self.agents.append(a)
            s.agents.append(len(self.agents) - 1)
            self.at(when + self.rng.random(), "step", len(self.agents) - 1)

    def _on_step(self, i: int) -> None:
        """A sub-agent's model call: agent prompt + plan + sub-question + its history. Mid-run
        it calls a tool (a search or a page fetch; call and result join the history); its
        last call (or one whose context passes AGENT_CAP) writes its findings."""
        rng, a = self.rng, self.agents[i]
        plan = self.sessions[a.session].plan
        a.sent.append(len(self.out))
        segs = [*self.system("agent"), plan, a.question, *a.history]
        self.send("agent", i, len(a.sent) - 1, segs)
        a.steps -= 1
        if a.steps > 0 and segment_tokens(segs) < AGENT_CAP:
            call = clipped_length(rng, *TOOL_CALL)
            fetch = rng.random() < FETCH
            result = clipped_length(rng, *(FETCHED if fetch else SEARCH_RESULTS))
            a.history += [self.new(call), self.new(result)]
            wait = lognormal(rng, *(FETCH_TIME if fetch else SEARCH_TIME))
            self.at(self.now + call / RATE + wait, "step", i)
            return
        findings = self.new(clipped_length(rng, *FINDINGS))
        self.sessions[a.session].findings[i] = findings
        self.at(self.now + findings[1] / RATE, "reported", a.session)

    def _on_reported(self, k: int) -> None:
        """A sub-agent has reported; when the last one has, the orchestrator writes."""
        s = self.sessions[k]
        s.running -= 1
        if s.running:
            return
        fresh = [s.findings[a] for a in s.agents if s.findings[a] not in s.context]
        s.context += fresh
        if s.report is None:
            self._synthesise(k)
        else:
            self._revised(k)

    def _synthesise(self, k: int) -> None:
        """The synthesis: orchestrator prompt + question + plan + every sub-agent's findings
        (launch order); the report joins the context, the citation checks follow, and the
        user may come back to revise."""
        s = self.sessions[k]
        self._record(k, "synth")
        self.send("synth", k, 0, [*self.system("orchestrator"), *s.context])
        self._report(k)
        done = self.now + s.report[1] / RATE
        self.at(done, "cite", (k, 0, self.rng.randint(*CLAIMS)))

    def _report(self, k: int) -> None:
        """A report is written: it joins the orchestrator's context; the user comes back to
        revise REVISE of the time (AGAIN after a revision)."""
        s, rng = self.sessions[k], self.rng
        first = s.report is None
        s.report = self.new(clipped_length(rng, *REPORT))
        s.context.append(s.report)
        if rng.random() < (REVISE if first else AGAIN):
            self.at(self.now + s.report[1] / RATE + lognormal(rng, *BACK_AFTER), "back", k)

    def _on_cite(self, payload: tuple[int, int, int]) -> None:
        """A citation check of the report: verifier prompt + report + the claim + the cited
        source's passage; the next check follows within a second or two."""
        k, c, claims = payload
        rng, s = self.rng, self.sessions[k]
        self._record(k, "cite")
        self.send("cite", k, c, [*self.system("cite"), s.report,
                                 self.new(clipped_length(rng, *CLAIM)),
                                 self.new(clipped_length(rng, *CITED))])
        if c + 1 < claims:
            self.at(self.now + rng.uniform(*CLAIM_GAP), "cite", (k, c + 1, claims))

    def _on_back(self, k: int) -> None:
        """The user comes back with a revision request: orchestrator prompt + context + the
        ask. The orchestrator revises at once, or (DIG) sends new sub-agents first and
        revises when they have reported."""
        rng, s = self.rng, self.sessions[k]
        s.context.append(self.new(clipped_length(rng, *ASK)))
        self._record(k, "revise")
        self.send("revise", k, len(s.sent["revise"]) - 1,
                  [*self.system("orchestrator"), *s.context])
        if rng.random() < DIG:
            reply = self.new(clipped_length(rng, *DIG_PLAN))
            s.context.append(reply)
            self._launch(k, rng.randint(*DIG_AGENTS), self.now + reply[1] / RATE)
            return
        self._report(k)

    def _revised(self, k: int) -> None:
        """The revision after new sub-agents: orchestrator prompt + context (their findings
        last); the revised report joins the context."""
        s = self.sessions[k]
        self._record(k, "revise")
        self.send("revise", k, len(s.sent["revise"]) - 1,
                  [*self.system("orchestrator"), *s.context])
        self._report(k)
