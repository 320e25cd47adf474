"""Anthropic's Messages API, as vLLM 0.33 serves it (docs/architecture.md "The Messages API"):
``POST /v1/messages`` (JSON or SSE) and ``POST /v1/messages/count_tokens``, what the
``anthropic`` SDK and Claude Code (``ANTHROPIC_BASE_URL``) send.

A Messages body becomes a chat body (anthropic_input.py), the chat parser renders and bounds
it, and the chat route's own engine call and streaming loop run it (handlers.py ``answer``:
the gate, the pool check, a disconnect aborting the request); only the answer's shape is this
API's (anthropic_view.py). So greedy output equals the chat completion's for the same
messages. count_tokens renders the same chat messages as /tokenize does: its count is the
Messages request's prompt length.

Every error on these paths is Anthropic's error JSON (anthropic_errors.py NOTE(anthropic-errors)).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from aiohttp import web

from kvpool.errors import RequestError
from kvpool.server.anthropic_errors import PREFIX, anthropic_errors
from kvpool.server.anthropic_input import messages_to_chat
from kvpool.server.anthropic_view import MessagesView
from kvpool.server.body_fields import ignored_header
from kvpool.server.handlers import OpenAIRoutes
from kvpool.server.parsed_request import ParsedRequest
from kvpool.server.tools.request import parse_tool_request

__all__ = ["MessagesRoute"]

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


class MessagesRoute:
    """The routes over the app's chat machinery (``routes``)."""

    def __init__(self, routes: OpenAIRoutes) -> None:
        self.routes = routes

    @classmethod
    def register(cls, app: web.Application, routes: OpenAIRoutes) -> MessagesRoute:
        """Add the routes and the error hook; call after the app's own hooks (json_errors)
        so the hook sees their JSON."""
        route = cls(routes)
        app.router.add_post(PREFIX, route.create)
        app.router.add_post(PREFIX + "/count_tokens", route.count_tokens)
        app.on_response_prepare.append(anthropic_errors)
        return route

    async def create(self, request: web.Request) -> web.StreamResponse:
        req = await self.routes.prepare(request, self._parse)
        return await self.routes.answer(request, req, MessagesView)

    def _parse(self, raw: bytes) -> ParsedRequest:
        parser = self.routes.parser
        chat, ignored = messages_to_chat(parser.decode_body(raw), parser.fields)
        try:
            req = parser.parse_chat(chat)
        except RequestError as exc:
            raise _renamed(exc) from None
        return dataclasses.replace(req, ignored=ignored + req.ignored) if ignored else req

    def _count(self, raw: bytes) -> tuple[dict[str, Any], dict[str, str]]:
        parser = self.routes.parser
        chat, ignored = messages_to_chat(parser.decode_body(raw), parser.fields, count=True)
        try:
            parse_tool_request(chat, parser.tool_parser)  # chat's tool 400s, as vLLM renders
            ids = parser.parse_tokenize(chat)
        except RequestError as exc:
            raise _renamed(exc) from None
        return ({"input_tokens": len(ids),
                 "context_management": {"original_input_tokens": len(ids)}},
                ignored_header(ignored))

    async def count_tokens(self, request: web.Request) -> web.Response:
        out, headers = await self.routes.parse_pool.read_and_parse(request, self._count)
        return web.json_response(out, headers=headers)
