"""``kvpool router --kv-events`` over real ``kvpool serve`` replicas publishing KV events:
placement by the event-fed index with no lookup round trip, text prompts tokenized in the
router, and a replica restarted on new event ports (and another spec) followed from scratch."""

from __future__ import annotations

import json
import socket

import aiohttp
import pytest
import zmq
from aiohttp import web

from kvpool.core.hashing import BlockHasher
from kvpool.router.kv_routing import EventRouting
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from kvpool.router.scored_body import MESSAGES_PATH, scored_body
from tests.router.helpers import (LOOKUP_TIMEOUT, apps_served, complete, decisions, metrics,
                                  prompt, served, spawn, spawn_many)
from tests.router.kv_events import EVENTS, holder, until
from tests.server.chat_templates import CHATML


@pytest.fixture(scope="module")
def fleet():
    servers = spawn_many({"e1": tuple(EVENTS), "e2": tuple(EVENTS)})
    yield servers
    for srv in servers.values():
        srv.stop(timeout=20)


def event_router(urls):
    rs = ReplicaSet(urls, interval=0.5)
    events = EventRouting(rs, refresh_interval=0.3)
    return Router(rs, lookup_timeout=LOOKUP_TIMEOUT, kv_events=events), events


async def test_placed_by_events_without_a_lookup(fleet):
    urls = [s.url for s in fleet.values()]
    r, events = event_router(urls)
    async with served(r) as url, aiohttp.ClientSession() as s:
        await until(lambda: all(f.live for f in events.feeds.values()), "both feeds caught up")
        ids = [10 + (7 * i) % 200 for i in range(200)]
        first = await complete(s, url, {"prompt": ids})
        assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        await until(lambda: holder(events, ids), "the replica's BlockStored")
        (where,) = holder(events, ids)
        again = await complete(s, url, {"prompt": ids})
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == 192
        m = await metrics(s, url)
        assert decisions(m, "prefix") == 1 and m["kvpool_router_predicted_hit_tokens_total"][
            ()] == 192
        assert events.fallbacks == 0  # no request asked the replicas' lookups
        assert m["kvpool_router_lookup_fallbacks_total"][()] == 0
        assert sum(m["kvpool_router_kv_index_blocks"].values()) >= 12
        assert m["kvpool_router_kv_events_total"][(("kind", "applied"),
                                                   ("replica", where.split("//")[1]))] > 0
        # text prompts: the first one loads the replicas' tokenizer here (placed by lookups
        # meanwhile), the next ones are tokenized and hashed in the router
        await complete(s, url, {"prompt": prompt("kv-events")})
        assert events.fallbacks == 1
        await until(lambda: events.keys.parser is not None, "the router's tokenizer")
        body = {"prompt": prompt("kv-events")}  # its BlockStored may trail the response
        await until(lambda: holder(events, events.keys.ids_and_salt(body)[0]), "the text stored")
        text = await complete(s, url, body)
        assert text["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
        chat = {"messages": [{"role": "user", "content": prompt("chat")}]}
        await complete(s, url, chat, "/v1/chat/completions")
        await until(lambda: holder(events, events.keys.ids_and_salt(chat)[0]), "the chat prompt stored")
        again = await complete(s, url, chat, "/v1/chat/completions")
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
        assert events.fallbacks == 1 and where in urls



async def test_prompt_logprobs_requests_are_not_placed_by_a_hit_they_cannot_use(fleet):
    """A request asking for prompt logprobs reads no cache on the replica (NOTE(prompt-logprobs)
    in kvpool/runtime/engine): the router predicts no hit for it, ids or text alike."""
    r, events = event_router([s.url for s in fleet.values()])
    async with served(r) as url, aiohttp.ClientSession() as s:
        await until(lambda: all(f.live for f in events.feeds.values()), "both feeds caught up")
        ids = [20 + (11 * i) % 300 for i in range(160)]
        await complete(s, url, {"prompt": ids})
        await until(lambda: holder(events, ids), "the replica's BlockStored")
        before = (await metrics(s, url))["kvpool_router_predicted_hit_tokens_total"][()]
        for extra in ({"prompt_logprobs": 1}, {"echo": True, "logprobs": 1}):
            out = await complete(s, url, {"prompt": ids, **extra})
            assert out["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        m = await metrics(s, url)
        assert m["kvpool_router_predicted_hit_tokens_total"][()] == before
        assert decisions(m, "prefix") == 0
        again = await complete(s, url, {"prompt": ids})  # the plain request still hits
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == 144

async def test_a_replica_restarted_on_another_hash_spec_is_followed_from_scratch():
    """A replica restarted on the same URL with new event ports is followed from scratch (the
    old process's blocks leave the index), and NOTE(specs) in kv_routing.py: the router's
    keys follow each replica's spec. The first spec seen used to be kept for good: after a
    restart onto another block size every prompt scored 0 hits, though the index held the
    new blocks."""
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    srv = spawn("sp", *EVENTS, "--port", str(port), "--block-size", "16")
    try:
        r, events = event_router([srv.url])
        (feed,) = events.feeds.values()
        (replica,) = r.replicas.replicas
        async with served(r) as url, aiohttp.ClientSession() as s:
            await until(lambda: feed.live, "caught up")
            ids = list(range(20, 120))
            for block_size in (16, 32):
                if block_size == 32:
                    before = feed.info["endpoint"]
                    srv.stop(timeout=20)
                    srv = spawn("sp", *EVENTS, "--port", str(port), "--block-size", "32")
                    await until(lambda: feed.live and feed.info["block_size"] == 32, "spec")
                    assert feed.info["endpoint"] != before  # new event ports, followed
                    assert len(feed.index) == 0  # the old cache is gone with the old process
                await complete(s, url, {"prompt": ids})
                await until(lambda: holder(events, ids), f"stored in blocks of {block_size}")
                hits, chains = await events.score({"prompt": ids}, [replica], [])
                assert hits == [96] and len(chains[srv.url]) == 100 // block_size, hits
            assert len(events.specs) == 1  # the old spec went with the old process
    finally:
        srv.stop(timeout=20)


@pytest.fixture(scope="module")
def tenant_replica(tmp_path_factory):
    """One replica for the two tests below: tenants by header X-Tenant, and a chat template
    the router cannot load (a file the replica read at its start, gone since)."""
    template = tmp_path_factory.mktemp("ct") / "t.jinja"
    template.write_text(CHATML)
    srv = spawn("kv-tenant", *EVENTS, "--chat-template", str(template),
                "--tenant-header", "X-Tenant")
    template.unlink()
    yield srv
    srv.stop(timeout=20)


async def test_a_chat_template_the_router_cannot_load_is_said(tenant_replica, caplog):
    """NOTE(load-fails) in kv_routing.py: a replica's --chat-template that is not where the
    router runs made every chat prompt go to the lookups, and nothing said why."""
    srv = tenant_replica
    r, events = event_router([srv.url])
    (feed,) = events.feeds.values()
    chat = {"messages": [{"role": "user", "content": "hello " * 40}]}
    async with served(r) as url, aiohttp.ClientSession() as s:
        await until(lambda: feed.live, "caught up")
        for _ in range(3):
            await complete(s, url, chat, "/v1/chat/completions")
        await until(lambda: any("cannot be loaded" in m.message for m in caplog.records),
                    "the load failure said")
        await complete(s, url, chat, "/v1/chat/completions")
    said = [m for m in caplog.records if "cannot be loaded" in m.message]
    assert len(said) == 1 and "--chat-template" in said[0].message
    assert events.keys.parser is None and events.fallbacks >= 4


async def test_a_load_failing_again_and_again_holds_no_ended_task(tenant_replica, monkeypatch):
    """NOTE(own-tasks) in kv_routing.py: a tokenizer load that keeps failing is tried again
    every RELOAD_AFTER seconds for the router's life; each try's task was kept in a list after
    it ended (2880 a day at 30 s). Shortened here, several tries: none of their tasks lives on."""
    import asyncio
    import gc

    import kvpool.router.kv_routing as kv_routing
    monkeypatch.setattr(kv_routing, "RELOAD_AFTER", 0.02)
    r, events = event_router([tenant_replica.url])
    (feed,) = events.feeds.values()
    chat = {"messages": [{"role": "user", "content": "again " * 40}]}
    async with served(r) as url, aiohttp.ClientSession() as s:
        await until(lambda: feed.live, "caught up")
        for _ in range(5):  # each chat prompt after RELOAD_AFTER starts another load
            await complete(s, url, chat, "/v1/chat/completions")
            await asyncio.sleep(0.1)
        await until(lambda: not any(t.get_name() == "router-tokenizer"
                                    for t in asyncio.all_tasks()), "the last try ended")
        gc.collect()
        held = [o for o in gc.get_objects()
                if isinstance(o, asyncio.Task) and o.get_name() == "router-tokenizer"]
        assert events.keys.parser is None and events.fallbacks >= 5
    assert held == []


async def test_tenant_namespaces_are_hashed_as_the_replica_does(tenant_replica):
    """--tenant-header replica: the router folds the tenant into the salt by the replica's
    rule, so tenant b gets no predicted hit on a's prompt, and every prediction equals what
    the replica then reports as cached, with no lookup."""
    from kvpool.server.cache_namespace import CacheNamespace
    srv = tenant_replica
    r, events = event_router([srv.url])
    (feed,) = events.feeds.values()
    ids = list(range(30, 130))
    async with served(r) as url, aiohttp.ClientSession() as s:
        await until(lambda: feed.live, "caught up")
        assert events.keys.namespaced and events.keys.tenant_header == "X-Tenant"

        async def cached(tenant: str) -> int:
            before = (await metrics(s, url))["kvpool_router_predicted_hit_tokens_total"][()]
            async with s.post(url + "/v1/completions", headers={"X-Tenant": tenant},
                              json={"prompt": ids, "max_tokens": 1}) as resp:
                out = await resp.json()
                assert resp.status == 200, out
            got = out["usage"]["prompt_tokens_details"]["cached_tokens"]
            m = await metrics(s, url)
            assert m["kvpool_router_predicted_hit_tokens_total"][()] - before == got
            salt = CacheNamespace(identity=True).salt(tenant, None)
            first = BlockHasher(16, feed.info["hash"]["model_id"]).hash_blocks(ids, salt)[0]
            await until(lambda: first in feed.index, f"tenant {tenant}'s blocks")
            return got

        assert await cached("a") == 0
        assert await cached("b") == 0  # a's prompt is no hit for b
        assert await cached("a") == 96
        assert events.fallbacks == 0


async def test_a_replica_publishing_to_an_external_indexer_is_placed_by_lookups(fleet, caplog):
    """A replica whose PUB connects out to an indexer (publisher.py NOTE(pub-connect)) has no
    stream to follow: the router says so once and places its requests by lookups."""
    ctx = zmq.Context()
    indexer = ctx.socket(zmq.SUB)  # the external indexer binds; the replica dials it
    port = indexer.bind_to_random_port("tcp://127.0.0.1")
    cfg = json.dumps({"enable_kv_cache_events": True, "publisher": "zmq",
                      "endpoint": f"tcp://127.0.0.1:{port}"})
    srv = spawn("ext", "--kv-events-config", cfg)
    try:
        r, events = event_router([fleet["e1"].url, srv.url])
        ext = events.feeds[srv.url]
        async with served(r) as url, aiohttp.ClientSession() as s:
            await until(lambda: ext.external and events.feeds[fleet["e1"].url].live, "feeds")
            assert ext.external == f"tcp://127.0.0.1:{port}" and not ext.live
            ids = [40 + (13 * i) % 300 for i in range(100)]
            await complete(s, url, {"prompt": ids})
            again = await complete(s, url, {"prompt": ids})
            assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == 96
            m = await metrics(s, url)
            assert events.fallbacks == 2 and m["kvpool_router_lookup_fallbacks_total"][()] == 2
            assert decisions(m, "prefix") == 1  # the lookups found the hit
            await events.refresh(s)
        said = [m for m in caplog.messages if "external indexer" in m]
        assert len(said) == 1 and srv.url in said[0], said
    finally:
        srv.stop(timeout=20)
        indexer.close(linger=0)
        ctx.term()


def fronted(url: str, spoil) -> web.Application:
    """A real replica at ``url`` behind a proxy whose kv_events route answers ``spoil``(the
    replica's info): bytes, the answer as is; else that value as JSON."""
    async def relay(req: web.Request) -> web.Response:
        async with aiohttp.ClientSession() as s, s.request(
                req.method, url + req.path_qs, data=await req.read(),
                headers={"Content-Type": req.content_type}) as resp:
            body = await resp.read()
            if req.path == "/v1/kvpool/kv_events":
                got = spoil(json.loads(body))
                body = got if isinstance(got, bytes) else json.dumps(got).encode()
            return web.Response(status=resp.status, body=body,
                                content_type=resp.content_type)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", relay)
    return app


@pytest.mark.parametrize("n, spoil, reason", [
    (0, lambda i: {**i, "block_size": 0}, "block_size: want an integer"),
    (1, lambda i: {**i, "hash": {**i["hash"], "algo": "nope"}}, "hash: "),
    (2, lambda i: {**i, "endpoint": "tcp://127.0.0.1:x"}, "Invalid argument"),
    (3, lambda i: b"<html>not json</html>", "want a JSON object"),
    (4, lambda i: {**i, "endpoint": "tcp://127.0.0.2:1"}, "not the host of its URL")])
async def test_a_replica_whose_kv_events_info_is_unusable_is_placed_by_lookups(
        fleet, caplog, n, spoil, reason):
    """docs/kv_events.md: a replica whose info fails the router's checks is not followed and
    is placed by lookups (logged once). It scored 0 hits, so a prompt it holds went to a
    replica that held nothing (round robin over two zeros, then the other's new blocks)."""
    ids = [50 + n + (17 * i) % 400 for i in range(100)]
    async with aiohttp.ClientSession() as s, apps_served(fronted(fleet["e2"].url, spoil)) as (
            bad,):
        await complete(s, fleet["e2"].url, {"prompt": ids})  # the prefix is on e2 only
        r, events = event_router([fleet["e1"].url, bad])
        async with served(r) as url:
            await until(lambda: events.feeds[fleet["e1"].url].live
                        and events.feeds[bad].unusable, "feeds")
            assert reason in events.feeds[bad].unusable and not events.feeds[bad].live
            for _ in range(2):
                out = await complete(s, url, {"prompt": ids})
                assert out["usage"]["prompt_tokens_details"]["cached_tokens"] == 96
            m = await metrics(s, url)
            assert events.fallbacks == 2 and m["kvpool_router_lookup_fallbacks_total"][()] == 2
            assert decisions(m, "prefix") == 2  # the lookups found e2's hit
            await events.refresh(s)
    said = [m for m in caplog.messages if "placed by lookups" in m and bad in m]
    assert len(said) == 1 and reason in said[0], said


async def test_a_messages_request_is_hashed_as_the_chat_body_it_becomes(fleet):
    """NOTE(messages-scored): the router hashes an Anthropic Messages request as the chat body
    the replica runs (system prompt first), so the event index places its repeat where that
    prefix is stored, with the hit the replica then serves."""
    r, events = event_router([s.url for s in fleet.values()])
    body = {"model": "kvpool-tiny", "max_tokens": 2, "system": prompt("messages-events"),
            "messages": [{"role": "user", "content": "hi"}]}
    chat = scored_body(MESSAGES_PATH, b"", body)[1]
    async with served(r) as url, aiohttp.ClientSession() as s:
        await until(lambda: all(f.live for f in events.feeds.values()), "both feeds caught up")
        await complete(s, url, body, "/v1/messages")  # may load the router's tokenizer
        await until(lambda: events.keys.parser is not None, "the router's tokenizer")
        await until(lambda: holder(events, events.keys.ids_and_salt(chat)[0]), "chat stored")
        before = await metrics(s, url)
        again = await complete(s, url, body, "/v1/messages")
        after = await metrics(s, url)
    cached = again["usage"]["cache_read_input_tokens"]
    predicted = after["kvpool_router_predicted_hit_tokens_total"][()] - \
        before["kvpool_router_predicted_hit_tokens_total"][()]
    assert cached > 0 and predicted == cached
    assert decisions(after, "prefix") == decisions(before, "prefix") + 1
