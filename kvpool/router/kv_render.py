"""RenderGuard: a chat prompt's keys computed off the event loop, within a time budget.

NOTE(render-budget): to hash a chat prompt the router renders the chat template its replicas
name in their kv_events info (or their model directory's: kv_prompt.py NOTE(agreement)), a
program a replica supplies. Rendered on the event loop, one costly template froze every stream
and /health the router served for as long as it ran (nested ``range()`` loops: 10.5 s, or for
good). So a chat prompt's keys (template, tokenizer, hashing) are computed on one worker thread,
each within RENDER_BUDGET seconds plus RENDER_PER_MIB per MiB of body; a template renders a
short chat in about a millisecond, 64 KiB of messages in ~62 ms on a 2-core box, so the budget
is far above a real render and a loaded box does not trip it. Past the budget:

- that request is scored without that spec's keys: its replicas score 0 hits, so it is placed
  by load and the other replicas' hits, as a replica whose template is unknown (kv_routing.py);
- the spec is marked ``overran``: its chats are not rendered again until the replicas' info
  changes (a new spec), which is said once, naming the replicas and the fix;
- the render is stopped: RenderOverran is raised in its thread (CPython's
  ``PyThreadState_SetAsyncExc``, delivered at the next bytecode: a Jinja render is Python) and
  the worker is replaced, so the renders queued behind it do not wait (they are scored without
  their keys, once);
- until that thread has ended (one stuck in C code does not see the exception) no chat of its
  replicas is rendered, whatever spec they publish next: at most one render in flight per
  replica's template, never a pile of stuck threads.

A render that raises (a bug: a body the parser refuses is not one, it asks the lookups as
before) is scored without its keys too, for that request only. So is one the template sandbox
stops (kvpool/server/template_sandbox.py NOTE(template-cost)): an operation that would build a
huge integer or text (``x ** 10000000``, ``'x' * 10**9``) runs in one C call that holds the
GIL, so neither this budget's timer nor RenderOverran could stop it; the sandbox refuses it
before it runs, said once per spec with the fix.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from kvpool.router.kv_prompt import PromptKeys
from kvpool.server.template_sandbox import TemplateRefused

__all__ = ["RENDER_BUDGET", "RENDER_PER_MIB", "SKIPPED", "RenderGuard", "RenderOverran"]

log = logging.getLogger("kvpool.router")
RENDER_BUDGET = 0.2  # seconds one chat render may take here (NOTE(render-budget)) ...
RENDER_PER_MIB = 2.0  # ... plus these per MiB of request body (a long chat renders longer)
SKIPPED = "skipped"  # what ``RenderGuard.keys`` answers for a chat scored without its keys


class RenderOverran(BaseException):
    """Raised in a render's thread to stop it (NOTE(render-budget)); a BaseException, so the
    parser's ``except Exception`` does not swallow it."""


class _Render:
    """One chat render: what the loop needs to answer it, time it and stop it."""

    def __init__(self, keys: PromptKeys, urls: Sequence[str], budget: float,
                 answer: asyncio.Future) -> None:
        self.keys, self.urls, self.budget, self.answer = keys, tuple(urls), budget, answer
        self.work: Future | None = None
        self.thread: int | None = None  # the worker's ident, once it started
        self.timer: asyncio.TimerHandle | None = None


