"""Differential KV test through the real server (tests/runtime/test_kv_differential.py is the
engine's): each completion request, greedy or seeded, with n, best_of, logprobs and stop strings,
streamed or not, answers the same on a small swapping, defragmenting server crowded with the
others and with clients that leave mid-stream as it answers alone on a roomy server without
prefix caching. Afterwards the crowded server's pool holds no block (the make_server fixture
checks)."""

from __future__ import annotations

import asyncio
import json
import random

import aiohttp

from tests.server.helpers import Running

SYSTEM = "You are a paged key value cache. Answer briefly. "
CROWDED = dict(block_size=4, num_device_blocks=32, num_host_blocks=32, preemption_mode="swap",
               defrag_threshold=0.0, max_num_seqs=8)


def _bodies(seed: int, count: int) -> list[dict]:
    rng = random.Random(seed)
    bodies = []
    for i in range(count):
        greedy = i % 2 == 0
        n = rng.choice([1, 2])
        body = {"prompt": SYSTEM[:rng.randint(8, len(SYSTEM))] + f"question {i}?",
                "max_tokens": rng.randint(8, 28), "ignore_eos": True, "logprobs": 1,
                "temperature": 0 if greedy else 1.0, "n": n}
        if not greedy:
            body["seed"] = rng.randrange(1 << 20)
            if rng.random() < 0.5:
                body.update(best_of=n + 1, logprobs=None)  # best_of hides logprobs
        if "best_of" not in body and rng.random() < 0.5:
            body["stream"] = True  # the answer is the chunks joined
        if rng.random() < 0.3:
            body["stop"] = [rng.choice("aeiou") + rng.choice("nrst")]
        bodies.append(body)
    return bodies


def _answer(resp: dict) -> list:
    return [(c["index"], c["text"], c["finish_reason"],
             None if c["logprobs"] is None else c["logprobs"]["token_logprobs"])
            for c in sorted(resp["choices"], key=lambda c: c["index"])]


async def _complete(session: aiohttp.ClientSession, srv: Running, body: dict) -> list:
    async with session.post(srv.v1 + "/completions", json=body) as r:
        assert r.status == 200, await r.text()
        if not body.get("stream"):
            return _answer(await r.json())
        joined: dict[int, dict] = {}
        async for line in r.content:
            if not line.startswith(b"data: {"):
                continue
            for c in json.loads(line[6:])["choices"]:
                j = joined.setdefault(c["index"], {"index": c["index"], "text": "",
                                                   "finish_reason": None, "logprobs": None})
                j["text"] += c["text"]
                j["finish_reason"] = c["finish_reason"] or j["finish_reason"]
                if c["logprobs"] is not None:
                    j["logprobs"] = j["logprobs"] or {"token_logprobs": []}
                    j["logprobs"]["token_logprobs"] += c["logprobs"]["token_logprobs"]
        return _answer({"choices": list(joined.values())})


async def _leave_mid_stream(session: aiohttp.ClientSession, srv: Running) -> None:
    body = {"prompt": SYSTEM + "a long answer", "max_tokens": 60, "stream": True,
            "temperature": 0, "ignore_eos": True}
    resp = await session.post(srv.v1 + "/completions", json=body)
    assert resp.status == 200
    await resp.content.readline()  # the first chunk: it holds blocks now
    resp.close()


def _same(alone: list, crowded: list) -> bool:
    for a, b in zip(alone, crowded, strict=True):
        if a[:3] != b[:3] or (a[3] is None) != (b[3] is None):
            return False
        if a[3] is not None and any(abs(x - y) > 1e-3 for x, y in zip(a[3], b[3], strict=True)):
            return False
    return True


async def test_crowded_swapping_server_answers_as_alone(make_server):
    bodies = _bodies(7, 12)
    async with make_server(enable_prefix_caching=False) as roomy, \
            aiohttp.ClientSession() as session:
        alone = [await _complete(session, roomy, b) for b in bodies]
    async with make_server(**CROWDED) as srv, aiohttp.ClientSession() as session:
        leavers = [_leave_mid_stream(session, srv) for _ in range(3)]
        got = await asyncio.gather(*(_complete(session, srv, b) for b in bodies), *leavers)
        again = await asyncio.gather(*(_complete(session, srv, b) for b in bodies))
        snap = srv.engine.snapshot()
    crowded = got[:len(bodies)]
    assert [i for i, (a, b) in enumerate(zip(alone, crowded)) if not _same(a, b)] == []
    assert [i for i, (a, b) in enumerate(zip(alone, again)) if not _same(a, b)] == []
    assert snap.preemptions["swap"] > 0 and snap.manager.prefix_hit_tokens > 0
