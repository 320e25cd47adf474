"""The built-in chat template, for a model whose tokenizer carries none (the model's own
Jinja template is chat_template.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvpool.errors import RequestError

__all__ = ["ChatTemplate"]


class ChatTemplate:
    """The built-in chat template (the tokenizer carries none)::

        <|system|>\\n{content}\\n<|end|>\\n<|user|>\\n{content}\\n<|end|>\\n<|assistant|>\\n

    The markers are plain text (the built-in tokenizer encodes them as bytes, so user content
    cannot forge a control token); ``developer`` messages render as ``system``.
    """

    ROLES = ("system", "developer", "user", "assistant")
    add_special_tokens = True  # the markers are text: the tokenizer adds BOS

    def render(self, messages: Sequence[tuple[str, str]], *, add_generation_prompt: bool = True,
               continue_final_message: bool = False, variables: Any = None) -> str:
        """``variables`` (chat_template_kwargs): this template has none to read."""
        parts = []
        for role, content in messages:
            role = "system" if role == "developer" else role
            parts.append(f"<|{role}|>\n{content}\n<|end|>\n")
        if continue_final_message:
            if messages[-1][0] != "assistant":
                raise RequestError("continue_final_message: the last message must be the "
                                   "assistant's, to be continued",
                                   param="continue_final_message")
            parts[-1] = parts[-1][: -len("\n<|end|>\n")]  # left open: the model continues it
        elif add_generation_prompt:
            parts.append("<|assistant|>\n")
        return "".join(parts)
