"""The endpoint picker behind a real Envoy (deploy/envoy/envoy.yaml) in front of real
``kvpool serve`` replicas, all on 127.0.0.1 and all stopped by pid."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import signal
import subprocess
import sys
import uuid

import aiohttp
import pytest

from kvpool.epp.cli import READY_PREFIX, picking
from kvpool.epp.metrics import MetricsPort
from kvpool.epp.picker import Picker, endpoint_of
from kvpool.router.membership import Membership
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from stress.http.servers import ROOT
from bench.envoy_proc import Envoy
from tests.epp.test_epp_limits import holding
from tests.router.helpers import LOOKUP_TIMEOUT, complete, prompt, read_events, spawn_many
from tests.server.helpers import parse_metrics


TENANT = "X-Tenant"  # the replicas' --tenant-header (the Responses API tests' tenants)


@pytest.fixture(scope="module")
def fleet():
    started = spawn_many({"e0": ("--tenant-header", TENANT), "e1": ("--tenant-header", TENANT)})
    try:
        yield [started["e0"].url, started["e1"].url]
    finally:
        for srv in started.values():
            srv.stop(timeout=20)


@contextlib.asynccontextmanager
async def through_envoy(urls, workdir):
    """The picker (in this loop) over ``urls`` and Envoy in front; yields (picker, Envoy URL)."""
    picker = Picker(Router(ReplicaSet(urls, interval=0.5), lookup_timeout=LOOKUP_TIMEOUT))
    async with picking(picker, "127.0.0.1", 0) as port:
        envoy = Envoy(port, workdir)
        await asyncio.to_thread(envoy.start)
        try:
            yield picker, envoy.url
        finally:
            await asyncio.to_thread(envoy.stop)


async def post(s, url, body, **kw):
    async with s.post(url + "/v1/completions", json={"temperature": 0, **body}, **kw) as r:
        out = await r.json()
        assert r.status == 200, out
        return out, r.headers


async def test_same_prefix_same_replica_and_greedy_output_as_direct(fleet, tmp_path):
    endpoints = {endpoint_of(u): u for u in fleet}
    async with through_envoy(fleet, tmp_path) as (picker, url), aiohttp.ClientSession() as s:
        for _ in range(2):  # two prefixes: each keeps to the replica that holds it
            p = prompt(uuid.uuid4().hex)
            first, h1 = await post(s, url, {"prompt": p + " first", "max_tokens": 8})
            # a client's own destination header is overwritten, never obeyed
            again, h2 = await post(s, url, {"prompt": p + " again", "max_tokens": 8},
                                   headers={"x-gateway-destination-endpoint": "127.0.0.1:9"})
            assert h1["x-kvpool-upstream"] == h2["x-kvpool-upstream"] in endpoints
            # the dynamic metadata (namespace envoy.lb) carried the same endpoint
            assert h1["x-kvpool-picked"] == h1["x-kvpool-upstream"]
            assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
            assert again["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
            direct = await complete(s, endpoints[h2["x-kvpool-upstream"]],
                                    {"prompt": p + " again", "max_tokens": 8})
            assert again["choices"][0]["text"] == direct["choices"][0]["text"]
        async with s.get(url + "/v1/models") as r:  # no body: decided on the headers
            assert r.status == 200 and (await r.json())["data"]
    assert picker.picks == 5
    assert picker.full_duplex == 4  # the shipped config's mode: one round trip per body


async def test_concurrent_requests_and_a_large_body_through_one_picker_connection(fleet,
                                                                                   tmp_path):
    """Envoy multiplexes the requests' ext_proc streams on its connection to the picker; a
    256 KB body crosses many HTTP/2 frames each way (in to the picker, back in its answer)."""
    endpoints = {endpoint_of(u): u for u in fleet}
    big = {"prompt": prompt("big"), "max_tokens": 2, "user": "u" * (256 << 10)}
    async with through_envoy(fleet, tmp_path) as (picker, url), aiohttp.ClientSession() as s:
        outs = await asyncio.gather(*(post(s, url, {"prompt": prompt(f"c{i}"), "max_tokens": 2})
                                      for i in range(24)), post(s, url, big))
        assert all(h["x-kvpool-upstream"] in endpoints for _, h in outs)
        direct = await complete(s, endpoints[outs[-1][1]["x-kvpool-upstream"]], big)
    assert outs[-1][0]["choices"][0]["text"] == direct["choices"][0]["text"]
    assert picker.picks == picker.full_duplex == 25


async def test_streams_through_envoy_chunk_by_chunk(fleet, tmp_path):
    p = prompt(uuid.uuid4().hex)
    body = {"prompt": p, "max_tokens": 12, "temperature": 0, "stream": True}
    async with through_envoy(fleet, tmp_path) as (_, url), aiohttp.ClientSession() as s:
        async with s.post(url + "/v1/completions", json=body) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            upstream = resp.headers["x-kvpool-upstream"]
            events = await read_events(resp)
        direct = await complete(s, {endpoint_of(u): u for u in fleet}[upstream],
                                {"prompt": p, "max_tokens": 12})
    assert events[-1] == "[DONE]"
    chunks = [e for e in events[:-1] if e["choices"]]
    assert len(chunks) >= 2  # token by token, not one blob
    assert "".join(c["choices"][0]["text"] for c in chunks) == direct["choices"][0]["text"]


async def error_of(resp, status: int) -> dict:
    assert resp.status == status, await resp.text()
    assert resp.headers["Content-Type"].startswith("application/json")
    err = (await resp.json())["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return err


async def test_bad_json_is_a_400_from_the_picker(fleet, tmp_path):
    async with through_envoy(fleet, tmp_path) as (picker, url), aiohttp.ClientSession() as s:
        for raw in (b"{nope", b"[1, 2]", b"\xff\xfe", b""):
            async with s.post(url + "/v1/completions", data=raw,
                              headers={"Content-Type": "application/json"}) as resp:
                err = await error_of(resp, 400)
                assert err["type"] == "invalid_request_error"
        out, _ = await post(s, url, {"prompt": "still fine", "max_tokens": 2})
        assert out["choices"]
    assert picker.picks == 1


async def test_a_refused_call_is_retried_then_a_503_and_an_idle_close_is_harmless(fleet,
                                                                                   tmp_path):
    """The picker at --idle-timeout 0.3 s: Envoy's connection to it is closed (GOAWAY
    NO_ERROR) between two requests and the second is served on a new one. At
    --max-open-streams 1, with that call held by another client, Envoy's call is refused
    (REFUSED_STREAM), retried three times (deploy/envoy/envoy.yaml's retry_policy: four
    refusals counted) and answered 503 (its status_on_error); once the call is gone a request
    is served. Before that config Envoy answered 500 at once."""
    picker = Picker(Router(ReplicaSet(fleet, interval=0.5), lookup_timeout=LOOKUP_TIMEOUT))
    metrics = MetricsPort("127.0.0.1", 0)
    async with picking(picker, "127.0.0.1", 0, max_open_streams=1, idle_timeout=0.3,
                       metrics=metrics) as port, aiohttp.ClientSession() as s:
        envoy = Envoy(port, tmp_path)
        await asyncio.to_thread(envoy.start)
        try:
            await post(s, envoy.url, {"prompt": "before", "max_tokens": 2})
            await asyncio.sleep(1.5)  # Envoy's connection is closed as idle
            await post(s, envoy.url, {"prompt": "after an idle close", "max_tokens": 2})
            _, held = await holding(port, 1)
            try:
                await until_open(s, metrics.url)
                async with s.post(envoy.url + "/v1/completions",
                                  json={"prompt": "refused", "max_tokens": 2}) as r:
                    assert r.status == 503, await r.text()
                samples = parse_metrics(await (await s.get(metrics.url + "/metrics")).text())
            finally:
                held.close()
            await asyncio.sleep(0.5)
            await post(s, envoy.url, {"prompt": "served again", "max_tokens": 2})
        finally:
            await asyncio.to_thread(envoy.stop)
    assert samples["kvpool_epp_streams_refused_total"][(("reason", "max_open_streams"),)] == 4
    assert samples["kvpool_epp_connections_idle_closed_total"][()] >= 1
    assert picker.picks == 3


async def until_open(s: aiohttp.ClientSession, url: str) -> None:
    """Wait (5 s at most) until the picker counts one call open."""
    for _ in range(100):
        text = await (await s.get(url + "/metrics")).text()
        if parse_metrics(text)["kvpool_epp_open_streams"][()] == 1:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the held call never opened")


def spawn_epp(*argv: str) -> tuple[subprocess.Popen, int, int | None]:
    """``python -m kvpool epp --port 0 --metrics-port 0 --grpc-health-port 0 ARGV``;
    (process, bound gRPC port, bound metrics port or None) from its ready line."""
    proc = subprocess.Popen([sys.executable, "-m", "kvpool", "epp", "--port", "0",
                             "--metrics-port", "0", "--grpc-health-port", "0", *argv],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    line = proc.stdout.readline()  # bounded by the test's timeout
    assert line.startswith(READY_PREFIX), line
    metrics = re.search(r"metrics on http://[^ ]+:(\d+)$", line.strip())
    return (proc, int(line[len(READY_PREFIX):].split()[0].rsplit(":", 1)[1]),
            int(metrics.group(1)) if metrics else None)


async def test_no_healthy_replica_is_a_503_from_the_cli_picker(tmp_path):
    proc, port, _ = spawn_epp("--replica", "http://127.0.0.1:9")  # refused: never healthy
    envoy = Envoy(port, tmp_path)
    try:
        await asyncio.to_thread(envoy.start)
        async with aiohttp.ClientSession() as s, s.post(
                envoy.url + "/v1/completions", json={"prompt": "hi"}) as resp:
            assert (await error_of(resp, 503))["code"] == "no_replica"
            assert resp.headers["Retry-After"] == "1"
    finally:
        await asyncio.to_thread(envoy.stop)
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=20) == 0


async def test_the_picker_follows_a_replicas_file(fleet, tmp_path):
    """The router's membership runs inside the picker: a replica the file adds is picked."""
    path = tmp_path / "replicas.txt"
    path.write_text(f"{fleet[1]}\n")
    replicas = ReplicaSet([], interval=0.5)
    picker = Picker(Router(replicas, lookup_timeout=LOOKUP_TIMEOUT,
                           membership=Membership(replicas, replicas_file=str(path))))
    body = b'{"prompt": "hello", "max_tokens": 1}'
    await picker.start()
    try:
        assert (await picker.pick_body("/v1/completions", body, [])).endpoint == endpoint_of(fleet[1])
        path.write_text(f"{fleet[0]}\n")
        for _ in range(400):  # bounded: 20 s
            if (await picker.pick_body("/v1/completions", body, [])).endpoint == endpoint_of(fleet[0]):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the file's new replica was never picked")
    finally:
        await picker.close()


