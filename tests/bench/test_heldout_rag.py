"""bench.heldout's rerank_rag shape: chain ids as a trace's hash ids are, and the property it is
named for (popular chunks come in re-ranked orders, so behind different prefixes)."""

from __future__ import annotations

import itertools
import random
from collections import Counter

from bench.heldout_rag import CHUNKS, Chains, _question, rerank_rag


def test_chain_ids_are_one_per_prefix_and_block():
    c = Chains()
    a = c.ids([1, 2, 3])
    assert c.ids([1, 2, 3]) == a and len(set(a)) == 3
    b = c.ids([1, 3, 2])  # the same blocks in another order: only the head is shared
    assert b[0] == a[0] and not set(b[1:]) & set(a)


def test_questions_bring_popular_chunks_in_different_orders():
    rng = random.Random(0)
    fresh = itertools.count()
    new = lambda n: [next(fresh) for _ in range(n)]  # noqa: E731
    apps = [new(8) for _ in range(4)]
    chunks = [new(4) for _ in range(CHUNKS)]
    first = {c[0]: i for i, c in enumerate(chunks)}
    rank = list(range(CHUNKS))
    weights = [1 / (r + 1) ** 0.9 for r in range(CHUNKS)]
    orders: dict[frozenset, set] = {}
    used: Counter = Counter()
    for _ in range(3000):
        q = _question(rng, new, apps, chunks, rank, weights)
        picked = tuple(first[b] for b in q if b in first)
        assert 3 <= len(picked) <= 6 and len(set(picked)) == len(picked)
        orders.setdefault(frozenset(picked[:2]), set()).add(picked[:2])
        used.update(picked)
    assert used[0] > 10 * used[400]  # Zipf popularity
    assert sum(len(o) > 1 for o in orders.values()) > 20  # one pair, both orders


def test_apps_are_shared_and_content_is_reused_through_chains():
    reqs = rerank_rag(1, 0.25)
    heads = Counter(r[0] for r in reqs)
    # questions and conversations (85 %) start with one of 4 app prompts, uploads do not
    assert 0.75 * len(reqs) < sum(n for _, n in heads.most_common(4)) < 0.95 * len(reqs)
    blocks = sum(map(len, reqs))
    assert blocks - len({h for r in reqs for h in r}) > 0.2 * blocks
