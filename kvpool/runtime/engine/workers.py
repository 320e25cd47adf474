"""Start the event loop's default worker threads when the engine starts, not mid-request.

The remote read path hands its CPU work to the loop's default executor (``asyncio.to_thread``:
the tier's value checks, the landing copy; the async front's batches under contention). A
``ThreadPoolExecutor`` starts its threads lazily, one per submit that finds none idle, and
``Thread.start`` blocks its caller until the new thread has run: on the event loop, and on a
busy 2-core box, that wait was 2-9 ms per new thread inside the first fetch's MGET replies
(measured with a per-callback timer around ``asyncio.Handle._run``). A serving replica starts
them once; idle threads are reused, so no request pays it again.
"""

from __future__ import annotations

import asyncio
import os
import threading


def default_workers() -> int:
    """The size of a default ``ThreadPoolExecutor`` (documented: min(32, CPUs + 4)), which is
    what asyncio's default executor is unless the application set another."""
    return min(32, (os.cpu_count() or 1) + 4)


async def prestart_default_executor(n: int | None = None, timeout_s: float = 1.0) -> int:
    """Make the loop's default executor start ``n`` threads now; the number that met.

    Each of ``n`` jobs waits at one barrier until all ``n`` run at once, so the executor cannot
    serve two of them with one thread: it starts ``n`` (fewer if it is smaller; the barrier then
    breaks after ``timeout_s`` and the jobs return). Never blocks the loop beyond the starts."""
    n = default_workers() if n is None else n
    if n < 1:
        return 0
    loop = asyncio.get_running_loop()
    barrier = threading.Barrier(n)

    def meet() -> bool:
        try:
            barrier.wait(timeout_s)
        except threading.BrokenBarrierError:
            return False
        return True

    met = await asyncio.gather(*(loop.run_in_executor(None, meet) for _ in range(n)))
    return sum(met)
