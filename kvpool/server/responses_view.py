"""One Responses API answer, rendered from the chat request's ResponseBuilder.

handlers.py runs the request as it runs a chat completion and asks this view for the bytes:
the ``response`` object (non-streamed), or OpenAI's event sequence, each event
``event: TYPE`` + ``data: {..., "sequence_number": k}`` (k from 0, no ``[DONE]``)::

    response.created, response.in_progress          the response, status in_progress
    response.output_item.added                      the assistant message, no content yet
    response.content_part.added                     its output_text part, empty
    response.output_text.delta ...                  one per chat chunk with text
    response.output_text.done, response.content_part.done, response.output_item.done
    response.completed / response.incomplete        the finished response (incomplete when
                                                    max_output_tokens ended it)

NOTE(open-at-text): an output item opens when its first piece arrives, as vLLM 0.33's
simple (non-Harmony) stream opens it (streaming_events.py SimpleStreamingEventProcessor: a
delta with no text changes no state): the message at its first text, not with the response,
so an output with no text at all streams no item and its response has output [] (a body
not streamed has the message with content [], as vLLM's). The logprobs of tokens that
brought no text wait for the next text (``_text_delta``). A request whose output is read
for function calls (responses_tools.py) opens each call as chat's stream reads it (tools/),
closing the item before it (none arriving: no item)::

    response.output_item.added                      a function_call, arguments ""
    response.function_call_arguments.delta ...      one per piece of its arguments
    response.function_call_arguments.done, response.output_item.done

A custom tool's call (responses_custom.py) is a custom_tool_call item, input "", then
response.custom_tool_call_input.delta ... (each what the payload decoded so far adds),
response.custom_tool_call_input.done and response.output_item.done, as vLLM 0.33 streams it.

NOTE(think-items): under ``--reasoning-parser`` (reasoning.py) the thinking is an item of its
own before the answer's, as vLLM 0.33's simple processor streams it: ``reasoning`` with a
``reasoning_text`` part (output_item.added, content_part.added, response.reasoning_text.delta
..., response.reasoning_text.done, content_part.done, output_item.done); a body not streamed
has it first, status null, and no message when nothing followed the thinking. Usage counts
its tokens (output_tokens_details.reasoning_tokens).

NOTE(completed): the last event is named by the response's status, response.completed or
response.incomplete (cut by max_output_tokens), as vLLM 0.33 and OpenAI send it. The openai
client's ``responses.stream(...).get_final_response()`` raises on response.incomplete, with
vLLM as with OpenAI; a client that reads the events sees the status either way.

A failure after the headers went out is an ``error`` event. The finished response goes to
``on_done`` (the route stores it when the request asked for ``store``). A streamed response's
output is the items as they streamed; a non-streamed one's is read from the whole text.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from kvpool.server.middleware import APIError
from kvpool.server.sse import sse_event
from kvpool.server.responses import ResponseBuilder
from kvpool.server.responses_custom import decode_input, decode_input_prefix
from kvpool.server.responses_input import ResponsesInput
from kvpool.server.request_timing import builder_metrics

# the statuses whose response object carries vLLM's timing metrics (request_timing.py,
# --enable-per-request-metrics)
_ENDED = ("completed", "incomplete")

__all__ = ["ResponsesView", "cache_writes"]


def cache_block(config: Any) -> int | None:
    """The block size ``cache_writes`` counts in: the engine config's, with prefix caching;
    None without it."""
    return config.block_size if config.enable_prefix_caching else None


def cache_writes(prompt: int, cached: int, block: int | None) -> int:
    """The prompt tokens a request's prefill wrote to the prefix cache, as vLLM's
    PrefillStats.finalize counts them: the tokens of the prompt's full blocks (what its prefix
    cache holds of the request once prefilled) less those it found cached; 0 without prefix
    caching (``block`` None). Responses' cache_write_tokens and Messages'
    cache_creation_input_tokens (anthropic_view.py) are this number."""
    if block is None:
        return 0
    return max(0, prompt // block * block - cached)


def _part(text: str, logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """An output_text part; ``logprobs`` in chat's shape, which is OpenAI's Responses shape
    too ({token, logprob, bytes, top_logprobs}), or null when there are none (not asked:
    include), as vLLM 0.33's parts have them (its serving.py _make_response_output_items,
    streaming_events.py emit_simple_content_done; only content_part.added's part has [])."""
    return {"type": "output_text", "text": text, "annotations": [],
            "logprobs": logprobs or None}


def _content_logprobs(lp: dict[str, Any] | None) -> list[dict[str, Any]]:
    return (lp or {}).get("content") or []


