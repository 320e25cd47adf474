"""A request body, read within the router's bound and checked to be a JSON object.

Read bounded by the app's ``client_max_size`` (``--max-body-bytes``, the server's default:
past it 413 OpenAI error JSON, from the shared error middleware); then, as the replica checks
it (json_body.py, the same code)::

    more than CHECKED_VALUES JSON values   -> passed on unchecked: the replica, which knows its
                                              context length, answers it (400 when it cannot
                                              fit); NOTE(gil) in body_bound.py
    up to INLINE_BYTES                     -> decoded on the event loop (cheaper than a hop)
    larger                                 -> decoded on one worker thread
    not UTF-8 JSON, not an object, too deep -> 400 OpenAI error JSON, no replica asked

NOTE(gil): ``json.loads`` holds the GIL for a whole call, on any thread, and costs per value
(~75 ns each here): 2M values (a 4 MiB token list) stall every stream and /health for ~0.15 s.
The router only checks what it relays, so past CHECKED_VALUES (a few ms of decoding) it leaves
the work to the replica, whose own bound depends on its context length.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web

from kvpool.server.body_bound import structural_commas
from kvpool.server.json_body import MAX_JSON_DEPTH, decode_json_body

__all__ = ["CHECKED_VALUES", "INLINE_BYTES", "BodyReader"]

CHECKED_VALUES = 65536  # values the router decodes itself (a few ms of GIL)
INLINE_BYTES = 64 * 1024  # smaller bodies decode in well under a ms


def check_body(raw: bytes) -> None:
    """Raise RequestError (400 by the error middleware) unless ``raw`` is a JSON object."""
    if structural_commas(raw, CHECKED_VALUES) > CHECKED_VALUES:
        return  # the replica decides (module docstring)
    # max_model_len only words the value-count error, which the line above rules out
    decode_json_body(raw, max_json_depth=MAX_JSON_DEPTH, max_body_commas=CHECKED_VALUES,
                     max_model_len=0)


class BodyReader:
    """Reads and checks generation request bodies; large ones on its own worker thread."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="router-body")
        self.off_loop = 0  # bodies checked on the worker thread (monotonic; tests read it)

    async def read(self, request: web.Request) -> bytes:
        raw = await request.read()
        if len(raw) <= INLINE_BYTES:
            check_body(raw)
        else:
            self.off_loop += 1
            await asyncio.get_running_loop().run_in_executor(self.pool, check_body, raw)
        return raw

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
