"""Engine updates -> OpenAI response objects (one JSON body, or SSE chunks).

A :class:`ResponseBuilder` follows one request. The engine streams :class:`RequestOutput`
updates whose ``CompletionOutput`` entries are *deltas* per sequence; the builder keeps the
running text, token count and finish reason of each of the ``n`` choices and turns each update
into chunks (``stream=true``) or, at the end, into one body::

    update k: outputs=[(index 0, text "ab"), (index 2, text "x", finish "length")]
      stream   -> chunk{choices:[{index 0, "ab"}]}, chunk{choices:[{index 2, "x", "length"}]}
      no stream-> texts[0] += "ab"; texts[2] += "x"; finish[2] = "length"

Shapes follow OpenAI: ``text_completion`` / ``chat.completion`` bodies, ``text_completion`` /
``chat.completion.chunk`` chunks; with ``stream_options.include_usage`` every chunk carries
``"usage": null`` and a last chunk has ``"choices": []`` and the usage.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from kvpool.runtime.outputs import RequestOutput
from kvpool.server.middleware import APIError, error_body
from kvpool.server.protocol import ParsedRequest

__all__ = ["SSE_DONE", "ResponseBuilder", "sse_event"]

SSE_DONE = b"data: [DONE]\n\n"
OPENAI_FINISH = ("stop", "length")  # what a successful choice may report


def sse_event(payload: dict[str, Any]) -> bytes:
    """One server-sent event carrying a JSON object."""
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


class ResponseBuilder:
    """Accumulates one request's updates; renders chunks and the final body."""

    def __init__(self, req: ParsedRequest, *, created: int | None = None) -> None:
        self.req = req
        self.chat = req.kind == "chat"
        prefix = "chatcmpl-" if self.chat else "cmpl-"
        self.id = prefix + uuid.uuid4().hex
        self.created = int(time.time()) if created is None else created
        n = req.params.n
        self.texts: list[list[str]] = [[] for _ in range(n)]
        self.num_generated = [0] * n
        self.finish: list[str | None] = [None] * n
        self.num_prompt_tokens = len(req.prompt_ids)
        self.num_cached_tokens = 0
        self.error: str | None = None
        self.finished = False

    # ---- accumulation -------------------------------------------------------------------------
    def update(self, out: RequestOutput) -> list[dict[str, Any]]:
        """Fold one engine update in; return its stream chunks (one per choice with news)."""
        self.num_prompt_tokens = out.num_prompt_tokens or self.num_prompt_tokens
        self.num_cached_tokens = out.num_cached_tokens
        self.finished = self.finished or out.finished
        if out.error:
            self.error = out.error
        chunks = []
        for c in out.outputs:
            if not 0 <= c.index < len(self.texts):
                continue  # NOTE(index): never trust an index past n; drop rather than crash
            self.num_generated[c.index] = max(self.num_generated[c.index], c.num_generated)
            if c.text:
                self.texts[c.index].append(c.text)
            if c.finish_reason is not None:
                self.finish[c.index] = c.finish_reason
            if c.text or c.finish_reason is not None:
                reason = c.finish_reason if c.finish_reason in OPENAI_FINISH else None
                chunks.append(self._chunk(c.index, c.text, reason))
        return chunks

    def failure(self) -> APIError | None:
        """Why the finished request did not succeed (engine error or abort), if it did not."""
        reasons = set(self.finish)
        if self.error or "error" in reasons:
            return APIError(500, f"generation failed: {self.error or 'engine error'}",
                            code="generation_error")
        if "abort" in reasons or not self.finished:
            return APIError(503, "the request was aborted by the server (shutting down or "
                                 "overloaded); retry later", code="request_aborted",
                            headers={"Retry-After": "1"})
        return None

    # ---- rendering ----------------------------------------------------------------------------
    @property
    def completion_tokens(self) -> int:
        return sum(self.num_generated)

    def usage(self) -> dict[str, Any]:
        completion = self.completion_tokens
        return {"prompt_tokens": self.num_prompt_tokens, "completion_tokens": completion,
                "total_tokens": self.num_prompt_tokens + completion,
                "prompt_tokens_details": {"cached_tokens": self.num_cached_tokens}}

    def _envelope(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.req.model}

    def _chunk(self, index: int, text: str, finish: str | None) -> dict[str, Any]:
        if self.chat:
            delta = {"content": text} if text else {}
            choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
            chunk = self._envelope("chat.completion.chunk")
        else:
            choice = {"index": index, "text": text, "logprobs": None, "finish_reason": finish}
            chunk = self._envelope("text_completion")
        chunk["choices"] = [choice]
        if self.req.include_usage:
            chunk["usage"] = None
        return chunk

    def role_chunks(self) -> list[dict[str, Any]]:
        """Chat streams open each choice with an assistant-role delta (OpenAI does)."""
        if not self.chat:
            return []
        out = []
        for i in range(len(self.texts)):
            chunk = self._envelope("chat.completion.chunk")
            chunk["choices"] = [{"index": i, "delta": {"role": "assistant", "content": ""},
                                 "logprobs": None, "finish_reason": None}]
            if self.req.include_usage:
                chunk["usage"] = None
            out.append(chunk)
        return out

    def usage_chunk(self) -> dict[str, Any]:
        chunk = self._envelope("chat.completion.chunk" if self.chat else "text_completion")
        chunk["choices"] = []
        chunk["usage"] = self.usage()
        return chunk

    @staticmethod
    def error_event(err: APIError) -> dict[str, Any]:
        """What a stream sends when it fails after its headers went out."""
        return error_body(err.message, err.type, err.param, err.code)

    def body(self) -> dict[str, Any]:
        """The non-streaming response."""
        choices = []
        for i, parts in enumerate(self.texts):
            text = "".join(parts)
            reason = self.finish[i] if self.finish[i] in OPENAI_FINISH else "stop"
            if self.chat:
                choices.append({"index": i, "message": {"role": "assistant", "content": text},
                                "logprobs": None, "finish_reason": reason})
            else:
                choices.append({"index": i, "text": text, "logprobs": None,
                                "finish_reason": reason})
        body = self._envelope("chat.completion" if self.chat else "text_completion")
        body["choices"] = choices
        body["usage"] = self.usage()
        return body
