"""Every HTTP answer of the app, counted in vLLM's HTTP series (kvpool/metrics/http_series.py).

NOTE(http-counting): no one place sees both ends of every answer, so two parts share a
per-request record:

    on_response_prepare hook   every answer the app makes, once its status is fixed: a
                               handler's, the error middleware's JSON (the router's 404 and
                               405 among them), what aiohttp answers ahead of the middlewares
                               (417 for a refused Expect: middleware.py NOTE(expect)) or after
                               an exception escaped them (500). It counts the answer and its
                               sizes, and observes the duration of a whole body, which is
                               handed to the transport right after.
    outermost middleware       notes the arrival; for a stream (prepared while its handler
                               runs) observes the duration when the handler returns, after
                               the last event.

NOTE(left-early): a client that leaves before its answer started (a timeout while queued)
cancels the handler (``handler_cancellation``), and nothing is prepared. vLLM's
instrumentator counts every request that reached the app, in a ``finally``: its completion and
chat routes (``with_cancellation``) answer such a client with an empty 200, and a stream's 200
headers went out before its first token; so the middleware counts it then, a 2xx with an
empty body and its duration to the cancel. A cancel while the connection is still open (the
server's shutdown) is a 500, the instrumentator's status when no answer started. An answer
prepared inside the handler (a stream) was counted then, never again. A request
aiohttp's parser refuses (a malformed request line) never reaches the app, nor vLLM's. Unlike
vLLM, whose CORS and API-key middlewares sit outside its instrumentator, CORS preflights and
401s are counted: a flood of unauthenticated requests shows on the 4xx rate.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from kvpool.metrics.http_series import HttpSeries, excluded

__all__ = ["HttpCounting"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(slots=True)
class _Arrival:
    """One request as the middleware saw it."""

    start: float
    handler_done: bool = False
    stream: tuple[str | None, str] | None = None  # (template, method) of a stream prepared


_ARRIVAL = web.RequestKey("kvpool_http_arrival", _Arrival)


class HttpCounting:
    """The middleware and the hook of NOTE(http-counting), on one HttpSeries."""

    def __init__(self, series: HttpSeries) -> None:
        self.series = series

    def register(self, app: web.Application) -> None:
        """Call after every other hook is on ``app``: the middleware goes first (outermost: it
        times the error middleware's answers too), the hook last (it reads the size of the
        body the error hooks leave: anthropic_errors.py rewrites /v1/messages errors)."""
        app.middlewares.insert(0, self.middleware)
        app.on_response_prepare.append(self.on_response_prepare)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Outermost: the arrival, and the end of a stream."""
        arrival = request[_ARRIVAL] = _Arrival(time.perf_counter())
        try:
            return await handler(request)
        except asyncio.CancelledError:
            if arrival.stream is None:  # nothing prepared: NOTE(left-early)
                await self.left_early(request, arrival)
            raise
        finally:
            arrival.handler_done = True
            if arrival.stream is not None:
                self.series.ended(*arrival.stream, time.perf_counter() - arrival.start)

    async def left_early(self, request: web.Request, arrival: _Arrival) -> None:
        """Count a cancelled request no answer was prepared for (NOTE(left-early))."""
        template = await route_template(request)
        if excluded(template or request.path):
            return
        status = 200 if request.transport is None else 500  # the client gone, or the server
        self.series.answered(template, request.method, status, request.content_length or 0, 0)
        self.series.ended(template, request.method, time.perf_counter() - arrival.start)

    async def on_response_prepare(self, request: web.Request,
                                  response: web.StreamResponse) -> None:
        """Count the answer; observe its duration unless it is a stream still being written."""
        template = await route_template(request)
        if excluded(template or request.path):
            return
        method = request.method
        self.series.answered(template, method, response.status, request.content_length or 0,
                             response.content_length or 0)
        arrival = request.get(_ARRIVAL)
        if arrival is None:  # answered before any middleware ran: no body was read
            self.series.ended(template, method, 0.0)
        elif arrival.handler_done:
            self.series.ended(template, method, time.perf_counter() - arrival.start)
        else:
            arrival.stream = (template, method)


async def route_template(request: web.Request) -> str | None:
    """The template of the route the path matched (``/v1/models/{model}``), None for none.
    A 405's path matched a route of other methods, which the router does not keep: asked of
    each resource again (405s only), as Starlette names a partial match's route."""
    match = request.match_info
    resource = match.route.resource
    if resource is not None:
        return resource.canonical
    if not isinstance(getattr(match, "http_exception", None), web.HTTPMethodNotAllowed):
        return None
    for candidate in request.app.router.resources():
        _, allowed = await candidate.resolve(request)
        if allowed:
            return candidate.canonical
    return None
