"""RenderGuard: a chat prompt's keys computed in a child process, within a time budget.

NOTE(render-budget): to hash a chat prompt the router renders the chat template its replicas
name in their kv_events info (or their model directory's: kv_prompt.py NOTE(agreement)), a
program a replica supplies. Rendered on the event loop, one costly template froze every stream
and /health the router served for as long as it ran (nested ``range()`` loops: 10.5 s, or for
good); on a thread, one spending its time in a single C call (``list.count`` over large lists,
``|sum`` over big integers) still held the GIL for 6-23 s past a 0.5 s budget. So a chat
prompt's keys (template, tokenizer, hashing) are computed in one worker process
(render_worker.py NOTE(render-process)), one render at a time, each within RENDER_BUDGET
seconds plus RENDER_PER_MIB per MiB of body; a template renders a short chat in about a
millisecond, 64 KiB of messages in ~62 ms on a 2-core box, so the budget is far above a real
render and a loaded box does not trip it. The hop to the process adds about half a
millisecond per chat (docs/kv_events.md). Past the budget:

- that request is scored without that spec's keys: its replicas score 0 hits, so it is placed
  by load and the other replicas' hits, as a replica whose template is unknown (kv_routing.py);
- the spec is marked ``overran``: its chats are not rendered again until the replicas' info
  changes (a new spec), which is said once, naming the replicas and the fix;
- the process is killed (SIGKILL by pid: C code stops too) and the renders queued behind it
  are scored without their keys, once; the next chat starts a fresh process.

A render that fails (a bug, or MemoryError at the process's address-space limit, RENDER_MEMORY:
a template building GBs) is scored without its keys, for that request only; so is one the
template sandbox stops (kvpool/server/template_sandbox.py NOTE(template-cost)), said once per
spec with the fix. A body the parser refuses is not a failure: it asks the lookups as before.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import weakref
from collections.abc import Sequence
from typing import Any

from kvpool.router.kv_prompt import PromptKeys
from kvpool.router.render_worker import BEGAN, DONE, REFUSED, RENDER_MEMORY, RenderWorker

__all__ = ["RENDER_BUDGET", "RENDER_MEMORY", "RENDER_PER_MIB", "SKIPPED", "RenderGuard"]

log = logging.getLogger("kvpool.router")
RENDER_BUDGET = 0.2  # seconds one chat render may take here (NOTE(render-budget)) ...
RENDER_PER_MIB = 2.0  # ... plus these per MiB of request body (a long chat renders longer)
SKIPPED = "skipped"  # what ``RenderGuard.keys`` answers for a chat scored without its keys


class _Render:
    """One chat render: what the loop needs to send it, answer it and time it."""

    def __init__(self, rid: int, keys: PromptKeys, body: dict,
                 headers: Sequence[tuple[str, str]], urls: Sequence[str], budget: float,
                 answer: asyncio.Future) -> None:
        self.rid, self.keys, self.body, self.headers = rid, keys, body, headers
        self.urls, self.budget, self.answer = tuple(urls), budget, answer
        self.timer: asyncio.TimerHandle | None = None


class RenderGuard:
    """The chat renders of EventRouting: one worker process, a budget each."""

    def __init__(self, budget: float = RENDER_BUDGET, memory: int = RENDER_MEMORY) -> None:
        """``budget``: seconds a render of a small body may take (RENDER_BUDGET); ``memory``:
        bytes of address space a render may add in the process (RENDER_MEMORY)."""
        self.budget, self.memory = budget, memory
        self.started = 0  # renders begun in the worker (monotonic)
        self.overruns = 0  # renders stopped past their budget (monotonic)
        self.skipped = 0  # chats scored without a spec's keys (monotonic)
        self._worker: RenderWorker | None = None
        self._starting: asyncio.Task | None = None
        self._killed: list[RenderWorker] = []  # until their process is gone
        self._queue: collections.deque[_Render] = collections.deque()
        self._current: _Render | None = None  # the one in the worker
        self._ids = itertools.count()
        self._spec_ids: weakref.WeakKeyDictionary[PromptKeys, int] = weakref.WeakKeyDictionary()
        self._failure_said = False
        self._closed = False

    @property
    def pid(self) -> int | None:
        """The worker process's pid, None while none runs."""
        return None if self._worker is None else self._worker.proc.pid

    @property
    def stuck(self) -> int:
        """Killed worker processes not gone yet."""
        self._killed = [w for w in self._killed if w.alive()]
        return len(self._killed)

    def warm(self) -> None:
        """Start the worker ahead of the first chat (the forkserver's first start imports the
        tokenizer's modules: ~1.5 s a chat would otherwise wait); once running, nothing."""
        if self._worker is None and self._starting is None and not self._closed:
            self._starting = asyncio.create_task(self._start(), name="router-render")

    async def keys(self, keys: PromptKeys, body: dict, headers: Sequence[tuple[str, str]],
                   size: int, urls: Sequence[str]) -> Any:
        """``keys.keys(body, headers)`` computed in the worker, or SKIPPED: past the budget,
        failed, or not tried (``keys``' spec overran before). ``size``: the body's bytes;
        ``urls``: the replicas of ``keys``' spec (named in the warnings)."""
        if keys.overran:
            self.skipped += 1
            return SKIPPED
        r = _Render(next(self._ids), keys, body, headers, urls,
                    self.budget + RENDER_PER_MIB * size / (1 << 20),
                    asyncio.get_running_loop().create_future())
        self._queue.append(r)
        self._next()
        got = await r.answer
        if got is SKIPPED:
            self.skipped += 1
        return got

    def _next(self) -> None:
        """Send the next queued render, once the worker is free (started lazily, off the loop:
        the forkserver's first start imports torch)."""
        while self._current is None and self._queue:
            if self._worker is None:
                self.warm()
                return
            r = self._queue.popleft()
            if r.answer.done():  # its request went away while queued
                continue
            sid = self._spec_ids.setdefault(r.keys, next(self._ids))
            try:
                began = self._worker.send(r.rid, sid, r.keys, r.body, r.headers)
            except (OSError, ValueError) as exc:  # the process died: a fresh one next
                self._stop_worker()
                self._failed(r, exc)
                continue
            self._current = r
            if began:
                self._began(r)

    async def _start(self) -> None:
        try:
            worker = await asyncio.to_thread(RenderWorker, self.memory)
        except Exception as exc:  # noqa: BLE001 - no process: every chat placed without keys
            for r in self._drain():
                self._failed(r, exc)
        else:
            if self._closed:  # the router closed while it started
                worker.kill()
                return
            self._worker = worker
            worker.listen(self._answered)
        finally:
            self._starting = None
        self._next()

    def _began(self, r: _Render) -> None:
        self.started += 1
        r.timer = asyncio.get_running_loop().call_later(r.budget, self._overdue, r)

    def _answered(self, got: Any) -> None:
        """The worker's answer ``(rid, kind, value)``, or None: it is gone (died, not
        killed by us: the render in it fails)."""
        r = self._current
        if got is None:
            self._stop_worker()
            if r is not None:
                self._failed(r, RuntimeError("the render process ended"))
            self._next()
            return
        rid, kind, value = got
        if r is None or rid != r.rid:
            return
        if kind == BEGAN:
            self._began(r)
            return
        self._current = None
        if kind == DONE:
            self._finish(r, value)
        elif kind == REFUSED:
            self._refused(r, value)
        else:
            self._failed(r, value)
        self._next()

    def _finish(self, r: _Render, got: Any) -> None:
        if r.timer is not None:
            r.timer.cancel()
        if not r.answer.done():
            r.answer.set_result(got)

    def _failed(self, r: _Render, exc: Any) -> None:
        if not self._failure_said:
            self._failure_said = True  # a bug or a memory bomb: said once, not per chat
            log.warning("router: computing a chat prompt's KV keys failed (%s): such chats are "
                        "placed without them", exc)
        self._finish(r, SKIPPED)

    def _refused(self, r: _Render, why: str) -> None:
        """NOTE(render-budget): the sandbox stopped the template (template_sandbox.py
        NOTE(template-cost)): that chat is placed without its keys, said once per spec; the
        template still renders the chats it does not stop."""
        if not r.keys.refusal_said:
            r.keys.refusal_said = True
            log.warning("router: the chat template of replica(s) %s was stopped rendering a "
                        "prompt here (%s), so such chats are placed without it (by load and "
                        "the other replicas' hits); fix the template they serve "
                        "(--chat-template or the model directory's)", ", ".join(r.urls), why)
        self._finish(r, SKIPPED)

    def _overdue(self, r: _Render) -> None:
        """NOTE(render-budget): ``r`` ran past its budget: kill the process, never run its
        template again for these replicas, answer it and those queued without their keys."""
        if r is not self._current:
            return  # it ended meanwhile
        self._stop_worker()
        self.overruns += 1
        if not r.keys.overran:
            r.keys.overran = True
            log.warning("router: the chat template of replica(s) %s took over %.2f s to render "
                        "one prompt here, so their chat prompts are now placed without it (by "
                        "load and the other replicas' hits) until their kv_events info "
                        "changes; fix the template they serve (--chat-template or the model "
                        "directory's): it loops too long for a chat", ", ".join(r.urls),
                        r.budget)
        for q in [r, *self._drain()]:
            self._finish(q, SKIPPED)

    def _drain(self) -> list[_Render]:
        out = list(self._queue)
        self._queue.clear()
        return out

    def _stop_worker(self) -> None:
        if self._worker is not None:
            self._worker.kill()
            self._killed.append(self._worker)
        self._worker, self._current = None, None

    def close(self) -> None:
        """The router closes: the process stopped by pid, what waits answered without keys."""
        current, self._closed = self._current, True
        self._stop_worker()
        for r in [*([current] if current else []), *self._drain()]:
            self._finish(r, SKIPPED)
