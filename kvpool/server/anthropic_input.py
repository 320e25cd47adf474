"""An Anthropic Messages body (``POST /v1/messages``, ``/v1/messages/count_tokens``) -> the
chat body the chat parser takes (protocol.py), as vLLM 0.33 converts it (docs/architecture.md
"The Messages API").

::

    system           a string or text blocks, joined with no separator: one system message
                     first (a text block opening with Claude Code's per-request
                     ``x-anthropic-billing-header`` is dropped: it would defeat the prefix
                     cache)
    messages[i]      role user | assistant | system, content a string or blocks:
      text           a text part (an empty one is skipped); one part alone is the string
      tool_use       (assistant) a tool call {id, name, arguments: json(input)}
      tool_result    (user) a ``tool`` message {tool_call_id, content: its text}; (assistant)
                     a text part "Tool result: ..."
      image          a 400: the model reads text only, as vLLM refuses an image for such a
                     model (a user tool result's image items too); one with no source is
                     dropped, as vLLM drops it
      thinking       the message's reasoning, its blocks joined (an assistant's reaches the
                     template: chat_messages.py, as vLLM hands it on)
      redacted_thinking, tool_reference
                     accepted, dropped
                     a system message's text stays where it is, or joins the first system
                     message when the template wants that first (NOTE(merge-system))
    max_tokens       required, > 0 (the chat route clamps and bounds it as for chat)
    stop_sequences   chat's ``stop``; temperature, top_p, top_k, cache_salt pass through;
                     metadata is ignored
    chat_template_kwargs  passed through, count_tokens' too (the server's
                     --default-chat-template-kwargs go under them: anthropic_api.py)
    tools            [{name, description?, input_schema, strict?}] -> chat's function tools
                     (a schema without ``type`` gets ``object``); with tools and no
                     tool_choice, chat's ``auto``
    tool_choice      {type: auto | any | tool (+ name) | none, disable_parallel_tool_use?}
                     -> auto | required | named | none (+ parallel_tool_calls)
    output_config    format {type json_schema, schema} -> chat's response_format;
                     effort (low | medium | high | xhigh | max) -> reasoning_effort
    thinking         {type disabled} -> reasoning_effort "none", or the effort
                     anthropic_effort.py resolves for the template; enabled (budget_tokens
                     >= 1024, < max_tokens) -> thinking_token_budget (vLLM's; none without
                     --reasoning-parser, where vLLM answers 400);
                     adaptive is checked and changes nothing, display (summarized | omitted |
                     updates) too

NOTE(lax-anthropic): vLLM validates the body in pydantic's lax mode, so an int field
(max_tokens, thinking.budget_tokens) also takes a bool, a number without a fraction or a
string such as "4" (NOTE(lax-int)) and a bool field (stream,
tool_choice.disable_parallel_tool_use) 0, 1 or "false", "yes"... (NOTE(lax-bool)); 4.5 and 2
stay 400s. temperature, top_p and top_k are the chat route's, which reads them so too.

A user message left with nothing (only tool results) is not sent, as vLLM leaves it out.
Anything else in a known field is a 400 naming it (``messages[2].content[0].type``); a field
the API does not know is ignored and listed (body_fields.py), as vLLM ignores it.
"""

from __future__ import annotations

import json
from typing import Any

from kvpool.errors import RequestError, shown
from kvpool.server.field_policy import FieldPolicy
from kvpool.server.json_body import json_bool, json_int

_bad = RequestError.field  # errors.py: "param: message", with the param named

__all__ = ["KNOWN_COUNT_TOKENS", "KNOWN_MESSAGES", "messages_to_chat"]

BILLING_HEADER = "x-anthropic-billing-header"  # Claude Code's per-request attribution line
ROLES = ("user", "assistant", "system")
BLOCKS = ("text", "image", "tool_use", "tool_result", "tool_reference", "thinking",
          "redacted_thinking", "tool_addition", "tool_removal")
CHOICES = {"auto": "auto", "any": "required", "none": "none"}
EFFORTS = ("low", "medium", "high", "xhigh", "max")  # vLLM's AnthropicEffort
DISPLAYS = ("summarized", "omitted", "updates")  # its thinking display: taken, unused
PASS_THROUGH = ("temperature", "top_p", "top_k", "cache_salt")
KNOWN_COUNT_TOKENS = frozenset({"model", "messages", "system", "tools", "tool_choice",
                                "output_config", "thinking", "chat_template_kwargs"})
