"""A relayed SSE answer's events: passed on whole (``EventCuts``: upstream.py
NOTE(event-boundary)), and ended in the protocol of its route when the router cuts it short.

NOTE(stream-end): a stream the router ends itself (its replica broke off or went silent,
``--request-timeout`` ran out: upstream.py) ends the way a client of that route reads as a
failure, as ``kvpool serve`` ends its own failed streams::

    /v1/messages and below    Anthropic's ``event: error`` + ``data: {"type": "error",
                              "error": {"type": "api_error" | "overloaded_error", ...}}``
                              (anthropic_errors.py, the server's builder), no ``[DONE]``
    /v1/responses and below   the Responses API's ``event: error`` + ``data: {"type": "error",
                              "code", "message", "param", "sequence_number"}`` (the server's
                              responses_view.py ``tail``), numbered after the last event
                              passed on, no ``[DONE]``
    any other                 an OpenAI error chunk, ``data: {"error": {...}}``, then
                              ``data: [DONE]`` (the chat and completions streams)

Before, every route got the OpenAI form: the Anthropic SDK skips an event with no name, so a
Messages stream cut off by a dying replica ended as a silent truncation.
NOTE(no-topology): what the client reads names no replica: the URLs are internal topology
(proxy.py NOTE(health-view)); the router's log names it.
"""

from __future__ import annotations

import re

from aiohttp import web

from kvpool.router.response_ids import events_end
from kvpool.server.anthropic_errors import anthropic_error_event, messages_path
from kvpool.server.middleware import error_body
from kvpool.server.sse import SSE_DONE, sse_event

__all__ = ["ENDING", "MAX_PENDING", "EventCuts", "StreamEnd", "sse_error"]


MAX_PENDING = 1 << 20  # bytes of one open SSE event held back (NOTE(event-boundary))
# affinity.RESPONSES_PATH, not imported: affinity.py imports upstream.py, which imports this
_RESPONSES = "/v1/responses"
_SEQUENCE_KEY = b'"sequence_number":'
_INT = re.compile(rb"\s*(\d+)")


def sse_error(message: str, code: str) -> bytes:
    """The OpenAI error chunk and ``[DONE]`` a chat or completions stream ends with."""
    return sse_event(error_body(message, "server_error", None, code)) + SSE_DONE


class StreamEnd:
    """The error ending of one relayed stream on ``path`` (NOTE(stream-end)); ``passed`` is
    told each run of whole events the client got, for the Responses API's numbering."""

    def __init__(self, path: str) -> None:
        self.kind = ("messages" if messages_path(path) else
                     "responses" if path == _RESPONSES or path.startswith(_RESPONSES + "/")
                     else "openai")
        self.sequence = -1  # the last sequence_number passed on (a Responses stream's)

    def passed(self, events: bytes) -> None:
        """NOTE(scan) in upstream.py: the key's bytes are searched, nothing is decoded; only
        the top level of a Responses event carries ``sequence_number``."""
        if self.kind != "responses":
            return
        at = events.rfind(_SEQUENCE_KEY)
        if at >= 0 and (digits := _INT.match(events, at + len(_SEQUENCE_KEY))) is not None:
            self.sequence = int(digits.group(1))

    def error(self, status: int, message: str, code: str) -> bytes:
        """The bytes that end the stream: a failure the router would answer ``status`` with
        (Anthropic's error type comes from it), ``code`` its OpenAI error code."""
        if self.kind == "messages":
            return anthropic_error_event(status, message)
        if self.kind == "responses":
            return sse_event({"type": "error", "code": code, "message": message,
                              "param": None, "sequence_number": self.sequence + 1}, "error")
        return sse_error(message, code)


# request key: the relay's StreamEnd (drain.py reads it)
ENDING = web.RequestKey("kvpool_router_stream_end", StreamEnd)


class EventCuts:
    """A stream's bytes, handed on up to its last whole event (NOTE(event-boundary))."""

    def __init__(self) -> None:
        self.pending = bytearray()  # grown in place, not copied per chunk

    def cut(self, chunk: bytes) -> bytes:
        """What of the bytes so far may go to the client now (b"": nothing yet)."""
        pending = self.pending
        start = max(0, len(pending) - 3)  # pending holds no event end: search the new bytes
        pending += chunk
        end = events_end(pending, start)
        if not end and len(pending) <= MAX_PENDING:
            return b""
        end = end or len(pending)
        out = bytes(pending[:end])
        del pending[:end]
        return out

    def rest(self) -> bytes:
        return bytes(self.pending)
