"""CORS for browser clients, as vLLM's server answers them.

vLLM installs starlette's CORSMiddleware (FastAPI's is the same class) with its four flags;
``CorsPolicy`` gives the same answers from an aiohttp middleware (the preflight) and an
``on_response_prepare`` hook (every other answer)::

    flag                  default  meaning
    --allowed-origins     []       origins a page may call from ("*": any; none by default)
    --allow-credentials   off      Access-Control-Allow-Credentials: true
    --allowed-methods     ["*"]    methods a preflight may ask for ("*": DELETE GET HEAD OPTIONS
                                   PATCH POST PUT)
    --allowed-headers     ["*"]    request headers a preflight may ask for ("*": any; else these
                                   plus the CORS-safelisted Accept, Accept-Language,
                                   Content-Language, Content-Type)

NOTE(no-origin-default): by default no origin is allowed, as in vLLM 0.33 (its
``allowed_origins`` defaults to an empty list): a page on another origin gets no
``Access-Control-Allow-Origin`` and its preflight a 400, so a web page the user visits cannot
read the prompts and completions of a server on their machine or network. Clients that send
no ``Origin`` (curl, the SDKs) and same-origin pages (they need no CORS header) are not
affected; ``--allowed-origins '["*"]'`` lets any page call, as kvpool's default once did.

A request without ``Origin`` is not a CORS request: nothing is added but ``Vary``
(NOTE(vary-origin)). A preflight (``OPTIONS`` with ``Origin`` and
``Access-Control-Request-Method``) is answered here, on any path, before the API key is
checked (browsers never send ``Authorization`` on a preflight)::

    200 "OK"  Access-Control-Allow-Methods (the allowed list), Access-Control-Max-Age 600,
              Access-Control-Allow-Headers (the requested headers when "*", else the list),
              Access-Control-Allow-Origin: "*" when any origin is allowed and credentials are
              not; otherwise the request's Origin, with Vary: Origin
    400 "Disallowed CORS origin, method, headers" (those that failed); no
              Access-Control-Allow-Origin for a disallowed origin

Every other answer to a request with ``Origin`` (successes, SSE streams, and the error JSON of
middleware.py: 401, 400, 404, 413, 5xx) gets, before its headers go out:
``Access-Control-Allow-Origin: *`` when any origin is allowed and credentials are not, else
the Origin itself with ``Vary: Origin`` when it is allowed, else nothing; and with
``--allow-credentials``, ``Access-Control-Allow-Credentials: true`` whatever the origin.

NOTE(vary-origin): where the answer echoes the Origin (a list of origins, or credentials;
never with no origin allowed, NOTE(no-origin-default)), it depends on the Origin, so every
answer, preflight or not, carries ``Vary: Origin``: also the answers to a disallowed or
malformed Origin and to a request without one (the Fetch standard's advice; starlette adds it
only where it echoes). Otherwise a shared cache could
keep an answer without ``Access-Control-Allow-Origin`` (made for another origin, or for no
browser at all) and serve it to an allowed page, which the browser would then refuse.

NOTE(echo-credentials): with credentials on, any origin allowed, the answer echoes the Origin,
never ``*``, whatever the request carries. A browser refuses ``*`` on a request sent with
``credentials: "include"``, and a server cannot see that mode: a page sending a bearer token
without cookies got ``*`` and could not read the answer its preflight had allowed. starlette
decided the same (its PR #3137, after the older rule keyed on a ``Cookie`` header).

NOTE(hostile-origin): one thing differs from starlette, which echoes any Origin value. Here an
Origin that is not one serialized origin (``null`` or ``scheme://host[:port]``, at most
``MAX_ORIGIN_CHARS``, sent once) counts as a disallowed origin, and requested headers that
are not a comma-separated list of header names are disallowed headers: nothing a client sends
is echoed unless it has that shape. Browsers only ever send that shape.

NOTE(simple-post): a browser sends a "simple" cross-origin request (a POST whose Content-Type
is ``text/plain``, ``application/x-www-form-urlencoded`` or ``multipart/form-data``, or none)
with no preflight: CORS only hides the answer from the page. Where --allowed-origins is a
list (by default an empty one), a page from another origin could still start generations on
a server without an API key. vLLM refuses every body that is not ``application/json`` (400);
here such a request is refused (403 ``origin_not_allowed``) only when it carries an Origin the
flags refuse, so ``curl -d`` and other clients that send no Origin keep working.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

from aiohttp import web

from kvpool.errors import ConfigError
from kvpool.server.middleware import APIError
from kvpool.server.vllm_flags import VllmSwitch  # vLLM's --no-allow-credentials too

__all__ = ["ALL_METHODS", "MAX_AGE_SECONDS", "MAX_ORIGIN_CHARS", "CorsPolicy", "add_cors_args",
           "cors_list"]

ALL_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")  # starlette's "*"
SAFELISTED_HEADERS = ("Accept", "Accept-Language", "Content-Language", "Content-Type")
MAX_AGE_SECONDS = 600  # how long a browser may cache a preflight answer (starlette's default)
MAX_ORIGIN_CHARS = 320  # a DNS name is at most 253 characters; scheme and port add ~20
MAX_REQUESTED_HEADERS_CHARS = 4096
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
# NOTE(simple-post): the media types a browser sends cross-origin without a preflight
SIMPLE_MEDIA_TYPES = ("", "text/plain", "application/x-www-form-urlencoded",
                      "multipart/form-data")

# an origin is ``null`` or scheme://host[:port]: no path, no comma, no space
_ORIGIN = re.compile(r"null|[A-Za-z][A-Za-z0-9+.-]*://[A-Za-z0-9._~%!$&'()*+;=:\[\]-]+")
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 token: a method, a header name
_FLAG_SHAPES = {  # flag: (what each entry must match, its name, an example value)
    "--allowed-origins": (_ORIGIN, "an origin: scheme://host[:port], no path",
                          '["https://app.example", "http://localhost:3000"]'),
    "--allowed-methods": (_TOKEN, "a method name", '["GET", "POST"]'),
    "--allowed-headers": (_TOKEN, "a header name", '["Authorization", "Content-Type"]')}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def cors_list(flag: str, value: str | Sequence[str]) -> tuple[str, ...]:
    """One of the --allowed-* values: a JSON list of strings, as vLLM takes it (or a sequence
    of strings already), each "*" or of the flag's shape; a ConfigError names the flag."""
    shape, what, example = _FLAG_SHAPES[flag]
    example = f"{flag} '{example}'"
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ConfigError(f"{flag} {value[:80]!r} is not JSON: give a JSON list of "
                              f"strings, e.g. {example}") from None
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{flag}: give a JSON list of strings, e.g. {example}")
    for v in value:
        if v != "*" and not shape.fullmatch(v):
            raise ConfigError(f"{flag}: {v[:80]!r} is not {what} (or \"*\"), e.g. {example}")
    return tuple(value)