def test_endpoint_of_a_replica_url():
    assert endpoint_of("http://10.0.0.7:8000") == "10.0.0.7:8000"
    assert endpoint_of("http://10.0.0.7") == "10.0.0.7:80"
    assert endpoint_of("https://[fd00::1]:8443") == "[fd00::1]:8443"


def test_the_admin_token_flag_is_refused():
    from kvpool.epp.cli import main
    assert main(["--replica", "http://127.0.0.1:9", "--admin-token-file", "/x"]) == 2


def test_the_transport_flags_and_their_checks():
    """--max-connection-bytes: 64 MiB, or four largest calls when --max-body-bytes makes that
    more; less than one call exits 2 (docs/epp.md). --max-connections: 1024; 0 exits 2.
    --max-held-bytes: 1 GiB, or --max-connection-bytes when more; less than that exits 2."""
    from kvpool.epp.cli import MESSAGE_SLACK, limits, main
    assert limits(4 << 20) == {"max_message": (4 << 20) + MESSAGE_SLACK,
                               "max_connections": 1024, "max_connection_bytes": 64 << 20,
                               "max_held_bytes": 1 << 30, "max_open_streams": 8192,
                               "idle_timeout": 60.0, "first_message_timeout": 10.0}
    big = limits(100 << 20)
    assert big["max_connection_bytes"] == 4 * (big["max_message"] + 5)
    assert limits(4 << 20, max_connection_bytes=3 << 29)["max_held_bytes"] == 3 << 29
    with pytest.raises(ValueError, match="max-connection-bytes"):
        limits(4 << 20, max_connection_bytes=8 << 20)
    with pytest.raises(ValueError, match="max-connections"):
        limits(4 << 20, max_connections=0)
    with pytest.raises(ValueError, match="max-held-bytes"):
        limits(4 << 20, max_held_bytes=(64 << 20) - 1)
    replica = ["--replica", "http://127.0.0.1:9"]
    assert main([*replica, "--max-connection-bytes", "1000"]) == 2
    assert main([*replica, "--max-connections", "0"]) == 2
    assert main([*replica, "--max-held-bytes", str(1 << 20)]) == 2


