"""``--remote-url``'s accepted forms (``clients.py`` builds the client of one), checked where
``kvpool serve`` parses its flags, before an engine is built.

NOTE(lazy-redis): redis-py (with hiredis, opentelemetry, cryptography: ~90 modules) costs a
server start 60-80 ms of imports, so nothing a start without ``--remote-url`` loads may import
it: this module imports only the standard library at its top and loads redis-py's URL parser
when a URL is checked, and ``kvpool.remote``'s ``__init__`` imports ``RedisTier`` when it is
first named (tests/runtime/test_startup_imports.py holds the start-up path to that).

NOTE(url-secret): a refused URL is said on stderr, which ends up in pod logs and CI output,
so no message holds any part of its password. A generated secret often holds an unencoded
``/``, ``?`` or ``#``, which ends the URL's host part early: the password's tail then reads as
a port, a path or a query, and redis-py's and urllib's errors quote those pieces (``Port could
not be cast to integer value as 'hunter2'``). So an ``@`` after the host part is refused first
(``_split``): what is then read as the hosts and the port, and what the tier later logs as the
URL (``connections.where``), cannot be a piece of the password. A message shows the URL through
:func:`shown_url`, which hides everything that may be the password (up to the URL's last ``@``)
and every query value from a secret parameter on, and passes on only the errors that quote no
part of the password (``_SAFE``), the others said in kvpool's words (``_reason``).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import SplitResult, unquote, unquote_plus, urlsplit

from kvpool.errors import ConfigError

__all__ = ["ENCODE", "SCHEMES", "check_url", "shown_url", "split_url"]

SCHEMES = ("redis://HOST:PORT, rediss://HOST:PORT, unix:///PATH, "
           "redis+cluster://HOST:PORT[,HOST:PORT...] (rediss+cluster:// for TLS) or "
           "redis+sentinel://HOST:PORT[,HOST:PORT...]/SERVICE (rediss+sentinel:// for TLS)")
ENCODE = ("percent-encode a '/', '?', '#', '@' or ':' in the user or password as %2F, %3F, "
          "%23, %40, %3A, and an '@' in a path or query as %40")
# the redis-py and urllib errors that quote no part of the password (the rest are said in
# kvpool's words, _reason): "Invalid value for '<name>'" names one of redis-py's own query
# parameters, and the port quoted is read after the netloc's last '@', where _split leaves
# only the hosts
_SAFE = ("Redis URL must specify", "Invalid value for '", "Invalid IPv6 URL", "Port out of range",
         "Port could not be cast")
# query parameters whose value is a secret (redis-py's password and ssl_password), and any
# name that reads like one: a URL may pass any connection keyword in its query
_SECRET_NAME = re.compile(r"pass|secret|token|cred", re.IGNORECASE)
_QUERY_NAME = re.compile(r"[?&]([^?&=#]*)=")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")


def check_url(url: str) -> str:
    """The kind of ``url`` ("server", "cluster", "sentinel"), or ConfigError naming the
    accepted forms: what ``kvpool serve`` checks before it builds an engine."""
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    base, _, mode = scheme.partition("+")
    if base not in ("redis", "rediss", "unix") or mode not in ("", "cluster", "sentinel") or (
            mode and base == "unix"):
        raise _refused(url, "unknown scheme", SCHEMES)
    if not mode:
        _split(url, SCHEMES)
        _parse_url(url, url, SCHEMES)
        return "server"
    _, path, _ = split_url(url, base, mode)
    service = path.strip("/")
    if mode == "sentinel" and (not service or "/" in service):
        raise _refused(url, "name the master's service",
                       "redis+sentinel://HOST:PORT[,HOST:PORT...]/SERVICE")
    return mode


def split_url(url: str, base: str, mode: str) -> tuple[list[tuple[str, int]], str, dict]:
    """(seed nodes, path, connection options) of a cluster or sentinel URL."""
    forms = f"{base}+{mode}://HOST:PORT[,HOST:PORT...]{'/SERVICE' if mode == 'sentinel' else ''}"
    parts = _split(url, forms)
    auth, _, hosts = parts.netloc.rpartition("@")
    nodes = []
    for h in filter(None, hosts.split(",")):
        host, _, port = h.rpartition(":") if ":" in h else (h, "", "")
        if not port.isdigit() or not host:  # h: never the password (_split, NOTE(url-secret))
            raise _refused(url, f"{h!r} is not HOST:PORT", forms)
        nodes.append((host, int(port)))
    if not nodes:
        raise _refused(url, "no HOST:PORT", forms)
    # the URL's user, password and query options, parsed as redis-py parses one server's
    one = f"{base}://{auth + '@' if auth else ''}{nodes[0][0]}:{nodes[0][1]}"
    options = dict(_parse_url(one + (f"?{parts.query}" if parts.query else ""), url, forms))
    options.pop("db", None)
    if options.get("username"):
        options["username"] = unquote(options["username"])
    return nodes, parts.path, options


def _split(url: str, forms: str) -> SplitResult:
    """urllib's reading of ``url``, refused where a part of the password could read as a
    host, path or query (NOTE(url-secret)): an ``@`` after the host part."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise _refused(url, _reason(exc), forms) from None
    if "@" in parts.path + parts.query + parts.fragment:
        raise _refused(url, f"an '@' after the host part (a '/', '?' or '#' in the password "
                            f"ends the host part early); {ENCODE}", forms)
    return parts


def _parse_url(url: str, given: str, forms: str) -> dict[str, Any]:
    """redis-py's reading of a one-server ``url`` (its options; ConfigError in kvpool's words
    on ``given``, the ``--remote-url``), imported only here where a URL was given
    (NOTE(lazy-redis))."""
    from redis.asyncio.connection import parse_url
    try:
        return parse_url(url)
    except ValueError as exc:
        raise _refused(given, _reason(exc), forms) from None


def _reason(exc: ValueError) -> str:
    """What redis-py's or urllib's ``exc`` says is wrong, without the URL's pieces it may
    quote (NOTE(url-secret))."""
    text = str(exc)
    if text.startswith(_SAFE):
        return text.rstrip(".")
    if "NFKC" in text:
        return ("the user, password or host holds a character that NFKC normalization turns "
                f"into '/', '?', '#', '@' or ':': {ENCODE}")
    return f"redis-py cannot read it ({type(exc).__name__})"


def _refused(url: str, why: str, forms: str) -> ConfigError:
    return ConfigError(f"--remote-url {shown_url(url)!r}: {why}; use {forms}")


def shown_url(url: str) -> str:
    """``url`` without its password, for error messages: the user and the host part after the
    URL's last ``@``, the query up to the first secret parameter's value (NOTE(url-secret))."""
    scheme, sep, rest = url.partition("://")
    if not sep or not _SCHEME.fullmatch(scheme):
        scheme, sep, rest = "", "", url
    cut = next((m.end() for m in _QUERY_NAME.finditer(rest)
                if _SECRET_NAME.search(unquote_plus(m.group(1)))), len(rest))
    hidden = "***" if cut < len(rest) else ""
    at = rest.rfind("@")
    if at < 0:
        return f"{scheme}{sep}{rest[:cut]}{hidden}"
    user = rest[:min(at, cut)].partition(":")[0]
    if at >= cut:  # the secret value runs on past the last '@'
        return f"{scheme}{sep}{user}:***"
    return f"{scheme}{sep}{user}:***@{rest[at + 1:cut]}{hidden}"
