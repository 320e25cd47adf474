"""A completions stream's first events, encoded in slices, a shared echo's JSON made once.

NOTE(echo-events): with ``echo`` and ``logprobs`` each choice's first chunk carries the whole
prompt's logprobs in front of its first token's (NOTE(echo-chunk) in responses.py), and
``sse_event`` encoded each whole, in one pass: 16 ``json.dumps`` of 2.9 MB for n=16 over an
8,000-token prompt held the loop 2.1-2.5 s, one of 6.5 MB (30k tokens) 0.15 s (an outside
probe). The n choices share the echo's lists (NOTE(echo-once)): ``joined_logprobs`` keeps each
as the ``head`` of its joined list (logprob_format.py ``JoinedList``), and ``EventEncoder``
makes a head's JSON once and reuses it for the other choices. Heavy values are encoded in
slices of about SLICE_WEIGHT, the loop getting a turn between them, as NOTE(encode-slices) in
json_answer.py does for a JSON answer; the separators are ``sse_event``'s, so the bytes sent
are the same. First events of INLINE_WEIGHT or less are ``sse_event``'s, one call each.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

from kvpool.server.sse import sse_event
from kvpool.server.json_answer import INLINE_WEIGHT, SLICE_WEIGHT, weight
from kvpool.server.logprob_format import JoinedList

__all__ = ["EventEncoder"]

_SEP = (",", ":")  # sse_event's


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=_SEP)


class EventEncoder:
    """``data:`` events of chunks, as ``sse_event`` writes them (NOTE(echo-events)); shared
    by every stream of the server, its counts watched by tests."""

    def __init__(self) -> None:
        self.sliced = 0  # first events' batches encoded in slices so far
        self.heads_reused = 0  # lists whose items' JSON was made before in their batch

    async def events(self, chunks: list[dict[str, Any]]) -> bytes:
        """The events of ``chunks``: each ``sse_event(chunk)``, joined."""
        if sum(weight(c, INLINE_WEIGHT) for c in chunks) <= INLINE_WEIGHT:
            return b"".join(sse_event(c) for c in chunks)
        self.sliced += 1
        heads: dict[int, bytes] = {}  # id(list) -> its items' JSON, for this batch only
        parts: list[bytes] = []
        since = 0
        for chunk in chunks:
            parts.append(b"data: ")
            for text, heavy in self._pieces(chunk, heads):
                # ASCII: json.dumps escapes the rest; a shared list's JSON comes as bytes
                parts.append(text if type(text) is bytes else text.encode("ascii"))
                since += heavy
                if since >= SLICE_WEIGHT // 2:
                    since = 0
                    await asyncio.sleep(0)
            parts.append(b"\n\n")
        return b"".join(parts)

    def _pieces(self, value: Any, heads: dict[int, bytes]) -> Iterator[tuple[str | bytes, int]]:
        """``(text, weight)`` pieces joining to ``_dumps(value)``."""
        if isinstance(value, JoinedList):
            yield from self._joined(value, heads)
            return
        split = (isinstance(value, dict) and all(type(k) is str for k in value)) or \
            (isinstance(value, (list, tuple)) and value)
        heavy = weight(value, SLICE_WEIGHT)
        if not split or heavy <= SLICE_WEIGHT:
            yield _dumps(value), heavy
        elif isinstance(value, dict):
            yield "{", 0
            for i, (key, v) in enumerate(value.items()):
                yield ("," if i else "") + _dumps(key) + ":", 0
                yield from self._pieces(v, heads)
            yield "}", 0
        else:
            yield "[", 0
            yield from self._shared(value, heads)
            yield "]", 0

    def _joined(self, value: JoinedList, heads: dict[int, bytes]) -> Iterator[tuple[str | bytes, int]]:
        """A joined list: its head's items (``_shared``), then its own."""
        own = value[len(value.head):]
        yield "[", 0
        yield from self._shared(value.head, heads)
        yield ("," if value.head and own else "") + _dumps(own)[1:-1] + "]", len(own)

    def _shared(self, value: list | tuple, heads: dict[int, bytes]) -> Iterator[tuple[str | bytes, int]]:
        """The JSON of ``value``'s items (no brackets), in slices, made once per batch: the
        choices' first chunks share the echo's lists, or (no token of their own yet) its
        whole object."""
        done = heads.get(id(value))
        if done is not None:
            self.heads_reused += 1
            yield done, 0
            return
        made = []
        for text, heavy in self._items(value, heads):
            made.append(text if type(text) is bytes else text.encode("ascii"))
            yield made[-1], heavy
        heads[id(value)] = b"".join(made)

    def _items(self, value: list | tuple, heads: dict[int, bytes]
               ) -> Iterator[tuple[str | bytes, int]]:
        """The JSON of ``value``'s items, without its brackets, in slices of about
        SLICE_WEIGHT (an item heavier than that in pieces of its own)."""
        each = max(weight(value[0], SLICE_WEIGHT), weight(value[-1], SLICE_WEIGHT))
        step = max(1, SLICE_WEIGHT // each)
        for start in range(0, len(value), step):
            if start:
                yield ",", 0
            if step == 1:
                yield from self._pieces(value[start], heads)
            else:
                yield _dumps(value[start:start + step])[1:-1], step * each
