"""bench/heldout_early.py: the first held-out shapes (drift, loop, tenants, agent, mooncake,
rag_bursty, code_edit), each written after a policy was frozen; bench/heldout.py says which
came after which freeze, registers them in SHAPES and replays them."""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Iterator

Trace = list[list[int]]

def drift(seed: int, scale: float = 1.0) -> Trace:
    rng = random.Random(seed)
    ids = itertools.count()
    prefixes, shift = 3000, 1500
    pre = [[next(ids) for _ in range(rng.randint(4, 24))] for _ in range(prefixes)]
    cdf = list(itertools.accumulate(1.0 / (r + 1) ** 0.8 for r in range(prefixes)))
    order = list(range(prefixes))
    out = []
    for i in range(int(10000 * scale)):
        if i % shift == 0:
            rng.shuffle(order)
        r = min(bisect.bisect_left(cdf, rng.random() * cdf[-1]), prefixes - 1)
        out.append(pre[order[r]] + [next(ids) for _ in range(rng.randint(0, 8))])
    return out


def loop(seed: int, scale: float = 1.0) -> Trace:
    rng = random.Random(seed)
    ids = itertools.count()
    docs = [[next(ids) for _ in range(rng.randint(8, 40))] for _ in range(400)]
    out = []
    i = 0
    for _ in range(int(6000 * scale)):
        i = (i + 1 + (rng.random() < 0.2)) % len(docs)
        out.append(list(docs[i]))
    return out


def tenants(seed: int, scale: float = 1.0) -> Trace:
    rng = random.Random(seed)
    ids = itertools.count()
    system = [[next(ids) for _ in range(rng.randint(16, 64))] for _ in range(8)]
    shots = [[[next(ids) for _ in range(rng.randint(2, 10))] for _ in range(50)]
             for _ in range(8)]
    weights = [1.0 / (t + 1) for t in range(8)]
    out = []
    for _ in range(int(10000 * scale)):
        t = rng.choices(range(8), weights)[0]
        s = shots[t][min(int(rng.paretovariate(1.2)) - 1, 49)]
        out.append(system[t] + s + [next(ids) for _ in range(rng.randint(1, 20))])
    return out


def agent(seed: int, scale: float = 1.0) -> Trace:
    rng = random.Random(seed)
    ids = itertools.count(1)

    def session() -> list:
        return [[next(ids) for _ in range(rng.randint(10, 60))], rng.randint(2, 40)]

    sessions = [session() for _ in range(100)]
    out = []
    for _ in range(int(8000 * scale)):
        if rng.random() < 0.3:
            out.append([next(ids) for _ in range(rng.randint(1, 12))])
            continue
        i = rng.randrange(len(sessions))
        s = sessions[i]
        out.append(list(s[0]))
        s[1] -= 1
        if s[1] <= 0:
            sessions[i] = session()
        else:
            s[0] = s[0] + [next(ids) for _ in range(rng.randint(0, 3))]
    return out


