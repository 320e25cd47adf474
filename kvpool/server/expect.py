"""The routes' ``Expect`` handler: ``100 Continue`` only for a body the server will read.

NOTE(expect-bound): aiohttp calls a route's expect handler before its handler and before any
middleware, and its default writes ``HTTP/1.1 100 Continue`` for every ``Expect:
100-continue``: a client whose Content-Length was already past ``--max-body-bytes`` uploaded
the whole body and only then got the 413 the body reader gives (NOTE(declared) in
body_coding.py). RFC 9110 10.1.1 lets a server answer such a request with its final status
instead, and the client (curl, ...) then sends no body. So this handler runs the body reader's
own head checks first (``body_coding.refuse_from_head``: the app's bound, one rule for both);
a refusal is the error middleware's JSON answer with ``Connection: close``, as the body it
announced never follows on this connection. Any other expectation is a 417, as aiohttp's
default makes it (middleware.py NOTE(expect) turns that into JSON). app.py gives this handler
to every route, and so does the router (``readable_expectations``: its app reads and relays
bodies under the same bound, through the same reader).
"""

from __future__ import annotations

from functools import partial

from aiohttp import HttpVersion11, hdrs, web

from kvpool.server.body_coding import refuse_from_head
from kvpool.server.middleware import to_api_error

__all__ = ["continue_if_readable", "readable_expectations"]

CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


async def continue_if_readable(request: web.Request) -> web.StreamResponse | None:
    """NOTE(expect-bound): the interim 100, or the final refusal the head already earns."""
    if request.version != HttpVersion11:
        return None  # HTTP/1.0 has no interim responses: the body comes anyway
    expect = request.headers.get(hdrs.EXPECT, "")
    if expect.lower() != "100-continue":
        raise web.HTTPExpectationFailed(text=f"Unknown Expect: {expect}")
    try:
        refuse_from_head(request)
    except web.HTTPException as exc:
        resp = to_api_error(exc, request).response()
        resp.force_close()
        return resp
    await request.writer.write(CONTINUE)
    request.writer.output_size = 0  # the interim lines are not the answer's start
    return None


def readable_expectations(app: web.Application) -> web.Application:
    """``app``, whose routes added from here on through add_route (add_post does; add_get
    does not: those routes read no body) answer Expect with ``continue_if_readable``,
    not aiohttp's unconditional 100 (NOTE(expect-bound)); routes are added in many modules."""
    app.router.add_route = partial(app.router.add_route,  # type: ignore[method-assign]
                                   expect_handler=continue_if_readable)
    return app
