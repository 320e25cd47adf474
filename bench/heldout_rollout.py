"""bench.heldout's ``prompt_rollout`` shape: a multi-product chat service that ships new
versions of its system prompts while conversations are running. Written after ``admitbig``
(bench/admitbig.py) was frozen, by someone who had not read the eviction policies.

What each part models:

- products: 6 products behind one server (traffic Zipf(1)), each with a long 20..120-block
  system prompt: the prefix every request of the product starts with, the hottest content.
- rollouts: 1..3 times in the trace a product ships a new prompt version. A version is an
  edit: it keeps the first 0..60 % of the previous one and the rest is new content (so new
  ids from the edit on, as a prefix cache hashes it). It goes out in stages (1 %, 10 %, 25 %,
  50 % of new conversations, each a quarter of a rollout lasting 3..15 % of the trace), then
  to everyone: the old version is retired and never sent again. A conversation keeps the
  version it started on while that is live (sticky bucketing); at its first turn after its
  version is retired it is re-rendered on a live one, so its whole history is new content
  behind the new prompt. What it tests: two hot versions of a prefix at once, then one of them
  going cold for good, and a burst of re-sent histories that no longer hit.
- tools: after the prompt, one of 6 few-shot / tool-schema sets of 2..16 blocks per product
  (Zipf(1.2)), picked by a conversation at its start.
- conversations: each turn re-sends the conversation so far plus a 1..6-block user message;
  the 1..10-block reply then joins the history. 45 % never return (one turn), 35 % take 2..4
  turns, 20 % 5..30; each has its own think time (lognormal, median 30 requests, a few of them
  thousands). One request is served per step: a turn that is due, else a new conversation. A
  history past 400 blocks ends the conversation (the context is full).
- summaries: one-off long summarization requests, a shared 4-block instruction + 50..300
  fresh blocks: 3 % of requests, and half of the requests in a nightly-batch window of
  40..120 requests once every 1000. Scans that should not flush the prompts and histories.

9000 requests at scale 1.0 (about 1.2M blocks requested, 170k..190k distinct); rollout times
are fractions of the trace, so a scaled-down trace still has them.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import Callable

from bench.heldout_rag import Chains

Trace = list[list[int]]
New = Callable[[int], list[int]]  # n -> n blocks of unique content
Meta = tuple[str, int, int, int]  # (kind, conversation, product, version); -1 for a scan
PRODUCTS = 6
TOOLSETS = 6
STAGES = (0.01, 0.1, 0.25, 0.5)  # share of new conversations on the new version, by quarter
PERIOD = 1000  # requests from one nightly summary batch to the next
INSTRUCTION = 4  # blocks of the shared summarization instruction
MAX_HISTORY = 400  # blocks of history that end a conversation


def prompt_rollout(seed: int, scale: float = 1.0) -> Trace:
    """6 products with 20..120-block system prompts rolled out in 1..3 new versions each (in
    stages; the old version retired after), tool sets after the prompt, multi-turn
    conversations with per-conversation think times, and one-off 50..300-block summaries
    (3 %, plus nightly bursts). See the module docstring."""
    return generate(seed, scale)[0]


def generate(seed: int, scale: float = 1.0) -> tuple[Trace, list[Meta], list, list]:
    """The trace, each request's (kind "turn" or "scan", conversation, product, version), and
    per product its prompt versions (content, not ids) and rollouts [(start, end)]: version
    v + 1 goes out over rollouts[v], and version v is retired at its end."""
    rng = random.Random(seed)
    fresh = itertools.count()
    new: New = lambda n: [next(fresh) for _ in range(n)]  # noqa: E731 - unique content
    size = int(9000 * scale)
    prompts, plans = map(list, zip(*(_product(rng, new, size) for _ in range(PRODUCTS))))
    tools = [[new(rng.randint(2, 16)) for _ in range(TOOLSETS)] for _ in range(PRODUCTS)]
    instruction, batches = new(INSTRUCTION), _batches(rng, size)
    chains, convs, due = Chains(), {}, []
    out: Trace = []
    meta: list[Meta] = []
    for n in range(size):
        if rng.random() < (0.5 if any(a <= n < b for a, b in batches) else 0.03):
            out.append(chains.ids(instruction + new(rng.randint(50, 300))))
            meta.append(("scan", -1, -1, -1))
            continue
        if due and due[0][0] <= n:
            c = heapq.heappop(due)[1]
        else:
            c = len(meta)  # a new conversation, named by its first request
            convs[c] = _conversation(rng, plans, tools, n)
        conv = convs[c]
        out.append(chains.ids(_turn(rng, new, conv, prompts[conv[0]], plans[conv[0]], n)))
        meta.append(("turn", c, conv[0], conv[1]))
        if conv[4] > 0 and len(conv[3]) <= MAX_HISTORY:
            heapq.heappush(due, (n + 1 + rng.expovariate(1 / conv[5]), c))
        else:
            del convs[c]
    return out, meta, prompts, plans


def _product(rng: random.Random, new: New, size: int) -> tuple[list, list]:
    """A product's prompt versions and their rollouts in a trace of ``size`` requests: the
    first starts in the first 5..40 %, lasts 3..15 %, and the next starts 15..50 % after the
    previous one ended (at most 3). A version keeps the first 0..60 % of the one before and
    its length within 20 % of it (20..120 blocks); the rest is new content."""
    prompts = [new(rng.randint(20, 120))]
    plans: list[tuple[int, int]] = []
    t = rng.uniform(0.05, 0.4) * size
    while t < size and len(plans) < 3:
        length = rng.uniform(0.03, 0.15) * size
        plans.append((int(t), max(int(t + length), int(t) + 4)))
        old = prompts[-1]
        keep = int(len(old) * rng.uniform(0.0, 0.6))
        target = min(120, max(20, round(len(old) * rng.uniform(0.8, 1.2))))
        prompts.append(old[:keep] + new(max(8, target - keep)))
        t += length + rng.uniform(0.15, 0.5) * size
    return prompts, plans


def _batches(rng: random.Random, size: int) -> list[tuple[int, int]]:
    """The nightly summary batches: a window of 40..120 requests once every PERIOD, starting
    in the first half of its period."""
    starts = (k * PERIOD + rng.randrange(PERIOD // 2) for k in range(size // PERIOD + 1))
    return [(s, s + rng.randint(40, 120)) for s in starts]


def _live(plan: list[tuple[int, int]], n: int) -> tuple[int, int, float]:
    """At request ``n``: (old version, new version, share of new conversations on the new
    one); old == new and share 0 outside a rollout."""
    started = sum(a <= n for a, _ in plan)
    if not started:
        return 0, 0, 0.0
    a, b = plan[started - 1]
    if n >= b:
        return started, started, 0.0
    return started - 1, started, STAGES[4 * (n - a) // (b - a)]


def _assign(rng: random.Random, plan: list[tuple[int, int]], n: int) -> int:
    """The version a conversation (re-)rendered at request ``n`` gets: its bucket is on the
    new version with the rollout stage's share."""
    old, new, share = _live(plan, n)
    return new if rng.random() < share else old


