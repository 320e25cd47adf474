"""Replicas that join and leave a running router (admin API, watched file), in front of real
``kvpool serve`` processes on loopback (stopped by pid)."""

from __future__ import annotations

import argparse
import asyncio
import os
import uuid

import aiohttp
import pytest

from kvpool.router.cli import add_arguments, build_router
from kvpool.router.membership import ADMIN_PATH, Membership, replica_url
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from tests.router.helpers import (LOOKUP_TIMEOUT, complete, decisions, metrics, prompt,
                                  read_events, served, spawn_many)

TOKEN = "s3cret-admin"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JOIN_BOUND = 20.0  # seconds: liveness bound on a shared 2-core box (the 2 s target is a bench's)


@pytest.fixture(scope="module")
def fleet():
    started = spawn_many({"m0": (), "m1": ()})
    try:
        yield [started["m0"].url, started["m1"].url]
    finally:
        for srv in started.values():
            srv.stop(timeout=20)


def admin_router(urls, policy: str = "prefix", **kw) -> Router:
    replicas = ReplicaSet(urls, interval=0.5)
    return Router(replicas, lookup_timeout=LOOKUP_TIMEOUT, policy=policy,
                  membership=Membership(replicas, admin_token=TOKEN, **kw))


async def hit_on(s, rep: str, text: str) -> int:
    async with s.post(rep + "/v1/kvpool/lookup", json={"prompt": text}) as r:
        return (await r.json())["device_hit_tokens"]


async def until(cond, bound: float = JOIN_BOUND) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound
    while not await cond():
        assert loop.time() < deadline, "condition not met within the bound"
        await asyncio.sleep(0.05)


async def test_added_replica_takes_traffic(fleet):
    r = admin_router(fleet[:1])
    async with served(r) as url, aiohttp.ClientSession() as s:
        async with s.post(url + ADMIN_PATH, json={"url": fleet[1] + "/"}, headers=AUTH) as resp:
            assert resp.status == 201, await resp.text()
            assert await resp.json() == {"url": fleet[1], "added": True,
                                         "name": fleet[1].removeprefix("http://")}
        async with s.post(url + ADMIN_PATH, json={"url": fleet[1]}, headers=AUTH) as resp:
            assert resp.status == 200 and (await resp.json())["added"] is False

        async def new_one_served() -> bool:
            p = prompt(uuid.uuid4().hex)
            await complete(s, url, {"prompt": p})
            return await hit_on(s, fleet[1], p) > 0
        await until(new_one_served)
        async with s.get(url + ADMIN_PATH, headers=AUTH) as resp:
            listed = (await resp.json())["replicas"]
        assert [(x["url"], x["healthy"]) for x in listed] == [(fleet[0], True), (fleet[1], True)]


async def test_removed_replica_drains_its_stream_and_gets_nothing_new(fleet):
    r = admin_router(list(fleet))
    body = {"prompt": prompt(uuid.uuid4().hex), "max_tokens": 40, "ignore_eos": True,
            "stream": True, "temperature": 0}
    async with served(r) as url, aiohttp.ClientSession() as s:
        async with s.post(url + "/v1/completions", json=body) as stream:
            assert stream.status == 200
            await stream.content.readline()  # its first chunk arrived: running upstream
            busy = next(x for x in r.replicas.replicas if x.in_flight)
            other = next(x.url for x in r.replicas.replicas if x is not busy)
            async with s.delete(url + ADMIN_PATH, json={"url": busy.url},
                                headers=AUTH) as resp:
                assert resp.status == 200
                assert await resp.json() == {"url": busy.url, "removed": True, "draining": 1}
            events = await read_events(stream)
        assert events[-1] == "[DONE]"
        assert sum(len(e["choices"]) for e in events[:-1]) >= 39  # every token came
        for _ in range(3):
            p = prompt(uuid.uuid4().hex)
            await complete(s, url, {"prompt": p})
            assert await hit_on(s, other, p) > 0 and await hit_on(s, busy.url, p) == 0

        async def beats_stopped() -> bool:
            return busy not in r.replicas.beats
        await until(beats_stopped)  # drained: its heartbeat ended too


