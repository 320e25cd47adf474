"""NOTE(background): ``POST /v1/responses`` with ``background: true`` runs apart from the HTTP
request that asked for it, as vLLM 0.33 runs it with its store on (kvpool's store is always
on; with ``--max-stored-responses 0`` or ``--max-stored-response-bytes 0`` it is off, and
``background`` is vLLM's 400 for that case)::

    POST        parse, compile, the gate's admission, the pool's rules, the engine's queue
                (--max-queue): their 400 / 429 / 503 as usual, at once, nothing stored
                (responses_api.py NOTE(refused-at-once)); then the response object at once,
                status "queued", output [], usage null
    the run     one task per response: the engine request, to the end, as a request not
                streamed runs (handlers.py ``run``)
    GET         while it runs: the queued object (vLLM's status stays "queued" until the
                end); then the stored response: "completed" / "incomplete", or "failed" (its
                ``error`` says why), or "cancelled"
    continue    the queued object is stored at once, with its input's conversation, as vLLM
                keeps it: a ``previous_response_id`` naming it while it runs continues from
                that input, no output (vLLM reads its stored object as it is: output [])
    cancel      while it runs: the task is cancelled, the engine request aborted (its blocks
                back to the pool), and the object stored and answered with status
                "cancelled"; after the end, the 400 of a finished response. The engine's end
                is the end: a cancel (or DELETE) while the finished object's JSON is being
                written waits for it to be stored, then acts as after the end (``storing``;
                responses_api.py NOTE(store-slices))

With ``stream`` too, the run writes the Responses events (responses_view.py) into its
``EventLog`` and the POST answers them as they come: a client that leaves stops reading, not
the run. ``GET /v1/responses/{id}?stream=true&starting_after=N`` answers the events after
number N, live while it runs, then from the store, which keeps them with the response (their
bytes count toward its bounds); any other response has no events: vLLM's 400 "Unknown
response_id".

The run holds the gate's ticket like any request, so a draining server waits for it; what is
still running at shutdown is cancelled (``close``). A client that disconnects after the POST
changes nothing: the run is not its handler. At most ``MAX_RUNNING`` runs at once, all
tenants together, ``MAX_STREAMED`` of them streamed (the next POST is a 429
``too_many_background_responses``), so tasks, queued objects and event logs stay bounded;
each run's engine request, and so its log, is bounded as any other request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from kvpool.server.middleware import APIError, known_error
from kvpool.server.response_store import StoredResponse

__all__ = ["MAX_RUNNING", "MAX_STREAMED", "BackgroundRuns", "EventLog", "api_error", "failed"]

logger = logging.getLogger("kvpool.server")

MAX_RUNNING = 1024
MAX_STREAMED = 64  # of them streamed: each keeps its events until it ends (EventLog)


class EventLog:
    """A streamed run's SSE events in order (event k has ``sequence_number`` k), for the
    POST that asked for it and for GET ``?stream=true&starting_after=N`` while it runs."""

    def __init__(self) -> None:
        self.events: list[bytes] = []
        self.ended = False
        self._grew = asyncio.Event()

    def add(self, data: bytes) -> None:
        """``data``: whole events (``event: T\ndata: {...}\n\n`` each; JSON has no raw
        newline)."""
        self.events += [e + b"\n\n" for e in data.split(b"\n\n") if e]
        self._grew.set()

    def end(self) -> None:
        self.ended = True
        self._grew.set()

    async def follow(self, after: int = -1) -> AsyncIterator[bytes]:
        """The events after number ``after`` as they come, until the run ends."""
        i = max(after + 1, 0)
        while True:
            if i < len(self.events):
                yield b"".join(self.events[i:])
                i = len(self.events)
            elif self.ended:
                return
            else:
                self._grew.clear()
                await self._grew.wait()


@dataclass(slots=True)
class _Run:
    task: asyncio.Task[None]
    body: dict[str, Any]  # the queued response object, as GET shows it while it runs
    keep: Callable[[dict[str, Any]], None]  # stores a final object (responses_api.py)
    log: EventLog | None  # a streamed run's events
    entry: StoredResponse | None  # ``body`` with its conversation (NOTE(one-id))
    storing: bool = False  # the engine request ended; the finished object is being stored


class BackgroundRuns:
    """The background responses running now, by (tenant, response id)."""

    def __init__(self, limit: int = MAX_RUNNING, streamed_limit: int = MAX_STREAMED) -> None:
        self.limit = limit
        self.streamed_limit = streamed_limit
        self._runs: dict[tuple[str, str], _Run] = {}

    def __len__(self) -> int:
        return len(self._runs)

    def check_room(self, stream: bool) -> None:
        """The 429 when ``limit`` runs (``streamed_limit`` streamed ones) are running, asked
        before the request is admitted."""
        if len(self._runs) >= self.limit:
            what = f"{self.limit} background responses"
        elif stream and sum(r.log is not None for r in self._runs.values()) \
                >= self.streamed_limit:
            what = f"{self.streamed_limit} streamed background responses"
        else:
            return
        raise APIError(429, f"{what} are running already; try again when one has finished",
                       code="too_many_background_responses")

    def start(self, key: tuple[str, str], body: dict[str, Any],
              keep: Callable[[dict[str, Any]], None],
              run: Callable[[], Coroutine[Any, Any, Any]], log: EventLog | None = None,
              entry: StoredResponse | None = None) -> None:
        """Run ``run()`` (it stores the finished object itself) in a task of its own; a
        failure stores ``body`` as "failed" with the error (``keep``). ``entry``: what GET
        and a continuation read while it runs (responses_api.py NOTE(one-id))."""
        task = asyncio.get_running_loop().create_task(self._run(key, run, log))
        self._runs[key] = _Run(task, body, keep, log, entry)

    def storing(self, key: tuple[str, str]) -> None:
        """The run's engine request has ended, its finished object is being written and
        stored: a cancel from now waits for that and finds a finished response
        (NOTE(background), cancel)."""
        run = self._runs.get(key)
        if run is not None:
            run.storing = True

    def get(self, key: tuple[str, str]) -> dict[str, Any] | None:
        run = self._runs.get(key)
        return run.body if run is not None else None

    def entry(self, key: tuple[str, str]) -> StoredResponse | None:
        """The queued response of a run still going, with its conversation. One dict lookup:
        safe from the parse's worker thread too."""
        run = self._runs.get(key)
        return run.entry if run is not None else None

    def log(self, key: tuple[str, str]) -> EventLog | None:
        """The events of a streamed run still running."""
        run = self._runs.get(key)
        return run.log if run is not None else None

    async def _run(self, key: tuple[str, str], run: Callable[[], Coroutine[Any, Any, Any]],
                   log: EventLog | None) -> None:
        try:
            await run()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the stored object says it failed
            entry = self._runs.get(key)
            if entry is not None:
                entry.keep(failed(entry.body, exc))
        finally:
            self._runs.pop(key, None)
            if log is not None:
                log.end()

    async def cancel(self, key: tuple[str, str]) -> dict[str, Any] | None:
        """The cancelled object (stored first), or None when no run has this key or it has
        ended (a run ``storing`` its finished object: once that is stored)."""
        run = self._runs.get(key)
        if run is None:
            return None
        if run.storing:
            await asyncio.wait([run.task])  # stored, then popped (``_run``'s finally)
            return None
        del self._runs[key]
        body = {**run.body, "status": "cancelled"}
        run.keep(body)
        run.task.cancel()
        await asyncio.wait([run.task])  # released (NOTE(abort) in handlers.py) on return
        return body

    async def close(self) -> None:
        """Cancel every run (the app's shutdown) and wait for their release."""
        tasks = [run.task for run in self._runs.values()]
        self._runs.clear()
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)


def failed(body: dict[str, Any], exc: Exception) -> dict[str, Any]:
    """The queued object, status "failed" as vLLM stores it; ``error`` ({code, message}, what
    the request's HTTP answer would have said) is kvpool's addition: vLLM 0.33's response
    object has no error field (protocol.py ResponsesResponse, its ``error`` commented out)."""
    err = api_error(exc)
    if err.code == "internal_error":
        logger.error("background response %s failed", body["id"], exc_info=exc)
    code = err.code or ("server_error" if err.status >= 500 else "invalid_request")
    return {**body, "status": "failed", "error": {"code": code, "message": err.message}}


def api_error(exc: Exception) -> APIError:
    """The error a run's failure reports: middleware.py's table (``known_error``, as the
    request's HTTP answer would have had it), anything else the 500 ``internal_error``."""
    known = known_error(exc)
    return known if known is not None else APIError(500, "internal server error",
                                                    code="internal_error")