def mooncake(seed: int, scale: float = 1.0) -> Trace:
    """Written after a candidate policy was frozen. 4 system prompts; 35 %: a system prompt + one of
    600 documents (16..96 blocks, Zipf(0.9), ranking rotated by 37 every 800 requests) + a
    unique question; 45 %: the next turn of one of 150 chats, each with its own think time
    (lognormal, median 40 requests, some thousands), whose history grows 1..6 blocks a turn;
    20 %: a one-shot scan of 48..240 blocks."""
    rng = random.Random(seed)
    ids = itertools.count()
    system = [[next(ids) for _ in range(rng.randint(8, 40))] for _ in range(4)]
    docs = [[next(ids) for _ in range(rng.randint(16, 96))] for _ in range(600)]
    cdf = list(itertools.accumulate(1.0 / (r + 1) ** 0.9 for r in range(600)))

    def chat() -> list:
        think = rng.lognormvariate(3.7, 1.4)  # requests between turns, per chat
        return [system[rng.randrange(4)] + [next(ids) for _ in range(rng.randint(2, 12))],
                think, rng.randint(2, 30)]

    chats = [chat() for _ in range(150)]
    due = sorted((rng.expovariate(1 / c[1]), i) for i, c in enumerate(chats))
    out: Trace = []
    for n in range(int(8000 * scale)):
        u = rng.random()
        if u < 0.35:
            r = min(bisect.bisect_left(cdf, rng.random() * cdf[-1]), 599)
            doc = docs[(r + 37 * (n // 800)) % 600]
            out.append(system[rng.randrange(4)] + doc + [next(ids) for _ in range(2)])
        elif u < 0.8:
            t, i = due.pop(0)
            c = chats[i]
            out.append(list(c[0]))
            c[2] -= 1
            if c[2] <= 0:
                c = chats[i] = chat()
            else:
                c[0] = c[0] + [next(ids) for _ in range(rng.randint(1, 6))]
            bisect.insort(due, (t + rng.expovariate(1 / c[1]), i))
        else:
            out.append([next(ids) for _ in range(rng.randint(48, 240))])
    return out


def rag_bursty(seed: int, scale: float = 1.0) -> Trace:
    """Written after ``ghostwin`` (bench/ghostwin.py) was frozen. Bursts of 150..600 requests,
    each over a hot set of 4..16 of 800 long documents (32..128 blocks; a burst keeps about a
    third of the previous burst's set): 55 %: a hot document (Zipf(1) within the set) + a
    unique 1..4-block query; 10 %: any document + a query (cold lookups); 35 %: the next turn
    of one of 60 background chats (a 4..16-block system prompt shared by all, then history
    growing 1..5 blocks a turn, 2..25 turns)."""
    rng = random.Random(seed)
    ids = itertools.count()
    docs = [[next(ids) for _ in range(rng.randint(32, 128))] for _ in range(800)]
    system = [next(ids) for _ in range(rng.randint(4, 16))]
    chats = [_background_chat(rng, ids, system) for _ in range(60)]
    hot: list[int] = []
    left = 0
    out: Trace = []
    for _ in range(int(8000 * scale)):
        if left <= 0:
            hot, left = _next_burst(rng, hot)
        left -= 1
        u = rng.random()
        if u < 0.65:
            w = [1.0 / (r + 1) for r in range(len(hot))]
            d = rng.choices(hot, w)[0] if u < 0.55 else rng.randrange(800)
            out.append(docs[d] + [next(ids) for _ in range(rng.randint(1, 4))])
            continue
        i = rng.randrange(len(chats))
        c = chats[i]
        out.append(list(c[0]))
        c[1] -= 1
        if c[1] <= 0:
            chats[i] = _background_chat(rng, ids, system)
        else:
            c[0] = c[0] + [next(ids) for _ in range(rng.randint(1, 5))]
    return out


def _background_chat(rng: random.Random, ids: Iterator[int], system: list[int]) -> list:
    """rag_bursty's chat: [the shared system prompt + 2..10 new blocks, 2..25 turns left]."""
    return [system + [next(ids) for _ in range(rng.randint(2, 10))], rng.randint(2, 25)]


def _next_burst(rng: random.Random, hot: list[int]) -> tuple[list[int], int]:
    """rag_bursty's next burst: a hot set of 4..16 of the 800 documents that keeps about a
    third of ``hot``, and its length, 150..600 requests."""
    size = rng.randint(4, 16)
    keep = rng.sample(hot, min(len(hot) // 3, size))
    return keep + rng.sample(range(800), size - len(keep)), rng.randint(150, 600)


def code_edit(seed: int, scale: float = 1.0) -> Trace:
    """Written after ``doorarc`` was frozen. 3000 requests of a code assistant: 12
    repositories (Zipf(1.1)), each a 24..96-block repo context and 40 files of 8..48 blocks.
    85 %: the next turn of one of 80 sessions, each on one repository with a working set of
    1..4 of its files: repo context + those files + the session's history (1..4 blocks a
    turn, 2..20 turns); after a turn, with probability 0.3, the session edits one of its
    files at a random block, and every block from there on is new content (for everyone:
    the edit lands in the repository). 15 %: a search over 6..12 random files of a
    repository after its context (one-off orderings of shared files)."""
    rng = random.Random(seed)
    ids = itertools.count()
    repos = [([next(ids) for _ in range(rng.randint(24, 96))],
              [[next(ids) for _ in range(rng.randint(8, 48))] for _ in range(40)])
             for _ in range(12)]
    weights = [1.0 / (r + 1) ** 1.1 for r in range(12)]
    sessions = [_code_session(rng, weights) for _ in range(80)]
    out: Trace = []
    for _ in range(int(3000 * scale)):
        if rng.random() < 0.15:
            ctx, files = repos[rng.choices(range(12), weights)[0]]
            picks = rng.sample(range(40), rng.randint(6, 12))
            out.append(ctx + [h for f in picks for h in files[f]])
            continue
        i = rng.randrange(80)
        r, work, hist, left = s = sessions[i]
        ctx, files = repos[r]
        hist.extend(next(ids) for _ in range(rng.randint(1, 4)))
        out.append(ctx + [h for f in work for h in files[f]] + hist)
        if rng.random() < 0.3:
            _edit(rng, ids, files, work)
        s[3] = left - 1
        if s[3] <= 0:
            sessions[i] = _code_session(rng, weights)
    return out


def _code_session(rng: random.Random, weights: list[float]) -> list:
    """code_edit's session: [its repository (by ``weights``), its working set of 1..4 of the
    repository's 40 files, its history (empty), 2..20 turns left]."""
    r = rng.choices(range(12), weights)[0]
    return [r, rng.sample(range(40), rng.randint(1, 4)), [], rng.randint(2, 20)]


def _edit(rng: random.Random, ids: Iterator[int], files: list[list[int]],
          work: list[int]) -> None:
    """An edit to one of the ``work`` files: its content from a random block on is new."""
    f = rng.choice(work)
    cut = rng.randrange(len(files[f]))
    files[f] = files[f][:cut] + [next(ids) for _ in range(len(files[f]) - cut)]