async def test_a_body_over_the_limit_is_a_413_from_the_picker(fleet, tmp_path):
    """Envoy streams the body to the picker (full duplex, no buffer of its own in front):
    the picker bounds it by its --max-body-bytes, with OpenAI error JSON."""
    picker = Picker(Router(ReplicaSet(fleet, interval=0.5), lookup_timeout=LOOKUP_TIMEOUT,
                           max_body_bytes=2000))
    async with picking(picker, "127.0.0.1", 0) as port, aiohttp.ClientSession() as s:
        envoy = Envoy(port, tmp_path)
        await asyncio.to_thread(envoy.start)
        try:
            for size in (3000, 200_000):  # the larger in chunks bigger than 64 KiB each
                async with s.post(envoy.url + "/v1/completions",
                                  json={"prompt": "x" * size, "max_tokens": 1}) as resp:
                    err = await error_of(resp, 413)
                assert err["code"] == "request_too_large"
            out, _ = await post(s, envoy.url, {"prompt": "small", "max_tokens": 1})
            assert out["choices"]
        finally:
            await asyncio.to_thread(envoy.stop)
    assert picker.picks == 1


async def respond(s, url, tenant="a", **body) -> tuple[int, dict]:
    """POST /v1/responses through ``url``: (status, JSON answer)."""
    async with s.post(url + "/v1/responses", headers={TENANT: tenant},
                      json={"input": "hello", "max_output_tokens": 2, **body}) as r:
        return r.status, await r.json()


