"""``--remote-url``'s accepted forms (``clients.py`` builds the client of one), checked where
``kvpool serve`` parses its flags, before an engine is built.

NOTE(lazy-redis): redis-py (with hiredis, opentelemetry, cryptography: ~90 modules) costs a
server start 60-80 ms of imports, so nothing a start without ``--remote-url`` loads may import
it: this module imports only the standard library at its top and loads redis-py's URL parser
when a URL is checked, and ``kvpool.remote``'s ``__init__`` imports ``RedisTier`` when it is
first named (tests/runtime/test_startup_imports.py holds the start-up path to that).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlsplit

from kvpool.errors import ConfigError

__all__ = ["SCHEMES", "check_url", "shown_url", "split_url"]

SCHEMES = ("redis://HOST:PORT, rediss://HOST:PORT, unix:///PATH, "
           "redis+cluster://HOST:PORT[,HOST:PORT...] (rediss+cluster:// for TLS) or "
           "redis+sentinel://HOST:PORT[,HOST:PORT...]/SERVICE (rediss+sentinel:// for TLS)")


def check_url(url: str) -> str:
    """The kind of ``url`` ("server", "cluster", "sentinel"), or ConfigError naming the
    accepted forms: what ``kvpool serve`` checks before it builds an engine."""
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    base, _, mode = scheme.partition("+")
    if base not in ("redis", "rediss", "unix") or mode not in ("", "cluster", "sentinel") or (
            mode and base == "unix"):
        raise ConfigError(f"--remote-url {shown_url(url)!r}: unknown scheme; use {SCHEMES}")
    if not mode:
        try:
            _parse_url(url)
        except ValueError as exc:
            raise ConfigError(f"--remote-url {shown_url(url)!r}: {exc}; use {SCHEMES}"
                              ) from None
        return "server"
    _, path, _ = split_url(url, base, mode)
    service = path.strip("/")
    if mode == "sentinel" and (not service or "/" in service):
        raise ConfigError(f"--remote-url {shown_url(url)!r}: name the master's service: "
                          "redis+sentinel://HOST:PORT[,HOST:PORT...]/SERVICE")
    return mode


def split_url(url: str, base: str, mode: str) -> tuple[list[tuple[str, int]], str, dict]:
    """(seed nodes, path, connection options) of a cluster or sentinel URL."""
    parts = urlsplit(url)
    auth, _, hosts = parts.netloc.rpartition("@")
    nodes = []
    for h in filter(None, hosts.split(",")):
        host, _, port = h.rpartition(":") if ":" in h else (h, "", "")
        if not port.isdigit() or not host:
            raise ConfigError(f"--remote-url {shown_url(url)!r}: {h!r} is not HOST:PORT; use "
                              f"{base}+{mode}://HOST:PORT[,HOST:PORT...]")
        nodes.append((host, int(port)))
    if not nodes:
        raise ConfigError(f"--remote-url {shown_url(url)!r}: no HOST:PORT; use "
                          f"{base}+{mode}://HOST:PORT[,HOST:PORT...]")
    # the URL's user, password and query options, parsed as redis-py parses one server's
    one = f"{base}://{auth + '@' if auth else ''}{nodes[0][0]}:{nodes[0][1]}"
    try:
        options = dict(_parse_url(one + (f"?{parts.query}" if parts.query else "")))
    except ValueError as exc:
        raise ConfigError(f"--remote-url {shown_url(url)!r}: {exc}") from None
    options.pop("db", None)
    if options.get("username"):
        options["username"] = unquote(options["username"])
    return nodes, parts.path, options


def _parse_url(url: str) -> dict[str, Any]:
    """redis-py's reading of a one-server URL (its options, its errors), imported only here
    where a URL was given (NOTE(lazy-redis))."""
    from redis.asyncio.connection import parse_url
    return parse_url(url)


def shown_url(url: str) -> str:
    """``url`` without its password, for error messages."""
    scheme, sep, rest = url.partition("://")
    auth, at, hosts = rest.rpartition("@")
    return f"{scheme}{sep}{auth.partition(':')[0] + ':***@' if at else ''}{hosts}"
