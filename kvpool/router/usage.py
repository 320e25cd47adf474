"""The prompt cache hits a proxied answer reports, read off the bytes the router relays.

The router's ``kvpool_router_cached_tokens_total`` sums
``usage.prompt_tokens_details.cached_tokens`` of every answer it passed on: from the final
usage chunk of an SSE stream, or from a plain JSON body. Only the first ``SCAN_BYTES`` of an
answer are looked at (usage comes early in a JSON body and in a short last SSE line).
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

__all__ = ["SCAN_BYTES", "UsageScanner"]

SCAN_BYTES = 1 << 20  # bodies are scanned for usage only up to this size


class UsageScanner:
    """Finds usage.prompt_tokens_details.cached_tokens in a JSON body or an SSE stream."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.seen = 0
        self.found: int | None = None

    def feed(self, chunk: bytes) -> None:
        self.seen += len(chunk)
        if self.seen > SCAN_BYTES:
            self.buf.clear()
            return
        self.buf += chunk
        while (nl := self.buf.find(b"\n")) >= 0:  # SSE: one event line at a time
            line, self.buf = bytes(self.buf[:nl]), self.buf[nl + 1:]
            if line.startswith(b"data: {") and b'"usage"' in line:
                self._take(line[6:])

    def cached_tokens(self) -> int | None:
        if self.found is None and self.buf.startswith(b"{"):  # a plain JSON answer
            self._take(bytes(self.buf))
        return self.found

    def _take(self, text: bytes) -> None:
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            usage: Any = json.loads(text).get("usage") or {}
            cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
            if isinstance(cached, int):
                self.found = cached
