"""The built-in chat template, for a model whose tokenizer carries none (the model's own
Jinja template is chat_template.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from kvpool.server.chat_messages import ROLES, message_dict

__all__ = ["ChatTemplate"]

TOOLS_INTRO = ("# Tools\n\nYou may call one or more of these functions (one JSON signature a "
               "line):\n")
TOOLS_HOW = ('To call a function, reply with <tool_call>{"name": NAME, "arguments": '
             '{...}}</tool_call>, once for each call.')


def _call_text(call: dict[str, Any]) -> str:
    fn = call["function"]
    return "<tool_call>" + json.dumps({"name": fn["name"], "arguments": fn["arguments"]},
                                      ensure_ascii=False) + "</tool_call>"


def _tools_text(tools: Sequence[dict[str, Any]]) -> str:
    lines = [json.dumps(t.get("function", t), ensure_ascii=False) for t in tools]
    return TOOLS_INTRO + "\n".join(lines) + "\n" + TOOLS_HOW


class ChatTemplate:
    """The built-in chat template (the tokenizer carries none)::

        <|system|>\\n{content}\\n<|end|>\\n<|user|>\\n{content}\\n<|end|>\\n<|assistant|>\\n

    The markers are plain text (the built-in tokenizer encodes them as bytes, so user content
    cannot forge a control token); ``developer`` messages render as ``system``. With
    ``tools`` the system turn (one is opened when the conversation has none) lists their
    signatures and asks for Hermes-style ``<tool_call>{json}</tool_call>`` calls, so
    ``--tool-call-parser hermes`` reads them; an assistant's calls render the same way and a
    tool result is a ``<|tool|>`` turn.
    """

    ROLES = ROLES
    add_special_tokens = True  # the markers are text: the tokenizer adds BOS

    def render(self, messages: Sequence[tuple], *, add_generation_prompt: bool = True,
               continue_final_message: bool = False, variables: Any = None,
               tools: Sequence[dict[str, Any]] | None = None) -> str:
        """``variables`` (chat_template_kwargs): this template has none to read."""
        chat = [message_dict(m) for m in messages]
        if tools:
            if chat[0]["role"] in ("system", "developer"):
                chat[0] = {**chat[0], "content": chat[0]["content"] + "\n\n" + _tools_text(tools)}
            else:
                chat.insert(0, {"role": "system", "content": _tools_text(tools)})
        parts = []
        for m in chat:
            role = "system" if m["role"] == "developer" else m["role"]
            calls = m.get("tool_calls")
            text = m["content"] + "".join(map(_call_text, calls)) if calls else m["content"]
            parts.append(f"<|{role}|>\n{text}\n<|end|>\n")
        if continue_final_message:  # whoever's it is, as vLLM and transformers continue it
            parts[-1] = parts[-1][: -len("\n<|end|>\n")]  # left open: the model continues it
        elif add_generation_prompt:
            parts.append("<|assistant|>\n")
        return "".join(parts)
