"""One Responses API answer, rendered from the chat request's ResponseBuilder.

handlers.py runs the request as it runs a chat completion and asks this view for the bytes:
the ``response`` object (non-streamed), or OpenAI's event sequence, each event
``event: TYPE`` + ``data: {..., "sequence_number": k}`` (k from 0, no ``[DONE]``)::

    response.created, response.in_progress          the response, status in_progress
    response.output_item.added                      the assistant message, no content yet
    response.content_part.added                     its output_text part, empty
    response.output_text.delta ...                  one per chat chunk with text
    response.output_text.done, response.content_part.done, response.output_item.done
    response.completed                              the finished response (status incomplete
                                                    when max_output_tokens ended it)

NOTE(completed): the last event is response.completed even for an incomplete response, as
vLLM sends it: the openai client's ``responses.stream(...).get_final_response()`` accepts
nothing else (OpenAI's own response.incomplete makes it raise).

A failure after the headers went out is an ``error`` event. The finished response goes to
``on_done`` (the route stores it when the request asked for ``store``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from kvpool.server.middleware import APIError
from kvpool.server.responses import ResponseBuilder, sse_event
from kvpool.server.responses_input import ResponsesInput

__all__ = ["ResponsesView"]


def _part(text: str, logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """An output_text part; ``logprobs`` in chat's shape, which is OpenAI's Responses shape
    too ({token, logprob, bytes, top_logprobs}), or none when not asked (include)."""
    return {"type": "output_text", "text": text, "annotations": [],
            "logprobs": logprobs or []}


def _content_logprobs(lp: dict[str, Any] | None) -> list[dict[str, Any]]:
    return (lp or {}).get("content") or []


class ResponsesView:
    """The Responses shape of one chat request's updates."""

    def __init__(self, builder: ResponseBuilder, inp: ResponsesInput,
                 on_done: Callable[[dict[str, Any], str], None]) -> None:
        self.builder = builder
        self.inp = inp
        self.on_done = on_done
        self.id = "resp_" + uuid.uuid4().hex
        self.item_id = "msg_" + uuid.uuid4().hex
        self.sequence = 0
        self.done: dict[str, Any] | None = None

    # ---- objects ------------------------------------------------------------------------------
    def response(self, status: str, output: list[dict[str, Any]],
                 usage: dict[str, Any] | None = None) -> dict[str, Any]:
        b, inp = self.builder, self.inp
        params = b.req.params
        return {"id": self.id, "object": "response", "created_at": b.created, "status": status,
                "error": None, "incomplete_details": {"reason": "max_output_tokens"}
                if status == "incomplete" else None, "instructions": inp.instructions,
                "max_output_tokens": inp.max_output_tokens, "model": b.req.model,
                "output": output, "parallel_tool_calls": False,
                "previous_response_id": inp.previous_id, "temperature": params.temperature,
                "top_p": params.top_p, "tool_choice": "none", "tools": [],
                "text": {"format": inp.text_format}, "truncation": "disabled",
                "metadata": inp.metadata, "store": inp.store, "user": b.req.user,
                "usage": usage}

    def _item(self, status: str, content: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": self.item_id, "type": "message", "role": "assistant", "status": status,
                "content": content}

    def usage(self) -> dict[str, Any]:
        u = self.builder.usage()
        return {"input_tokens": u["prompt_tokens"],
                "input_tokens_details": {"cached_tokens": u["prompt_tokens_details"]
                                         ["cached_tokens"]},
                "output_tokens": u["completion_tokens"],
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": u["total_tokens"]}

    def body(self) -> dict[str, Any]:
        """The finished response (made once; handed to ``on_done``)."""
        if self.done is None:
            text = "".join(self.builder.texts[0])
            status = "incomplete" if self.builder.finish[0] == "length" else "completed"
            part = _part(text, _content_logprobs(self.builder.logprobs[0]))
            self.done = self.response(status, [self._item(status, [part])], self.usage())
            self.on_done(self.done, text)
        return self.done

    # ---- events -------------------------------------------------------------------------------
    def _event(self, kind: str, **fields: Any) -> bytes:
        payload = {"type": kind, **fields, "sequence_number": self.sequence}
        self.sequence += 1
        return f"event: {kind}\n".encode() + sse_event(payload)

    def _at(self) -> dict[str, Any]:
        return {"item_id": self.item_id, "output_index": 0, "content_index": 0}

    def head(self) -> bytes:
        opened = self.response("in_progress", [])
        return (self._event("response.created", response=opened)
                + self._event("response.in_progress", response=opened)
                + self._event("response.output_item.added", output_index=0,
                              item=self._item("in_progress", []))
                + self._event("response.content_part.added", part=_part(""), **self._at()))

    def events(self, chunks: list[dict[str, Any]]) -> bytes:
        out = []
        for chunk in chunks:
            choice = chunk["choices"][0]
            text = choice["delta"].get("content")
            lps = _content_logprobs(choice.get("logprobs"))
            if text or lps:
                out.append(self._event("response.output_text.delta", delta=text or "",
                                       logprobs=lps, **self._at()))
        return b"".join(out)

    def tail(self, failure: APIError | None) -> bytes:
        if failure is not None:
            return self._event("error", code=failure.code, message=failure.message,
                               param=failure.param)
        body = self.body()
        item = body["output"][0]
        part = item["content"][0]
        return (self._event("response.output_text.done", text=part["text"],
                            logprobs=part["logprobs"], **self._at())
                + self._event("response.content_part.done", part=part, **self._at())
                + self._event("response.output_item.done", output_index=0, item=item)
                + self._event("response.completed", response=body))
