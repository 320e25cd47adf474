"""Why the router could not reach a replica, in words an operator can act on.

A failed connect or /health beat is one of::

    refused                          -> "refused a connection" (nobody listens there)
    timed out                        -> "did not accept a connection within N s"
    TLS certificate rejected         -> the verify message, and the fix: --replica-ca-certs
    TLS wrong version number         -> an https:// URL on a plain HTTP port: use http://
    closed before any answer         -> maybe an http:// URL on a TLS port: use https://
    the router's own sockets ran out -> OutOfConnections: not the replica's fault at all

NOTE(why-down): the reason goes into the one log line of a replica's turn from healthy to
unhealthy (replicas.py) and into ``mark_down``'s (upstream.py): before, a certificate the
router did not trust, or a URL of the wrong scheme, showed as "is unhealthy" with no reason,
even at debug level (docs/architecture.md, Router: "Replicas over HTTPS").

NOTE(local-exhaustion): a connect that fails for want of the router's own resources (EMFILE:
its open-file limit; ENFILE: the system's; ENOBUFS / ENOMEM: kernel memory; EADDRNOTAVAIL:
no local port left) says nothing about the replica. Before, it was taken for a refusal and
the healthy replica marked down, and the client got 503 ``no_replica``. Now the request gets
the router's own 503 ``router_out_of_connections`` (Retry-After: the sockets free up as
requests end), nothing is marked down, and one WARNING line per interval says how many were
turned away and the fix. The connection cap (cli.py NOTE(router-cap)) keeps the open-file
limit from being reached by client connections alone.
"""

from __future__ import annotations

import errno
import logging
import os
import ssl

import aiohttp

from kvpool.server.middleware import APIError
from kvpool.throttle import Throttle

__all__ = ["LOCAL_ERRNOS", "OutOfConnections", "Shortage", "UpstreamDown", "connect_failed",
           "local_cause", "out_of_connections", "why_down"]

log = logging.getLogger("kvpool.router")
REPORT_INTERVAL = 10.0  # seconds between two lines about the router's own shortage
RETRY_AFTER = "1"  # seconds: a stream ending frees its two sockets
# errno -> what to change (NOTE(local-exhaustion))
LOCAL_ERRNOS = {
    errno.EMFILE: "raise the router's open-file limit (ulimit -n) or lower --max-connections",
    errno.ENFILE: "the system's open-file table is full (fs.file-max)",
    errno.ENOBUFS: "the kernel is out of socket buffers",
    errno.ENOMEM: "the kernel is out of memory for sockets",
    errno.EADDRNOTAVAIL: "no local port is free (net.ipv4.ip_local_port_range)",
}


class UpstreamDown(ConnectionError):
    """No connection to the replica (refused, unreachable, timed out, TLS refused): it is
    down; ``why``: in words (NOTE(why-down))."""

    timed_out = False  # the connect timed out, rather than being refused (NOTE(connect-timeout))
    why = "refused a connection"


class OutOfConnections(OSError):
    """The router itself could not open a socket (NOTE(local-exhaustion))."""


def _cause(exc: BaseException | None) -> BaseException | None:
    """The error behind ``exc``: the OSError aiohttp wraps in a connector error, else itself."""
    return exc.os_error if isinstance(exc, aiohttp.ClientConnectorError) else exc


def local_cause(exc: BaseException | None) -> OSError | None:
    """The OSError of the router's own shortage behind ``exc`` (aiohttp wraps it), if any."""
    cause = _cause(exc)
    if isinstance(cause, OSError) and cause.errno in LOCAL_ERRNOS:
        return cause
    return None


def connect_failed(exc: BaseException, host: str, port: int, tls: bool, timeout: float,
                   shortage: Shortage) -> OSError:
    """What a failed connect to ``host:port`` (``tls``: for an https:// URL) raises:
    OutOfConnections for the router's own shortage (counted in ``shortage``), else
    UpstreamDown saying why."""
    where = f"{host}:{port}"
    if (local := local_cause(exc)) is not None:
        shortage.report(local)
        return OutOfConnections(local.errno, f"cannot connect to {where}: {local.strerror}")
    down = UpstreamDown(f"cannot connect to {where}: {exc!r}")
    down.timed_out = isinstance(exc, TimeoutError)
    down.why = (f"did not accept a connection within {timeout:g} s" if down.timed_out
                else why_down(exc, tls))
    return down


def why_down(exc: BaseException, tls: bool) -> str:
    """The reason ``exc`` (a beat's or a connect's; ``tls``: the URL is https://) gives for a
    replica being unreachable, with the fix where there is one (NOTE(why-down))."""
    cause = _cause(exc)
    if isinstance(cause, ssl.SSLCertVerificationError):
        return (f"rejected: its TLS certificate does not verify ({cause.verify_message}); "
                "pass --replica-ca-certs PEM with the CA that signed it")
    if isinstance(cause, ssl.SSLError):
        if cause.reason == "WRONG_VERSION_NUMBER":
            return ("does not speak TLS on that port (wrong version number): give its URL "
                    "as http://")
        return f"failed the TLS handshake ({cause.reason or cause})"
    if isinstance(cause, ConnectionRefusedError):
        return "refused a connection"
    if isinstance(cause, TimeoutError):
        return "did not answer in time"
    if isinstance(exc, aiohttp.ServerDisconnectedError) and not tls:
        return ("closed the connection without an answer (is it serving HTTPS? then give its "
                "URL as https://)")
    if isinstance(cause, OSError) and cause.errno is not None:
        return f"cannot be reached ({os.strerror(cause.errno)})"
    return f"cannot be reached ({type(exc).__name__}: {exc})"


def out_of_connections() -> APIError:
    """The 503 of a request the router had no socket for (NOTE(local-exhaustion))."""
    return APIError(503, "the router is out of connections to its replicas; retry later",
                    code="router_out_of_connections", headers={"Retry-After": RETRY_AFTER})


class Shortage:
    """Counts the router's own connect failures and says so at most once an interval."""

    def __init__(self, what: str, interval: float = REPORT_INTERVAL) -> None:
        self.what = what  # whose connects: "request(s)", "health beat(s)"
        self.throttle = Throttle(interval)
        self.unsaid = 0  # failures since the last line
        self.total = 0

    def report(self, exc: OSError) -> None:
        self.total += 1
        self.unsaid += 1
        if self.throttle.due():
            log.warning("router out of sockets (%s): %d %s could not connect to a replica "
                        "since the last report, the replicas not blamed: %s",
                        os.strerror(exc.errno or 0), self.unsaid, self.what,
                        LOCAL_ERRNOS.get(exc.errno or 0, "free some resources"))
            self.unsaid = 0
