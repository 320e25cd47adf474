"""A Responses API body -> the chat body the chat parser takes, and the conversation it holds.

The messages, in order: ``instructions`` as a system message (none when empty, as vLLM
adds none); the conversation of ``previous_response_id`` (its input and output, less its
system messages: NOTE(history)); then ``input``: a string (one user message) or a list of
messages, each ``{"role", "content"}`` (``"type": "message"`` optional) whose content is a
string or a list of ``input_text`` / ``output_text`` parts, joined with newlines as vLLM (and
the chat route, chat_messages.py) joins text parts (the output items of an earlier response
can be sent back as they came). Function calling (responses_tools.py): ``tools``,
``tool_choice`` and ``parallel_tool_calls`` become chat's; a ``function_call`` item is an
assistant message's tool call (consecutive calls, and an assistant message right before
them, make one message, as chat holds parallel calls) and a ``function_call_output`` item a
``tool`` message answering its ``call_id``; ``custom`` and ``namespace`` tools and
``custom_tool_call`` items are shown as function tools and calls, as vLLM shows them
(responses_custom.py); a ``reasoning`` item is an assistant's earlier thinking
(responses_items.py has every item kind).
``max_output_tokens`` is the chat ``max_tokens``; the sampling fields (vLLM's:
penalties, ``min_p``, ``logit_bias``, ``stop_token_ids``, ...) and ``chat_template_kwargs`` pass
through; ``include`` ``message.output_text.logprobs`` is chat's ``logprobs`` (``top_logprobs``
alternatives); ``truncation: "auto"`` is chat's ``truncate_prompt_tokens: -1``,
``reasoning.effort`` chat's ``reasoning_effort``, ``include_reasoning`` chat's (and more:
responses_api.py NOTE(hidden)). ``text.format``
``json_schema`` / ``json_object`` is the chat ``response_format`` of the same constraint, as
vLLM runs it, and vLLM's ``structured_outputs`` chat's (not with ``text.format``);
``background`` is kept for responses_api.py; the fields vLLM only echoes (``service_tier``,
``prompt_cache_key``, ...) are checked and echoed (responses_echo.py). Other item kinds
(files, images) and Responses features this server does not implement (hosted
tools, stored ``prompt`` templates) are a 400 naming the field, so a client never gets a
silently different result.

NOTE(history): a continuation reads the earlier response's conversation without any
system-role message: not its instructions (never part of it) nor a ``system`` message of
its input, as vLLM 0.33 drops every system message of the history it continues
(responses/utils.py construct_input_messages: instructions do not carry over, OpenAI's
rule); a ``developer`` message stays, as there. The store keeps them; each continuation
drops them as it reads, so a chain of continuations carries none of the earlier inputs'
system messages.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kvpool.errors import RequestError, shown
from kvpool.server.field_policy import FieldPolicy
from kvpool.server.json_body import bool_field, json_bool, json_int
from kvpool.server.response_store import StoredResponse
from kvpool.server.responses_echo import ECHOED, echoed_fields
from kvpool.server.responses_items import input_messages
from kvpool.server.responses_tools import ResponsesTools, forced_text_format, tool_fields

META_PAIRS, META_KEY, META_VALUE = 16, 64, 512  # OpenAI's metadata limits
_bad = RequestError.field  # errors.py: "param: message", with the param named

__all__ = ["KNOWN_RESPONSES", "ResponseNotFoundError", "ResponsesInput", "responses_to_chat"]

# copied into the chat body as they are (the chat parser validates them): vLLM's Responses
# sampling fields and chat_template_kwargs
PASS_THROUGH = ("model", "temperature", "top_p", "top_k", "seed", "stop", "ignore_eos", "user",
                "priority", "cache_salt", "stream", "min_p", "presence_penalty",
                "frequency_penalty", "repetition_penalty", "logit_bias", "stop_token_ids",
                "skip_special_tokens", "spaces_between_special_tokens",
                "include_stop_str_in_output", "chat_template_kwargs")
# ``conversation`` is not known: vLLM 0.33's ResponsesRequest has no such field, so it is an
# unknown field (ignored and listed, body_fields.py), as vLLM ignores it
TRUNCATIONS = ("disabled", "auto")
VERBOSITIES = (None, "low", "medium", "high")  # OpenAI's text.verbosity
KNOWN_RESPONSES = frozenset({"input", "instructions", "max_output_tokens", "store",
                             "previous_response_id", "metadata", "text", "tools", "tool_choice",
                             "parallel_tool_calls", "include", "top_logprobs", "truncation",
                             "reasoning", "structured_outputs", "background", "request_id",
                             "include_reasoning"}
                            | set(PASS_THROUGH) | {"prompt"} | ECHOED)
INCLUDE_LOGPROBS = "message.output_text.logprobs"
INCLUDABLE = ("code_interpreter_call.outputs", "computer_call_output.output.image_url",
              "file_search_call.results", "message.input_image.image_url", INCLUDE_LOGPROBS,
              "reasoning.encrypted_content")  # vLLM 0.33's include values, its order


class ResponseNotFoundError(RequestError):
    """``previous_response_id`` (or a GET) names no stored response of this tenant: 404, as
    OpenAI answers it."""

    http_status = 404

    def __init__(self, response_id: str, param: str = "previous_response_id") -> None:
        previous = param == "previous_response_id"  # else a GET's or cancel's: response_id
        super().__init__(f"Previous response with id {shown(response_id, 80)} not found."
                         if previous else f"Response with id {shown(response_id, 80)} not found.",
                         param=param, code="previous_response_not_found" if previous else
                         "response_not_found")


@dataclass(frozen=True, slots=True)
class ResponsesInput:
    """What one Responses request asks, beside the chat body it became."""

    chat: dict[str, Any]  # the chat completions body
    conversation: tuple[dict[str, Any], ...]  # previous turns + this input, no instructions
    instructions: str | None
    previous_id: str | None
    store: bool
    metadata: dict[str, Any] | None  # as sent: null when not (vLLM echoes the request's)
    max_output_tokens: int | None
    ignored: tuple[str, ...]  # unknown fields that were ignored (body_fields.py)
    text: dict[str, Any] | None  # the response echoes it (_text_echo), NOTE(forced-text)
    tools: ResponsesTools  # tools, tool_choice, parallel_tool_calls: the response echoes them
    truncation: str = "disabled"  # as asked: the response echoes it
    background: bool = False  # run apart from the request (responses_background.py)
    top_logprobs: int | None = None  # the logprobs asked (vLLM's echo: none without include)
    reasoning: dict[str, Any] | None = None  # echoed as vLLM dumps it (_reasoning)
    request_id: str | None = None  # the response's id when the client names it (_request_id)
    include_reasoning: bool = True  # vLLM's field (chat's too): responses_api.py NOTE(hidden)
    echoed: dict[str, Any] = field(default_factory=dict)  # responses_echo.py


def _opt(body: dict[str, Any], name: str, kind: type, default: Any) -> Any:
    value = body.get(name)
    if value is None:
        return default
    if kind is int:  # NOTE(lax-int): as vLLM's ResponsesRequest reads an int ("3", 3.0, true)
        return _int(body, name)
    if not isinstance(value, kind):
        raise _bad(name, f"must be {kind.__name__}, got {type(value).__name__}")
    return value


def _int(body: dict[str, Any], name: str) -> int:
    """Field ``name`` (not null) as vLLM's pydantic int reads it (json_body.json_int,
    NOTE(lax-int)), else a 400 naming it."""
    value = json_int(body[name])
    if value is None:
        raise _bad(name, f"must be an integer, got {json.dumps(body[name])[:50]}")
    return value


def responses_to_chat(body: dict[str, Any], fields: FieldPolicy,
                      lookup: Callable[[str], StoredResponse | None]) -> ResponsesInput:
    """The chat request of one Responses body; ``lookup`` finds the tenant's stored
    responses (``previous_response_id``)."""
    ignored = fields.check(body, KNOWN_RESPONSES)
    if body.get("prompt") is not None:  # vLLM's ResponsesRequest.validate_prompt, its words
        raise _bad("prompt", "prompt template is not supported", "unsupported_parameter")
    fmt = _opt(body, "text", dict, {}).get("format") or {"type": "text"}
    instructions = _opt(body, "instructions", str, None)
    previous_id = _opt(body, "previous_response_id", str, None)
    before: tuple[dict[str, Any], ...] = ()
    if previous_id is not None:
        previous = lookup(previous_id)
        if previous is None:
            raise ResponseNotFoundError(previous_id)
        # NOTE(history): its system messages dropped
        before = tuple(m for m in previous.messages if m.get("role") != "system")
    conversation = before + tuple(input_messages(body.get("input")))
    # vLLM adds no system turn for empty instructions (responses/utils.py; echoed as sent)
    system = ({"role": "system", "content": instructions},) if instructions else ()
    chat = {k: body[k] for k in PASS_THROUGH if body.get(k) is not None}
    chat["messages"] = [dict(m) for m in system + conversation]
    max_output = _opt(body, "max_output_tokens", int, None)
    if max_output is not None:
        chat["max_tokens"] = max_output
    top_logprobs = _include(body, chat)
    truncation = _truncation(body, chat)
    reasoning = _reasoning(body, chat)
    include_reasoning = chat["include_reasoning"] = bool_field(body, "include_reasoning", True)
    chat.update(tool_fields(body))
    _constraint(body, fmt, chat)
    store = bool_field(body, "store", True)  # NOTE(lax-bool): as vLLM's model reads it
    return ResponsesInput(chat=chat, conversation=conversation, instructions=instructions,
                          previous_id=previous_id, store=store, metadata=_metadata(body),
                          max_output_tokens=max_output, ignored=ignored, text=_text_echo(body),
                          tools=ResponsesTools(body), truncation=truncation,
                          background=_background(body, store), top_logprobs=top_logprobs,
                          reasoning=reasoning, echoed=echoed_fields(body),
                          request_id=_request_id(body), include_reasoning=include_reasoning)


def _request_id(body: dict[str, Any]) -> str | None:
    """vLLM's ``request_id``: the response's id, as the client names it so it can fetch or
    cancel it by that name (a stored one of the same tenant and id is replaced, as vLLM's
    store replaces it); any string, "" too, as vLLM's ``str`` field takes it: the body's
    bound bounds it (the id is in the few whole-response events of a stream, never a
    delta's)."""
    return _opt(body, "request_id", str, None)


def _text_echo(body: dict[str, Any]) -> dict[str, Any] | None:
    """The response's ``text``: vLLM echoes the request's ``text`` as its pydantic
    ResponseTextConfig dumps it, every field (``format``, ``verbosity``; a json_schema format's
    ``description`` and ``strict``) null where not sent, and null when no ``text`` came; under
    a forcing ``tool_choice`` its tool parser's replacement (NOTE(forced-text)). ``strict``
    is echoed as the bool vLLM's model reads (NOTE(lax-bool))."""
    forced = forced_text_format(body)
    if forced is not None:
        return {"format": {**forced, "description": None}, "verbosity": None}
    text = body.get("text")
    if text is None:
        return None
    verbosity = text.get("verbosity")
    if verbosity not in VERBOSITIES:
        raise _bad("text.verbosity", "must be 'low', 'medium' or 'high'")
    fmt = text.get("format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":  # NOTE(lax-bool): strict
        # as its model read it ("yes": true); one it cannot read is the chat parser's 400
        fmt = {"description": None, "strict": None, **fmt}
        fmt["strict"] = json_bool(fmt["strict"])
    return {"format": fmt, "verbosity": verbosity}


def _background(body: dict[str, Any], store: bool) -> bool:
    """``background``: only with ``store``, vLLM's rule and words (its ResponsesRequest
    validate_background); what it runs: responses_background.py NOTE(background)."""
    background = bool_field(body, "background", False)  # NOTE(lax-bool)
    if background and not store:
        raise _bad("background", "background can only be used when `store` is true")
    return background


def _metadata(body: dict[str, Any]) -> dict[str, str] | None:
    """``metadata``, held to OpenAI's limits (at most 16 pairs, string keys of at most 64
    characters, string values of at most 512), as OpenAI checks them: the stored response
    keeps it, so it must not grow past what a client of OpenAI's API may send."""
    meta = _opt(body, "metadata", dict, None)
    if meta is None:
        return None
    if len(meta) > META_PAIRS:
        raise _bad("metadata", f"must have at most {META_PAIRS} pairs, got {len(meta)}")
    for k, v in meta.items():
        if len(k) > META_KEY:
            raise _bad("metadata", f"keys must be at most {META_KEY} characters")
        if not isinstance(v, str) or len(v) > META_VALUE:
            raise _bad("metadata", f"values must be strings of at most {META_VALUE} characters")
    return meta


def _truncation(body: dict[str, Any], chat: dict[str, Any]) -> str:
    """``truncation``: ``"auto"`` is chat's ``truncate_prompt_tokens: -1`` (the prompt cut to
    the model's context less one position, so it generates: NOTE(clamp) in
    context_budget.py), as vLLM reads it; ``"disabled"`` (the default) cuts nothing."""
    value = body.get("truncation")
    if value is None:
        return "disabled"
    if value not in TRUNCATIONS:
        raise _bad("truncation", f"must be 'auto' or 'disabled', got {json.dumps(value)[:40]}")
    if value == "auto":
        chat["truncate_prompt_tokens"] = -1
    return value


def _reasoning(body: dict[str, Any], chat: dict[str, Any]) -> dict[str, Any] | None:
    """``reasoning.effort`` is the chat template's ``reasoning_effort`` (vLLM's, vllm_fields.py);
    the response echoes ``reasoning`` as vLLM's pydantic Reasoning dumps it (null when not
    sent, its fields null where not sent)."""
    reasoning = _opt(body, "reasoning", dict, None)
    if reasoning is None:
        return None
    if reasoning.get("effort") is not None:
        chat["reasoning_effort"] = reasoning["effort"]
    return {"effort": None, "generate_summary": None, "summary": None, **reasoning}


def _include(body: dict[str, Any], chat: dict[str, Any]) -> int | None:
    """``include: ["message.output_text.logprobs"]`` asks for the output's logprobs, with
    ``top_logprobs`` alternatives each (chat's ``logprobs`` / ``top_logprobs``), as vLLM reads
    them; without it ``top_logprobs`` asks nothing. Other ``include`` values name output kinds
    this server never makes (reasoning, tool calls, images), so they change nothing. The
    logprobs asked (vLLM's echo: ``top_logprobs``, 0 when not sent) or None without them."""
    include = _opt(body, "include", list, [])
    if not all(isinstance(x, str) for x in include):
        raise _bad("include", "must be a list of strings")
    bad = next((i for i, x in enumerate(include) if x not in INCLUDABLE), None)
    if bad is not None:  # vLLM's ResponsesRequest.include: a Literal of these (a 400 there)
        raise _bad(f"include[{bad}]", f"must be one of {', '.join(INCLUDABLE)}, got "
                   f"{json.dumps(include[bad])[:60]}")
    # NOTE(lax-int): a string too ("2"): vLLM's Responses model reads it as any int field,
    # with no check_logprobs before it as chat has (logprob_fields.py); the bound is chat's
    top = None if body.get("top_logprobs") is None else _int(body, "top_logprobs")
    if INCLUDE_LOGPROBS in include:
        chat["logprobs"] = True
        if top is not None:
            chat["top_logprobs"] = top
        return 0 if top is None else top
    return None


def _constraint(body: dict[str, Any], fmt: dict[str, Any], chat: dict[str, Any]) -> None:
    """The output constraint: ``text.format`` as chat's ``response_format``, or vLLM's
    ``structured_outputs`` as chat's (guided_fields.py: each kind, the option keys, the 400s
    naming ``structured_outputs.<key>``). Both at once is vLLM's 400 naming
    structured_outputs, whatever the format's type (vLLM refuses any ``text.format`` there)."""
    so = body.get("structured_outputs")
    if so is None:
        constraint = response_format(fmt)
        if constraint is not None:
            chat["response_format"] = constraint
        return
    if _opt(body, "text", dict, {}).get("format") is not None:
        raise _bad("structured_outputs", "cannot be given with text.format: give one of them")
    tagged = isinstance(so, dict) and so.get("structural_tag") is not None
    if body.get("tool_choice") not in (None, "auto", "none") and not tagged:  # vLLM makes
        raise _bad("structured_outputs", "cannot be given with a tool_choice forcing a call "
                   "(its schema is the text.format): give one of them")  # the call text.format
    # a structural tag holds the forced call's output instead (forced_tool_fields.py
    # NOTE(tool-forced)); the text stays the client's (NOTE(forced-text) in responses_tools.py)
    chat["structured_outputs"] = so


def response_format(fmt: Any) -> dict[str, Any] | None:
    """``text.format`` -> the chat ``response_format`` of the same constraint: OpenAI's
    ``{"type": "json_schema", "name", "schema", "description"?, "strict"?}`` (the chat shape
    nests all but the type under ``json_schema``) or ``{"type": "json_object"}``. The chat
    parser checks the rest; its errors name ``text.format`` (responses_api.py)."""
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return dict(fmt)
    if kind != "json_schema":
        raise _bad("text.format", "must be {'type': 'text'}, {'type': 'json_object'} or "
                   "{'type': 'json_schema', 'name': ..., 'schema': {...}}")
    if not isinstance(fmt.get("name"), str):
        raise _bad("text.format", "name is required for the json_schema format")
    return {"type": kind, "json_schema": {k: v for k, v in fmt.items() if k != "type"}}
