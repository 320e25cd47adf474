"""GrammarPool: the engine's response_format compiles, seen from the event loop.

NOTE(compile-share): an agent fleet sends the same tool schema from many clients at once, and a
compile holds one of the pool's few threads for up to ~1 s (grammar_compile.py). So, on the
loop and before the pool:

- a grammar kept by the compiler's cache (NOTE(compile-cache)) is answered at once: it does
  not wait in the pool's queue behind other requests' heavy compiles;
- a grammar already being compiled (or queued) is not compiled again: the later requests await
  that compile's outcome, holding no thread, and each gets its own answer (a refusal names each
  request's own field);
- a request that goes away (its client gone, its task cancelled) leaves the compile to the
  others: the compile is cancelled only when no request waits for it, so a queued one then
  never starts, and one already running still keeps its outcome in the cache. A cancelled or
  failed compile keeps nothing, and the next request for it compiles it afresh.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from kvpool.runtime.model.grammar import GrammarSpec
from kvpool.runtime.model.grammar_compile import GrammarCompiler, Outcome, cache_key

__all__ = ["GrammarPool"]


class GrammarPool:
    """``threads`` compile threads and the compiles in flight on them; call it on one loop."""

    def __init__(self, compiler: GrammarCompiler, threads: int) -> None:
        self.compiler = compiler
        # never the event loop or the step thread: a compile takes up to ~1 s of CPU
        self.threads = ThreadPoolExecutor(threads, thread_name_prefix="kvpool-grammar")
        self._flights: dict[bytes, _Flight] = {}  # cache_key -> its compile in the pool

    async def compile(self, spec: GrammarSpec) -> GrammarSpec:
        """``spec`` compiled (GrammarCompiler.compile's answer); NOTE(compile-share)."""
        key = cache_key(spec)
        outcome = self.compiler.cached(key)
        if outcome is None:
            outcome = await self._shared(spec, key)
        return self.compiler.answer(spec, outcome)

    async def _shared(self, spec: GrammarSpec, key: bytes) -> Outcome:
        """The outcome of ``key``'s one compile in the pool, started here unless in flight."""
        flight = self._flights.get(key)
        if flight is None:
            loop = asyncio.get_running_loop()
            flight = _Flight(loop.run_in_executor(self.threads, self.compiler.build, spec, key))
            self._flights[key] = flight
        flight.waiters += 1
        try:  # shielded: one waiter's cancellation is not the compile's
            return await asyncio.shield(flight.future)
        finally:
            flight.waiters -= 1
            if flight.waiters == 0:
                if self._flights.get(key) is flight:
                    del self._flights[key]
                flight.future.cancel()  # done: a no-op; else no one waits any more

    def shutdown(self) -> None:
        """Cancel the queued compiles; a running one ends on its own (threads cannot be stopped)."""
        self.threads.shutdown(wait=False, cancel_futures=True)


class _Flight:
    """One compile in the pool and how many requests await it."""

    def __init__(self, future: asyncio.Future[Outcome]) -> None:
        self.future = future
        self.waiters = 0