async def test_added_replica_gets_nothing_before_a_passing_beat(fleet):
    """Joining is not being healthy: a replica that accepts connections but has not answered
    /health yet (here: never does) is not chosen, so nothing waits on it or is retried."""
    async def mute(reader, writer):
        await reader.read()  # holds the connection, answers nothing, until the client goes
        writer.close()
    server = await asyncio.start_server(mute, "127.0.0.1", 0)
    silent = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    r = admin_router(fleet[:1], policy="round_robin")  # no lookups: the 2nd goes to #2
    try:
        async with served(r) as url, aiohttp.ClientSession() as s:
            async with s.post(url + ADMIN_PATH, json={"url": silent}, headers=AUTH) as resp:
                assert resp.status == 201
            for _ in range(2):  # right after the POST: before its first beat can time out
                await complete(s, url, {"prompt": prompt(uuid.uuid4().hex)})
            assert decisions(await metrics(s, url), "retry") == 0
    finally:
        server.close()


def write(path, text: str) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)  # an editor's atomic save: a new inode


async def test_replicas_file_adds_and_removes(fleet, tmp_path):
    path = tmp_path / "replicas.txt"
    write(path, f"# the pool\n{fleet[0]}\n")
    args = add_arguments(argparse.ArgumentParser()).parse_args(
        ["--replicas-file", str(path), "--health-interval", "0.5",
         "--lookup-timeout-ms", str(LOOKUP_TIMEOUT * 1000)])
    r = build_router(args)
    async with served(r) as url, aiohttp.ClientSession() as s:

        def healthy_is(*urls):
            async def check() -> bool:
                async with s.get(url + "/health") as h:
                    return (await h.json())["healthy"] == list(urls)
            return check
        await until(healthy_is(fleet[0]))
        write(path, f"{fleet[0]}\nnot a url\n{fleet[1]}  # joins\n")
        await until(healthy_is(fleet[0], fleet[1]))
        write(path, f"{fleet[1]}\n")
        await until(healthy_is(fleet[1]))
        p = prompt(uuid.uuid4().hex)
        await complete(s, url, {"prompt": p})
        assert await hit_on(s, fleet[1], p) > 0
        path.unlink()  # a missing file changes nothing
        await asyncio.sleep(1.0)
        assert await healthy_is(fleet[1])()


async def error_of(resp, status: int) -> dict:
    assert resp.status == status, await resp.text()
    err = (await resp.json())["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return err


async def test_admin_api_refuses_bad_tokens_and_hostile_bodies():
    r = admin_router(["http://127.0.0.1:9"])
    async with served(r) as url, aiohttp.ClientSession() as s:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
            async with s.post(url + ADMIN_PATH, json={"url": "http://a:1"},
                              headers=headers) as resp:
                assert (await error_of(resp, 401))["code"] == "invalid_admin_token"
        hostile = [b"{nope", b"[1]", b'{"url": 5}', b'{"url": "ftp://h:1"}',
                   b'{"url": "http://h:99999"}', b'{"url": "http://h:1/v1"}', b'{"url": "h:1"}',
                   b'\xff\xfe']
        for raw in hostile:
            async with s.post(url + ADMIN_PATH, data=raw, headers=AUTH) as resp:
                assert (await error_of(resp, 400))["code"] in ("invalid_json", "invalid_url")
        async with s.delete(url + ADMIN_PATH, json={"url": "http://10.9.9.9:8000"},
                            headers=AUTH) as resp:
            assert (await error_of(resp, 404))["code"] == "replica_not_found"
        async with s.put(url + ADMIN_PATH, json={}, headers=AUTH) as resp:
            await error_of(resp, 405)
        assert [x.url for x in r.replicas.replicas] == ["http://127.0.0.1:9"]
    replicas = ReplicaSet(["http://127.0.0.1:9"])  # a file, no --admin-token-file: API off
    off = Router(replicas, membership=Membership(replicas, replicas_file="/nonexistent"))
    async with served(off) as url, aiohttp.ClientSession() as s:
        async with s.post(url + ADMIN_PATH, json={"url": "http://a:1"}, headers=AUTH) as resp:
            assert (await error_of(resp, 403))["code"] == "admin_disabled"


def test_replica_url_checks_the_shape_only():
    assert replica_url("http://Some-Host.example:8000/") == "http://Some-Host.example:8000"
    assert replica_url("https://10.1.2.3") == "https://10.1.2.3"
    assert replica_url("http://[::1]:8000") == "http://[::1]:8000"
    for bad in ("", "10.0.0.1:80", "file:///etc/passwd", "http://", "http://u@h:1",
                "http://h:0x50", "http://h:1?x=1", "http://a b:80", "http://127.0.0.1:0"):
        with pytest.raises(ValueError):
            replica_url(bad)
