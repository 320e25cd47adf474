"""Server-sent events of completions and chat: the stream's headers, one ``data:`` event per
chunk, ``[DONE]`` at the end, and :class:`ChunkView`, the answer a ResponseBuilder
(responses.py) makes of its updates."""

from __future__ import annotations

from typing import Any

from kvpool.server.middleware import APIError
from kvpool.server.request_timing import builder_metrics
from kvpool.server.responses import ResponseBuilder
from kvpool.server.sse import SSE_DONE, sse_event

__all__ = ["SSE_HEADERS", "ChunkView"]

SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache",
               "X-Accel-Buffering": "no"}


class ChunkView:
    """How completions and chat answer from a builder: the body, or each chunk one ``data:``
    event (chat opens with role chunks), then the usage chunk (when asked) and ``[DONE]``.
    handlers.py streams through a view; responses_api.py is the Responses API's."""

    def __init__(self, builder: ResponseBuilder) -> None:
        self.builder = builder

    def head(self) -> bytes:
        return self.events(self.builder.role_chunks())

    @staticmethod
    def events(chunks: list[dict[str, Any]]) -> bytes:
        return b"".join(sse_event(c) for c in chunks)

    def tail(self, failure: APIError | None) -> bytes:
        b = self.builder
        if failure is not None:
            return sse_event(b.error_event(failure)) + SSE_DONE
        if b.req.include_usage:  # the metrics ride on it (NOTE(per-request-metrics))
            chunk, metrics = b.usage_chunk(), builder_metrics(b, stream=True)
            if metrics is not None:
                chunk["metrics"] = metrics
            return sse_event(chunk) + SSE_DONE
        return SSE_DONE

    def body(self) -> dict[str, Any]:
        body = self.builder.body()
        body["metrics"] = builder_metrics(self.builder, stream=False)  # null without them
        return body
