"""bench/heldout_agents.py: held-out trace shapes for bench.heldout (its SHAPES), written
after the research policies ``wintune`` (tool_agent) and ``arctune`` (doc_window) were frozen;
see bench/heldout.py for how they are replayed and reported."""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Callable

Trace = list[list[int]]
New = Callable[[int], list[int]]  # n -> n blocks of unique content


def tool_agent(seed: int, scale: float = 1.0) -> Trace:
    """Written after ``wintune`` was frozen. 6 agent kinds: a 40..120-block tool-schema prompt
    each (Zipf(1)). 60 %: the next step of one of 24 agents (kind + 2..10-block task, then per
    step 1..3 blocks of output and a 1..8-block tool result, 20..80 for a file read one in five;
    10 % retries, 5 % forks; 4..40 steps); 25 %: batch bursts of 100..400 requests on one
    16..48-block template + a unique 1..6-block row (every 10th burst an old template); 15 %: a
    one-off request of 4..60 unique blocks."""
    rng = random.Random(seed)
    ids = itertools.count()
    new = lambda n: [next(ids) for _ in range(n)]  # noqa: E731 - unique content
    kinds = [new(rng.randint(40, 120)) for _ in range(6)]
    agents = [_agent(rng, new, kinds) for _ in range(24)]
    templates = [new(rng.randint(16, 48))]
    burst = 0
    out: Trace = []
    for _ in range(int(8000 * scale)):
        u = rng.random()
        if u < 0.25:
            if burst <= 0:
                burst = _next_template(rng, new, templates)
            burst -= 1
            out.append(templates[-1] + new(rng.randint(1, 6)))
        elif u < 0.4:
            out.append(new(rng.randint(4, 60)))
        else:
            out.append(_agent_step(rng, new, agents, kinds))
    return out


def _agent(rng: random.Random, new: New, kinds: list[list[int]]) -> list:
    """tool_agent's agent: [a kind's schema prompt (Zipf(1)) + a 2..10-block task, 4..40
    steps left]."""
    kind = rng.choices(kinds, [1, 1 / 2, 1 / 3, 1 / 4, 1 / 5, 1 / 6])[0]
    return [kind + new(rng.randint(2, 10)), rng.randint(4, 40)]


def _next_template(rng: random.Random, new: New, templates: list[list[int]]) -> int:
    """A new batch burst: a 16..48-block template appended to ``templates`` (every 10th an
    old one); returns its length, 100..400 requests."""
    old = len(templates) % 10 == 0
    templates.append(rng.choice(templates) if old else new(rng.randint(16, 48)))
    return rng.randint(100, 400)


def _agent_step(rng: random.Random, new: New, agents: list[list],
                kinds: list[list[int]]) -> list[int]:
    """The next step of a random one of ``agents``: its context as the request; then it may
    fork (5 %), it retries (10 %) or its output and tool result join its context, it ends
    (a new agent takes its place), and past 24 agents a random one leaves."""
    i = rng.randrange(len(agents))
    a = agents[i]
    req = list(a[0])
    r = rng.random()
    if r < 0.05:
        agents.append([list(a[0]), rng.randint(2, 20)])
    if r >= 0.1:  # not a retry: the step's output and tool result join the context
        tool = rng.randint(20, 80) if rng.random() < 0.2 else rng.randint(1, 8)
        a[0], a[1] = a[0] + new(rng.randint(1, 3)) + new(tool), a[1] - 1
    if a[1] <= 0:
        agents[i] = _agent(rng, new, kinds)
    if len(agents) > 24:
        agents.pop(rng.randrange(len(agents)))
    return req


