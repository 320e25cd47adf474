"""The stop signals of the long-running commands (``kvpool serve``, ``kvpool router``): each
passes its own handler, which drains on the first SIGTERM or SIGINT and exits on a second
(kvpool/server/serve.py, kvpool/router/drain.py NOTE(router-drain))."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable

__all__ = ["install_stop_signals"]


def install_stop_signals(loop: asyncio.AbstractEventLoop,
                         on_signal: Callable[[asyncio.Event], None],
                         stop: asyncio.Event) -> list[int]:
    """``on_signal(stop)`` on SIGTERM and SIGINT, where the loop can take them (not on
    Windows, nor off the main thread); the signals it took."""
    installed = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, on_signal, stop)
            installed.append(sig)
    return installed