class RenderGuard:
    """The chat renders of EventRouting: one worker thread, a budget each."""

    def __init__(self, budget: float = RENDER_BUDGET) -> None:
        """``budget``: seconds a render of a small body may take (RENDER_BUDGET)."""
        self.budget = budget
        self.started = 0  # renders begun on the worker (monotonic)
        self.overruns = 0  # renders stopped past their budget (monotonic)
        self.skipped = 0  # chats scored without a spec's keys (monotonic)
        self._pool = _worker()
        self._stuck: dict[str, Future] = {}  # replica URL -> its overran render, until it ends
        self._failure_said = False

    @property
    def stuck(self) -> int:
        """Overran renders whose thread has not ended yet."""
        return len({id(f) for f in self._stuck.values() if not f.done()})

    def _blocked(self, keys: PromptKeys, urls: Sequence[str]) -> bool:
        return keys.overran or any((f := self._stuck.get(u)) is not None and not f.done()
                                   for u in urls)

    async def keys(self, keys: PromptKeys, body: dict, headers: Sequence[tuple[str, str]],
                   size: int, urls: Sequence[str]) -> Any:
        """``keys.keys(body, headers)`` computed on the worker, or SKIPPED: past the budget,
        failed, or not tried (``urls``, the replicas of ``keys``' spec, have a render stuck;
        the spec overran before). ``size``: the body's bytes."""
        if self._blocked(keys, urls):
            self.skipped += 1
            return SKIPPED
        loop = asyncio.get_running_loop()
        r = _Render(keys, urls, self.budget + RENDER_PER_MIB * size / (1 << 20),
                    loop.create_future())
        r.work = self._pool.submit(self._run, loop, r, body, headers)
        r.work.add_done_callback(lambda _: _soon(loop, self._ended, r))
        got = await r.answer
        if got is SKIPPED:
            self.skipped += 1
        return got

    def _run(self, loop: asyncio.AbstractEventLoop, r: _Render, body: dict,
             headers: Sequence[tuple[str, str]]) -> Any:
        """On the worker: the render, its start told to the loop (its budget starts then, so
        a render queued behind another is not charged for the wait)."""
        r.thread = threading.get_ident()
        _soon(loop, self._began, r)
        return r.keys.keys(body, headers)

    def _began(self, r: _Render) -> None:
        self.started += 1
        if r.work is not None and not r.work.done():
            r.timer = asyncio.get_running_loop().call_later(r.budget, self._overdue, r)

    def _ended(self, r: _Render) -> None:
        """The render's thread let go of it: answer the request (unless the budget did) and
        free its replicas."""
        if r.timer is not None:
            r.timer.cancel()
        for url in r.urls:
            if self._stuck.get(url) is r.work:
                del self._stuck[url]
        if r.answer.done() or r.work is None:
            return
        exc = None if r.work.cancelled() else r.work.exception()
        if isinstance(exc, TemplateRefused):
            self._refused(r, exc)
        elif exc is not None and not isinstance(exc, RenderOverran) and not self._failure_said:
            self._failure_said = True  # a bug: said once, not per chat
            log.warning("router: computing a chat prompt's KV keys failed (%r): such chats are "
                        "placed without them", exc)
        ok = not r.work.cancelled() and exc is None
        r.answer.set_result(r.work.result() if ok else SKIPPED)

    def _refused(self, r: _Render, exc: TemplateRefused) -> None:
        """NOTE(render-budget): the sandbox stopped the template (template_sandbox.py
        NOTE(template-cost)): that chat is placed without its keys, said once per spec; the
        template still renders the chats it does not stop."""
        if not r.keys.refusal_said:
            r.keys.refusal_said = True
            log.warning("router: the chat template of replica(s) %s was stopped rendering a "
                        "prompt here (%s), so such chats are placed without it (by load and "
                        "the other replicas' hits); fix the template they serve "
                        "(--chat-template or the model directory's)", ", ".join(r.urls), exc)

    def _overdue(self, r: _Render) -> None:
        """NOTE(render-budget): ``r`` ran past its budget: stop it, never run its template
        again for these replicas, answer its request without its keys."""
        if r.work is None or r.work.done():
            return  # it ended meanwhile: ``_ended`` answers
        old, self._pool = self._pool, _worker()
        old.shutdown(wait=False, cancel_futures=True)  # those queued: without their keys
        _stop(r.thread)  # after: what it lands in, if not ``r``'s render, is abandoned too
        self.overruns += 1
        if not r.keys.overran:
            r.keys.overran = True
            log.warning("router: the chat template of replica(s) %s took over %.2f s to render "
                        "one prompt here, so their chat prompts are now placed without it (by "
                        "load and the other replicas' hits) until their kv_events info "
                        "changes; fix the template they serve (--chat-template or the model "
                        "directory's): it loops too long for a chat", ", ".join(r.urls),
                        r.budget)
        for url in r.urls:
            self._stuck[url] = r.work
        if not r.answer.done():
            r.answer.set_result(SKIPPED)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _worker() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(1, thread_name_prefix="router-render")


def _soon(loop: asyncio.AbstractEventLoop, fn: Callable[[_Render], None], r: _Render) -> None:
    """``fn(r)`` on ``loop``, from any thread; nothing once the loop closed (the router's
    shutdown)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(fn, r)


def _stop(thread: int | None) -> None:
    """NOTE(render-budget): RenderOverran in ``thread`` at its next bytecode."""
    if thread is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread),
                                                   ctypes.py_object(RenderOverran))