KNOWN_MESSAGES = KNOWN_COUNT_TOKENS | {"max_tokens", "metadata", "stop_sequences", "stream",
                                       "temperature", "top_p", "top_k", "cache_salt"}


def messages_to_chat(body: dict[str, Any], fields: FieldPolicy, *, count: bool = False,
                     merge_system: bool = False, thinks: bool = False,
                     disabled_effort: str = "none") -> tuple[dict[str, Any], tuple[str, ...]]:
    """The chat body of one Messages body (``count``: a count_tokens body, no sampling), and
    the unknown fields it ignored. ``merge_system``: inline system messages join the first
    (anthropic_api.py NOTE(merge-system)); ``thinks``: the server reads reasoning
    (--reasoning-parser), so a thinking budget is chat's thinking_token_budget;
    ``disabled_effort``: the reasoning_effort of disabled thinking (anthropic_effort.py)."""
    ignored = fields.check(body, KNOWN_COUNT_TOKENS if count else KNOWN_MESSAGES)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("model", "is required: the name of a served model")
    chat: dict[str, Any] = {"model": model, "messages": _messages(body, merge_system)}
    if body.get("chat_template_kwargs") is not None:  # count_tokens' too, as vLLM's
        chat["chat_template_kwargs"] = body["chat_template_kwargs"]
    if not count:
        chat.update(_sampling(body))
    chat.update(_tools(body))
    chat.update(_output(body, chat.get("max_tokens"), thinks, disabled_effort))
    return chat, ignored


def _sampling(body: dict[str, Any]) -> dict[str, Any]:
    given = body.get("max_tokens")
    if given is None:
        raise _bad("max_tokens", "is required")
    max_tokens = json_int(given)  # NOTE(lax-anthropic): 4.0, "4", true (1) too
    if max_tokens is None or max_tokens <= 0:
        raise _bad("max_tokens", f"must be a positive integer, got {shown(given)}")
    out = {k: body[k] for k in PASS_THROUGH if body.get(k) is not None}
    out["max_tokens"] = max_tokens
    stop = body.get("stop_sequences")
    if stop is not None:
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise _bad("stop_sequences", "must be a list of strings")
        out["stop"] = stop
    stream = body.get("stream")
    if stream is not None and json_bool(stream) is None:  # NOTE(lax-anthropic): 0, "false"
        raise _bad("stream", f"must be a boolean, got {shown(stream)}")
    out["stream"] = bool(json_bool(stream))
    if body.get("metadata") is not None and not isinstance(body["metadata"], dict):
        raise _bad("metadata", "must be an object")
    return out


# ---- messages -----------------------------------------------------------------------------
def _messages(body: dict[str, Any], merge_system: bool) -> list[dict[str, Any]]:
    """The system prompt first, then each message's chat messages; with ``merge_system`` an
    inline system message's text is appended to the first instead (no separator)."""
    system = [_system_text(body.get("system"), "system", strip_string=False)]
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise _bad("messages", "must be a list of {role, content} message objects")
    out = []
    for i, m in enumerate(messages):
        for msg in _message(m, f"messages[{i}]"):
            if merge_system and msg["role"] == "system":
                system.append(msg["content"])
            else:
                out.append(msg)
    text = "".join(system)
    return [{"role": "system", "content": text}] + out if text else out


