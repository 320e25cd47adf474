"""How the router ends what a replica leaves unfinished, in each route's protocol: a stream its
replica broke off (kvpool/router/stream_end.py NOTE(stream-end)), and a request past
``--request-timeout`` / ``--first-byte-timeout`` (request_limits.py NOTE(request-timeout)).
The replica is a real aiohttp server on 127.0.0.1 that sends its first events and then
aborts its connection, or, for a prompt of "hang", never answers (or stops after one event);
the router is ``kvpool router``'s (cli.listen, its argument parser)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json

import aiohttp
from aiohttp import web

from kvpool.router.cli import add_arguments, build_router, listen, request_limits
from tests.router.helpers import apps_served

OK_HEALTH = b'{"status": "ok", "num_running": 0, "num_waiting": 0}'
FIRST = {  # what each route's replica sends before it dies: its own protocol
    "/v1/messages": b'event: message_start\ndata: {"type":"message_start"}\n\n',
    "/v1/responses": (b'event: response.created\ndata: {"type":"response.created",'
                      b'"sequence_number":0}\n\nevent: response.in_progress\ndata: {"type":'
                      b'"response.in_progress","sequence_number":1}\n\n'),
    "/v1/chat/completions": b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n',
}
WAIT = 20.0  # seconds a client waits at most (a bound, never the expected time)


@contextlib.asynccontextmanager
async def routed(*flags: str):
    """A router (``kvpool router`` given ``flags``) over one replica whose streams die."""
    gone = asyncio.Event()  # set on the way out: the hung handlers end

    async def health(_):
        return web.Response(body=OK_HEALTH, content_type="application/json")

    async def generate(request):
        body = await request.json()
        if body.get("prompt") == "hang":
            await gone.wait()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(FIRST[request.path])
        if body.get("prompt") == "stall":
            await gone.wait()
        request.transport.abort()  # killed mid-stream
        return resp

    app = web.Application()
    app.router.add_get("/health", health)
    for path in FIRST:
        app.router.add_post(path, generate)
    async with apps_served(app) as (replica,):
        args = add_arguments(argparse.ArgumentParser()).parse_args(
            ["--replica", replica, "--policy", "round_robin", *flags])
        runner, server = await listen(build_router(args), "127.0.0.1", 0,
                                      limits=request_limits(args))
        try:
            yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        finally:
            gone.set()
            server.close()
            await runner.cleanup()


async def _post(url: str, path: str, prompt: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as s, asyncio.timeout(WAIT):
        async with s.post(url + path, json={"prompt": prompt, "stream": True}) as r:
            return r.status, (await r.read()).decode()


def _events(text: str) -> list[tuple[str | None, str]]:
    """(event name or None, data) of each SSE event."""
    out = []
    for block in filter(None, text.split("\n\n")):
        fields = dict(line.split(": ", 1) for line in block.split("\n"))
        out.append((fields.get("event"), fields["data"]))
    return out


async def test_a_messages_stream_cut_off_ends_with_anthropics_error_event():
    """Before, an OpenAI error chunk and ``data: [DONE]``: the Anthropic SDK skips unnamed
    events, so the truncated answer read as a whole one."""
    async with routed() as url:
        status, text = await _post(url, "/v1/messages", "x")
    name, data = _events(text)[-1]
    assert status == 200 and name == "error" and "[DONE]" not in text
    err = json.loads(data)
    assert err["type"] == "error" and err["error"]["type"] == "api_error"
    assert "broke off" in err["error"]["message"]


async def test_a_responses_stream_cut_off_ends_with_its_error_event_numbered_next():
    async with routed() as url:
        _, text = await _post(url, "/v1/responses", "x")
    name, data = _events(text)[-1]
    assert name == "error" and "[DONE]" not in text
    assert json.loads(data) == {"type": "error", "code": "replica_failed",
                                "message": json.loads(data)["message"], "param": None,
                                "sequence_number": 2}


async def test_a_chat_stream_cut_off_still_ends_openai_style():
    async with routed() as url:
        _, text = await _post(url, "/v1/chat/completions", "x")
    events = _events(text)
    assert events[-1] == (None, "[DONE]")
    assert json.loads(events[-2][1])["error"]["code"] == "replica_failed"


async def test_a_request_its_replica_never_answers_gets_504_after_request_timeout():
    """Before, no bound: the client waited as long as it would (150 s in the probe)."""
    async with routed("--request-timeout", "0.3") as url, aiohttp.ClientSession() as s:
        status, text = await _post(url, "/v1/chat/completions", "hang")
        anthropic = await _post(url, "/v1/messages", "hang")
        async with s.get(url + "/metrics") as r:
            metrics = await r.text()
    err = json.loads(text)["error"]
    assert status == 504 and err["code"] == "replica_unresponsive"
    assert "--request-timeout" in err["message"]
    assert anthropic[0] == 504 and json.loads(anthropic[1])["error"]["type"] == "api_error"
    assert 'kvpool_router_request_timeouts_total{bound="request"} 2.0' in metrics


async def test_a_stream_that_stalls_ends_with_its_error_event_after_request_timeout():
    async with routed("--request-timeout", "0.3") as url:
        _, text = await _post(url, "/v1/messages", "stall")
    name, data = _events(text)[-1]
    assert name == "error" and "--request-timeout" in json.loads(data)["error"]["message"]


async def test_first_byte_timeout_ends_an_unanswered_request_but_not_a_started_stream():
    """The first-byte bound is lifted once the answer starts: the stalled stream is then
    ended by the request bound, and each bound is counted as its own."""
    async with routed("--first-byte-timeout", "0.2", "--request-timeout", "0.6") as url, \
            aiohttp.ClientSession() as s:
        status, text = await _post(url, "/v1/chat/completions", "hang")
        _, stalled = await _post(url, "/v1/responses", "stall")
        async with s.get(url + "/metrics") as r:
            metrics = await r.text()
    assert status == 504 and "--first-byte-timeout" in json.loads(text)["error"]["message"]
    assert "--request-timeout" in json.loads(_events(stalled)[-1][1])["message"]
    assert 'kvpool_router_request_timeouts_total{bound="first_byte"} 1.0' in metrics
    assert 'kvpool_router_request_timeouts_total{bound="request"} 1.0' in metrics


def test_the_timeout_flags_exist_and_are_checked(capsys):
    """Before, the router's 408 named --body-timeout, a flag ``kvpool router`` refused."""
    from kvpool.router.cli import main
    parser = add_arguments(argparse.ArgumentParser())
    args = parser.parse_args(["--replica", "http://127.0.0.1:1", "--body-timeout", "5",
                              "--header-timeout", "3"])
    assert (args.body_timeout, args.header_timeout) == (5.0, 3.0)
    for bad in (["--request-timeout", "-1"], ["--body-timeout", "nan"]):
        assert main(["--replica", "http://127.0.0.1:1", *bad]) == 2
        assert bad[0] in capsys.readouterr().err


async def test_body_timeout_is_the_routers_flag_and_its_408_names_it():
    """A body that never finishes arriving: the 408 comes after --body-timeout (the flag
    exists now), and its message names that flag."""
    async with routed("--body-timeout", "0.3") as url:
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                         b"application/json\r\nContent-Length: 100\r\n\r\n{")
            async with asyncio.timeout(WAIT):
                head = await reader.readuntil(b"\r\n\r\n")
                body = await reader.read(4096)
        finally:
            writer.close()
    assert head.startswith(b"HTTP/1.1 408") and b"(--body-timeout)" in body
