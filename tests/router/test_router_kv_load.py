"""``kvpool router --kv-events`` beyond placement: the load it balances on without a lookup,
one decode of each body, and replicas that want an API key for their event endpoints."""

from __future__ import annotations

import json
import logging

import aiohttp
import pytest

from kvpool.router.kv_routing import EventRouting
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from kvpool.router.scoring import LoadGuard
from tests.router.helpers import (HOG_TOKENS, LOOKUP_TIMEOUT, complete, decisions, metrics,
                                  served, spawn, spawn_many, wait_idle)
from tests.router.kv_events import EVENTS, holder, until

HOG = {"prompt": "hold", "max_tokens": HOG_TOKENS, "ignore_eos": True, "stream": True,
       "temperature": 0}


@pytest.fixture(scope="module")
def fleet():
    servers = spawn_many({"l1": tuple(EVENTS), "l2": tuple(EVENTS)})
    yield [s.url for s in servers.values()]
    for srv in servers.values():
        srv.stop(timeout=20)


def event_router(urls, **kw):
    rs = ReplicaSet(urls, interval=0.3)
    key = {"api_key": kw.pop("api_key")} if "api_key" in kw else {}
    events = EventRouting(rs, refresh_interval=0.3, **key)
    return Router(rs, lookup_timeout=LOOKUP_TIMEOUT, kv_events=events, **kw), events


async def test_the_guard_sees_load_the_router_did_not_send(fleet):
    """The prompt's blocks live on one replica, which then runs a long stream some other
    client sent it directly. With ``--balance-abs-threshold 0`` the router must see that load
    (from the replica's /health, no lookup) and send the prompt to the idle replica; blind
    to it (its own in-flight count, 0 everywhere) it chose the hot one by its prefix hit."""
    r, events = event_router(fleet, guard=LoadGuard(0, 1.5))
    ids = [10 + (11 * i) % 200 for i in range(100)]
    async with served(r) as url, aiohttp.ClientSession() as s:
        await until(lambda: all(f.live for f in events.feeds.values()), "both feeds caught up")
        await complete(s, url, {"prompt": ids})
        await until(lambda: holder(events, ids), "the replica's BlockStored")
        (hot,) = holder(events, ids)
        async with s.post(hot + "/v1/completions", json=HOG) as held:
            assert held.status == 200
            await held.content.readline()  # running there, not through the router
            (rep,) = [x for x in r.replicas.replicas if x.url == hot]
            await until(lambda: rep.load >= 1, "a beat reporting the stream")
            assert rep.in_flight == 0
            moved = await complete(s, url, {"prompt": ids})
            m = await metrics(s, url)
        assert decisions(m, "load") == 1
        assert moved["usage"]["prompt_tokens_details"]["cached_tokens"] == 0  # the idle one
        assert events.fallbacks == 0
        assert await wait_idle(s, fleet) == 0


async def test_a_body_is_decoded_once_in_the_router(fleet, monkeypatch):
    """The body check's decoded object is what the prompt hashing reads: one json.loads of a
    request's body in the router, not one for the check and one for the keys."""
    r, events = event_router(fleet)
    body = {"prompt": [10 + (13 * i) % 200 for i in range(64)], "max_tokens": 1}
    raw = json.dumps(body)
    decodes = []
    real = json.loads

    def counting(s, *a, **kw):
        if s in (raw, raw.encode()):
            decodes.append(1)
        return real(s, *a, **kw)

    async with served(r) as url, aiohttp.ClientSession() as s:
        await until(lambda: all(f.live for f in events.feeds.values()), "both feeds caught up")
        monkeypatch.setattr(json, "loads", counting)
        async with s.post(url + "/v1/completions", data=raw,
                          headers={"Content-Type": "application/json"}) as resp:
            assert resp.status == 200, await resp.text()
        monkeypatch.undo()
    assert len(decodes) == 1
    assert events.fallbacks == 0  # scored from the events, so the keys read the body


async def test_the_replicas_api_key_opens_their_event_endpoints(caplog):
    """A replica started with --api-key answers GET /v1/kvpool/kv_events 401 without it: the
    router says once how to give it the key, and with ``--replica-api-key`` it follows."""
    srv = spawn("kv-key", *EVENTS, "--api-key", "s3cret")
    try:
        auth = {"Authorization": "Bearer s3cret"}
        without, events = event_router([srv.url])
        with caplog.at_level(logging.WARNING, logger="kvpool.router"):
            async with served(without):
                pass
        assert not any(f.live for f in events.feeds.values())
        assert sum("--replica-api-key" in m for m in caplog.messages) == 1
        r, events = event_router([srv.url], api_key="s3cret")
        ids = list(range(40, 140))
        async with served(r) as url, aiohttp.ClientSession(headers=auth) as s:
            await until(lambda: all(f.live for f in events.feeds.values()), "the feed live")
            await complete(s, url, {"prompt": ids})
            (feed,) = events.feeds.values()  # the key's tenant salts the chain: count blocks
            await until(lambda: len(feed.index) >= 6, "stored")
            again = await complete(s, url, {"prompt": ids})
            m = await metrics(s, url)
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == 96
        assert m["kvpool_router_predicted_hit_tokens_total"][()] == 96  # from the events
        assert events.fallbacks == 0
    finally:
        srv.stop(timeout=20)


async def test_a_text_prompt_is_tokenized_once_in_the_router(fleet, monkeypatch):
    """Once the replicas' tokenizer is loaded here, a text prompt is encoded once per request
    in the router (the scoring and the expected blocks share that one result) and placed
    without a lookup, which would tokenize it again on every replica."""
    r, events = event_router(fleet)
    text = "tokenize me once " * 20
    async with served(r) as url, aiohttp.ClientSession() as s:
        await until(lambda: all(f.live for f in events.feeds.values()), "both feeds caught up")
        await complete(s, url, {"prompt": "load the tokenizer"})  # by lookup, loads it
        await until(lambda: events.keys.parser is not None, "the router's tokenizer")
        tok = events.keys.parser.tokenizer
        calls = []
        for name in ("encode", "encode_unlocked"):
            real = getattr(tok, name)
            monkeypatch.setattr(tok, name, lambda *a, _real=real, **kw: (
                calls.append(1), _real(*a, **kw))[1])
        await complete(s, url, {"prompt": text})
        monkeypatch.undo()
    assert len(calls) == 1
    assert events.fallbacks == 1  # only the first prompt, before the tokenizer was here
