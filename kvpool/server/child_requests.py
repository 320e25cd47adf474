"""ChildRequests: one request's ``n`` sequences run as several engine requests (children),
read as one stream (the UpdateStream contract: engine_client.py).

NOTE(apart) in kvpool/sched/request_checker.py: a request whose sequences cannot run together
as forks (``n`` past ``--max-num-seqs`` or the tenant cap, or a group the whole pool cannot
hold at the length asked, a default max_tokens included) runs as vLLM 0.33 runs every n > 1
request (its ParentRequest), in child requests, each of them a group of forks: the most that
fit together (``RequestChecker.fork_group``, one at least; the last group the rest). Child
``g`` is the engine request ``<g>_<id>`` whose forks are sequences ``start .. start + size``,
seeded (when the request is) from seed + start, so fork ``j`` draws from seed + start + j, the
seed the request's fork would (row_sampler.py): a seeded or greedy request gives the same
texts on every path. Each keeps the max_tokens one sequence gets; the engine admits them in
turns. NOTE(fork-groups): vLLM's children share the prompt even when admitted in one step (its
cache holds a block once allocated); kvpool's holds it once computed, so children of one
sequence each admitted together each computed the whole prompt (n=5 past --max-num-seqs 4:
140 blocks where the forks held 47, second probe). Forks share it in any step, and a later
group, admitted when the batch has room again, finds it cached. The request gate opens them
(request_gate.py ``Ticket.open``)::

    __init__      every child queued at once (engine.generate): a QueueFullError or
                  any other refusal aborts the ones already queued and is raised, as the
                  forks' one request would raise it
    async for     each child's updates as they arrive, its forks renumbered to their index;
                  ``finished`` on the update that ends the last child
    a failure     a child that ends in "abort" or "error" (a shutdown, an engine error), or
                  whose stream fails: every other child is aborted, and their last updates
                  come as one finished update, as the forks' would (the error raised as is)
    aclose()      every unfinished child closed (aborted): a client that left, a failure
    abort()       every unfinished child aborted; the stream then ends as above (drain)

NOTE(child-count): each child is an engine request, as vLLM counts its children: the request
counters, gauges and histograms (/metrics), --max-queue and /health count each group once.
The answer counts the prompt's tokens once and sums the children's completion tokens, as for
forks.

NOTE(child-metrics): a child's final update, passed on renumbered, carries its own timings
(queue, ttft, preemptions, prefix hits); the answer's builder keeps each choice's own from
the update that finishes it (responses.py ``own``: a fork's e2e, a child's all), so the
per-request histograms (decode, inference, prefill KV computed) observe each child as vLLM
observes each child request (stats.py update_from_finished_request); a fork that ends before
its group takes the request's last. They took the last child's for every choice: decode
times 0.96 s summed where 3.6 s were spent.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import TYPE_CHECKING

from kvpool.runtime.engine.output_processor import CompletionOutput, RequestOutput, \
    aclose_updates
from kvpool.server.merged_updates import MergedUpdates

if TYPE_CHECKING:
    from kvpool.runtime.model import SamplingParams
    from kvpool.server.engine_client import EngineClient, UpdateStream

__all__ = ["ChildRequests", "child_params"]

log = logging.getLogger("kvpool.server")

_FAILED = ("abort", "error")  # finish reasons that end the whole request
_closing: set[asyncio.Task] = set()  # NOTE(drop-opened): closings under way


def child_params(params: SamplingParams, start: int, size: int) -> SamplingParams:
    """The parameters of the child whose ``size`` forks are sequences ``start ..``: seeded
    so that its fork j draws as fork ``start + j`` would (seed + start, an int64 seed wrapped
    as make_generator wraps it: -2 + 1 stays a seed, never vLLM's -1)."""
    seed = None if params.seed is None else (params.seed + start) % (1 << 64)
    return dataclasses.replace(params, n=size, seed=seed)


class ChildRequests:
    """The children of one request (see the module docstring); owned by one stream reader."""

    def __init__(self, engine: EngineClient, request_id: str, prompt_ids: list[int],
                 params: SamplingParams, *, group: int, cache_salt: str | None, priority: int,
                 tenant: str | None, checked: bool) -> None:
        self.request_id: str | None = request_id
        self.engine = engine
        self.starts = list(range(0, params.n, group))  # each child's first sequence
        self.ids = [f"{g}_{request_id}" for g in range(len(self.starts))]  # vLLM's child ids
        self.children: list[UpdateStream] = []
        self.done = [False] * len(self.ids)  # the child's last update came (or it was closed)
        self.failed = False  # a child failed: the others are to be aborted
        self.aborted = False  # ... and were
        self.prompt_tokens = 0
        self.held: list[CompletionOutput] = []  # failing: the children's last outputs
        self.error: str | None = None
        self.cached: int | None = None  # the first update's prefix hits (NOTE(cached-once))
        try:
            for rid, start in zip(self.ids, self.starts):
                size = min(group, params.n - start)
                self.children.append(engine.generate(
                    rid, prompt_ids, child_params(params, start, size), cache_salt=cache_salt,
                    priority=priority, tenant=tenant, checked=checked))
        except BaseException:
            # NOTE(drop-opened): __init__ cannot await (the gate opens streams in sync code,
            # so a QueueFullError is its 503 there): the children queued before the refusal
            # are closed (aborted) on the loop, at once, and held until they are
            self.done = [True] * len(self.ids)
            task = asyncio.get_running_loop().create_task(self._close(self.children))
            _closing.add(task)
            task.add_done_callback(_closing.discard)
            raise
        self._merged = MergedUpdates(self.children)

    @staticmethod
    async def _close(children: list[UpdateStream]) -> None:
        for child in children:
            await aclose_updates(child)

    def __aiter__(self) -> ChildRequests:
        return self

    async def __anext__(self) -> RequestOutput:
        while not all(self.done):
            i, item = await self._merged.get()
            if isinstance(item, BaseException):
                self.done[i] = True
                await self.abort()
                raise item
            out = None if item is None else self._renumbered(i, item)
            self.done[i] = self.done[i] or item is None
            if self.failed and not self.aborted:
                self.aborted = True
                await self.abort()
            if out is not None:
                return out
            if self.failed and all(self.done):
                return self._failure()
        raise StopAsyncIteration

    def _renumbered(self, i: int, out: RequestOutput) -> RequestOutput | None:
        """Child ``i``'s update as the request's (None while a failure collects them): its
        forks renumbered to the request's sequences."""
        start = self.starts[i]
        outputs = tuple(dataclasses.replace(c, index=start + c.index) for c in out.outputs)
        self.prompt_tokens = out.num_prompt_tokens or self.prompt_tokens
        if out.finished:
            self.done[i] = True
            self.failed = self.failed or bool(out.error) or any(
                c.finish_reason in _FAILED for c in outputs)
        if self.failed:
            self.held += outputs
            self.error = self.error or out.error
            return None
        if self.cached is None:
            # NOTE(cached-once): the prompt is counted once; later children hit the cache
            # the first one filled, which is no hit the forks would have had
            self.cached = out.num_cached_tokens
        return dataclasses.replace(out, request_id=self.request_id, outputs=outputs,
                                   finished=all(self.done), num_cached_tokens=self.cached)

    def _failure(self) -> RequestOutput:
        """The children's last updates as one finished update (the forks' failure)."""
        return RequestOutput(self.request_id or "", tuple(self.held), finished=True,
                             num_prompt_tokens=self.prompt_tokens,
                             num_cached_tokens=self.cached or 0,
                             error=self.error or None)

    async def abort(self) -> None:
        """Abort every unfinished child; their last updates end the stream (the drain)."""
        for rid, done in zip(self.ids, self.done):
            if not done:
                await self.engine.abort(rid)

    async def aclose(self) -> None:
        """Stop reading; close (abort) every child not yet ended."""
        await self._merged.stop()
        for i, child in enumerate(self.children):
            if not self.done[i]:
                self.done[i] = True
                try:
                    await aclose_updates(child)
                except Exception:  # noqa: BLE001 - the other children are still closed
                    log.exception("closing child request %s failed", self.ids[i])
