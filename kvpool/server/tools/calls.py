"""One tool call, as the response carries it (vLLM's and OpenAI's shape)::

    {"id": "chatcmpl-tool-<hex>", "type": "function",
     "function": {"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}}

``arguments`` is JSON *text* (OpenAI's rule): a client ``json.loads`` it.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kvpool.server.tools.scan import json_values

__all__ = ["TOOL_NAME", "Extracted", "ToolCall", "ToolParser", "arguments_delta",
           "arguments_text", "call_from_json", "escaped_surrogates", "new_call_id",
           "tagged_reads"]

# NOTE(tool-names): a tool's name, in a request and in a parser's reading of an output: 1-256
# characters, none a control character. vLLM takes any string (its FunctionDefinition.name is a
# str); OpenAI's a-z, A-Z, 0-9, _ and - (64 at most) refused the names agents use
# ("github/create_issue", "server:tool", "café"). A name goes into JSON strings and templates
# escaped, and a parser that reads it out of its own markup still finds its end.
TOOL_NAME = re.compile(r"[^\x00-\x1f\x7f-\x9f]{1,256}")


def new_call_id() -> str:
    return "chatcmpl-tool-" + uuid.uuid4().hex


def arguments_text(value: Any) -> str:
    """A parsed arguments value as the JSON text a response carries.
    NOTE(lone-args): a lone UTF-16 surrogate in it (the model wrote an unpaired ``\\ud83d``,
    legal JSON) stays the escape the model wrote, which reads back as the same value: text
    holding the surrogate itself is no text a body may carry (json_body.py refuses it), so a
    call sent back inline (chat's tool_calls, a Responses function_call) was a 400. vLLM's
    parsers dump with ensure_ascii=False too, and its JSONResponse (UTF-8) cannot encode that."""
    return escaped_surrogates(value if isinstance(value, str)
                              else json.dumps(value, ensure_ascii=False))


def escaped_surrogates(text: str) -> str:
    """``text``, each lone surrogate in it written as its JSON escape (``\\ud83d``): the
    only code points UTF-8 cannot encode, which backslashreplace writes so."""
    return text if text.isascii() else text.encode("utf-8", "backslashreplace").decode()


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call: the function's name and its arguments as JSON text."""

    name: str
    arguments: str
    id: str = field(default_factory=new_call_id)

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}

    def opening_delta(self, index: int) -> dict[str, Any]:
        """A stream's first delta of a call: index, id, type and the name (vLLM's order)."""
        return {"tool_calls": [{"index": index, "id": self.id, "type": "function",
                                "function": {"name": self.name}}]}


def arguments_delta(index: int, piece: str) -> dict[str, Any]:
    """A later delta of call ``index``: a piece of its arguments text."""
    return {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}


@dataclass(frozen=True, slots=True)
class Extracted:
    """What a parser read from a whole output: the content (None when empty) and the calls.
    No calls means the output is plain content."""

    content: str | None
    calls: tuple[ToolCall, ...] = ()

    @classmethod
    def plain(cls, text: str) -> "Extracted":
        return cls(text)

    @classmethod
    def of(cls, text: str, start: int, calls: tuple[ToolCall, ...]) -> "Extracted":
        """The calls read from ``text`` past its first marker (at ``start``): the text before
        it is the content; no call read, the whole text is."""
        return cls(text[:start] or None, calls) if calls else cls(text)


def tagged_reads(text: str, pos: int, tags: tuple[str, str],
                 read: Callable[[str], ToolCall | None]) -> tuple[tuple[ToolCall, ...], int]:
    """The calls of a section of tagged calls from offset ``pos`` on (``tags``: a call's
    opening and end; ``read`` makes a call of what lies between them), and where a next
    reading goes on (ToolParser.calls_from). A segment that ``read`` finds no call ends the
    reading (-1), so a streamed prefix reads no call the whole output lacks."""
    begin, end = tags
    calls: list[ToolCall] = []
    at = text.find(begin, pos)
    while at >= 0 and (close := text.find(end, at)) >= 0:
        call = read(text[at + len(begin):close])
        if call is None:
            return tuple(calls), -1
        calls.append(call)
        pos = close + len(end)
        at = text.find(begin, pos)
    return tuple(calls), pos


def call_from_json(obj: Any) -> ToolCall | None:
    """``{"name": ..., "arguments" | "parameters": {...}}`` (the arguments an object or its
    JSON text; left out: none) -> a call; anything else -> None."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # some models write the arguments as JSON text
        decoded, _ = json_values(args)
        args = decoded[0] if len(decoded) == 1 else None
    return ToolCall(obj["name"], arguments_text(args)) if isinstance(args, dict) else None


class ToolParser:
    """What every ``--tool-call-parser`` declares (tools/stream.py reads it): ``markers``,
    what may open a call; ``at_start``, calls only open the output; ``keeps_special_tokens``,
    its markers are special tokens, so the text must keep them; ``null_content``, its call
    deltas carry ``"content": null`` as vLLM's parser of that name writes them; ``closers``,
    the tags that end a call, or where there are none the ``brackets`` (pairs) and ``quotes``
    of the calls' syntax (tools/tool_text.py: when the stream reads the text again)."""

    name = ""
    markers: tuple[str, ...] = ()
    closers: tuple[str, ...] = ()
    brackets = "{}[]"
    quotes = '"'
    at_start = False
    keeps_special_tokens = False
    null_content = False

    def for_tools(self, tools: tuple[dict[str, Any], ...]) -> "ToolParser":
        """The parser that reads one request's output, given its ``tools``: this one, where
        the format writes its arguments as JSON (tools/typed.py types the others')."""
        return self

    def extract(self, text: str) -> Extracted:
        """A whole output: the calls read from its first marker on (``calls_from``), the text
        before the marker its content; no call read, plain content. A parser overrides this
        or ``calls_from``, each written by the other."""
        found = [i for m in self.markers if (i := text.find(m)) >= 0]
        if not found:
            return Extracted.plain(text)
        start = min(found)
        return Extracted.of(text, start, self.calls_from(text, start, 0)[0])

    def calls_from(self, text: str, pos: int, seen: int) -> tuple[tuple[ToolCall, ...], int]:
        """A stream's next reading (tools/stream.py NOTE(resume)): of ``text``, everything
        from the first marker on, the calls not given before, and the offset the next
        reading starts from (-1: no call can follow). A parser that can go on where its
        last reading ended (``pos``, the offset it returned) reads only from there; this
        one reads the whole text again and drops the ``seen`` calls given before."""
        return self.extract(text).calls[seen:], 0
