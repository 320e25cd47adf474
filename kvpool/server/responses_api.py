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
store per tenant (response_store.py) for ``previous_response_id`` and GET. ``background``
runs a response apart from its request, GET and cancel reach it while it runs
(responses_background.py NOTE(background)).
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
from kvpool.server.body_fields import ignored_header
from kvpool.server.response_store import ResponseStore, StoredResponse
from kvpool.server.responses_background import BackgroundRuns
from kvpool.server.responses import ResponseBuilder
from kvpool.server.responses_input import (ResponseNotFoundError, ResponsesInput,
                                           item_messages, responses_to_chat)
from kvpool.server.responses_tools import chat_param, text_only_auto
from kvpool.server.responses_view import ResponsesView
from kvpool.server.middleware import current_tenant

__all__ = ["RESPONSES_KEY", "ResponsesRoute"]

NO_STORE = ("background: this server stores no responses (--max-stored-responses 0 or "
            "--max-stored-response-bytes 0) and therefore does not support the background "
            "mode")  # vLLM's words for its store being off

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
        self.background = BackgroundRuns()  # NOTE(background) in responses_background.py

    @classmethod
    def register(cls, app: web.Application, routes: OpenAIRoutes) -> ResponsesRoute:
        route = cls(routes)
        app.router.add_post("/v1/responses", route.create)
        app.router.add_get("/v1/responses/{response_id}", route.retrieve)
        app.router.add_post("/v1/responses/{response_id}/cancel", route.cancel)
        app.on_shutdown.append(route.close)  # before the engine stops (app.py NOTE(shutdown))
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

        req = await self.routes.prepare(request, parse)
        if asked[0].background:
            return await self._background(tenant, asked[0], req)
        return await self.routes.answer(request, req, view)

    async def _background(self, tenant: str, inp: ResponsesInput,
                          req: ParsedRequest) -> web.Response:
        """NOTE(background) in responses_background.py: the queued object now, the run in a
        task of its own."""
        if req.stream:
            raise RequestError("background: a background response is not streamed by this "
                               "server: poll GET /v1/responses/{id}", param="background",
                               code="unsupported_parameter")
        if not (self.store.max_entries and self.store.max_bytes):
            raise RequestError(NO_STORE, param="background")
        self.background.check_room()
        builder, updates = self.routes.open(req)  # the gate's 503 / 429 here
        try:
            updates.check()  # a request the pool can never hold: its 400 now
        except BaseException:
            await updates.release()
            raise
        keep = functools.partial(self._keep, tenant, inp)
        view = ResponsesView(builder, inp, keep)
        body = view.response("queued", [], None)

        async def run() -> None:
            await self.routes.run(builder, updates)
            view.body()  # stored (keep)

        self.background.start((tenant, view.id), body, keep, run)
        return web.json_response(body, headers=ignored_header(req.ignored))

    def _keep(self, tenant: str, inp: ResponsesInput, body: dict[str, Any]) -> None:
        """Store the response with its conversation: the input's, then the output items as
        chat messages (its text, its function calls), as a client would send them back."""
        if inp.store:
            turns = tuple(item_messages(body["output"], "output"))
            self.store.put(tenant, body["id"], StoredResponse(body, inp.conversation + turns))

    async def retrieve(self, request: web.Request) -> web.Response:
        """A background response still running (NOTE(background)), else a stored one."""
        rid = request.match_info["response_id"]
        running = self.background.get((current_tenant(), rid))
        if running is not None:
            return web.json_response(running)
        entry = self.store.get(current_tenant(), rid)
        if entry is None:
            raise ResponseNotFoundError(rid, param=None)
        return web.json_response(entry.body)

    async def cancel(self, request: web.Request) -> web.Response:
        """vLLM's and OpenAI's cancel: a background response still running is cancelled
        (NOTE(background)); any other stored response is a 400 (vLLM's words) and any other id
        the 404 of retrieve."""
        rid = request.match_info["response_id"]
        cancelled = await self.background.cancel((current_tenant(), rid))
        if cancelled is not None:
            return web.json_response(cancelled)
        await self.retrieve(request)
        raise RequestError("Cannot cancel a synchronous response: only a background response "
                           "still running can be cancelled.", param="response_id",
                           code="response_not_cancellable")

    async def close(self, app: web.Application) -> None:
        """The app's shutdown: every background run still going is cancelled."""
        await self.background.close()


RESPONSES_KEY = web.AppKey("kvpool_responses", ResponsesRoute)