def _system_text(value: Any, where: str, strip_string: bool = True) -> str:
    """A system prompt's text: a string, or its text blocks joined with no separator
    (vLLM drops a billing header from a top-level system string only when it is a block)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return "" if strip_string and value.startswith(BILLING_HEADER) else value
    parts = []
    for block in _blocks(value, where):
        text = block.get("text") if block["type"] == "text" else None
        if text and not text.startswith(BILLING_HEADER):
            parts.append(text)
    return "".join(parts)


def _blocks(value: Any, where: str) -> list[dict[str, Any]]:
    """Content blocks, each an object of a known type (tool changes: unsupported here)."""
    if not isinstance(value, list):
        raise _bad(where, "must be a string or a list of content blocks")
    for j, block in enumerate(value):
        at = f"{where}[{j}]"
        if not isinstance(block, dict):
            raise _bad(at, "must be a content block object with a type")
        if block.get("type") not in BLOCKS:
            raise _bad(f"{at}.type", f"must be one of {', '.join(BLOCKS)}, got "
                       f"{json.dumps(block.get('type'))[:40]}")
        if block["type"] in ("tool_addition", "tool_removal"):
            raise _bad(f"{at}.type", f"{block['type']} blocks are not supported by this "
                       "server")
        if block.get("text") is not None and not isinstance(block["text"], str):
            raise _bad(f"{at}.text", "must be a string")
    return value


def _message(m: Any, where: str) -> list[dict[str, Any]]:
    """One Anthropic message -> its chat messages (tool results split off)."""
    if not isinstance(m, dict):
        raise _bad(where, "must be an object with 'role' and 'content'")
    role = m.get("role")
    if role not in ROLES:
        raise _bad(f"{where}.role", f"must be one of {', '.join(ROLES)}, got "
                   f"{json.dumps(role)[:40]}")
    content = m.get("content")
    if role == "system":
        text = _system_text(content, f"{where}.content") if content is not None else None
        if content is None:
            raise _bad(f"{where}.content", "is required")
        return [{"role": "system", "content": text}] if text else []
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    return _block_message(role, _blocks(content, f"{where}.content"), f"{where}.content")


def _block_message(role: str, blocks: list[dict[str, Any]],
                   where: str) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    thought: list[str] = []  # thinking blocks: the message's reasoning, as vLLM joins them
    for j, block in enumerate(blocks):
        at, kind = f"{where}[{j}]", block["type"]
        if kind == "text" and block.get("text"):
            parts.append({"type": "text", "text": block["text"]})
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            thought.append(block["thinking"])
        elif kind == "image" and block.get("source"):  # vLLM drops one with no source
            _no_image(at)
        elif kind == "tool_use":
            calls.append(_call(block, at))
        elif kind == "tool_result" and role == "user":
            results.append(_result(block, at))
        elif kind == "tool_result":
            parts.append({"type": "text", "text": f"Tool result: {_result_text(block, at)}"})
    msg: dict[str, Any] = {"role": role}
    if parts:
        msg["content"] = parts[0]["text"] if len(parts) == 1 else parts
    if calls:
        msg["tool_calls"] = calls
    if thought:
        msg["reasoning"] = "".join(thought)
    keep = role != "user" or "content" in msg
    return results + [msg] if keep else results


def _no_image(at: str) -> None:
    """vLLM hands an image to the model's multimodal processor, which a text-only model
    lacks: its 400."""
    raise _bad(f"{at}.type", "image content is not supported: this server's model reads text "
               "only")


def _call(block: dict[str, Any], at: str) -> dict[str, Any]:
    name, args, cid = block.get("name"), block.get("input"), block.get("id")
    if not isinstance(name, str):
        raise _bad(f"{at}.name", "must be a string")
    if args is not None and not isinstance(args, dict):
        raise _bad(f"{at}.input", "must be an object")
    if cid is not None and not isinstance(cid, str):
        raise _bad(f"{at}.id", "must be a string")
    call = {"type": "function", "function": {"name": name, "arguments": json.dumps(args or {})}}
    return {"id": cid, **call} if cid else call


def _result(block: dict[str, Any], at: str) -> dict[str, Any]:
    cid = block.get("tool_use_id")
    if cid is not None and not isinstance(cid, str):
        raise _bad(f"{at}.tool_use_id", "must be a string")
    content = block.get("content")
    for k, item in enumerate(content if isinstance(content, list) else ()):
        if isinstance(item, dict) and item.get("type") == "image":  # source or not, as vLLM
            _no_image(f"{at}.content[{k}]")
    return {"role": "tool", "tool_call_id": cid or "", "content": _result_text(block, at)}


def _result_text(block: dict[str, Any], at: str) -> str:
    """A tool result's text: a string, or its text items joined with newlines."""
    content = block.get("content")
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise _bad(f"{at}.content", "must be a string or a list of content items")
    texts = [item.get("text") for item in content
             if isinstance(item, dict) and item.get("type") == "text"]
    if not all(t is None or isinstance(t, str) for t in texts):
        raise _bad(f"{at}.content", "a text item's text must be a string")
    return "\n".join(t or "" for t in texts)


