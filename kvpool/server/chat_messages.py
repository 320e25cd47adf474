"""Chat ``messages`` -> ``(role, text)`` pairs the chat templates render.

A message is ``{"role", "content"}``; the role one of system, developer, user, assistant;
content a string or a list of ``{"type": "text", "text"}`` parts (joined); an assistant's
``null`` content is empty. Anything else is a 400 naming the message (``messages[i].role``).
"""

from __future__ import annotations

import json
from typing import Any

from kvpool.errors import RequestError
from kvpool.server.builtin_template import ChatTemplate

__all__ = ["parse_messages"]


def _bad(param: str, message: str) -> RequestError:
    return RequestError(f"{param}: {message}", param=param)


def parse_messages(messages: Any) -> list[tuple[str, str]]:
    if messages is None:
        raise _bad("messages", "is required")
    if not isinstance(messages, list) or not messages:
        raise _bad("messages", "must be a non-empty list of message objects")
    roles = ChatTemplate.ROLES
    out = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise _bad(where, "must be an object with 'role' and 'content'")
        role = m.get("role")
        if role not in roles:
            raise _bad(f"{where}.role", f"must be one of {', '.join(roles)}, "
                       f"got {json.dumps(role)[:40]}")
        out.append((role, _content(m.get("content"), f"{where}.content", role)))
    return out


def _content(content: Any, param: str, role: str) -> str:
    if isinstance(content, str):
        return content
    if content is None and role == "assistant":
        return ""
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" \
                    or not isinstance(part.get("text"), str):
                raise _bad(param, "only text content parts ({'type': 'text', 'text': ...}) "
                           "are supported")
            texts.append(part["text"])
        return "".join(texts)
    raise _bad(param, "must be a string or a list of text parts")
