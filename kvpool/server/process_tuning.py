"""The process-wide settings of a ``kvpool serve`` process: torch's intra-op threads, the GIL
switch interval and the event loop (uvloop when installed). Only the entry point (serve.py)
owns the process: library classes never touch these."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Callable

from kvpool.runtime.engine.config import EngineConfig

__all__ = ["SWITCH_INTERVAL", "default_num_threads", "loop_factory", "tune_process"]

log = logging.getLogger("kvpool.server")

# NOTE(latency): the step thread runs long stretches of Python (scheduling 1000s of sequences);
# a 0.5 ms GIL switch interval (default 5 ms) bounds how long the event loop (HTTP, /metrics)
# waits for it, for a small throughput cost. Process-wide, so set here (by the entry point) and
# nowhere else.
SWITCH_INTERVAL = 0.0005


def default_num_threads() -> int:
    """Torch intra-op threads: every core this process may run on but one.

    NOTE(threads): the step thread's Python, the event loop and the copy worker need a core
    of their own. An OpenMP team whose threads must share a core with them waits at every
    barrier for the thread that is descheduled, so one thread too many costs far more than it
    gains (bench.step measures a decode step per thread count: on a 2-core machine, 2 threads
    made decode ~6x slower than 1, while a prefill gained ~1.6x; decode dominates serving).
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, (cores or 1) - 1)


def tune_process(config: EngineConfig) -> None:
    """The process-wide settings of a server process (torch threads, GIL switch interval):
    only the entry point owns the process, library classes never touch them."""
    import torch

    threads = config.num_threads or default_num_threads()
    torch.set_num_threads(threads)
    if sys.getswitchinterval() > SWITCH_INTERVAL:
        sys.setswitchinterval(SWITCH_INTERVAL)
    log.info("torch threads: %d (%s), GIL switch interval %.1f ms", threads,
             "--num-threads" if config.num_threads else "default: usable cores - 1",
             sys.getswitchinterval() * 1e3)


def loop_factory(use_uvloop: bool | None) -> Callable[[], asyncio.AbstractEventLoop] | None:
    if use_uvloop is False:
        return None
    try:
        import uvloop
    except ImportError:
        if use_uvloop:
            raise SystemExit("--uvloop was asked for but uvloop is not installed") from None
        return None
    return uvloop.new_event_loop
