"""abandon: what the AsyncEngine does with the EngineCore once its step loop died.

NOTE(abandon): a step that raised (a forward's CUDA error, a dead copy worker) ends the step
loop, and every request then fails with the engine's error, as in vLLM V1 (EngineDeadError).
Before, the requests stayed in the scheduler with their device and host blocks, the failed
step stayed in flight, and ``AsyncEngine.shutdown`` waited its full timeout plus 5 s on
``has_work()`` for a step thread that was gone, then returned with the blocks still allocated
(its docstring promises every block back). Now the step thread, before it exits, aborts every
request and gives the step in flight up (``Scheduler.on_step_failed``: it also aborts that
step's defrag plan), so the pools are whole again at once.
"""

from __future__ import annotations

import logging

from kvpool.runtime.engine.core import EngineCore

__all__ = ["abandon"]

log = logging.getLogger(__name__)


def abandon(core: EngineCore, reason: str) -> None:
    """NOTE(abandon): free every block of a core whose step loop died (on that thread, which
    owns the core). Never raises: the engine's error is what the callers hear, this only
    logs."""
    sched = core.scheduler
    try:
        inflight = sched.state.inflight  # the step that raised, unless it raised elsewhere
        for rid in sched.request_ids():
            core.abort(rid, reason)  # safe while a step is in flight (Scheduler.finish)
        if inflight is not None:
            sched.on_step_failed(inflight, reason)  # its requests are gone: settles defrag
        core.failed_copies.drain()  # those requests are aborted already
    except Exception:  # noqa: BLE001 - a broken scheduler: its blocks stay, the error stands
        log.exception("could not free the blocks of the failed engine's requests")
