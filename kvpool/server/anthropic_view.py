"""One Anthropic Messages answer, rendered from the chat request's ResponseBuilder.

handlers.py runs the request as a chat completion; this view shapes its answer as vLLM 0.33
shapes it (docs/architecture.md "The Messages API"). Non-streamed, the chat body becomes::

    {"id": "chatcmpl-...", "type": "message", "role": "assistant",
     "content": [{"type": "text", "text": ...}, {"type": "tool_use", "id", "name", "input"}],
     "model", "stop_reason", "stop_sequence" (only when a stop sequence ended it),
     "usage": {"input_tokens", "output_tokens", "cache_creation_input_tokens",
               "cache_read_input_tokens"}}

An answer with neither text nor calls has one empty text block.

NOTE(cut-call): a call whose arguments are not a JSON object (a forced call a stop sequence
or max_tokens cut short) must not run. Non-streamed, vLLM json-decodes each call's arguments
into its ``input`` and a failure is its 400 (a ValueError), so the answer is a 400
invalid_request_error here too, never a tool_use block with made-up input; streamed, the
pieces already went out, and stop_reason says stop_sequence (or max_tokens), not tool_use.

Streamed, each event is ``event: TYPE`` + ``data: {...}``, no ``[DONE]`` and no ``ping`` (vLLM
sends none)::

    message_start          the message, content [], usage {input_tokens: prompt, output 0}
    content_block_start    a text block {type text, text ""} at the first text, or a
                           tool_use block {id, name, input {}} when a call opens
    content_block_delta    text_delta {text} / input_json_delta {partial_json}
    content_block_stop     when the next block opens, or at the end
    message_delta          {stop_reason, stop_sequence} and the final usage
    message_stop

Under ``--reasoning-parser`` (reasoning.py) the thinking comes first, as a ``thinking`` block
{thinking, signature} (vLLM's: the signature a random hex, nothing here verifies it); streamed,
a thinking block {type thinking, thinking ""} with thinking_delta {thinking} events and, before
its content_block_stop, one signature_delta {signature}.

Text arriving while a tool_use block is open waits and goes out as a text block of its own
after it, as vLLM orders it. A failure after the headers went out closes the open block and
sends an ``error`` event (anthropic_api.py's error types).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from kvpool.errors import RequestError, shown
from kvpool.server.anthropic_errors import anthropic_error_event
from kvpool.server.middleware import APIError
from kvpool.server.responses import ResponseBuilder
from kvpool.server.responses_view import cache_writes
from kvpool.server.sse import sse_event

__all__ = ["MessagesView", "stop_reason"]

def stop_reason(finish: str | None, stop: Any, called: bool,
                complete: bool) -> tuple[str | None, str | None]:
    """vLLM's mapping of a chat finish to ``(stop_reason, stop_sequence)``: max_tokens wins,
    then complete calls (tool_use), then a matched stop string (a str: stop_sequence; a call it
    cut short must not run), then any call (tool_use); else end_turn."""
    if finish == "length":
        return "max_tokens", None
    if finish not in ("stop", "tool_calls"):
        return None, None
    if complete:
        return "tool_use", None
    if isinstance(stop, str):
        return "stop_sequence", stop
    if finish == "tool_calls" or called:
        return "tool_use", None
    return "end_turn", None


def _input(call: dict[str, Any], at: int) -> dict[str, Any]:
    """A call's arguments as the tool_use ``input`` object; a 400 where they are not one
    (NOTE(cut-call))."""
    fn = call["function"]
    try:
        value = json.loads(fn["arguments"])
    except ValueError as exc:
        why = f"are not JSON ({exc})"
    else:
        if isinstance(value, dict):
            return value
        why = "are not a JSON object"
    raise RequestError.field(f"content[{at}].input", f"the arguments of the call to "
                             f"{shown(fn['name'])} {why}: it was cut short (a stop sequence "
                             "or max_tokens) and must not run")


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


class MessagesView:
    """The Messages shape of one chat request's updates."""

    def __init__(self, builder: ResponseBuilder, cache_block: int | None = None) -> None:
        self.builder = builder
        self.cache_block = cache_block  # the prefix cache's block size; None: no caching
        self.index = 0  # the next content block's index
        self.open: str | None = None  # the type of the block streaming now
        self.call_id: str | None = None  # the tool_use block streaming now
        self.calls: dict[int, str] = {}  # a chat call index -> its tool call id
        self.held: list[str] = []  # text that came while a tool_use block was open
        self.args: list[str] = []  # the latest call's arguments so far
        self.called = False
        self.finish: str | None = None
        self.stop: Any = None

    # ---- the body -----------------------------------------------------------------------------
    def usage(self) -> dict[str, Any]:
        """The final usage, as vLLM's with prompt token details: the prompt is split into
        cache reads (the prefix cache's hits), cache writes (the tokens of the prompt's full
        blocks less those hits: what its prefill wrote to the prefix cache, responses_view's
        cache_writes) and input_tokens, the rest."""
        u = self.builder.usage()
        prompt, cached = u["prompt_tokens"], u["prompt_tokens_details"]["cached_tokens"]
        written = cache_writes(prompt, cached, self.cache_block)
        return {"input_tokens": max(0, prompt - cached - written),
                "output_tokens": u["completion_tokens"], "cache_creation_input_tokens": written,
                "cache_read_input_tokens": cached}

    def body(self) -> dict[str, Any]:
        chat = self.builder.body()
        choice = chat["choices"][0]
        msg = choice["message"]
        calls = msg.get("tool_calls") or []
        reason, sequence = stop_reason(choice["finish_reason"], choice["stop_reason"],
                                       bool(calls), bool(calls))
        content = [{"type": "thinking", "thinking": msg["reasoning"],
                    "signature": uuid.uuid4().hex}] if msg.get("reasoning") else []
        content += [{"type": "text", "text": msg["content"]}] if msg.get("content") else []
        content += [{"type": "tool_use", "id": c["id"], "name": c["function"]["name"],
                     "input": _input(c, len(content) + i)} for i, c in enumerate(calls)]
        out = {"id": chat["id"], "type": "message", "role": "assistant",
               "content": content or [{"type": "text", "text": ""}], "model": chat["model"],
               "stop_reason": reason}
        if sequence is not None:
            out["stop_sequence"] = sequence
        out["usage"] = self.usage()
        return out

    # ---- events -------------------------------------------------------------------------------
    @staticmethod
    def _event(kind: str, **fields: Any) -> bytes:
        return sse_event({"type": kind, **fields}, kind)

    def head(self) -> bytes:
        b = self.builder
        message = {"id": b.id, "type": "message", "role": "assistant", "content": [],
                   "model": b.req.model, "stop_reason": None, "stop_sequence": None,
                   "usage": {"input_tokens": b.num_prompt_tokens, "output_tokens": 0}}
        return self._event("message_start", message=message)

    def _start(self, block: dict[str, Any]) -> bytes:
        self.open = block["type"]
        self.call_id = block.get("id")
        return self._event("content_block_start", content_block=block, index=self.index)

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return self._event("content_block_delta", delta=delta, index=self.index)

    def _stop(self) -> bytes:
        """Close the open block, if any."""
        if self.open is None:
            return b""
        signed = self._delta({"type": "signature_delta", "signature": uuid.uuid4().hex}) \
            if self.open == "thinking" else b""
        self.open = self.call_id = None
        self.index += 1
        return signed + self._event("content_block_stop", index=self.index - 1)

    def _stop_and_flush(self) -> bytes:
        """Close the open block; text held behind a call goes out as a block of its own."""
        out = self._stop()
        if not self.held:
            return out
        text, self.held = "".join(self.held), []
        return (out + self._start({"type": "text", "text": ""})
                + self._delta({"type": "text_delta", "text": text}) + self._stop())

    def events(self, chunks: list[dict[str, Any]]) -> bytes:
        out = []
        for chunk in chunks:
            choice = chunk["choices"][0]
            if choice.get("finish_reason") is not None:
                self.finish, self.stop = choice["finish_reason"], choice.get("stop_reason")
            delta = choice["delta"]
            if delta.get("reasoning"):
                out.append(self._thinking(delta["reasoning"]))
            if delta.get("content"):
                out.append(self._text(delta["content"]))
            for call in delta.get("tool_calls") or ():
                out.append(self._call(call))
        return b"".join(out)

    def _thinking(self, text: str) -> bytes:
        opened = b"" if self.open == "thinking" else (
            self._stop_and_flush() + self._start({"type": "thinking", "thinking": ""}))
        return opened + self._delta({"type": "thinking_delta", "thinking": text})

    def _text(self, text: str) -> bytes:
        if self.open == "tool_use":
            self.held.append(text)
            return b""
        opened = b"" if self.open == "text" else (
            self._stop_and_flush() + self._start({"type": "text", "text": ""}))
        return opened + self._delta({"type": "text_delta", "text": text})

    def _call(self, call: dict[str, Any]) -> bytes:
        """A chat tool-call delta: an id and a name open a tool_use block; an arguments piece
        of the open call is an input_json_delta."""
        fn = call.get("function") or {}
        out = b""
        cid = call.get("id")
        if cid is not None:
            self.calls[call.get("index", 0)] = cid
            if self.call_id != cid and fn.get("name") is not None:
                out = self._stop_and_flush()
                self.called, self.args = True, []
                out += self._start({"type": "tool_use", "id": cid, "name": fn["name"],
                                    "input": {}})
        else:
            cid = self.calls.get(call.get("index", 0))
        piece = fn.get("arguments")
        if not piece or cid is None or cid != self.call_id:
            return out
        self.args.append(piece)
        return out + self._delta({"type": "input_json_delta", "partial_json": piece})

    def tail(self, failure: APIError | None) -> bytes:
        if failure is not None:
            return self._stop() + anthropic_error_event(failure.status, failure.message)
        out = self._stop_and_flush()
        complete = self.called and _is_json("".join(self.args))
        reason, sequence = stop_reason(self.finish or "stop", self.stop, self.called, complete)
        out += self._event("message_delta", delta={"stop_reason": reason,
                                                    "stop_sequence": sequence},
                           usage=self.usage())
        return out + self._event("message_stop")
