"""--max-connections over HTTPS (kvpool/server/tls_gate.py NOTE(tls-cap)): a connection counts
from its TCP accept, not from the end of its TLS handshake. Raw TCP connections that never
handshake fill the cap, a real HTTPS client past it is refused at once, and every slot comes
back whether the handshake times out, fails on garbage or the client goes away. The listener
(connections.start_listener) runs on 127.0.0.1 on both loops ``kvpool serve`` may use (asyncio's
and uvloop, its default when installed); the last test runs a whole ``kvpool serve``."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator

import aiohttp
import pytest
import uvloop
from aiohttp import web

from kvpool.server.connections import ConnectionLimiter, start_listener
from tests.server.helpers import parse_metrics, wait_until
from tests.server.test_vllm_tls import ca, get_health, https, trusting  # noqa: F401 (fixture)
from tests.server.tls_certs import CA

LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
BOUND = 5.0  # seconds: a liveness limit on a refusal or a close, never a timing assertion
REQUEST = b"GET /health HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"


async def health(_request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


@contextlib.asynccontextmanager
async def listening(ca: CA, header_timeout: float = 5.0) -> AsyncIterator[tuple[str, ...]]:
    """An HTTPS start_listener with --max-connections 3: yields (url, port) and the limiter."""
    cert, key, _ = ca.issue("server")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    app = web.Application()
    app.router.add_get("/health", health)
    runner = web.AppRunner(app)
    await runner.setup()
    limiter = ConnectionLimiter(3)
    server = await start_listener(runner, "127.0.0.1", 0, limiter=limiter,
                                  header_timeout=header_timeout, ssl=context)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"https://127.0.0.1:{port}", port, limiter
    finally:
        server.close()
        await runner.cleanup()
    limiter.check_invariants()


async def raw(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


async def closed(reader: asyncio.StreamReader) -> bool:
    """The server closed this raw connection (EOF or reset) within BOUND."""
    try:
        while await asyncio.wait_for(reader.read(4096), BOUND):
            pass
    except ConnectionError:
        pass
    return True


def run(loop: str, main) -> None:
    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        runner.run(main())


@pytest.mark.parametrize("loop", LOOPS)
def test_connections_that_never_handshake_fill_the_cap(ca, loop):
    async def main() -> None:
        async with listening(ca) as (url, port, limiter):
            silent = [await raw(port) for _ in range(3)]
            assert await wait_until(lambda: limiter.open == 3, BOUND), limiter.open
            # the 4th, a real HTTPS client: refused at once (closed before its handshake)
            with pytest.raises(aiohttp.ClientError):
                await asyncio.wait_for(get_health(url, trusting(ca)), BOUND)
            assert limiter.open == 3 and limiter.rejected["max_connections"] == 1
            for _, writer in silent:
                writer.close()
            assert await wait_until(lambda: limiter.open == 0, BOUND), limiter.open
            connector = aiohttp.TCPConnector(ssl=trusting(ca))
            async with aiohttp.ClientSession(connector=connector) as s:
                async with s.get(url + "/health") as r:
                    assert r.status == 200
                    await r.read()
                assert limiter.open == 1  # its keep-alive connection, counted once
            assert await wait_until(lambda: limiter.open == 0, BOUND), limiter.open
    run(loop, main)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_handshake_past_the_header_timeout_gives_its_slot_back(ca, loop):
    async def main() -> None:
        async with listening(ca, header_timeout=0.3) as (url, port, limiter):
            silent = [await raw(port) for _ in range(3)]
            assert await wait_until(lambda: limiter.open == 3, BOUND), limiter.open
            for reader, _ in silent:
                assert await closed(reader)  # the server gave up on the handshake
            assert await wait_until(lambda: limiter.open == 0, BOUND), limiter.open
            assert await get_health(url, trusting(ca)) == 200
            assert limiter.rejected["max_connections"] == 0
    run(loop, main)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_failed_handshake_gives_its_slot_back(ca, loop):
    async def main() -> None:
        async with listening(ca) as (url, port, limiter):
            for _ in range(4):  # one more than the cap: each slot came back
                reader, writer = await raw(port)
                assert await wait_until(lambda: limiter.open == 1, BOUND), limiter.open
                writer.write(REQUEST)  # plain HTTP to the TLS port: not a ClientHello
                assert await closed(reader)
                writer.close()
                assert await wait_until(lambda: limiter.open == 0, BOUND), limiter.open
            assert await get_health(url, trusting(ca)) == 200
    run(loop, main)


async def handshake(reader: asyncio.StreamReader, tls: ssl.SSLObject,
                    out: ssl.MemoryBIO, incoming: ssl.MemoryBIO, writer) -> None:
    while True:
        try:
            tls.do_handshake()
            return
        except ssl.SSLWantReadError:
            writer.write(out.read())
            data = await asyncio.wait_for(reader.read(65536), BOUND)
            assert data, "the server closed during the handshake"
            incoming.write(data)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_request_sent_with_the_clients_finished_is_served(ca, loop):
    """The request's bytes reach the server with the handshake's last ones, before start_tls
    has returned on asyncio (NOTE(tls-cap)): kept, and answered."""
    async def main() -> None:
        async with listening(ca) as (_url, port, limiter):
            reader, writer = await raw(port)
            assert await wait_until(lambda: limiter.open == 1, BOUND), limiter.open
            incoming, out = ssl.MemoryBIO(), ssl.MemoryBIO()
            tls = trusting(ca).wrap_bio(incoming, out, server_hostname="127.0.0.1")
            await handshake(reader, tls, out, incoming, writer)
            tls.write(REQUEST)
            writer.write(out.read())  # the client's Finished and the request, one write
            answer = b""
            while not answer.startswith(b"HTTP/1.1") or b"\r\n\r\n" not in answer:
                try:
                    answer += tls.read(65536)
                except ssl.SSLWantReadError:
                    data = await asyncio.wait_for(reader.read(65536), BOUND)
                    assert data, f"closed before an answer: {answer!r}"
                    incoming.write(data)
            assert answer.startswith(b"HTTP/1.1 200"), answer
            assert limiter.open == 1
            writer.close()
            assert await wait_until(lambda: limiter.open == 0, BOUND), limiter.open
    run(loop, main)


async def test_kvpool_serve_counts_a_tls_connection_from_its_accept(ca):
    cert, key, _ = ca.issue("server")
    # the silent handshakes must still be open when the fourth connection comes: at 0.5 s a
    # loaded CI box (two workers) let them time out first, and the fourth was served
    async with https("--ssl-certfile", cert, "--ssl-keyfile", key, "--max-connections", "3",
                     "--header-timeout", "2") as url:
        port = int(url.rsplit(":", 1)[1])
        connector = aiohttp.TCPConnector(ssl=trusting(ca))
        async with aiohttp.ClientSession(connector=connector) as s:

            async def metrics() -> dict:
                async with s.get(url + "/metrics") as r:
                    return parse_metrics(await r.text())

            silent = [await raw(port) for _ in range(2)]  # with the scrape's own connection: 3
            assert (await metrics())["kvpool_http_connections"][()] == 3
            with pytest.raises(aiohttp.ClientError):
                await asyncio.wait_for(get_health(url, trusting(ca)), BOUND)
            for reader, _ in silent:  # the handshake timeout (--header-timeout) closes them
                assert await closed(reader)
            m = await metrics()
            assert m["kvpool_http_connections"][()] == 1  # the scrape's own
            assert m["kvpool_http_connections_rejected_total"][(("reason", "max_connections"),)] \
                == 1