def _conversation(rng: random.Random, plans: list, tools: list, n: int) -> list:
    """A new conversation at request ``n``: [product (Zipf(1)), version, tool set (Zipf(1.2)),
    history (empty), turns left (45 %: 1, 35 %: 2..4, 20 %: 5..30), think time (lognormal,
    median 30 requests)]."""
    p = rng.choices(range(PRODUCTS), [1 / (r + 1) for r in range(PRODUCTS)])[0]
    kit = rng.choices(tools[p], [1 / (r + 1) ** 1.2 for r in range(TOOLSETS)])[0]
    u = rng.random()
    turns = 1 if u < 0.45 else rng.randint(2, 4) if u < 0.8 else rng.randint(5, 30)
    return [p, _assign(rng, plans[p], n), kit, [], turns, rng.lognormvariate(math.log(30), 1.5)]


def _turn(rng: random.Random, new: New, conv: list, prompts: list, plan: list,
          n: int) -> list[int]:
    """The content of ``conv``'s next turn at request ``n`` (re-rendered on a live version if
    its own is retired): prompt + tool set + history + a 1..6-block message; the message and
    a 1..10-block reply then join the history."""
    old, cur, _ = _live(plan, n)
    if conv[1] not in (old, cur):
        conv[1] = _assign(rng, plan, n)
    message = new(rng.randint(1, 6))
    content = prompts[conv[1]] + conv[2] + conv[3] + message
    conv[3] = conv[3] + message + new(rng.randint(1, 10))
    conv[4] -= 1
    return content