async def retrieve(s, url, rid, tenant="a") -> tuple[int, dict]:
    async with s.get(f"{url}/v1/responses/{rid}", headers={TENANT: tenant}) as r:
        return r.status, await r.json()


async def test_responses_follow_ups_reach_the_replica_holding_the_response(fleet, tmp_path):
    """A response made on the second replica (the picker's first choice for anything but
    generation is the first): a GET and a previous_response_id through Envoy reach its
    replica, found by one search, then known. Without NOTE(responses) in kvpool/epp/picker.py
    both went to the first replica: 404."""
    async with through_envoy(fleet, tmp_path) as (picker, url), aiohttp.ClientSession() as s:
        status, made = await respond(s, fleet[1])
        assert status == 200, made
        rid = made["id"]
        assert (await retrieve(s, fleet[0], rid))[0] == 404  # it lives on the second only
        status, got = await retrieve(s, url, rid)
        assert (status, got.get("id")) == (200, rid), got
        assert picker.router.affinity.owner_url(rid) == fleet[1]
        searches = picker.router.affinity.searches
        status, after = await respond(s, url, previous_response_id=rid)
        assert status == 200 and after["previous_response_id"] == rid, after
        assert picker.router.affinity.searches == searches == 1  # known now: no search


async def test_responses_another_tenant_and_hostile_ids_get_a_replicas_answer(fleet, tmp_path,
                                                                              caplog):
    """Tenant b naming tenant a's response gets the owner's own 404, as for an id never
    issued, and the picker's map, counts and logs do not move; ids no replica could hold
    are placed without a search and answered by a replica; a body that is no JSON object is
    the picker's 400."""
    caplog.set_level(logging.DEBUG, logger="kvpool")
    async with through_envoy(fleet, tmp_path) as (picker, url), aiohttp.ClientSession() as s:
        rid = (await respond(s, fleet[1]))[1]["id"]
        assert (await retrieve(s, url, rid))[0] == 200  # tenant a's: found and learnt
        m = picker.router.affinity
        before = (len(m), dict(m.learnt))
        known = await retrieve(s, url, rid, tenant="b")
        assert known == await retrieve(s, fleet[1], rid, tenant="b")
        assert known[0] == 404 and known[1]["error"]["code"] == "response_not_found"
        for prev in (rid, "resp_" + uuid.uuid4().hex):
            status, out = await respond(s, url, tenant="b", previous_response_id=prev)
            assert (status, out["error"]["code"]) == (404, "previous_response_not_found")
        assert (len(m), dict(m.learnt)) == before
        assert not [r for r in caplog.records if rid in r.getMessage()]
        searches = m.searches
        for prev, status in ((12345, 400), (["resp_x"], 400), ("r" * 1_000_000, 404)):
            got = await respond(s, url, previous_response_id=prev)  # the replica's answer
            assert got[0] == status and got[1]["error"]["param"] == "previous_response_id"
        assert (await retrieve(s, url, "r" * 300))[0] == 404
        assert m.searches == searches
        async with s.post(url + "/v1/responses", data=b"{nope",
                          headers={"Content-Type": "application/json"}) as resp:
            assert (await error_of(resp, 400))["code"] == "invalid_json"


async def test_the_picker_places_a_messages_request_by_the_chat_body_it_becomes(fleet):
    """NOTE(messages-scored) in the picker: an Anthropic Messages request is planned by the
    chat body the replica runs, so it goes to the replica holding its system prompt, every
    time; planned on its own body, the lookups read only the user turn and it goes by load."""
    body = {"model": "kvpool-tiny", "max_tokens": 1, "temperature": 0,
            "system": "a system prompt the picker should find " * 12,
            "messages": [{"role": "user", "content": "hi"}]}
    async with aiohttp.ClientSession() as s, s.post(fleet[1] + "/v1/messages", json=body) as r:
        assert r.status == 200, await r.text()
    picker = Picker(Router(ReplicaSet(fleet, interval=0.5), lookup_timeout=LOOKUP_TIMEOUT))
    await picker.start()
    try:
        raw = json.dumps(body).encode()
        picks = [(await picker.pick_body("/v1/messages", raw, [])).endpoint for _ in range(4)]
    finally:
        await picker.close()
    assert picks == [endpoint_of(fleet[1])] * 4
