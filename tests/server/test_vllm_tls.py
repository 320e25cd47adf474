"""vLLM's TLS flags on ``kvpool serve`` (kvpool/server/tls.py): real HTTPS servers on
127.0.0.1 from the kvpool serve command line, with certificates made here (tls_certs.py),
answered over TLS by a client trusting them; client certificates; the refresh; and the files
kvpool cannot use, refused before the model loads."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from kvpool.server import serve
from tests.server.helpers import wait_until
from tests.server.test_vllm_flags_served import post, served
from tests.server.tls_certs import CA

BODY = {"prompt": "Once upon", "max_tokens": 2}


@pytest.fixture
def ca(tmp_path) -> CA:
    return CA(tmp_path)


def trusting(ca: CA, client: tuple[str, str, bytes] | None = None) -> ssl.SSLContext:
    """A client context that trusts ``ca``, presenting ``client``'s certificate if given."""
    context = ssl.create_default_context(cafile=ca.path)
    if client is not None:
        context.load_cert_chain(client[0], client[1])
    return context


@contextlib.asynccontextmanager
async def https(*argv: str) -> AsyncIterator[str]:
    async with served(*argv) as url:
        yield url.replace("http://", "https://", 1)


async def get_health(url: str, context: ssl.SSLContext | None) -> int:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as s:
        async with s.get(url + "/health") as r:
            await r.read()
            return r.status


async def test_https_is_served_with_the_certificate_and_its_key(ca, capsys):
    cert, key, _ = ca.issue("server")
    async with https("--ssl-certfile", cert, "--ssl-keyfile", key) as url:
        assert await get_health(url, trusting(ca)) == 200
        connector = aiohttp.TCPConnector(ssl=trusting(ca))
        async with aiohttp.ClientSession(connector=connector) as s:
            assert (await post(s, url, "/v1/completions", BODY))["usage"]["completion_tokens"]
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await get_health(url, ssl.create_default_context())  # a CA it does not trust
        with pytest.raises(aiohttp.ClientError):  # plain HTTP to the TLS port: no answer
            await get_health(url.replace("https://", "http://", 1), None)
        assert await get_health(url, trusting(ca)) == 200  # unharmed
    assert serve.READY_TLS_PREFIX + "127.0.0.1:" in capsys.readouterr().out


async def test_the_key_may_be_in_the_certificate_file(ca, tmp_path):
    cert, key, _ = ca.issue("server")
    both = tmp_path / "both.pem"
    both.write_bytes(Path(cert).read_bytes() + Path(key).read_bytes())
    async with https("--ssl-certfile", str(both)) as url:
        assert await get_health(url, trusting(ca)) == 200


async def test_client_certificates_required_refuse_a_client_without_one(ca, tmp_path):
    cert, key, _ = ca.issue("server")
    mine, stranger = ca.issue("client", client=True), CA(tmp_path, "other").issue(
        "stranger", client=True)
    async with https("--ssl-certfile", cert, "--ssl-keyfile", key, "--ssl-ca-certs", ca.path,
                     "--ssl-cert-reqs", "2") as url:
        for refused in (trusting(ca), trusting(ca, stranger)):
            with pytest.raises((aiohttp.ClientError, ssl.SSLError, ConnectionError)):
                await get_health(url, refused)
        assert await get_health(url, trusting(ca, mine)) == 200
        connector = aiohttp.TCPConnector(ssl=trusting(ca, mine))
        async with aiohttp.ClientSession(connector=connector) as s:
            assert (await post(s, url, "/v1/completions", BODY))["usage"]["completion_tokens"]


async def peer_certificate(url: str, ca: CA) -> bytes:
    """The DER certificate a new connection to ``url`` is shown."""
    where = urlsplit(url)
    _, writer = await asyncio.open_connection(where.hostname, where.port, ssl=trusting(ca))
    try:
        return writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await writer.wait_closed()


