"""Per-request ``chat_template`` sources, compiled once and kept in a small LRU.

A client that sends its own template (vLLM's ``chat_template`` field) usually sends the same
one on every request; compiling Jinja each time would cost more than rendering. At most
``MAX_TEMPLATES`` compiled templates are kept, so a client sending a new source every time
holds no more memory than that. A per-request template is rendered with the model's special
tokens (``bos_token``...) like the model's own, and carries its own BOS.

NOTE(untrusted-template): a template is code the server runs. Jinja's sandbox keeps it from
the host, not from the CPU or memory: nested loops or a repeated string can hold the event
loop for seconds or take gigabytes. So, as vLLM does, a request's template is refused (400)
unless the server was started with ``--trust-request-chat-template``, for deployments whose
clients are trusted like the operator (docs/architecture.md "A request's path"). A request
naming one of the tokenizer's templates ("tool_use") is refused so too, as vLLM refuses it:
vLLM checks the field before it resolves a name.

A name is resolved as vLLM 0.33 resolves it (transformers' get_chat_template): where the
tokenizer holds named templates, the one of that name renders the request, with or without
``tools`` (NOTE(request-template-name) in chat_template.py); any other string is a template.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from kvpool.errors import RequestError
from kvpool.server.chat_template import ChatTemplateError, ModelChatTemplate

__all__ = ["MAX_TEMPLATES", "TemplateCache"]

MAX_TEMPLATES = 16


class TemplateCache:
    """Compiled per-request templates, keyed by source (least recently used goes first)."""

    def __init__(self, default: Any, trusted: bool = False) -> None:
        self.default = default  # the server's template (model's or built-in)
        self.trusted = trusted  # NOTE(untrusted-template): requests may bring their own
        self._compiled: OrderedDict[str, ModelChatTemplate] = OrderedDict()

    def pick(self, source: str | None) -> Any:
        """The template a request renders with: its own ``source`` (a template, or the name
        of one of the tokenizer's), else the default."""
        if source is None:
            return self.default
        if not self.trusted:
            raise RequestError("chat_template: this server does not run templates sent with a "
                               "request (a template is code); its operator can allow them "
                               "with --trust-request-chat-template", param="chat_template",
                               code="untrusted_chat_template")
        hit = self._compiled.get(source)
        if hit is not None:
            self._compiled.move_to_end(source)
            return hit
        special = getattr(self.default, "special_tokens", None)
        named = getattr(self.default, "named", {})  # the built-in and a missing one: none
        text, origin = named.get(source, (source, "the request's chat_template"))
        try:
            tpl = ModelChatTemplate(text, special, origin=origin)
        except ChatTemplateError as exc:
            raise RequestError(f"chat_template: {exc}", param="chat_template") from None
        self._compiled[source] = tpl
        while len(self._compiled) > MAX_TEMPLATES:
            self._compiled.popitem(last=False)
        return tpl
