"""bench.heldout's ``rerank_rag`` shape: retrieval-augmented questions whose chunks arrive in a
re-ranked order. Written after ``admitrun`` (bench/admitrun.py) was frozen at e892ece.

What it tests: a prefix cache reuses a chunk only behind the same prefix, so the same popular
chunk after a different first chunk is new content. Popularity of content and popularity of
chains part ways here: the sketch sees a popular chunk's text once per order it comes in,
while the chains that actually repeat are the app prompts and the few orders a popular set
comes in most often.
"""

from __future__ import annotations

import itertools
import math
import random

Trace = list[list[int]]
CHUNKS = 800  # the corpus
CONVERSATIONS = 30


class Chains:
    """Block ids as a trace's hash ids are: one per (prefix, block content), interned."""

    def __init__(self) -> None:
        self._ids: dict[tuple[int, int], int] = {}

    def ids(self, contents: list[int]) -> list[int]:
        out, parent, table = [], -1, self._ids
        for c in contents:
            parent = table.setdefault((parent, c), len(table))
            out.append(parent)
        return out


def rerank_rag(seed: int, scale: float = 1.0) -> Trace:
    """4 apps (a 8..32-block system prompt each, Zipf(1)); a corpus of 800 chunks of 4..16
    blocks, popularity Zipf(0.9) over a ranking that drifts (every 1000 requests 5 % of the
    chunks swap ranks). 60 %: a question: app prompt + 3..6 retrieved chunks, ordered by
    rank plus noise (the same chunks come in different orders) + a unique 1..3-block
    question. 25 %: the next turn of one of 30 conversations (its context so far + 2..6
    new blocks; 2..10 turns, then a new one from a fresh question). 15 %: a one-off upload of
    40..160 unique blocks."""
    rng = random.Random(seed)
    fresh = itertools.count()
    new = lambda n: [next(fresh) for _ in range(n)]  # noqa: E731 - unique content
    apps = [new(rng.randint(8, 32)) for _ in range(4)]
    chunks = [new(rng.randint(4, 16)) for _ in range(CHUNKS)]
    rank = list(range(CHUNKS))  # rank[r] = the chunk at popularity rank r
    weights = [1 / (r + 1) ** 0.9 for r in range(CHUNKS)]
    chains = Chains()
    convs = [_question(rng, new, apps, chunks, rank, weights) for _ in range(CONVERSATIONS)]
    convs = [[c, rng.randint(2, 10)] for c in convs]
    out: Trace = []
    for i in range(int(8000 * scale)):
        if i and i % 1000 == 0:
            _drift(rng, rank)
        u = rng.random()
        if u < 0.6:
            content = _question(rng, new, apps, chunks, rank, weights)
        elif u < 0.85:
            conv = convs[rng.randrange(CONVERSATIONS)]
            conv[0] = content = conv[0] + new(rng.randint(2, 6))
            conv[1] -= 1
            if conv[1] <= 0:
                conv[:] = [_question(rng, new, apps, chunks, rank, weights),
                           rng.randint(2, 10)]
        else:
            content = new(rng.randint(40, 160))
        out.append(chains.ids(content))
    return out


def _question(rng: random.Random, new, apps: list[list[int]], chunks: list[list[int]],
              rank: list[int], weights: list[float]) -> list[int]:
    """An app prompt + 3..6 distinct chunks drawn by popularity, in re-ranked order (rank in
    log scale plus Gaussian noise) + a unique 1..3-block question."""
    app = rng.choices(apps, [1, 1 / 2, 1 / 3, 1 / 4])[0]
    k = rng.randint(3, 6)
    picked: dict[int, float] = {}
    while len(picked) < k:
        r = rng.choices(range(len(rank)), weights)[0]
        picked.setdefault(r, math.log(r + 1) + rng.gauss(0.0, 0.7))
    order = sorted(picked, key=picked.__getitem__)
    return app + [b for r in order for b in chunks[rank[r]]] + new(rng.randint(1, 3))


def _drift(rng: random.Random, rank: list[int]) -> None:
    """5 % of the ranks swap their chunks with another random rank."""
    for _ in range(len(rank) // 20):
        a, b = rng.randrange(len(rank)), rng.randrange(len(rank))
        rank[a], rank[b] = rank[b], rank[a]
