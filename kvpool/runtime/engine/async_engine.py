"""AsyncEngine: the asyncio face of the EngineCore.

Threads and hand-offs::

    event loop (uvloop)                              step thread "kvpool-step"
    generate() -> RequestStream ─┐                   ┌─> inbox: adds / aborts (deque)
    abort()                      ├─ per-iteration ───┤   core.step(): schedule, copies,
                                 │  flush (one       │   forward, sample, update
    RequestStream.__anext__ <────┘  wake-up)         └── call_soon_threadsafe(deliver, outs)

The step loop never runs on the event loop, so the loop stays responsive while a forward runs.
Requests queued by many coroutines during one loop iteration reach the step thread in one
batch (one deque extend, one wake-up). A stream that is closed early (client gone, task
cancelled) aborts its request, which frees its blocks in the next step-thread pass.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator

from kvpool.errors import EngineError, QueueFullError, RequestError, context_length_error
from kvpool.metrics import KVPoolMetrics, MetricsSnapshot
from kvpool.runtime.engine.config import EngineConfig
from kvpool.runtime.engine.core import EngineCore
from kvpool.runtime.engine.grammar_pool import GrammarPool
from kvpool.runtime.engine.output_processor import CompletionOutput, RequestOutput
from kvpool.runtime.engine.step_failure import abandon
from kvpool.runtime.engine.workers import prestart_default_executor
from kvpool.runtime.faults import FaultPlan
from kvpool.runtime.model import SamplingParams
from kvpool.runtime.ops import AbortRequest, AddRequest, EngineOp, ResetPrefixCache
from kvpool.runtime.remote.host_front import HostBlockFront
from kvpool.runtime.remote.importer import RemoteImports
from kvpool.runtime.remote.link import RemoteLink
from kvpool.runtime.remote.reader import RemoteReader
from kvpool.runtime.remote.writer import RemoteWriter
from kvpool.sched import exceeds_context

log = logging.getLogger(__name__)
_ids = itertools.count()
GRAMMAR_THREADS = 2  # response_format compiles running at once; the rest wait their turn


class RequestStream:
    """Async iterator over one request's updates; closing it early aborts the request."""

    def __init__(self, engine: AsyncEngine, request_id: str, prompt_ids: list[int]) -> None:
        self.engine = engine
        self.request_id = request_id
        self.prompt_ids = prompt_ids
        self.queue: asyncio.Queue[RequestOutput] = asyncio.Queue()
        self.finished = False

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> RequestOutput:
        if self.finished:
            raise StopAsyncIteration
        try:
            out = await self.queue.get()
        except BaseException:
            await self.aclose()
            raise
        if out.finished:
            self.finished = True
            self.engine.forget_stream(self.request_id)
        return out

    async def aclose(self) -> None:
        if not self.finished:
            self.finished = True
            self.engine.forget_stream(self.request_id)
            self.engine.abort_nowait(self.request_id)

    async def __aenter__(self) -> RequestStream:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()


