"""A non-streamed answer's JSON response, written without stalling the event loop.

NOTE(encode-slices): ``json.dumps`` of a large answer holds the GIL for the whole call (the C
encoder never returns to the interpreter, as ``json.loads``: NOTE(gil) in json_body.py), so a
worker thread does not free the loop: measured, a 0.63 s encode on ``run_in_executor`` still
stalled the loop 0.60 s. The largest answers a client can ask for take far longer (chat with
``top_logprobs`` 20, ``n`` 16 x 8,191 tokens of the tiny model: ~3.4 s, 175 MB; bench/
json_answer.py), and every stream, request and /health of the server waited them out. So an
answer past ``INLINE_WEIGHT`` is encoded on the loop in slices of about ``SLICE_WEIGHT``
(each a ``json.dumps`` of a part), the loop running other work between them; a smaller one
is one ``json.dumps`` as before (slicing costs more than it saves there). The text is
``json.dumps``' own (its separators and escaping, each part encoded by it), so the bytes and
headers sent are the same either way.

A value's weight is about how many JSON values it holds (``weight``): a list counts its
length times the larger of its first and last item's (an answer's long lists are one shape
throughout: logprob entries, token ids), so weighing reads a few items per level, never the
whole answer. A list whose middle items are far heavier than its ends makes longer slices.
A string weighs 1 whatever its length: text alone is cheap to encode (3 MB of CJK, escaped,
in ~2.3 ms), only logprobs and ids make an answer heavy. What stays on the loop whole is one
copy of the bytes (``b"".join``: ~0.1 s for the 175 MB answer) and aiohttp's own send.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any

from aiohttp import web

__all__ = ["INLINE_WEIGHT", "SLICE_WEIGHT", "bytes_answer", "json_bytes", "json_encoded",
           "weight"]

# NOTE(encode-slices): from bench/json_answer.py on this machine's CPUs, a weight unit encodes
# in ~0.25 us (chat logprobs) to ~0.3 us (completions logprobs): 4,096 units is ~1 ms per
# slice, and 16,384 (~4 ms, a chat answer of ~150 tokens with top_logprobs 20) the most one
# inline encode may take
SLICE_WEIGHT = 4096
INLINE_WEIGHT = 16384
_MAX_DEPTH = 32  # weighing stops below this nesting (a request's echoed JSON schema, say)


def weight(value: Any, cap: int, depth: int = 0) -> int:
    """About how many JSON values ``value`` holds, counted only until past ``cap``.

    NOTE(weigh-once): a list's last item is weighed only where it is another item and the
    first has not already taken the list past ``cap``. Weighing both ends of every list,
    a one-item list's child was weighed twice per level and nested pairs doubled the work
    per level: a 300-byte Responses request whose echoed tool schema nested one-item lists
    24 deep held the loop 12 s. Now a call visits at most about ``cap`` values: a list whose
    ends are both weighed has two items or more, so its weight is at least what was visited.
    """
    if depth > _MAX_DEPTH:
        return 1
    if isinstance(value, dict):
        total = 1
        for v in value.values():
            total += weight(v, cap, depth + 1)
            if total > cap:
                break
        return total
    if isinstance(value, (list, tuple)) and value:  # NOTE(weigh-once)
        ends = weight(value[0], cap, depth + 1)
        if len(value) > 1 and len(value) * ends <= cap:
            ends = max(ends, weight(value[-1], cap, depth + 1))
        return 1 + len(value) * ends
    return 1


def _pieces(value: Any) -> Iterator[tuple[str, int]]:
    """``(text, weight)`` pieces whose texts join to ``json.dumps(value)``, none heavier than
    about SLICE_WEIGHT unless a single leaf or a dict with non-string keys is."""
    split = (isinstance(value, dict) and all(type(k) is str for k in value)) or \
        (isinstance(value, (list, tuple)) and value)
    heavy = weight(value, SLICE_WEIGHT)
    if not split or heavy <= SLICE_WEIGHT:
        yield json.dumps(value), heavy
    elif isinstance(value, dict):  # json.dumps' separators: ", " and ": "
        yield "{", 0
        for i, (key, v) in enumerate(value.items()):
            yield (", " if i else "") + json.dumps(key) + ": ", 0
            yield from _pieces(v)
        yield "}", 0
    else:
        each = max(weight(value[0], SLICE_WEIGHT), weight(value[-1], SLICE_WEIGHT))
        step = max(1, SLICE_WEIGHT // each)
        yield "[", 0
        for start in range(0, len(value), step):
            if start:
                yield ", ", 0
            if step == 1:  # each item alone is a slice or more: split it in turn
                yield from _pieces(value[start])
            else:  # json.dumps of the part, less its brackets
                yield json.dumps(value[start:start + step])[1:-1], step * each
        yield "]", 0


async def json_bytes(value: Any) -> bytes:
    """``json.dumps(value).encode()``, slice by slice, the loop getting a turn once the pieces
    since its last weigh half a slice (so at most ~1.5 SLICE_WEIGHT between turns: a piece is
    written before its weight is known; NOTE(encode-slices)). Each piece is made bytes as it
    comes (ASCII: json.dumps escapes the rest), so one join is the only whole-answer copy."""
    parts: list[bytes] = []
    since = 0
    for text, heavy in _pieces(value):
        parts.append(text.encode("ascii"))
        since += heavy
        if since >= SLICE_WEIGHT // 2:
            since = 0
            await asyncio.sleep(0)
    return b"".join(parts)


async def json_encoded(value: Any,
                       written: Callable[[Any, bytes], None] | None = None) -> bytes:
    """``json.dumps(value).encode()``: one call at or under INLINE_WEIGHT, in slices past it
    (NOTE(encode-slices)); ``bytes_answer`` answers them. ``written``: handed ``value`` and
    the bytes, the write and it in a task of their own that the caller's cancel does not stop,
    so a client that leaves mid-write still has its response kept (responses_api.py
    NOTE(store-slices))."""
    if written is None:
        return await _encoded(value)

    async def write() -> bytes:
        raw = await _encoded(value)
        written(value, raw)
        return raw
    return await asyncio.shield(asyncio.ensure_future(write()))


async def _encoded(value: Any) -> bytes:
    if weight(value, INLINE_WEIGHT) <= INLINE_WEIGHT:
        return json.dumps(value).encode("ascii")
    return await json_bytes(value)


def bytes_answer(raw: bytes, headers: dict[str, str] | None = None) -> web.Response:
    """The JSON answer whose body is ``raw`` (``json_encoded``'s bytes), with
    ``web.json_response``'s headers."""
    return web.Response(body=raw, content_type="application/json", charset="utf-8",
                        headers=headers)
