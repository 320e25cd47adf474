"""The router's shutdown on SIGTERM/SIGINT: ``kvpool router --shutdown-timeout SECONDS``.

NOTE(router-drain): the replica's drain (kvpool/server/request_gate.py, serve.py), on the
router's side, on one deadline::

    t0 signal      stop listening; a new request on an open connection gets 503
                   shutting_down + Retry-After (OpenAI error JSON; /metrics still answers)
    ...            requests in flight go on, relayed as usual
    t0+timeout     the rest are ended: their handler is cancelled (its replica connection
                   closes, which aborts the request there); a stream already started ends
                   with an SSE error event ``request_aborted`` and ``data: [DONE]``, a request
                   not answered yet gets 503 ``request_aborted`` JSON + Retry-After (what
                   kvpool serve answers), a large JSON answer midway has its connection cut
    +grace         aiohttp closes what is left (a short runner timeout), the process exits 0
    second signal  exit at once, status 1 (FORCED_EXIT_LINE): the operator means it; what
                   is open is cut, no tails (as kvpool serve's second signal)

Before, aiohttp's own runner cleanup waited its fixed 10 s twice, then cut every connection: a
stream ended with no error event and no ``[DONE]``, a non-stream with no status at all,
nothing was logged, and a second signal was ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from kvpool.router.stream_end import ENDING, StreamEnd
from kvpool.router.upstream import SSE_TYPE
from kvpool.server.middleware import error_body
from kvpool.signals import install_stop_signals

__all__ = ["DEFAULT_SHUTDOWN_TIMEOUT", "FORCED_EXIT_LINE", "FORCED_EXIT_STATUS", "SHUTDOWN_GRACE",
           "Drain", "install_signals"]

log = logging.getLogger("kvpool.router")

# kvpool serve's default (kvpool/server/serve_options.py), not imported: that module loads the
# engine's runtime (torch), which the router's process never does (test_router_imports.py)
DEFAULT_SHUTDOWN_TIMEOUT = 10.0
FORCED_EXIT_LINE = "kvpool router: second signal, exiting now"
FORCED_EXIT_STATUS = 1
# after the deadline, ended handlers get this long to write their tail (as serve.py's
# NOTE(grace)); aiohttp's runner gets it again for what is left
SHUTDOWN_GRACE = 0.2
# the router's own counters, read to the end: every path they answer on (/metrics/ too,
# kvpool/server/handlers.py NOTE(metrics-path))
STILL_ANSWERED = "/metrics"
_RESPONSE = "kvpool_router_drain_response"  # the request's prepared response, if any
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Drain:
    """The requests in flight and the drain over them (NOTE(router-drain))."""

    def __init__(self) -> None:
        self.draining = False
        self._live: dict[asyncio.Task, web.Request] = {}
        self._ending: set[asyncio.Task] = set()

    def install(self, app: web.Application) -> web.Application:
        """``app`` with the drain's middleware outermost (before any other sees a request)."""
        @web.middleware
        async def drain_middleware(request: web.Request,
                                   handler: Handler) -> web.StreamResponse:
            return await self._handle(request, handler)

        app.middlewares.insert(0, drain_middleware)
        app.on_response_prepare.append(_remember)
        return app

    @property
    def live(self) -> int:
        return len(self._live)

    async def _handle(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self.draining and not request.path.startswith(STILL_ANSWERED):
            return _error("the router is shutting down; retry on another router or later",
                          "shutting_down")
        task = asyncio.current_task()
        assert task is not None
        self._live[task] = request
        try:
            return await handler(request)
        except asyncio.CancelledError:
            if task not in self._ending:
                raise  # the client went away: nobody to answer
            task.uncancel()
            return await _ended(request)
        finally:
            self._live.pop(task, None)

    async def run(self, timeout: float) -> None:
        """Refuse new requests, let those in flight run until ``timeout``, end the rest;
        returns within timeout + 2 * SHUTDOWN_GRACE."""
        deadline = time.monotonic() + max(0.0, timeout)
        self.draining = True
        log.info("shutting down: %d request(s) in flight get %.1fs", self.live, timeout)
        while self._live and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if self._live:
            log.warning("shutting down: ending %d request(s) still running after %.1fs "
                        "(streams: an error event and [DONE]; others: 503 request_aborted)",
                        self.live, timeout)
            for task in list(self._live):
                self._ending.add(task)
                task.cancel()
            grace_end = time.monotonic() + SHUTDOWN_GRACE
            while self._live and time.monotonic() < grace_end:
                await asyncio.sleep(0.01)
        await asyncio.sleep(SHUTDOWN_GRACE / 4)  # a tail just written reaches its socket
        log.info("shutting down: drained")


async def _remember(request: web.Request, response: web.StreamResponse) -> None:
    request[_RESPONSE] = response


async def _ended(request: web.Request) -> web.StreamResponse:
    """What a request ended by the drain gets (NOTE(router-drain))."""
    resp = request.get(_RESPONSE)
    if resp is None or not resp.prepared:
        return _error("the request was aborted: the router shut down before it was answered;"
                      " retry later", "request_aborted")
    if resp.headers.get("Content-Type", "").startswith(SSE_TYPE):
        with contextlib.suppress(ConnectionError):  # the client may be gone
            ending = request.get(ENDING) or StreamEnd(request.path)  # the route's protocol
            await resp.write(ending.error(503, "the router shut down before the stream ended",
                                          "request_aborted"))
            await resp.write_eof()
        return resp
    if request.transport is not None:  # half a JSON body sent: nothing more can be told
        request.transport.abort()
    raise asyncio.CancelledError("the router shut down midway")


def _error(message: str, code: str) -> web.Response:
    return web.json_response(error_body(message, "server_error", None, code), status=503,
                             headers={"Retry-After": "1"})


def install_signals(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> list[int]:
    """SIGTERM/SIGINT: the first sets ``stop`` (drain), a second exits at once."""
    return install_stop_signals(loop, _on_signal, stop)


def _on_signal(stop: asyncio.Event) -> None:
    if not stop.is_set():
        stop.set()
        return
    print(FORCED_EXIT_LINE, flush=True)
    # out of the event loop now: its tasks are cancelled (open connections cut, no tails)
    raise SystemExit(FORCED_EXIT_STATUS)