class AsyncEngine:
    """Serve requests over the paged KV pool; see the module docstring for the threading."""

    def __init__(self, config: EngineConfig | None = None, *,
                 faults: FaultPlan | None = None, remote: RemoteLink | None = None,
                 pool_observer=None) -> None:
        self.config = config or EngineConfig()
        self.core = EngineCore(self.config, faults=faults, pool_observer=pool_observer)
        self.metrics = KVPoolMetrics(self.snapshot, model_name=self.core.model_name, cache_info=(
            ("block_size", str(self.config.block_size)),
            ("enable_prefix_caching", str(bool(self.config.enable_prefix_caching)))))
        self.core.metrics = self.core.outputs.metrics = self.metrics
        self.model_name = self.core.model_name
        self.tokenizer = self.core.tokenizer
        self.max_model_len = self.core.max_model_len
        self.num_device_blocks = self.core.num_device_blocks
        self._streams: dict[str, RequestStream] = {}
        self._pending: list[EngineOp] = []  # ops queued during this loop iteration
        self._inbox: deque[EngineOp] = deque()  # ops for the step thread
        self._wake = threading.Event()
        self._flush_scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._draining = False
        self._error: BaseException | None = None
        self.invariant_check_interval = 0  # steps between full invariant checks (0 = off)
        # the shared remote prefix tier (kvpool serve --remote-url): built in start()
        self.remote_link = remote if remote is not None and self.core.manager.caching else None
        self.front: HostBlockFront | None = None
        self.reader: RemoteReader | None = None
        self.writer: RemoteWriter | None = None
        self.imports = RemoteImports(self.core.manager, self.core.copies, self._wake.set)
        self._prefetches: set[asyncio.Task] = set()
        # grammar compiles (grammar_compile.py) on threads of their own; NOTE(compile-share)
        self._grammar_pool = GrammarPool(self.core.grammars.compiler, GRAMMAR_THREADS)

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if self._thread is not None:
            return
        self._loop = asyncio.get_running_loop()
        link = self.remote_link
        if link is not None:
            core = self.core
            self.front = HostBlockFront(core.manager)
            self.reader = RemoteReader(link, self.front, core.storage.host_kv,
                                       core.storage.bytes_per_block, lambda: core.cost.prefill_rate,
                                       lambda: self.imports.latency_s)
            if link.write_policy != "off":
                self.writer = RemoteWriter(link, self.front, core.copies, core.storage.host_kv,
                                           core.storage.bytes_per_block, self._loop)
                core.block_sink = self.writer
            # NOTE(warm-start): once per process, what the first fetch would otherwise do on
            # the loop: open the tier's pooled connections, start the worker threads
            await self.reader.warm_up()  # a failure is a miss like any other: serve anyway
            await prestart_default_executor()
        self._thread = threading.Thread(target=self._run, name="kvpool-step", daemon=True)
        self._thread.start()

    async def shutdown(self, timeout: float = 10.0) -> None:
        """Stop admitting; let in-flight requests finish, abort what is left after
        ``timeout``; stop the step thread. Every block is back in the pool (NOTE(abandon))."""
        self._draining = True
        deadline = time.monotonic() + timeout
        while self._streams and time.monotonic() < deadline and self._stepping():
            await asyncio.sleep(0.02)
        for rid in list(self._streams):
            self.abort_nowait(rid)
        while self._stepping() and self.core.has_work() and time.monotonic() < deadline + 5:
            await asyncio.sleep(0.02)
        for t in list(self._prefetches):
            t.cancel()
        self._stop.set()
        self._wake.set()
        loop = asyncio.get_running_loop()
        if self._thread is not None:
            await loop.run_in_executor(None, self._thread.join, 10)
            self._thread = None
        await loop.run_in_executor(None, self.imports.cancel_all)
        if self.writer is not None:
            self.core.block_sink = None
            await self.writer.aclose()
        await loop.run_in_executor(None, self.core.close)  # joins the copy worker
        self._grammar_pool.shutdown()
        if self.remote_link is not None:  # the engine warmed its tier at start; it closes it
            await self.remote_link.tier.aclose()

    def _stepping(self) -> bool:
        """The step thread runs (not before start(), after shutdown or once it died)."""
        return self._thread is not None and self._thread.is_alive()

    def is_healthy(self) -> bool:
        return self._error is None and (self._thread is None or self._thread.is_alive())

    def num_free_blocks(self) -> int:
        return self.core.manager.stats().device.num_allocatable

    def forget_stream(self, request_id: str) -> None:
        """A stream is finished or closed: it no longer counts against --max-queue."""
        self._streams.pop(request_id, None)

    def requests_in_flight(self) -> int:
        """Requests counted against --max-queue: admitted, not yet finished by the engine."""
        return len(self._streams)

    def snapshot(self) -> MetricsSnapshot:
        return dataclasses.replace(self.core.snapshot(),
                                   requests_in_flight=self.requests_in_flight())

    # ------------------------------------------------------------------ requests
    def encode_prompt(self, prompt: str | list[int]) -> list[int]:
        """Token ids for a prompt; one that cannot fit max_model_len is refused before the
        work (tokenizing, the per-id check) whose cost grows with its length."""
        if isinstance(prompt, str):
            per_token = self.tokenizer.max_chars_per_token()
            if per_token is not None and len(prompt) > self.max_model_len * per_token:
                raise context_length_error(self.max_model_len, f"the prompt has {len(prompt)} "
                                           "characters", "prompt")
            return self.tokenizer.encode(prompt)
        if isinstance(prompt, list) and exceeds_context(len(prompt), 1, self.max_model_len):
            raise context_length_error(self.max_model_len, f"the prompt has {len(prompt)} "
                                       "tokens", "prompt")
        if isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool)
                                            for t in prompt):
            return list(prompt)
        raise RequestError("prompt must be a string or a list of token ids", "prompt")

    def check_pool(self, prompt_ids: list[int], params: SamplingParams) -> None:
        """The RequestError for a prompt too big for the pool, queueing nothing; for the edge,
        which judged the input rules, checks every prompt before it starts any, and runs as
        child requests n sequences that cannot run as forks (NOTE(apart), request_checker.py)."""
        self.core.checker.check_pool(len(prompt_ids), params, apart=True)

    async def compile_grammar(self, params: SamplingParams) -> SamplingParams:
        """``params`` with its response_format compiled and probed on a worker thread
        (grammar_compile.py; a cached or in-flight grammar not again: NOTE(compile-share));
        RequestError (HTTP 400 naming response_format) when it is invalid or over its budget.
        ``generate`` takes only compiled grammars."""
        spec = params.response_format
        if spec is None or spec.compiled is not None:
            return params
        spec = await self._grammar_pool.compile(spec)  # NOTE(compile-share)
        return dataclasses.replace(params, response_format=spec)

    def generate(self, request_id: str | None, prompt: str | list[int], params: SamplingParams,
                 *, cache_salt: str | None = None, priority: int = 0,
                 tenant: str | None = None, checked: bool = False) -> RequestStream:
        """Queue a request and return its stream. Raises RequestError (HTTP 400) for input that
        can never be served and QueueFullError (HTTP 503) when the engine is full.
        ``checked``: the caller passes token ids it has judged and asked ``check_pool`` about
        (the server's edge), so they are not judged again here."""
        if self._error is not None:
            raise EngineError(f"the engine failed: {self._error}")
        if self._draining:
            raise QueueFullError("the server is shutting down")
        if self.requests_in_flight() >= (self.config.max_queue or float("inf")):
            raise QueueFullError(f"{len(self._streams)} requests in flight (--max-queue "
                                 f"{self.config.max_queue}); retry later")
        ids = list(prompt) if checked else self.encode_prompt(prompt)
        if not checked:
            self.core.validate(ids, params)
        if params.response_format is not None and params.response_format.compiled is None:
            raise RequestError("response_format: not compiled; await "
                               "engine.compile_grammar(params) first", "response_format")
        rid = request_id or f"req-{next(_ids)}"
        if rid in self._streams:
            raise RequestError(f"request id {rid!r} is already in flight", "request_id")
        stream = RequestStream(self, rid, ids)
        self._streams[rid] = stream
        op = AddRequest(rid, ids, params, cache_salt, priority, time.monotonic(), tenant)
        if self.reader is not None and params.prompt_logprobs is None:
            # NOTE(prefetch): the request waits in its own task while its prefix is fetched;
            # the scheduler and every other request keep running meanwhile
            t = asyncio.get_running_loop().create_task(self._prefetch_then_add(op))
            self._prefetches.add(t)
            t.add_done_callback(self._prefetches.discard)
        else:
            self._queue_op(op)
        return stream

    async def _prefetch_then_add(self, op: AddRequest) -> None:
        fetched = None
        try:
            fetched = await self.reader.prefetch(op.prompt_ids, op.cache_salt)
        finally:
            if op.request_id not in self._streams or self._draining:
                if fetched is not None:  # aborted while fetching: nothing may stay lent
                    await self.front.free_host_blocks(list(fetched.host_blocks))
                if op.request_id in self._streams:
                    self._queue_op(op)
            else:
                self._queue_op(dataclasses.replace(op, remote=fetched) if fetched else op)

    async def abort(self, request_id: str) -> None:
        self.abort_nowait(request_id)

    def abort_nowait(self, request_id: str) -> None:
        """Idempotent; applied by the step thread on its next pass."""
        self._queue_op(AbortRequest(request_id))

    def _queue_op(self, op: EngineOp) -> None:
        self._pending.append(op)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop = self._loop or asyncio.get_running_loop()
            loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        ops, self._pending = self._pending, []
        self._inbox.extend(ops)  # one atomic hand-off for the whole iteration
        self._wake.set()

    async def reset_prefix_cache(self, reset_running_requests: bool = False) -> bool:
        """EngineCore.reset_prefix_cache, run by the step thread between two steps."""
        if self._thread is None:  # not started (or stopped): nothing else touches the core
            return self.core.reset_prefix_cache(reset_running_requests)
        if self._error is not None:
            raise EngineError(f"the engine failed: {self._error}")
        op = ResetPrefixCache(reset_running_requests)
        self._queue_op(op)
        fut = asyncio.wrap_future(op.result)
        while not fut.done():  # a step loop that stops or fails never runs it
            await asyncio.wait((fut,), timeout=0.5)
            if not fut.done() and (self._stop.is_set() or not self.is_healthy()):
                fut.cancel()
                raise EngineError("the engine stopped before the prefix cache was reset")
        return fut.result()

    # ------------------------------------------------------------------ step thread
    def _run(self) -> None:
        core = self.core
        try:
            while not self._stop.is_set():
                outs = self._take_inbox()
                if self.imports.pending:  # fetched prefixes now in the device cache
                    for op in self.imports.ready():
                        outs += self._add(op)
                if core.has_work():
                    outs += core.step()
                    n = self.invariant_check_interval
                    if n and core.steps % n == 0:
                        core.check_invariants()
                elif not outs:
                    self._wake.wait(0.5)
                    self._wake.clear()
                if outs:
                    self._loop.call_soon_threadsafe(self._deliver, outs)
        except BaseException as e:  # noqa: BLE001 - surfaced to every waiting stream
            log.exception("engine step loop failed")
            self._error = e
            abandon(core, f"the engine failed: {e!r}")  # NOTE(abandon): the blocks come back
            self._loop.call_soon_threadsafe(self._fail_all, repr(e))

    def _take_inbox(self) -> list[RequestOutput]:
        outs: list[RequestOutput] = []
        inbox = self._inbox
        while inbox:
            op = inbox.popleft()
            if isinstance(op, AddRequest):
                if op.remote is not None and self.imports.start(op) is None:
                    continue  # added by imports.ready() once its copy is done
                outs += self._add(op)
            elif isinstance(op, AbortRequest):
                o = self.core.abort(op.request_id)
                if o is not None:
                    outs.append(o)
            else:
                op.run(self.core)  # between steps: nothing is in flight
        return outs

    def _add(self, op: AddRequest) -> list[RequestOutput]:
        try:
            self.core.add_request(op.request_id, op.prompt_ids, op.params,
                                  cache_salt=op.cache_salt, priority=op.priority,
                                  arrival=op.arrival, tenant=op.tenant)
        except Exception as e:  # noqa: BLE001 - the request fails, not the engine
            return [_error_output(op.request_id, op.prompt_ids, op.params, str(e))]
        return []

    def _deliver(self, outs: list[RequestOutput]) -> None:
        for o in outs:
            s = self._streams.get(o.request_id)
            if s is not None:
                s.queue.put_nowait(o)
                if o.finished:
                    # NOTE(slot): the engine is done with the request: its --max-queue slot is
                    # free now, not when the client has read the last chunk (a client that
                    # never reads would hold the slot until its write times out, or forever).
                    # The stream keeps its queue, so the handler still drains what is left.
                    del self._streams[o.request_id]

    def _fail_all(self, reason: str) -> None:
        for rid, s in list(self._streams.items()):
            s.queue.put_nowait(_error_output(rid, s.prompt_ids, None, reason))


def _error_output(rid: str, ids: list[int], params, reason: str) -> RequestOutput:
    n = getattr(params, "n", 1) or 1
    return RequestOutput(rid, tuple(CompletionOutput(i, (), "", 0, "error") for i in range(n)),
                         True, len(ids), 0, reason)


async def collect(stream: AsyncIterator[RequestOutput]) -> RequestOutput:
    """Drain a stream into one RequestOutput holding each sequence's whole output."""
    merged: RequestOutput | None = None
    async for out in stream:
        merged = out if merged is None else merged.then(out)
    assert merged is not None
    return merged
