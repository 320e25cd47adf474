"""Replicas that join and leave a running router (admin API, watched file), in front of real
``kvpool serve`` processes on loopback (stopped by pid)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import uuid

import aiohttp
import pytest
from aiohttp import web

from kvpool.router.cli import add_arguments, build_router
from kvpool.router.membership import ADMIN_PATH, Membership, replica_url
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from tests.router.helpers import (LOOKUP_TIMEOUT, apps_served, complete, decisions, metrics,
                                  prompt, read_events, served, spawn_many)

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


async def test_admin_bodies_are_bounded_and_decoded_off_the_loop():
    """membership.py NOTE(admin-body): a body of more JSON values than the router decodes
    is refused unread (it was decoded on the event loop, then served), one nested too deeply
    is a 400 (it was a 500), and a large one that fits is decoded on the reader's thread."""
    r = admin_router(["http://127.0.0.1:9"])
    many = b'{"url": "http://10.0.0.8:8000", "x": [' + b",".join([b"1"] * 300_000) + b"]}"
    deep = b"[" * 5000 + b"]" * 5000
    padded = b'{"url": "http://10.0.0.9:8000", "pad": "' + b"p" * 100_000 + b'"}'
    async with served(r) as url, aiohttp.ClientSession() as s:
        for raw in (many, deep):
            async with s.post(url + ADMIN_PATH, data=raw, headers=AUTH) as resp:
                assert (await error_of(resp, 400))["code"] == "invalid_json"
        async with s.post(url + ADMIN_PATH, data=padded, headers=AUTH) as resp:
            assert resp.status == 201, await resp.text()
    assert r.membership.bodies.off_loop == 2  # the two large ones, on the reader's thread
    assert [x.url for x in r.replicas.replicas] == ["http://127.0.0.1:9",
                                                     "http://10.0.0.9:8000"]


def test_replica_url_checks_the_shape_only():
    assert replica_url("http://Some-Host.example:8000/") == "http://Some-Host.example:8000"
    assert replica_url("https://10.1.2.3") == "https://10.1.2.3"
    assert replica_url("http://[::1]:8000") == "http://[::1]:8000"
    for bad in ("", "10.0.0.1:80", "file:///etc/passwd", "http://", "http://u@h:1",
                "http://h:0x50", "http://h:1?x=1", "http://a b:80", "http://127.0.0.1:0"):
        with pytest.raises(ValueError):
            replica_url(bad)


# ---------------------------------------------------------------- the file as one snapshot
# (membership.py NOTE(snapshot), NOTE(all-bad)): the real Membership over a real ReplicaSet
# with no session (no beats), the file read by check_file as the watcher reads it
A, B, C = "http://127.0.0.1:9001", "http://127.0.0.1:9002", "http://127.0.0.1:9003"


def watching(tmp_path, text: str, urls=(), names=None) -> tuple[Membership, object]:
    path = tmp_path / "replicas.txt"
    write(path, text)
    m = Membership(ReplicaSet(list(urls), names=names), replicas_file=str(path))
    m.check_file()
    return m, path


def members(m: Membership) -> dict[str, str]:
    return {r.url: r.name for r in m.replicas.replicas}


@pytest.mark.parametrize("before, after, want", [
    # scale-out: pod-a moves to a new replica, its old one becomes pod-b (sorted after it)
    (f"pod-a={B}\n", f"pod-a={A}\npod-b={B}\n", {A: "pod-a", B: "pod-b"}),
    (f"pod-a={A}\n", f"pod-a={B}\npod-b={A}\n", {A: "pod-b", B: "pod-a"}),
    (f"alpha={A}\nbeta={B}\n", f"beta={A}\nalpha={B}\n", {A: "beta", B: "alpha"}),  # swap
    (f"alpha={A}\nbeta={B}\n", f"beta={A}\ngamma={B}\n", {A: "beta", B: "gamma"}),  # chain
    (f"x={A}\ny={B}\nz={C}\n", f"z={A}\nx={B}\ny={C}\n", {A: "z", B: "x", C: "y"}),  # cycle
    (f"alpha={A}\ngamma={B}\n", f"{A}\n{B}\n",
     {A: "127.0.0.1:9001", B: "127.0.0.1:9002"}),  # names dropped: HOST:PORT again
])
def test_replicas_file_edit_is_applied_whole(tmp_path, caplog, before, after, want):
    m, path = watching(tmp_path, before)
    with caplog.at_level(logging.WARNING, logger="kvpool.router"):
        write(path, after)
        m.check_file()
    assert members(m) == want
    assert "skipped" not in caplog.text


def test_replicas_file_names_given_twice_log_once_first_line_wins(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="kvpool.router"):
        m, _ = watching(tmp_path, f"pod={B}\npod={A}\nother={C}\n", urls=[A])
        for _ in range(3):
            m.check_file()
    # A came from --replica: its refused line leaves it as it was
    assert members(m) == {B: "pod", A: "127.0.0.1:9001", C: "other"}
    assert caplog.text.count("skipped") == 1 and f"{A} skipped" in caplog.text


def test_replicas_file_line_blocked_by_a_flag_replica_joins_once_it_is_free(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="kvpool.router"):
        m, _ = watching(tmp_path, f"pod={B}\n", urls=[A], names={A: "pod"})
        m.check_file()
        assert members(m) == {A: "pod"}
        assert caplog.text.count("skipped") == 1  # logged once, tried at each look
        m.replicas.remove(A)
        m.check_file()
    assert members(m) == {B: "pod"}


@pytest.mark.parametrize("junk", ["{{ .Values.replicaUrl }}\n", "not a url\nftp://h:1\n"])
def test_replicas_file_of_junk_keeps_the_replicas_and_names_the_line(tmp_path, caplog, junk):
    m, path = watching(tmp_path, f"pod-a={A}\n{B}\n")
    with caplog.at_level(logging.WARNING, logger="kvpool.router"):
        write(path, junk)
        for _ in range(3):
            m.check_file()
    assert members(m) == {A: "pod-a", B: "127.0.0.1:9002"}
    assert caplog.text.count("nothing applied") == 1 and "line 1:" in caplog.text
    write(path, "# the pool is empty now\n\n")  # no lines at all: no replicas
    m.check_file()
    assert members(m) == {}


async def test_replicas_file_scale_out_edit_joins_the_new_replica(tmp_path):
    """Through a served router with real /health beats: after ``pod-a=<old>`` becomes
    ``pod-a=<new>`` / ``pod-b=<old>`` both are members, as named, and healthy."""
    async def health(_request):
        return web.json_response({"status": "ok", "num_running": 0, "num_waiting": 0})

    apps = [web.Application() for _ in range(2)]
    for app in apps:
        app.router.add_get("/health", health)
    async with apps_served(*apps) as urls:
        new, old = sorted(urls)  # the order that refused the new one (sorted URLs, one by one)
        path = tmp_path / "replicas.txt"
        write(path, f"pod-a={old}\n")
        replicas = ReplicaSet([], interval=0.05)
        r = Router(replicas, membership=Membership(replicas, admin_token=TOKEN,
                                                   replicas_file=str(path), poll=0.05))
        async with served(r) as url, aiohttp.ClientSession() as s:
            write(path, f"pod-a={new}\npod-b={old}\n")

            async def both_in() -> bool:
                async with s.get(url + ADMIN_PATH, headers=AUTH) as resp:
                    listed = (await resp.json())["replicas"]
                return {x["url"]: (x["name"], x["healthy"]) for x in listed} == {
                    new: ("pod-a", True), old: ("pod-b", True)}
            await until(both_in)
