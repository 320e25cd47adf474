"""The built-in chat template, for a model whose tokenizer carries none (the model's own
Jinja template is chat_template.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from kvpool.server.chat_messages import ROLES, message_dict

__all__ = ["JINJA_SOURCE", "ChatTemplate"]

TOOLS_INTRO = ("# Tools\n\nYou may call one or more of these functions (one JSON signature a "
               "line):\n")
TOOLS_HOW = ('To call a function, reply with <tool_call>{"name": NAME, "arguments": '
             '{...}}</tool_call>, once for each call.')

_END = r'"\n<|end|>\n"'
# NOTE(builtin-jinja): the built-in template as Jinja, for clients that render it themselves
# (GET /tokenizer_info's chat_template: lm-eval's RemoteTokenizer, under StrictUndefined).
# It renders what ChatTemplate.render does, tools and calls included
# (tests/server/test_tokenizer_info.py); ChatTemplate stays the renderer the server runs.
JINJA_SOURCE = "\n".join((
    '{%- set has_tools = tools is defined and tools -%}{%- if has_tools -%}',
    "{%- set ns = namespace(text=" + json.dumps(TOOLS_INTRO) + ") -%}",
    '{%- for t in tools -%}{%- set ns.text = ns.text + ((t["function"] if "function" in t',
    ' else t) | tojson) + "\\n" -%}{%- endfor -%}',
    "{%- set tools_text = ns.text + " + json.dumps(TOOLS_HOW) + " -%}",
    '{%- if messages[0]["role"] not in ["system", "developer"] -%}',
    '{{- "<|system|>\\n" + tools_text + ' + _END + ' -}}{%- endif -%}{%- endif -%}',
    '{%- for m in messages -%}',
    '{%- set role = "system" if m["role"] == "developer" else m["role"] -%}',
    '{{- "<|" + role + "|>\\n" + m["content"] -}}',
    '{%- if loop.first and has_tools and m["role"] in ["system", "developer"] -%}',
    '{{- "\\n\\n" + tools_text -}}{%- endif -%}',
    '{%- if "tool_calls" in m and m["tool_calls"] -%}{%- for c in m["tool_calls"] -%}',
    '{{- "<tool_call>" + ({"name": c["function"]["name"], "arguments":',
    ' c["function"]["arguments"]} | tojson) + "</tool_call>" -}}{%- endfor -%}{%- endif -%}',
    "{{- " + _END + " -}}{%- endfor -%}",
    '{%- if add_generation_prompt -%}{{- "<|assistant|>\\n" -}}{%- endif -%}'))


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
    source = JINJA_SOURCE  # the same template as Jinja (NOTE(builtin-jinja))
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
