"""The generation routes' body parsers: a client's raw body -> ParsedRequest, per route.

``chat`` and ``completion`` are what /v1/chat/completions and /v1/completions parse; each runs
on the ParsePool, off the event loop (handlers.py NOTE(parse-off-loop)). ``invocation`` is
vLLM's SageMaker route, ``POST /invocations``: one URL for either body. ``batch_chat`` is
vLLM's ``POST /v1/chat/completions/batch``: several conversations, one choice each.

NOTE(invocations): vLLM 0.33 validates an /invocations body against its chat request first
and its completion request second, and runs the first that validates. Its chat request needs
``messages``; its completion request needs nothing (a body without ``prompt`` fails later,
in the completion handler). So a body with ``messages`` is a chat request and any other body a
completion request, the rule here. Where vLLM differs: a body whose ``messages`` fails chat's
validation falls through to its completion request there, and the client reads "Cannot find
suitable handler" or a completion of its ``prompt``; here it reads chat's 400, which names the
field (docs/architecture.md "SageMaker's /invocations").

NOTE(batch-chat): vLLM 0.33's batch body is a chat body whose ``messages`` is a list of
conversations. Each conversation is rendered and bounded as a chat request of its own, the
other fields shared, and they run as the prompts of one request, as several completion prompts
do: choice i answers conversation i, usage sums them, and a disconnect aborts them all. As
vLLM's: ``n`` must be 1 and ``use_beam_search`` false (400 naming them), the answer is one
JSON body (``stream`` is not a field there, so it is ignored, as are ``tools``), and
``tool_choice`` may only be "none"; with ``echo``, each choice opens with its own
conversation's last assistant message.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kvpool.errors import RequestError
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

    def batch_chat(self, raw: bytes) -> ParsedRequest:
        """NOTE(batch-chat): one chat request per conversation, run as one request."""
        body = self.parser.decode_body(raw)
        convs = _conversations(body, self.parser.max_prompts)
        shared = {k: v for k, v in body.items() if k not in _NOT_BATCHED}
        parsed = [self._chat({**shared, "messages": m}) for m in convs]
        echoes = tuple(p.echo_text for p in parsed)
        return dataclasses.replace(
            parsed[0], prompts=tuple(p.prompt_ids for p in parsed), prompt_texts=(),
            budgets=tuple(p.params_at(0).max_tokens for p in parsed),
            echo_texts=echoes if len(set(echoes)) > 1 else ())

    def _chat(self, body: dict[str, Any]) -> ParsedRequest:
        check_chat_tools(body)
        return with_body_id(self.parser.parse_chat(body), body)

    def _completion(self, body: dict[str, Any]) -> ParsedRequest:
        return with_body_id(self.parser.parse_completion(body), body)


_NOT_BATCHED = ("messages", "stream", "stream_options", "tools")  # NOTE(batch-chat)


def _conversations(body: dict[str, Any], most: int) -> list[Any]:
    """A batch body's conversations (NOTE(batch-chat)), its vLLM-only refusals checked."""
    convs = body.get("messages")
    if not isinstance(convs, list) or not convs or not all(
            isinstance(c, list) and c for c in convs):
        raise RequestError.field("messages", "must be a non-empty list of conversations, "
                                 "each a non-empty list of messages")
    if len(convs) > most:
        raise RequestError.field("messages", f"at most {most} conversations per batch")
    if body.get("n", 1) not in (1, None):
        raise RequestError.field("n", "Batch chat completions do not support `n > 1`. "
                                 "Please set `n` to 1.")
    if body.get("use_beam_search"):
        raise RequestError.field("use_beam_search", "Batch chat completions do not support "
                                 "beam search. Please set `use_beam_search` to False.")
    if body.get("tool_choice") not in (None, "none"):
        raise RequestError.field("tool_choice", "a batch takes no tools: use \"none\"")
    return convs
