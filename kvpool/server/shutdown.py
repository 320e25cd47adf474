"""Graceful shutdown that keeps its deadline and tells every client what happened.

aiohttp's own runner cleanup waits ``shutdown_timeout`` for handlers, then cancels them and waits
``shutdown_timeout`` again (then the engine waits its own timeout): a 3 s timeout took 6.7 s,
cut streams had no ``[DONE]`` and queued requests saw a disconnect. ``serve`` instead drives
the drain itself, on one deadline, through :class:`DrainGate` (the engine as the routes see it)::

    t0 SIGTERM    stop listening; routes answer new requests 503 shutting_down;
                  shed_queued(): requests with no update yet (waiting in the engine queue)
                  are aborted and their handlers answer 503 shutting_down (JSON, Retry-After)
    ...           running requests may finish
    t0+timeout    abort_all(): the engine ends the rest with finish "abort"; a stream handler
                  then writes an error event (OpenAI error JSON) and ``data: [DONE]``
    +grace        aiohttp closes whatever is left (short runner timeout), engine.shutdown
    2nd signal    exit at once

Invariant: ``live`` holds exactly the streams that a handler holds and that have not ended.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from kvpool.runtime.outputs import aclose_updates
from kvpool.server.middleware import APIError

__all__ = ["DrainGate", "shutting_down_error"]


def shutting_down_error() -> APIError:
    return APIError(503, "the server is shutting down; retry on another replica or later",
                    code="shutting_down", headers={"Retry-After": "1"})


class _GateStream:
    """One request's updates; raises 503 shutting_down if it was shed before its first update."""

    def __init__(self, gate: DrainGate, inner: Any, key: int) -> None:
        self._gate = gate
        self._inner = inner
        self._key = key
        self.request_id: str | None = getattr(inner, "request_id", None)
        self.started = False  # an update arrived: the engine scheduled it (not just queued)
        self.shed = False  # aborted by shed_queued before it started

    def __aiter__(self) -> _GateStream:
        return self

    async def __anext__(self) -> Any:
        try:
            out = await self._inner.__anext__()
        except StopAsyncIteration:
            self._gate.forget(self._key)
            if self.shed and not self.started:
                raise shutting_down_error() from None
            raise
        except BaseException:
            self._gate.forget(self._key)
            raise
        if self.shed and not self.started and _aborted(out):
            self._gate.forget(self._key)
            raise shutting_down_error()
        self.started = True
        if out.finished:
            self._gate.forget(self._key)
        return out

    async def aclose(self) -> None:
        try:
            await aclose_updates(self._inner)
        finally:
            self._gate.forget(self._key)


def _aborted(out: Any) -> bool:
    return bool(out.finished) and any(c.finish_reason == "abort" for c in out.outputs)


class DrainGate:
    """The engine with a registry of live request streams; other attributes pass through."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        self._live: dict[int, _GateStream] = {}
        self._next_key = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def generate(self, request_id: str | None, prompt: Any, params: Any,
                 **kwargs: Any) -> AsyncIterator[Any]:
        inner = self._engine.generate(request_id, prompt, params, **kwargs)
        self._next_key += 1
        stream = _GateStream(self, inner, self._next_key)
        if stream.request_id is None:
            stream.request_id = request_id
        self._live[self._next_key] = stream
        return stream

    def forget(self, key: int) -> None:
        self._live.pop(key, None)

    @property
    def live(self) -> int:
        return len(self._live)

    async def shed_queued(self) -> int:
        """Abort every live request that has had no update yet; their handlers answer 503."""
        shed = [s for s in self._live.values() if not s.started and not s.shed]
        for s in shed:
            s.shed = True
            if s.request_id is not None:
                await self._engine.abort(s.request_id)
        return len(shed)

    async def abort_all(self) -> int:
        """Abort every live request: streams end with an error event and [DONE]."""
        live = list(self._live.values())
        for s in live:
            if s.request_id is not None:
                await self._engine.abort(s.request_id)
        return len(live)