# ---- tools and output ---------------------------------------------------------------------
def _tools(body: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise _bad("tools", "must be a list of {name, description, input_schema} objects")
        out["tools"] = [_tool(t, f"tools[{i}]") for i, t in enumerate(tools)]
        out["tool_choice"] = "auto"
    choice = body.get("tool_choice")
    if choice is None:
        return out
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind not in ("auto", "any", "tool", "none"):
        raise _bad("tool_choice", "must be {'type': 'auto' | 'any' | 'tool' | 'none'}")
    if kind == "tool" and not (isinstance(choice.get("name"), str) and choice["name"]):
        raise _bad("tool_choice.name", "is required when type is 'tool'")
    no_parallel = choice.get("disable_parallel_tool_use")
    if no_parallel is not None and json_bool(no_parallel) is None:  # NOTE(lax-anthropic)
        raise _bad("tool_choice.disable_parallel_tool_use", "must be a boolean")
    out["parallel_tool_calls"] = not json_bool(no_parallel)
    out["tool_choice"] = CHOICES.get(kind) or {"type": "function",
                                               "function": {"name": choice["name"]}}
    return out


def _tool(tool: Any, where: str) -> dict[str, Any]:
    if not isinstance(tool, dict):
        raise _bad(where, "must be a {name, description, input_schema} object")
    schema = tool.get("input_schema")
    if not isinstance(schema, dict):
        raise _bad(f"{where}.input_schema", "is required: a JSON schema object")
    # an empty input_schema stays empty: a forced call of it is {} (tools/request.py
    # NOTE(closed-tools)), as vLLM passes it on; any other is an object schema
    fn = {"name": tool.get("name"), "parameters": {"type": "object", **schema} if schema else {}}
    for key in ("description", "strict"):
        if tool.get(key) is not None:
            fn[key] = tool[key]
    return {"type": "function", "function": fn}


def _output(body: dict[str, Any], max_tokens: int | None, thinks: bool,
            disabled_effort: str) -> dict[str, Any]:
    """output_config (format, effort) and thinking, as chat fields."""
    out: dict[str, Any] = {}
    config = body.get("output_config")
    if config is not None:
        if not isinstance(config, dict):
            raise _bad("output_config", "must be an object")
        fmt = config.get("format")
        if fmt is not None and not isinstance(fmt, dict):
            raise _bad("output_config.format", "must be an object")
        if fmt is not None and fmt.get("type", "json_schema") != "json_schema":
            # vLLM's AnthropicJsonOutputFormat.type is Literal["json_schema"]: a 400 there
            raise _bad("output_config.format.type", "must be 'json_schema', got "
                       f"{json.dumps(fmt['type'])[:40]}")
        if fmt is not None and fmt.get("schema") is not None:
            out["response_format"] = {"type": "json_schema", "json_schema": {
                "name": "json_schema", "schema": fmt["schema"]}}
        effort = config.get("effort")
        if effort is not None and effort not in EFFORTS:
            raise _bad("output_config.effort", f"must be one of {', '.join(EFFORTS)}, got "
                       f"{json.dumps(effort)[:40]}")
        if effort is not None:
            out["reasoning_effort"] = effort
    kind, budget = _thinking(body.get("thinking"), max_tokens)
    if kind == "disabled":
        out["reasoning_effort"] = disabled_effort
    elif kind == "enabled" and thinks:  # vLLM's budget; with no reasoning parser, where vLLM
        out["thinking_token_budget"] = budget  # answers 400: none
    return out


def _thinking(thinking: Any, max_tokens: int | None) -> tuple[str | None, int | None]:
    """The thinking config's type and budget, checked as vLLM's request model checks them."""
    if thinking is None:
        return None, None
    kind = thinking.get("type") if isinstance(thinking, dict) else None
    if kind not in ("enabled", "disabled", "adaptive"):
        raise _bad("thinking.type", "must be one of enabled, disabled, adaptive")
    budget = json_int(thinking.get("budget_tokens"))  # NOTE(lax-anthropic): "2000" too
    if kind == "enabled" and not (budget is not None and budget >= 1024):
        raise _bad("thinking.budget_tokens", "must be an integer >= 1024")
    if kind == "enabled" and max_tokens is not None and budget >= max_tokens:
        raise _bad("thinking.budget_tokens", "must be less than max_tokens")
    display = thinking.get("display")
    if kind != "disabled" and display is not None and display not in DISPLAYS:
        raise _bad("thinking.display", f"must be one of {', '.join(DISPLAYS)}, got "
                   f"{json.dumps(display)[:40]}")
    return kind, budget
