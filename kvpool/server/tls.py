"""HTTPS for ``kvpool serve``, from vLLM's TLS flags (docs/architecture.md "vLLM's serve
flags")::

    --ssl-certfile PEM      the certificate chain: HTTPS on (its key too, without --ssl-keyfile)
    --ssl-keyfile PEM       its private key, not encrypted (kvpool never prompts for a passphrase)
    --ssl-ca-certs PEM      the CAs a client's certificate is checked against
    --ssl-cert-reqs 0|1|2   client certificates: ssl.CERT_NONE (default), CERT_OPTIONAL,
                            CERT_REQUIRED
    --ssl-ciphers LIST      OpenSSL's cipher list for TLS 1.2 and below (default: OpenSSL's)
    --enable-ssl-refresh    reload the files when they change (NOTE(ssl-refresh))

As vLLM's server builds it (uvicorn's create_ssl_context): ``SSLContext(PROTOCOL_TLS_SERVER)``,
the chain and key loaded, ``verify_mode`` the --ssl-cert-reqs value, the CA file, the ciphers.
:func:`server_context` reads every file when the options are made, so a file that is missing,
unreadable or not what its flag needs (a key that does not match the certificate, an encrypted
key) is a ConfigError naming the flag and the path: exit 2 before the model loads. Where vLLM
would serve plain HTTP or refuse every client (a TLS flag without --ssl-certfile, client
certificates asked for with no --ssl-ca-certs to check them), kvpool refuses to start.

NOTE(ssl-refresh): with --enable-ssl-refresh, :class:`ServerTLS` looks at the files' stat
(mtime, size, inode) every REFRESH_INTERVAL seconds and reloads what changed into the listener's
context, as vLLM's SSLCertRefresher does on a file event: new handshakes get the new
certificate, open connections keep theirs. The new chain is loaded into a scratch context
first, so a half-written or mismatched pair is logged (WARNING) and the previous one keeps
serving; the next change is tried again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
from typing import Any, Protocol

from kvpool.errors import ConfigError

__all__ = ["CERT_REQS", "REFRESH_INTERVAL", "ServerTLS", "add_tls_args", "server_context"]

log = logging.getLogger("kvpool.server")

CERT_REQS = (int(ssl.CERT_NONE), int(ssl.CERT_OPTIONAL), int(ssl.CERT_REQUIRED))  # 0, 1, 2
REFRESH_INTERVAL = 1.0  # seconds between two looks at the files (NOTE(ssl-refresh))


class TLSOptions(Protocol):  # ServeOptions' TLS fields (the flags' dests)
    ssl_keyfile: str | None
    ssl_certfile: str | None
    ssl_ca_certs: str | None
    ssl_cert_reqs: int
    ssl_ciphers: str | None
    enable_ssl_refresh: bool


def add_tls_args(group: Any, switch: Any) -> None:
    """vLLM's TLS flags; ``switch``: the argparse action of vLLM's boolean flags."""
    group.add_argument("--ssl-certfile", default=None, metavar="PEM",
                       help="serve HTTPS with this certificate chain (and its key, unless "
                       "--ssl-keyfile)")
    group.add_argument("--ssl-keyfile", default=None, metavar="PEM",
                       help="the certificate's private key (not encrypted)")
    group.add_argument("--ssl-ca-certs", default=None, metavar="PEM",
                       help="CA certificates that client certificates are checked against")
    group.add_argument("--ssl-cert-reqs", type=int, choices=CERT_REQS, default=0,
                       help="client certificates (Python's ssl.CERT_*): 0 none (default), 1 "
                       "optional, 2 required; 1 and 2 need --ssl-ca-certs")
    group.add_argument("--ssl-ciphers", default=None, metavar="LIST",
                       help="OpenSSL cipher list for TLS 1.2 and below (default: OpenSSL's)")
    group.add_argument("--enable-ssl-refresh", action=switch, default=False,
                       help="reload the certificate, key and CA files when they change (new "
                       "connections get them; a file that does not load is logged and the "
                       "old one kept)")


def server_context(o: TLSOptions) -> ssl.SSLContext | None:
    """The listener's context (None: plain HTTP), every file read now; ConfigError names the
    flag and the path of what cannot be used."""
    if o.ssl_certfile is None:
        given = [flag for flag, on in (("--ssl-keyfile", o.ssl_keyfile),
                                       ("--ssl-ca-certs", o.ssl_ca_certs),
                                       ("--ssl-cert-reqs", o.ssl_cert_reqs),
                                       ("--ssl-ciphers", o.ssl_ciphers),
                                       ("--enable-ssl-refresh", o.enable_ssl_refresh)) if on]
        if given:
            raise ConfigError(f"{given[0]} needs --ssl-certfile: kvpool serves HTTPS only with "
                              "a certificate (without one it would serve plain HTTP)")
        return None
    if o.ssl_cert_reqs != ssl.CERT_NONE and o.ssl_ca_certs is None:
        raise ConfigError(f"--ssl-cert-reqs {o.ssl_cert_reqs} needs --ssl-ca-certs: the CAs "
                          "that sign client certificates (without them no client gets in)")
    for flag, path in (("--ssl-certfile", o.ssl_certfile), ("--ssl-keyfile", o.ssl_keyfile),
                       ("--ssl-ca-certs", o.ssl_ca_certs)):
        _readable(flag, path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        _load_chain(context, o)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"{_chain_flags(o)}: not a PEM certificate chain and its unencrypted "
                          f"private key ({exc})") from None
    context.verify_mode = ssl.VerifyMode(o.ssl_cert_reqs)
    if o.ssl_ca_certs is not None:
        try:
            context.load_verify_locations(o.ssl_ca_certs)
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(f"--ssl-ca-certs {o.ssl_ca_certs}: not PEM CA certificates "
                              f"({exc})") from None
    if o.ssl_ciphers is not None:
        try:
            context.set_ciphers(o.ssl_ciphers)
        except ssl.SSLError as exc:
            raise ConfigError(f"--ssl-ciphers {o.ssl_ciphers}: {exc}") from None
    return context


def _readable(flag: str, path: str | None) -> None:
    if path is None:
        return
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as exc:
        raise ConfigError(f"{flag} {path}: cannot read it ({exc.strerror or exc})") from None


def _no_passphrase() -> bytes:
    """An encrypted key fails to load instead of OpenSSL prompting on the terminal."""
    return b""


def _load_chain(context: ssl.SSLContext, o: TLSOptions) -> None:
    context.load_cert_chain(o.ssl_certfile or "", o.ssl_keyfile, password=_no_passphrase)


def _chain_flags(o: TLSOptions) -> str:
    key = f" / --ssl-keyfile {o.ssl_keyfile}" if o.ssl_keyfile else ""
    return f"--ssl-certfile {o.ssl_certfile}{key}"


class ServerTLS:
    """The listener's SSLContext (None: plain HTTP) and, with --enable-ssl-refresh, the task
    that reloads it when its files change (NOTE(ssl-refresh)): :meth:`start` on the event loop,
    :meth:`close` at shutdown."""

    def __init__(self, o: TLSOptions) -> None:
        self.options = o
        self.context = server_context(o)
        self.task: asyncio.Task[None] | None = None
        self.seen = self.stamps()

    def stamps(self) -> tuple[Any, Any]:
        """(the chain's files' stats, the CA file's): what a change is seen by."""
        o = self.options
        return (tuple(_stamp(p) for p in (o.ssl_certfile, o.ssl_keyfile)),
                _stamp(o.ssl_ca_certs))

    def start(self) -> None:
        if self.context is not None and self.options.enable_ssl_refresh and self.task is None:
            self.task = asyncio.get_running_loop().create_task(self.watch())

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
            self.task = None

    async def watch(self) -> None:
        while True:
            await asyncio.sleep(REFRESH_INTERVAL)
            self.refresh()

    def refresh(self) -> list[str]:
        """Reload what changed since the last look; returns the flags reloaded."""
        now, o = self.stamps(), self.options
        if self.context is None or now == self.seen:
            return []
        chain, ca = now[0] != self.seen[0], now[1] != self.seen[1]
        self.seen, done = now, []
        if chain and _try(f"{_chain_flags(o)}", lambda c: _load_chain(c, o), self.context):
            done.append("--ssl-certfile")
        if ca and o.ssl_ca_certs and _try(f"--ssl-ca-certs {o.ssl_ca_certs}",
                                          lambda c: c.load_verify_locations(o.ssl_ca_certs),
                                          self.context):
            done.append("--ssl-ca-certs")
        return done


def _try(what: str, load: Any, live: ssl.SSLContext) -> bool:
    """``load`` into a scratch context, and only if that works into the live one."""
    try:
        load(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))
        load(live)
    except (ssl.SSLError, OSError) as exc:
        log.warning("TLS refresh: %s changed but does not load, the previous one stays: %s",
                    what, exc)
        return False
    log.info("TLS refresh: reloaded %s", what)
    return True


def _stamp(path: str | None) -> tuple[int, int, int] | None:
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)
