"""``kvpool router`` in front of https:// replicas (replica_tls.py NOTE(replica-ca)) and why a
replica is unhealthy (connect_errors.py NOTE(why-down)).

``--replica-ca-certs PEM`` is the CA the router trusts for its replicas, for the health beats
and the proxied requests alike; a file that cannot be used is exit 2 with one line naming the
flag and the path. A replica's turn to unhealthy is logged once, saying why: a certificate not
trusted (with the fix), a URL of the wrong scheme either way, a refusal. Before, there was no
such flag (only OpenSSL's SSL_CERT_FILE) and the log said "is unhealthy", nothing more. The
replicas are real aiohttp servers on 127.0.0.1, over TLS with certificates from a throwaway
CA (tests/server/tls_certs.py)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import socket
import ssl
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from kvpool.router.cli import add_arguments, build_router, main
from tests.router.helpers import replica_app, served
from tests.server.tls_certs import CA

HEALTH = {"status": "ok", "num_running": 0, "num_waiting": 0}
BEATS = 6  # beats of each replica waited for: the reason must still be said once


def tls_replica_app() -> web.Application:
    async def health(_request):
        return web.json_response(HEALTH)

    async def complete(_request):
        return web.json_response({"object": "text_completion", "choices": [{"text": "tls"}]})

    return replica_app(health, complete)


@contextlib.asynccontextmanager
async def replica_served(tmp_path):
    """The replica on two ports: TLS (a certificate for 127.0.0.1 from a private CA) and
    plain HTTP; yields (the CA's PEM path, the TLS port, the plain port)."""
    ca = CA(tmp_path, "replicas")
    cert, key, _der = ca.issue("replica")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    runner = web.AppRunner(tls_replica_app())
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context).start()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        yield ca.path, runner.addresses[0][1], runner.addresses[1][1]
    finally:
        await runner.cleanup()


def router_for(url: str, *flags: str):
    args = add_arguments(argparse.ArgumentParser()).parse_args(
        ["--replica", url, "--policy", "round_robin", "--health-interval", "0.05", *flags])
    return build_router(args)


async def beaten(router, times: int) -> None:
    """Until ``times`` more beats of the replicas are done (bounded)."""
    goal = router.replicas.polls + times
    for _ in range(400):
        if router.replicas.polls >= goal:
            return
        await asyncio.sleep(0.025)
    raise AssertionError("the router's beats did not run")


async def test_the_ca_flag_serves_the_beats_and_the_requests(tmp_path):
    async with replica_served(tmp_path) as (ca, tls_port, _plain), \
            served(router := router_for(f"https://127.0.0.1:{tls_port}",
                                        "--replica-ca-certs", ca)
                   ) as url, aiohttp.ClientSession() as s:
        async with s.get(url + "/health") as r:
            assert r.status == 200, await r.text()
        # the router's own asks (lookups, scrapes, KV-event info) trust the CA too
        async with router.session.get(f"https://127.0.0.1:{tls_port}/health") as r:
            assert r.status == 200
        async with s.post(url + "/v1/completions", json={"model": "m", "prompt": "x"}) as r:
            assert r.status == 200, await r.text()
            assert (await r.json())["choices"][0]["text"] == "tls"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("scheme, port, said", [
    ("https", "tls", ["TLS certificate does not verify", "--replica-ca-certs PEM"]),
    ("http", "tls", ["without an answer", "https://"]),
    ("https", "plain", ["wrong version number", "http://"]),
    ("http", "closed", ["refused a connection"]),
])
async def test_why_a_replica_is_unhealthy_is_logged_once(tmp_path, caplog, scheme, port,
                                                         said):
    async with replica_served(tmp_path) as (_ca, tls_port, plain_port):
        number = {"tls": tls_port, "plain": plain_port, "closed": closed_port()}[port]
        replica = f"{scheme}://127.0.0.1:{number}"
        router = router_for(replica)
        with caplog.at_level(logging.INFO, logger="kvpool.router"):
            async with served(router):
                await beaten(router, BEATS)
                assert not router.replicas.replicas[0].healthy
    lines = [r.getMessage() for r in caplog.records
             if r.getMessage().startswith(f"replica {replica} is unhealthy")]
    assert len(lines) == 1, lines
    assert all(part in lines[0] for part in said), lines[0]


@pytest.mark.parametrize("what", ["missing", "a key, no CA"])
def test_a_ca_file_that_cannot_be_used_is_one_line_and_exit_2(tmp_path, capsys, what):
    path = tmp_path / "ca.pem"
    if what != "missing":
        _cert, key, _der = CA(tmp_path, "x").issue("leaf")
        path = Path(key)
    code = main(["--replica", "https://127.0.0.1:1", "--replica-ca-certs", str(path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "--replica-ca-certs" in err[0] and str(path) in err[0], err
