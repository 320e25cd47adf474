"""Anthropic's Messages API, as vLLM 0.33 serves it (docs/architecture.md "The Messages API"):
``POST /v1/messages`` (JSON or SSE) and ``POST /v1/messages/count_tokens``, what the
``anthropic`` SDK and Claude Code (``ANTHROPIC_BASE_URL``) send.

A Messages body becomes a chat body (anthropic_input.py), the chat parser renders and bounds
it, and the chat route's own engine call and streaming loop run it (handlers.py ``answer``:
the gate, the pool check, a disconnect aborting the request); only the answer's shape is this
API's (anthropic_view.py). So greedy output equals the chat completion's for the same
messages. count_tokens renders the same chat messages as /tokenize does (its
chat_template_kwargs over the server's --default-chat-template-kwargs, as the message
renders them): its count is the Messages request's prompt length; a prompt longer than the
context is vLLM's 400. Disabled thinking's reasoning effort: anthropic_effort.py.

NOTE(merge-system): vLLM probes the model's chat template once, at start, by rendering
[system, user, system, user] (no generation prompt) in a bare sandboxed Jinja environment (no
``raise_exception``, no special tokens). A template that raises there wants its system message
first, so every Messages request's inline system messages are folded into the top-level one
(anthropic_input.py) instead of reaching the template where they were, which would refuse
them with a 400. The built-in template renders a system turn anywhere: nothing is merged.

Every error on these paths is Anthropic's error JSON (anthropic_errors.py NOTE(anthropic-errors)).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import Any

from aiohttp import web

from kvpool.errors import RequestError, context_length_error
from kvpool.server.anthropic_effort import DisabledThinkingEffort
from kvpool.server.anthropic_errors import PREFIX, anthropic_errors
from kvpool.server.anthropic_input import messages_to_chat
from kvpool.server.anthropic_view import MessagesView
from kvpool.server.body_fields import ignored_header
from kvpool.server.handlers import OpenAIRoutes
from kvpool.server.parsed_request import ParsedRequest
from kvpool.server.responses_view import cache_block
from kvpool.server.template_sandbox import BoundedSandbox
from kvpool.server.tools.request import parse_tool_request

__all__ = ["MessagesRoute", "merges_inline_system"]

log = logging.getLogger(__name__)
_PROBE = [{"role": role, "content": "t"} for role in ("system", "user", "system", "user")]
_EFFORT_PROBE = [{"role": "user", "content": "Hi"}]  # NOTE(disabled-effort)'s chat

# a chat parameter's name in an error -> the Messages field it came in
_RENAMES = (("max_completion_tokens", "max_tokens"), ("stop:", "stop_sequences:"),
            (".function.parameters", ".input_schema"), (".function.", "."),
            ("response_format", "output_config.format"))


def _renamed(exc: RequestError) -> RequestError:
    """A chat parser error, naming the Messages field."""
    message, param = str(exc), exc.param or ""
    for chat, ours in _RENAMES:
        message, param = message.replace(chat, ours, 1), param.replace(chat.rstrip(":"),
                                                                       ours.rstrip(":"), 1)
    if message == str(exc):
        return exc
    out = RequestError(message, param=param or None, code=exc.code)
    if hasattr(exc, "http_status"):
        out.http_status = exc.http_status
    return out


def merges_inline_system(template: Any) -> bool:
    """Whether inline system messages are merged into the first for ``template`` (the parser's
    chat template): NOTE(merge-system)."""
    source = getattr(template, "source", None)  # the built-in template has none
    if source is None:
        return False
    env = BoundedSandbox(trim_blocks=True, lstrip_blocks=True)  # NOTE(template-cost)
    try:
        env.from_string(source).render(messages=_PROBE, add_generation_prompt=False)
    except Exception:  # noqa: BLE001 - a template is untrusted code: any failure refuses it
        return True
    return False


class MessagesRoute:
    """The routes over the app's chat machinery (``routes``); ``disabled_effort``: vLLM's
    --anthropic-disabled-thinking-effort (anthropic_effort.py)."""

    def __init__(self, routes: OpenAIRoutes, disabled_effort: str = "auto") -> None:
        self.routes = routes
        self.disabled = DisabledThinkingEffort(self._probe_ids, disabled_effort)
        self.merge_system = merges_inline_system(routes.parser.chat_template)
        self.view = functools.partial(  # usage's cache writes (anthropic_view.py)
            MessagesView, cache_block=cache_block(routes.engine.config))
        if self.merge_system:
            log.warning("the chat template wants its system message first: inline system "
                        "messages in /v1/messages requests are merged into the first one, so "
                        "each new one changes the prompt's prefix (NOTE(merge-system))")

    @classmethod
    def register(cls, app: web.Application, routes: OpenAIRoutes,
                 disabled_effort: str = "auto") -> MessagesRoute:
        """Add the routes and the error hook; call after the app's own hooks (json_errors)
        so the hook sees their JSON."""
        route = cls(routes, disabled_effort)
        app.router.add_post(PREFIX, route.create)
        app.router.add_post(PREFIX + "/count_tokens", route.count_tokens)
        app.on_response_prepare.append(anthropic_errors)
        return route

    async def create(self, request: web.Request) -> web.StreamResponse:
        req = await self.routes.prepare(request, self._parse)
        return await self.routes.answer(request, req, self.view)

    def _probe_ids(self, effort: str) -> list[int]:
        """The prompt ids of NOTE(disabled-effort)'s probe chat at ``effort``."""
        parser = self.routes.parser
        body = {"messages": _EFFORT_PROBE, "reasoning_effort": effort}
        return parser.parse_tokenize(body)

    def _parse(self, raw: bytes) -> ParsedRequest:
        parser = self.routes.parser
        body = parser.decode_body(raw)
        chat, ignored = messages_to_chat(body, parser.fields, merge_system=self.merge_system,
                                         thinks=parser.reasoning_parser is not None,
                                         disabled_effort=self.disabled.resolve_for(body))
        try:
            req = parser.parse_chat(chat)
        except RequestError as exc:
            raise _renamed(exc) from None
        return dataclasses.replace(req, ignored=ignored + req.ignored) if ignored else req

    def _count(self, raw: bytes) -> tuple[dict[str, Any], dict[str, str]]:
        parser = self.routes.parser
        body = parser.decode_body(raw)
        chat, ignored = messages_to_chat(body, parser.fields, count=True,
                                         merge_system=self.merge_system,
                                         disabled_effort=self.disabled.resolve_for(body))
        try:
            parse_tool_request(chat, parser.tool_parser)  # chat's tool 400s, as vLLM renders
            ids = parser.parse_tokenize(chat)
        except RequestError as exc:
            raise _renamed(exc) from None
        if len(ids) > parser.max_model_len:  # vLLM's input check: no room asked for output
            raise context_length_error(parser.max_model_len, f"the prompt has {len(ids)} "
                                       "tokens, more than it holds", "messages", named=True)
        return ({"input_tokens": len(ids),
                 "context_management": {"original_input_tokens": len(ids)}},
                ignored_header(ignored))

    async def count_tokens(self, request: web.Request) -> web.Response:
        out, headers = await self.routes.parse_pool.read_and_parse(request, self._count)
        return web.json_response(out, headers=headers)
