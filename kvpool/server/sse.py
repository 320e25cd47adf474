"""Server-sent events as the server and the router write them: one JSON object per event,
compact, under an optional ``event:`` line (the Responses and Anthropic streams name theirs),
and the ``[DONE]`` that ends an OpenAI stream. Nothing here imports torch: the router writes
the same events when it ends a stream (kvpool/router/stream_end.py)."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["SSE_DONE", "sse_event"]

SSE_DONE = b"data: [DONE]\n\n"


def sse_event(payload: dict[str, Any], event: str | None = None) -> bytes:
    """One server-sent event carrying ``payload``; ``event``: its ``event:`` line, if any."""
    data = b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"
    return data if event is None else f"event: {event}\n".encode() + data