async def test_enable_ssl_refresh_gives_new_connections_the_new_files(ca, tmp_path, caplog):
    """NOTE(ssl-refresh): a mismatched pair is logged and the old one keeps serving."""
    cert, key, first = ca.issue("server")
    live_cert, live_key = str(tmp_path / "live.pem"), str(tmp_path / "live.key")
    shutil.copy(cert, live_cert)
    shutil.copy(key, live_key)
    caplog.set_level(logging.INFO, logger="kvpool.server")
    async with https("--ssl-certfile", live_cert, "--ssl-keyfile", live_key,
                     "--enable-ssl-refresh") as url:
        assert await peer_certificate(url, ca) == first
        cert2, key2, second = ca.issue("server2")
        shutil.copy(cert2, live_cert + ".new")
        os.replace(live_cert + ".new", live_cert)  # the key not yet: a mismatched pair
        assert await wait_until(lambda: "does not load" in caplog.text)
        assert await peer_certificate(url, ca) == first
        shutil.copy(key2, live_key + ".new")
        os.replace(live_key + ".new", live_key)

        async def renewed() -> bool:
            return await peer_certificate(url, ca) == second

        for _ in range(200):  # the watch looks once a second (REFRESH_INTERVAL)
            if await renewed():
                break
            await asyncio.sleep(0.05)
        assert await renewed()
        assert "TLS refresh: reloaded --ssl-certfile" in caplog.text


def encrypted_key(where: Path) -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    where.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                        serialization.PrivateFormat.PKCS8,
                                        serialization.BestAvailableEncryption(b"secret")))
    return str(where)


@pytest.mark.parametrize("flags, said", [
    ("--ssl-certfile {d}/none.pem", "--ssl-certfile {d}/none.pem: cannot read it (No such file"),
    ("--ssl-certfile {cert} --ssl-keyfile {d}/none.key", "--ssl-keyfile {d}/none.key: cannot "
     "read it (No such file or directory)"),
    ("--ssl-certfile {cert} --ssl-keyfile {d}", "--ssl-keyfile {d}: cannot read it (Is a "),
    ("--ssl-certfile {cert} --ssl-keyfile {other}", "--ssl-certfile {cert} / --ssl-keyfile "
     "{other}: not a PEM certificate chain and its unencrypted private key ("),
    ("--ssl-certfile {cert} --ssl-keyfile {locked}", "--ssl-certfile {cert} / --ssl-keyfile "
     "{locked}: not a PEM certificate chain and its unencrypted private key ("),
    ("--ssl-certfile {cert}", "--ssl-certfile {cert}: not a PEM certificate chain and its "),
    ("--ssl-certfile {cert} --ssl-keyfile {key} --ssl-ca-certs {key}", "--ssl-ca-certs {key}: "
     "not PEM CA certificates ("),
    ("--ssl-certfile {cert} --ssl-keyfile {key} --ssl-cert-reqs 2", "--ssl-cert-reqs 2 needs "
     "--ssl-ca-certs: the CAs that sign client certificates"),
    ("--ssl-certfile {cert} --ssl-keyfile {key} --ssl-ciphers NOPE", "--ssl-ciphers NOPE: "),
    ("--ssl-keyfile {key}", "--ssl-keyfile needs --ssl-certfile: kvpool serves HTTPS only with "
     "a certificate"),
    ("--ssl-ca-certs {cert} --ssl-cert-reqs 2", "--ssl-ca-certs needs --ssl-certfile"),
])
def test_a_tls_file_kvpool_cannot_use_exits_2_naming_flag_and_path(ca, tmp_path, flags, said,
                                                                   capsys):
    cert, key, _ = ca.issue("server")
    names = {"d": tmp_path, "cert": cert, "key": key, "other": ca.issue("other")[1],
             "locked": encrypted_key(tmp_path / "locked.key")}
    assert serve.main(["--port", "0", *flags.format(**names).split()]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("kvpool serve: ")]
    assert len(lines) == 1 and lines[0].startswith("kvpool serve: " + said.format(**names)), err


def test_ssl_cert_reqs_takes_the_three_ssl_modes_only(capsys):
    with pytest.raises(SystemExit) as exc:
        serve.main(["--port", "0", "--ssl-cert-reqs", "3"])
    assert exc.value.code == 2
    assert "argument --ssl-cert-reqs: invalid choice: 3" in capsys.readouterr().err