def _message(item_id: str, status: str, content: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": item_id, "type": "message", "role": "assistant", "status": status,
            "content": content}


def _reasoning(text: str | None, status: str | None) -> dict[str, Any]:
    """A reasoning item (NOTE(think-items)); ``text`` None: its content not known yet."""
    content = None if text is None else [{"type": "reasoning_text", "text": text}]
    return {"id": "rs_" + uuid.uuid4().hex, "type": "reasoning", "summary": [],
            "content": content, "encrypted_content": None, "status": status}


class _Streamed:
    """One output item as it streams: the item, and its text (a message) or its arguments
    (a function_call) so far."""

    def __init__(self, item: dict[str, Any]) -> None:
        self.item = item
        self.pieces: list[str] = []
        self.logprobs: list[dict[str, Any]] = []

    @property
    def text(self) -> str:
        return "".join(self.pieces)


class ResponsesView:
    """The Responses shape of one chat request's updates."""

    def __init__(self, builder: ResponseBuilder, inp: ResponsesInput,
                 on_done: Callable[[dict[str, Any]], None],
                 cache_block: int | None = None) -> None:
        self.builder = builder
        self.cache_block = cache_block  # the block size with prefix caching, else None
        self.inp = inp
        self.on_done = on_done
        self.tools = builder.req.tools  # the output is read for calls (tools/), or None
        self.id = inp.request_id if inp.request_id is not None else \
            "resp_" + uuid.uuid4().hex  # vLLM's request_id, "" too
        self.item_id = "msg_" + uuid.uuid4().hex
        self.sequence = 0
        self.done: dict[str, Any] | None = None
        self.items: list[_Streamed] = []  # a stream's output items, in order
        self.current: int | None = None  # the output index of the item still streaming
        self.calls: dict[int, int] = {}  # a chat tool call's index -> its output index
        self.pending: list[dict[str, Any]] = []  # logprobs held (_text_delta)

    # ---- objects ------------------------------------------------------------------------------
    def response(self, status: str, output: list[dict[str, Any]],
                 usage: dict[str, Any] | None = None) -> dict[str, Any]:
        """vLLM 0.33's response object (its ResponsesResponse.from_request, dumped whole):
        the request's fields as asked, the sampling ones as run (``max_output_tokens`` the
        tokens it may generate, NOTE(clamp) in context_budget.py), the rest null."""
        b, inp = self.builder, self.inp
        params = b.req.params
        out = {"id": self.id, "object": "response", "created_at": b.created, "status": status,
                "incomplete_details": {"reason": "max_output_tokens"}
                if status == "incomplete" else None, "instructions": inp.instructions,
                "metadata": inp.metadata, "model": b.req.model, "output": output,
                "parallel_tool_calls": inp.tools.parallel, "temperature": params.temperature,
                "tool_choice": inp.tools.tool_choice, "tools": inp.tools.tools,
                "top_p": params.top_p, "background": inp.background,
                "max_output_tokens": params.max_tokens, "previous_response_id": inp.previous_id,
                "reasoning": inp.reasoning, "text": inp.text, "top_logprobs": inp.top_logprobs,
                "truncation": inp.truncation, "usage": usage, "user": b.req.user,
                "presence_penalty": params.presence_penalty,
                "frequency_penalty": params.frequency_penalty, **inp.echoed}
        if status in _ENDED and (timing := builder_metrics(b, stream=False)) is not None:
            out["metrics"] = timing  # left out otherwise, as vLLM's exclude_if drops None
        return out

    def usage(self) -> dict[str, Any]:
        """vLLM 0.33's ResponseUsage as its SimpleContext fills it: no per-turn counts, no
        tool output, ``cache_write_tokens`` the prompt tokens its prefill wrote to the prefix
        cache (cache_writes)."""
        u = self.builder.usage()
        prompt, cached = u["prompt_tokens"], u["prompt_tokens_details"]["cached_tokens"]
        thinking = (u.get("completion_tokens_details") or {}).get("reasoning_tokens", 0)
        writes = cache_writes(prompt, cached, self.cache_block)
        return {"input_tokens": prompt,
                "input_tokens_details": {"cached_tokens": cached,
                                         "cache_write_tokens": writes,
                                         "input_tokens_per_turn": [],
                                         "cached_tokens_per_turn": []},
                "output_tokens": u["completion_tokens"],
                "output_tokens_details": {"reasoning_tokens": thinking, "tool_output_tokens": 0,
                                          "output_tokens_per_turn": [],
                                          "tool_output_tokens_per_turn": []},
                "total_tokens": u["total_tokens"]}

    def _status(self) -> str:
        return "incomplete" if self.builder.finish[0] == "length" else "completed"

    def body(self) -> dict[str, Any]:
        """The finished response (made once; handed to ``on_done``)."""
        if self.done is None:
            status = self._status()
            output = [s.item for s in self.items] if self.builder.req.stream \
                else self._output(status)
            self.done = self.response(status, output, self.usage())
            self.on_done(self.done)
        return self.done

    def _output(self, status: str) -> list[dict[str, Any]]:
        """A non-streamed response's items: the reasoning (NOTE(think-items)), then the
        message, or the calls read from the text (after the message of any text before
        them); the last item carries ``status``."""
        raw = text = "".join(self.builder.texts[0])
        think = self.builder.req.reasoning
        if think is not None:
            reasoning, text = think.split(raw)
            text = text or ""
            items = self._answer(status, text, len(raw) - len(text)) if text else []
            return ([_reasoning(reasoning, None)] if reasoning else []) + items
        return self._answer(status, text, 0)

    def _answer(self, status: str, text: str, start: int) -> list[dict[str, Any]]:
        """The items of the answer ``text``, which begins at character ``start`` of the
        output (its logprobs are those of the tokens from there: NOTE(own-logprobs))."""
        got = self.tools.extract(text) if self.tools is not None else None
        if got is not None and not got.calls and not got.content:
            return []  # nothing read: a required array cut short (NOTE(cut-required)), or ""
        skip = len(self.builder.logprobs_before(0, start)) if start else 0
        if got is None or not got.calls:  # no text: no part, as vLLM's message has none
            part = _part(text, _content_logprobs(self.builder.logprobs[0])[skip:])
            return [_message(self.item_id, status, [part] if text else [])]
        own = self.builder.logprobs_before(0, start + len(got.content or ""))[skip:]
        items = [_message(self.item_id, "completed", [_part(got.content, own)])] \
            if got.content else []
        items += [self.inp.tools.call_item(c.name, c.arguments, "completed")
                  for c in got.calls]
        if "status" in items[-1]:  # a custom_tool_call has none
            items[-1]["status"] = status
        return items

    # ---- events -------------------------------------------------------------------------------
    def _event(self, kind: str, **fields: Any) -> bytes:
        payload = {"type": kind, **fields, "sequence_number": self.sequence}
        self.sequence += 1
        return sse_event(payload, kind)

    def _at(self, k: int) -> dict[str, Any]:
        return {"item_id": self.items[k].item["id"], "output_index": k, "content_index": 0}

    def _open(self, item: dict[str, Any]) -> bytes:
        self.items.append(_Streamed(item))
        self.current = k = len(self.items) - 1
        return self._event("response.output_item.added", output_index=k, item=item)

    def _open_message(self) -> bytes:
        item_id = "msg_" + uuid.uuid4().hex if self.items else self.item_id
        return (self._open(_message(item_id, "in_progress", []))
                + self._event("response.content_part.added", part={**_part(""), "logprobs": []},
                              **self._at(len(self.items) - 1)))

    def _close(self, status: str) -> bytes:
        """Close the item still streaming (if any): its done events."""
        k, self.current = self.current, None
        if k is None:
            return b""
        s = self.items[k]
        if s.item["type"] != "custom_tool_call":  # which has no status
            s.item["status"] = status
        if s.item["type"] == "message":
            part = _part(s.text, s.logprobs)
            s.item["content"] = [part]
            done = (self._event("response.output_text.done", text=part["text"], logprobs=[],
                                **self._at(k))  # vLLM's done event: the part has them
                    + self._event("response.content_part.done", part=part, **self._at(k)))
        elif s.item["type"] == "reasoning":  # NOTE(think-items)
            s.item["content"] = [part := {"type": "reasoning_text", "text": s.text}]
            done = (self._event("response.reasoning_text.done", text=s.text, **self._at(k))
                    + self._event("response.content_part.done", part=part, **self._at(k)))
        elif s.item["type"] == "custom_tool_call":
            payload = decode_input(s.text)
            done = self._input_delta(k, payload) + self._event(
                "response.custom_tool_call_input.done", output_index=k, item_id=s.item["id"],
                input=payload)
        else:
            s.item["arguments"] = s.text
            done = self._event("response.function_call_arguments.done", item_id=s.item["id"],
                               output_index=k, arguments=s.text)
        return done + self._event("response.output_item.done", output_index=k, item=s.item)

    def head(self) -> bytes:
        """The response's opening events; its items open later (NOTE(open-at-text))."""
        opened = self.response("in_progress", [])
        return (self._event("response.created", response=opened)
                + self._event("response.in_progress", response=opened))

    def events(self, chunks: list[dict[str, Any]]) -> bytes:
        out = []
        for chunk in chunks:
            choice = chunk["choices"][0]
            calls = choice["delta"].get("tool_calls")
            if calls:
                out += [self._call_delta(c) for c in calls]
                continue
            if choice["delta"].get("reasoning"):  # its tokens' logprobs are no message's
                out.append(self._reasoning_delta(choice["delta"]["reasoning"]))
                continue
            text = choice["delta"].get("content")
            lps = _content_logprobs(choice.get("logprobs"))
            if text or lps:
                out.append(self._text_delta(text or "", lps))
        return b"".join(out)

    def _text_delta(self, text: str, lps: list[dict[str, Any]]) -> bytes:
        """Text opens the message (NOTE(open-at-text)). A message's own logprobs, streamed
        (responses.py NOTE(own-logprobs)): the logprobs of tokens that brought no text (a
        stop string or character held back; in an output read for calls, a call's marker
        the reader holds back until it knows) wait until it is known whose they are: the
        message's when its text goes on (or it ends the output), a call's when one opens
        (dropped). They went out at once, so the message streamed the marker's and the
        call's name's logprobs as its own."""
        k = self.current
        message = k is not None and self.items[k].item["type"] == "message"
        if not text:  # NOTE(open-at-text): no text opens no item
            if k is None or message:
                self.pending += lps
            return b""  # else the logprobs of call tokens: no message of their own
        lps, self.pending = self.pending + lps, []
        opened = b""
        if not message:
            opened = self._close("completed") + self._open_message()
            k = self.current
        self.items[k].pieces.append(text)
        self.items[k].logprobs += lps
        return opened + self._event("response.output_text.delta", delta=text, logprobs=lps,
                                    **self._at(k))

    def _reasoning_delta(self, piece: str) -> bytes:
        """NOTE(think-items): reasoning text opens a reasoning item (closing the one before)
        and streams as its reasoning_text deltas."""
        k, self.pending = self.current, []
        opened = b""
        if k is None or self.items[k].item["type"] != "reasoning":
            opened = self._close("completed") + self._open(_reasoning(None, "in_progress"))
            k = self.current
            opened += self._event("response.content_part.added",
                                  part={"type": "reasoning_text", "text": ""}, **self._at(k))
        self.items[k].pieces.append(piece)
        return opened + self._event("response.reasoning_text.delta", delta=piece,
                                    **self._at(k))

    def _call_delta(self, call: dict[str, Any]) -> bytes:
        """A chat tool-call delta: a new call (its id and name) opens a function_call item,
        an arguments piece is a function_call_arguments.delta of its item."""
        fn = call.get("function") or {}
        opened = b""
        if call.get("id") is not None:
            self.pending = []  # the call's marker's (_text_delta)
            opened = self._close("completed") + self._open(
                self.inp.tools.call_item(fn.get("name", ""), "", "in_progress"))
            self.calls[call["index"]] = self.current
        piece = fn.get("arguments")
        k = self.calls.get(call["index"])
        if not piece or k is None:
            return opened
        self.items[k].pieces.append(piece)
        if self.items[k].item["type"] == "custom_tool_call":
            return opened + self._input_delta(k, decode_input_prefix(self.items[k].text))
        return opened + self._event("response.function_call_arguments.delta",
                                    item_id=self.items[k].item["id"], output_index=k,
                                    delta=piece)

    def _input_delta(self, k: int, payload: str) -> bytes:
        """A custom call's input delta: what ``payload`` adds to the input streamed so far
        (its item's ``input``); one that does not extend it is sent whole, as vLLM sends it."""
        item = self.items[k].item
        sent, item["input"] = item["input"], payload
        if payload == sent:
            return b""
        return self._event("response.custom_tool_call_input.delta", output_index=k,
                           item_id=item["id"],
                           delta=payload[len(sent):] if payload.startswith(sent) else payload)

    def _flush(self) -> bytes:
        """The held logprobs at the end of a message no call followed: its own."""
        lps, self.pending = self.pending, []
        k = self.current
        if not lps or k is None or self.items[k].item["type"] != "message":
            return b""
        self.items[k].logprobs += lps
        return self._event("response.output_text.delta", delta="", logprobs=lps, **self._at(k))

    def tail(self, failure: APIError | None) -> bytes:
        if failure is not None:
            return self._event("error", code=failure.code, message=failure.message,
                               param=failure.param)
        status = self._status()
        # an output with no text and no call has no item (NOTE(open-at-text))
        out = self._flush() + self._close(status)  # NOTE(completed): the terminal event
        return out + self._event(f"response.{status}", response=self.body())
