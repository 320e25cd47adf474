"""The Responses API: ``POST /v1/responses``, ``GET /v1/responses/{id}`` and ``POST
/v1/responses/{id}/cancel``, as the openai client's ``client.responses.create`` / ``retrieve``
/ ``cancel`` send them.

A Responses body becomes a chat body (responses_input.py), the chat parser renders it with
the model's chat template, and the chat route's own engine call and streaming loop run it
(handlers.py ``generate``); only the answer's shape is this API's (responses_view.py). So
greedy output equals the chat completion's for the same messages, and every chat bound and
error holds here too (a chat parameter's name is translated back: ``max_tokens`` is
``max_output_tokens``, ``messages`` is ``input``; a structured-output error, whether the parser,
the compile or a grammar breaking midway raises it, names ``text.format``).

Finished responses with ``store`` (OpenAI's default: true) are kept in a bounded in-memory
store per tenant (response_store.py) for ``previous_response_id`` and GET.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from aiohttp import web

from kvpool.errors import RequestError
from kvpool.runtime.model import SamplingParams
from kvpool.server.handlers import OpenAIRoutes
from kvpool.server.parsed_request import ParsedRequest
from kvpool.server.response_store import ResponseStore, StoredResponse
from kvpool.server.responses import ResponseBuilder
from kvpool.server.responses_input import (ResponseNotFoundError, ResponsesInput,
                                           item_messages, responses_to_chat)
from kvpool.server.responses_tools import chat_param, text_only_auto
from kvpool.server.responses_view import ResponsesView
from kvpool.server.middleware import current_tenant

__all__ = ["RESPONSES_KEY", "ResponsesRoute"]

# chat parameter -> the Responses field a client sent it as
_PARAM_NAMES = {"max_tokens": "max_output_tokens", "messages": "input",
                "response_format": "text.format", "reasoning_effort": "reasoning.effort",
                "truncate_prompt_tokens": "truncation"}


def _renamed(exc: RequestError) -> RequestError:
    """A chat parser error, naming the Responses field (``max_output_tokens``, ``input``,
    ``text.format``, whose json_schema keys are not nested under ``json_schema``;
    ``tools[i].name``, a function tool's keys not nested under ``function``)."""
    tool_param = chat_param(exc.param or "")
    if tool_param is not None:
        return RequestError(str(exc).replace(exc.param, tool_param, 1), param=tool_param,
                            code=exc.code)
    name = _PARAM_NAMES.get(exc.param or "")
    if name is None:
        return exc
    message = str(exc).replace(exc.param, name, 1).replace(" json_schema.", " ")
    return RequestError(message, param=name, code=exc.code)


def _grammar_named(params: SamplingParams) -> SamplingParams:
    """``params`` whose grammar names the Responses field it came in (``text.format``, not the
    chat ``response_format`` it became): the compile's 400s on the worker thread and a grammar
    breaking midway (grammar_matchers.py NOTE(grammar-error)) name ``GrammarSpec.param``."""
    spec = params.response_format
    name = _PARAM_NAMES.get(spec.param) if spec is not None else None
    if name is None:
        return params
    return dataclasses.replace(params, response_format=dataclasses.replace(spec, param=name))


class ResponsesRoute:
    """The routes over the app's chat machinery (``routes``) and a response store."""

    def __init__(self, routes: OpenAIRoutes, store: ResponseStore | None = None) -> None:
        self.routes = routes
        self.store = store if store is not None else ResponseStore()

    @classmethod
    def register(cls, app: web.Application, routes: OpenAIRoutes) -> ResponsesRoute:
        route = cls(routes)
        app.router.add_post("/v1/responses", route.create)
        app.router.add_get("/v1/responses/{response_id}", route.retrieve)
        app.router.add_post("/v1/responses/{response_id}/cancel", route.cancel)
        app[RESPONSES_KEY] = route
        return route

    async def create(self, request: web.Request) -> web.StreamResponse:
        tenant = current_tenant()  # NOTE(contextvar): read on the loop, not in the parse
        asked: list[ResponsesInput] = []

        def parse(raw: bytes) -> ParsedRequest:
            parser = self.routes.parser
            inp = responses_to_chat(parser.decode_body(raw), parser.fields,
                                    lambda rid: self.store.get(tenant, rid))
            asked.append(inp)
            if parser.tool_parser is None:  # NOTE(auto-text) in responses_tools.py
                text_only_auto(inp.chat)
            try:
                req = parser.parse_chat(inp.chat)
            except RequestError as exc:
                raise _renamed(exc) from None
            ignored = tuple(_PARAM_NAMES.get(name, name) for name in req.ignored)
            return dataclasses.replace(req, ignored=inp.ignored + ignored,
                                       params=_grammar_named(req.params))

        def view(builder: ResponseBuilder) -> ResponsesView:
            return ResponsesView(builder, asked[0], functools.partial(self._keep, tenant,
                                                                      asked[0]))

        return await self.routes.generate(request, parse, view)

    def _keep(self, tenant: str, inp: ResponsesInput, body: dict[str, Any]) -> None:
        """Store the response with its conversation: the input's, then the output items as
        chat messages (its text, its function calls), as a client would send them back."""
        if inp.store:
            turns = tuple(item_messages(body["output"], "output"))
            self.store.put(tenant, body["id"], StoredResponse(body, inp.conversation + turns))

    async def retrieve(self, request: web.Request) -> web.Response:
        rid = request.match_info["response_id"]
        entry = self.store.get(current_tenant(), rid)
        if entry is None:
            raise ResponseNotFoundError(rid, param=None)
        return web.json_response(entry.body)

    async def cancel(self, request: web.Request) -> web.Response:
        """vLLM's and OpenAI's cancel: only a background response can be cancelled, and this
        server runs none, so a stored response is a 400 (vLLM's words) and any other id the
        404 of retrieve."""
        await self.retrieve(request)
        raise RequestError("Cannot cancel a synchronous response: only a background response "
                           "can be cancelled, and this server runs none.", param="response_id",
                           code="response_not_cancellable")


RESPONSES_KEY = web.AppKey("kvpool_responses", ResponsesRoute)