def doc_window(seed: int, scale: float = 1.0) -> Trace:
    """Written after ``arctune`` was frozen. 300 documents of 100..600 blocks (Zipf(1), the
    ranking rotated by one every 40 requests). 75 %: the next question of one of 12 QA
    sessions: a 6-block system prompt + a window of 32..128 blocks of one document from a
    start on an 8-block grid (the window's content depends on its start: blocks hashed as a
    chain) + a unique 2..6-block question; each question moves the start 0..2 grid steps on
    (a repeat of the same window one time in three), 3..20 questions a session. 25 %: tenant
    bursts of 50..300 requests from one of 5 tenants (a 20..60-block system prompt + one of
    its 30 examples of 4..16 blocks, Pareto-popular, + a unique 1..10-block query)."""
    rng = random.Random(seed)
    ids = itertools.count()
    new = lambda n: [next(ids) for _ in range(n)]  # noqa: E731 - unique content
    system, docs = new(6), [rng.randint(100, 600) for _ in range(300)]
    cdf = list(itertools.accumulate(1.0 / (r + 1) for r in range(300)))
    windows: dict[tuple[int, int], list[int]] = {}  # (doc, start) -> content from there
    tenants = [(new(rng.randint(20, 60)), [new(rng.randint(4, 16)) for _ in range(30)])
               for _ in range(5)]
    sessions = [_qa_session(rng, cdf, docs, 0) for _ in range(12)]
    burst = [0, 0]  # [tenant, requests left]
    out: Trace = []
    for n in range(int(8000 * scale)):
        if rng.random() < 0.25:
            out.append(_tenant_request(rng, new, tenants, burst))
            continue
        i = rng.randrange(12)
        d, start, width, left = s = sessions[i]
        text = windows.setdefault((d, start), new(docs[d] - start))
        out.append(system + text[:width] + new(rng.randint(2, 6)))
        s[1] = min(start + 8 * rng.randint(0, 2), 8 * (docs[d] // 8 - 4))
        s[3] = left - 1
        if s[3] <= 0:
            sessions[i] = _qa_session(rng, cdf, docs, n)
    return out


def _qa_session(rng: random.Random, cdf: list[float], docs: list[int], n: int) -> list:
    """doc_window's QA session at request ``n``: [a document (by ``cdf``, the ranking rotated
    by one every 40 requests), a window start on the 8-block grid in its first half, a window
    of 32..128 blocks, 3..20 questions left]."""
    d = (min(bisect.bisect_left(cdf, rng.random() * cdf[-1]), 299) + n // 40) % 300
    return [d, 8 * rng.randrange(docs[d] // 16), rng.randint(32, 128), rng.randint(3, 20)]


def _tenant_request(rng: random.Random, new: New, tenants: list[tuple[list[int], list]],
                    burst: list[int]) -> list[int]:
    """A request of the tenant burst ``burst`` ([tenant, requests left]; a new one of 50..300
    from one of 5 tenants once it ends): the tenant's prompt + one of its examples (Pareto-
    popular) + a unique 1..10-block query."""
    if burst[1] <= 0:
        burst[:] = rng.randrange(5), rng.randint(50, 300)
    burst[1] -= 1
    prompt, shots = tenants[burst[0]]
    return prompt + shots[min(int(rng.paretovariate(1.2)) - 1, 29)] + new(rng.randint(1, 10))


def doc_fanout(seed: int, scale: float = 1.0) -> Trace:
    """Written after ``admitlru`` was frozen. A document pipeline beside chat users, on 3 apps
    (a 8..24-block system prompt each, Zipf(1)). 55 %: the next task of one of 6 documents
    in flight: app prompt + the document (16..96 blocks) + a unique 1..4-block instruction;
    3..8 tasks a document, then a new one (one in ten an earlier document, re-run). 35 %: the
    next turn of one of 40 chats (app prompt + history, 2..12 blocks a turn, 3..30 turns).
    10 %: a one-off upload of 32..200 unique blocks."""
    rng = random.Random(seed)
    ids = itertools.count()
    new = lambda n: [next(ids) for _ in range(n)]  # noqa: E731 - unique content
    apps = [new(rng.randint(8, 24)) for _ in range(3)]
    done: list[list[int]] = []
    docs = [_fanout_doc(rng, new, apps, done) for _ in range(6)]
    chats = [_fanout_chat(rng, apps) for _ in range(40)]
    out: Trace = []
    for _ in range(int(8000 * scale)):
        u = rng.random()
        if u < 0.55:
            i = rng.randrange(6)
            d = docs[i]
            out.append(d[0] + new(rng.randint(1, 4)))
            d[1] -= 1
            if d[1] <= 0:
                done.append(d[0])
                docs[i] = _fanout_doc(rng, new, apps, done)
        elif u < 0.9:
            i = rng.randrange(40)
            c = chats[i]
            c[0] = c[0] + new(rng.randint(2, 12))
            out.append(list(c[0]))
            c[1] -= 1
            if c[1] <= 0:
                chats[i] = _fanout_chat(rng, apps)
        else:
            out.append(new(rng.randint(32, 200)))
    return out


def _app(rng: random.Random, apps: list[list[int]]) -> list[int]:
    """doc_fanout's app prompt for a new document or chat: one of ``apps``, Zipf(1)."""
    return rng.choices(apps, [1, 1 / 2, 1 / 3])[0]


def _fanout_doc(rng: random.Random, new: New, apps: list[list[int]],
                done: list[list[int]]) -> list:
    """doc_fanout's next document in flight: [one in ten an earlier one of ``done`` (re-run),
    else an app prompt + 16..96 new blocks, 3..8 tasks left]."""
    text = (rng.choice(done) if done and rng.random() < 0.1
            else _app(rng, apps) + new(rng.randint(16, 96)))
    return [text, rng.randint(3, 8)]


def _fanout_chat(rng: random.Random, apps: list[list[int]]) -> list:
    """doc_fanout's chat: [its app prompt (the history grows from there), 3..30 turns left]."""
    return [_app(rng, apps), rng.randint(3, 30)]
