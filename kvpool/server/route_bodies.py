"""The generation routes' body parsers: a client's raw body -> ParsedRequest, per route.

``chat`` and ``completion`` are what /v1/chat/completions and /v1/completions parse; each runs
on the ParsePool, off the event loop (handlers.py NOTE(parse-off-loop)). ``invocation`` is
vLLM's SageMaker route, ``POST /invocations``: one URL for either body.

NOTE(invocations): vLLM 0.33 validates an /invocations body against its chat request first
and its completion request second, and runs the first that validates. Its chat request needs
``messages``; its completion request needs nothing (a body without ``prompt`` fails later,
in the completion handler). So a body with ``messages`` is a chat request and any other body a
completion request, the rule here. Where vLLM differs: a body whose ``messages`` fails chat's
validation falls through to its completion request there, and the client reads "Cannot find
suitable handler" or a completion of its ``prompt``; here it reads chat's 400, which names the
field (docs/architecture.md "SageMaker's /invocations").
"""

from __future__ import annotations

from typing import Any

from kvpool.server.parsed_request import ParsedRequest
from kvpool.server.protocol import RequestParser
from kvpool.server.request_ids import with_body_id
from kvpool.server.tools.request import check_chat_tools

__all__ = ["RouteBodies"]


class RouteBodies:
    """The body parsers of the routes that generate, over one RequestParser."""

    __slots__ = ("parser",)

    def __init__(self, parser: RequestParser) -> None:
        self.parser = parser

    def chat(self, raw: bytes) -> ParsedRequest:
        return self._chat(self.parser.decode_body(raw))

    def completion(self, raw: bytes) -> ParsedRequest:
        return self._completion(self.parser.decode_body(raw))

    def invocation(self, raw: bytes) -> ParsedRequest:
        """NOTE(invocations): a chat body if it has ``messages``, else a completion body."""
        body = self.parser.decode_body(raw)
        return self._chat(body) if "messages" in body else self._completion(body)

    def _chat(self, body: dict[str, Any]) -> ParsedRequest:
        check_chat_tools(body)
        return with_body_id(self.parser.parse_chat(body), body)

    def _completion(self, body: dict[str, Any]) -> ParsedRequest:
        return with_body_id(self.parser.parse_completion(body), body)