def _is_preflight(request: web.Request) -> bool:
    return (request.method == "OPTIONS" and "Origin" in request.headers
            and "Access-Control-Request-Method" in request.headers)


def _origin(request: web.Request) -> str | None:
    """The request's one Origin if it has an origin's shape (NOTE(hostile-origin)), else
    None: treated as a disallowed origin."""
    given = request.headers.getall("Origin", [])
    if len(given) != 1 or len(given[0]) > MAX_ORIGIN_CHARS or not _ORIGIN.fullmatch(given[0]):
        return None
    return given[0]


def _vary_origin(headers: MutableMapping[str, str]) -> None:
    """Add Origin to ``Vary`` (a cache must keep answers to different origins apart), once."""
    existing = headers.get("Vary")
    if existing and "origin" in (v.strip().lower() for v in existing.split(",")):
        return
    headers["Vary"] = f"{existing}, Origin" if existing else "Origin"


class CorsPolicy:
    """The four CORS flags, and the answers they give (the module docstring's rules)."""

    def __init__(self, origins: str | Sequence[str] = (), *, credentials: bool = False,
                 methods: str | Sequence[str] = ("*",),
                 headers: str | Sequence[str] = ("*",)) -> None:
        self.origins = frozenset(cors_list("--allowed-origins", origins))
        self.credentials = bool(credentials)
        methods = cors_list("--allowed-methods", methods)
        self.methods = ALL_METHODS if "*" in methods else methods
        headers = cors_list("--allowed-headers", headers)
        self.any_origin = "*" in self.origins
        self.any_header = "*" in headers
        self.headers = tuple(sorted({*SAFELISTED_HEADERS, *headers} - {"*"}))
        self.header_names = frozenset(h.lower() for h in self.headers)
        # the Origin itself, not "*": a list, or credentials (NOTE(echo-credentials)); never
        # where no origin is allowed: no answer depends on the Origin (NOTE(no-origin-default))
        self.echo_origin = bool(self.origins) and (not self.any_origin or self.credentials)

    def allows(self, origin: str) -> bool:
        return self.any_origin or origin in self.origins

    def middleware(self) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
        """The aiohttp middleware that answers preflights (place it before auth)."""

        @web.middleware
        async def answer_preflight(request: web.Request,
                                   handler: Handler) -> web.StreamResponse:
            if _is_preflight(request):
                return self.preflight(request)
            if self.refuses_simple(request):
                raise APIError(403, "this Origin is not in --allowed-origins, and a request "
                               "from a browser page must send Content-Type: application/json",
                               code="origin_not_allowed")
            return await handler(request)

        return answer_preflight

    def refuses_simple(self, request: web.Request) -> bool:
        """NOTE(simple-post): a request with an Origin this policy refuses that a browser
        would have sent without a preflight (a write with a simple media type)."""
        if "Origin" not in request.headers or request.method in SAFE_METHODS:
            return False
        origin = _origin(request)
        if origin is not None and self.allows(origin):
            return False
        media = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
        return media in SIMPLE_MEDIA_TYPES

    def preflight(self, request: web.Request) -> web.Response:
        """200 with what the actual request may do, or 400 naming what is not allowed."""
        origin = _origin(request)
        headers = {"Access-Control-Allow-Methods": ", ".join(self.methods),
                   "Access-Control-Max-Age": str(MAX_AGE_SECONDS)}
        failures = []
        if origin is None or not self.allows(origin):
            failures.append("origin")
        elif self.echo_origin:
            headers["Access-Control-Allow-Origin"] = origin
        else:
            headers["Access-Control-Allow-Origin"] = "*"
        if self.echo_origin:
            _vary_origin(headers)
        if request.headers["Access-Control-Request-Method"] not in self.methods:
            failures.append("method")
        if not self._headers_allowed(request, headers):
            failures.append("headers")
        if self.credentials:
            headers["Access-Control-Allow-Credentials"] = "true"
        if failures:
            return web.Response(status=400, text="Disallowed CORS " + ", ".join(failures),
                                headers=headers)
        return web.Response(text="OK", headers=headers)

    def _headers_allowed(self, request: web.Request, headers: dict[str, str]) -> bool:
        """Check Access-Control-Request-Headers and say which are allowed in ``headers``."""
        asked = request.headers.get("Access-Control-Request-Headers")
        if not self.any_header:
            headers["Access-Control-Allow-Headers"] = ", ".join(self.headers)
        if asked is None:
            return True
        names = [name for h in asked.split(",") if (name := h.strip(" \t"))]
        if len(asked) > MAX_REQUESTED_HEADERS_CHARS or not all(map(_TOKEN.fullmatch, names)):
            return False  # NOTE(hostile-origin): not a list of header names, not echoed
        if self.any_header:
            headers["Access-Control-Allow-Headers"] = asked
            return True
        return all(h.lower() in self.header_names for h in names)

    async def on_response_prepare(self, request: web.Request,
                                  response: web.StreamResponse) -> None:
        """aiohttp ``on_response_prepare`` hook: the CORS headers of every non-preflight
        answer, before its headers go out (streams and error answers included)."""
        if _is_preflight(request):
            return
        if self.echo_origin:  # NOTE(vary-origin): on every answer, whatever the Origin
            _vary_origin(response.headers)
        if "Origin" not in request.headers:
            return
        if self.credentials:
            response.headers["Access-Control-Allow-Credentials"] = "true"
        origin = _origin(request)
        if origin is None or not self.allows(origin):
            return
        if not self.echo_origin:  # NOTE(echo-credentials): "*" only without credentials
            response.headers["Access-Control-Allow-Origin"] = "*"
            return
        response.headers["Access-Control-Allow-Origin"] = origin


def add_cors_args(srv: Any) -> None:
    """The flags of what browser pages on other origins may call (vLLM's flags and defaults),
    on ``srv``, a parser or argument group: ``kvpool serve``'s and ``kvpool router``'s."""
    srv.add_argument("--allowed-origins", default="[]", metavar="JSON",
                     help="origins whose pages may call the API, a JSON list, e.g. "
                     "'[\"https://app.example\"]', '[\"*\"]' for any (default: '[]', none: "
                     "a page on another origin cannot read the answers)")
    srv.add_argument("--allow-credentials", action=VllmSwitch, default=False,
                     help="send Access-Control-Allow-Credentials: true (pages may send cookies)")
    srv.add_argument("--allowed-methods", default='["*"]', metavar="JSON",
                     help="methods a CORS preflight may ask for, a JSON list (default: any)")
    srv.add_argument("--allowed-headers", default='["*"]', metavar="JSON",
                     help="request headers a CORS preflight may ask for, a JSON list "
                     "(default: any)")
