"""A chat choice's text read for what it holds beside the answer: a reasoning model's thinking
(reasoning.py) and tool calls (tools/). Reasoning is read first; the tool reader sees the answer
only, as in vLLM, whose tool parsers run on the content after the reasoning parser.

- streamed: :class:`ChoiceReader` turns each piece of text into deltas, ``{"reasoning": ...}``
  while the thinking lasts, then the tool stream's content and call deltas (``{"content": ...}``
  without tools);
- whole: :func:`chat_message` builds the body's assistant message and its finish reason.
"""

from __future__ import annotations

from typing import Any

from kvpool.server.parsed_request import ParsedRequest

__all__ = ["ChoiceReader", "chat_message", "reads_choices"]


def reads_choices(req: ParsedRequest) -> bool:
    """Whether ``req``'s choices are read beyond plain content."""
    return req.tools is not None or req.reasoning is not None


class ChoiceReader:
    """One streamed chat choice: its text in, its deltas out."""

    def __init__(self, req: ParsedRequest) -> None:
        self.think = req.reasoning.stream() if req.reasoning is not None else None
        self.show = req.reasoning is not None and req.reasoning.include
        self.tools = req.tools.stream() if req.tools is not None else None

    @property
    def called(self) -> bool:
        """Whether a tool call went out."""
        return self.tools is not None and self.tools.called

    def feed(self, text: str, done: bool) -> list[dict[str, Any]]:
        """The deltas of the next ``text``; ``done``: the choice ended with it."""
        if self.think is None:
            parts = [("content", text)]
        else:
            parts = self.think.feed(text) + (self.think.finish() if done else [])
        out: list[dict[str, Any]] = []
        for kind, piece in parts:
            if kind == "reasoning":
                out += [{"reasoning": piece}] if self.show else []
            elif self.tools is not None:
                out += self.tools.feed(piece)
            elif piece:
                out.append({"content": piece})
        if done and self.tools is not None:
            out += self.tools.finish()
        return out


def chat_message(req: ParsedRequest, text: str, reason: str,
                 echo: str = "") -> tuple[dict[str, Any], str]:
    """The body's assistant message for a choice's whole ``text`` (after ``echo``, its
    prompt's chat echo), and its finish reason (``tool_calls`` where a call was read from an
    output that stopped)."""
    reasoning, content = (None, text) if req.reasoning is None else req.reasoning.split(text)
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning is not None:
        message["reasoning"] = reasoning
    tools = req.tools
    if tools is None or content is None:
        if content is not None:
            message["content"] = echo + content
        return message, reason
    got = tools.extract(content)
    forced = tools.forced  # NOTE(forced-content) in tools/forced.py
    message["content"] = got.content or "" if forced else got.content
    if got.calls:  # none read: no key, as vLLM 0.33's ChatMessage drops an empty list
        message["tool_calls"] = [c.as_dict() for c in got.calls]
    called = got.calls and reason == "stop" and tools.call_finish
    return message, "tool_calls" if called else reason
