"""``ParsePool``: a request body parsed off the event loop once it is large enough to matter.

NOTE(parse-off-loop): tokenizing a megabyte prompt takes seconds; on the event loop it froze
every stream and /health. Bodies over ``INLINE_PARSE_BYTES`` are parsed (JSON, validation,
tokenization) on a small dedicated thread pool (``PARSE_THREADS`` workers bound how many run at
once; the rest wait in its queue) while the loop keeps serving. The parser refuses prompts too
long to fit before tokenizing them (protocol.py, NOTE(bounded-work)), and bounds a body's value
count and string lengths before ``json.loads`` holds the GIL (body_bound.py, NOTE(gil)).

Every route that parses a client body goes through one pool (the app's), so the bound on
parses at once holds across routes.

The worker thread does not see the handler's context variables (``run_in_executor`` does not
copy them): a parse must not read the request's tenant; the caller reads it on the loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

__all__ = ["INLINE_PARSE_BYTES", "PARSE_THREADS", "ParsePool"]

INLINE_PARSE_BYTES = 8192  # smaller bodies tokenize in well under a ms: a thread hop costs more
PARSE_THREADS = 2  # parses of large bodies running at once

T = TypeVar("T")


class ParsePool:
    """Runs ``parse(raw)`` inline for a small body, on the pool's threads for a large one."""

    def __init__(self, threads: int = PARSE_THREADS, *,
                 inline_bytes: int = INLINE_PARSE_BYTES, name: str = "kvpool-parse") -> None:
        self.parsing = 0  # large bodies being parsed on the pool now (tests watch it)
        self.offloaded = 0  # large bodies handed to the pool so far (monotonic)
        self.inline_bytes = inline_bytes  # bodies up to this size are parsed on the caller
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix=name)

    async def parse(self, raw: bytes, parse: Callable[[bytes], T]) -> T:
        if len(raw) <= self.inline_bytes:
            return parse(raw)
        self.parsing += 1
        self.offloaded += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, parse, raw)
        finally:
            self.parsing -= 1

    def close(self) -> None:
        """Stop the pool (the app's cleanup); a parse still running finishes first."""
        self._pool.shutdown(wait=False, cancel_futures=True)
