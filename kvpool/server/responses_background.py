"""NOTE(background): ``POST /v1/responses`` with ``background: true`` runs apart from the HTTP
request that asked for it, as vLLM 0.33 runs it with its store on (kvpool's store is always
on; with ``--max-stored-responses 0`` or ``--max-stored-response-bytes 0`` it is off, and
``background`` is vLLM's 400 for that case)::

    POST        parse, compile, the gate's admission: their 400 / 429 / 503 as usual; then the
                response object at once, status "queued", output [], usage null
    the run     one task per response: the engine request, to the end, as a request not
                streamed runs (handlers.py ``run``)
    GET         while it runs: the queued object (vLLM's status stays "queued" until the
                end); then the stored response: "completed" / "incomplete", or "failed" (its
                ``error`` says why), or "cancelled"
    cancel      while it runs: the task is cancelled, the engine request aborted (its blocks
                back to the pool), and the object stored and answered with status
                "cancelled"; after the end, the 400 of a finished response

The run holds the gate's ticket like any request, so a draining server waits for it; what is
still running at shutdown is cancelled (``close``). A client that disconnects after the POST
changes nothing: the run is not its handler. At most ``MAX_RUNNING`` runs at once, all
tenants together (the next POST is a 429 ``too_many_background_responses``), so tasks and
their queued objects stay bounded; each run's engine request is bounded as any other.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from kvpool.errors import EngineError, QueueFullError, RequestError, RequestRejected
from kvpool.server.middleware import APIError

__all__ = ["MAX_RUNNING", "BackgroundRuns"]

log = logging.getLogger("kvpool.server")

MAX_RUNNING = 1024


@dataclass(slots=True)
class _Run:
    task: asyncio.Task[None]
    body: dict[str, Any]  # the queued response object, as GET shows it while it runs
    keep: Callable[[dict[str, Any]], None]  # stores a final object (responses_api.py)


class BackgroundRuns:
    """The background responses running now, by (tenant, response id)."""

    def __init__(self, limit: int = MAX_RUNNING) -> None:
        self.limit = limit
        self._runs: dict[tuple[str, str], _Run] = {}

    def __len__(self) -> int:
        return len(self._runs)

    def check_room(self) -> None:
        """The 429 when ``limit`` runs are running (asked before the request is admitted)."""
        if len(self._runs) >= self.limit:
            raise APIError(429, f"{self.limit} background responses are running already; "
                           "try again when one has finished",
                           code="too_many_background_responses")

    def start(self, key: tuple[str, str], body: dict[str, Any],
              keep: Callable[[dict[str, Any]], None],
              run: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        """Run ``run()`` (it stores the finished object itself) in a task of its own; a
        failure stores ``body`` as "failed" with the error (``keep``)."""
        task = asyncio.get_running_loop().create_task(self._run(key, run))
        self._runs[key] = _Run(task, body, keep)

    def get(self, key: tuple[str, str]) -> dict[str, Any] | None:
        run = self._runs.get(key)
        return run.body if run is not None else None

    async def _run(self, key: tuple[str, str],
                   run: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        try:
            await run()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the stored object says it failed
            entry = self._runs.get(key)
            if entry is not None:
                entry.keep(_failed(entry.body, exc))
        finally:
            self._runs.pop(key, None)

    async def cancel(self, key: tuple[str, str]) -> dict[str, Any] | None:
        """The cancelled object (stored first), or None when no run has this key."""
        run = self._runs.pop(key, None)
        if run is None:
            return None
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


def _failed(body: dict[str, Any], exc: Exception) -> dict[str, Any]:
    """The queued object, status "failed", its ``error`` OpenAI's {code, message}: the code
    and words the request's HTTP answer would have had (middleware.py's table)."""
    if isinstance(exc, APIError):
        code, message = exc.code, exc.message
    elif isinstance(exc, RequestError):
        code, message = exc.code or "invalid_request", str(exc)
    elif isinstance(exc, RequestRejected):
        code, message = "request_rejected", str(exc)
    elif isinstance(exc, QueueFullError):
        code, message = "queue_full", str(exc)
    elif isinstance(exc, EngineError):
        code, message = "engine_unavailable", f"the engine cannot take this request: {exc}"
    else:
        log.error("background response %s failed", body["id"], exc_info=exc)
        code, message = "internal_error", "internal server error"
    return {**body, "status": "failed", "error": {"code": code or "server_error",
                                                  "message": message}}
