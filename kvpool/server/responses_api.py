"""The Responses API: ``POST /v1/responses``, ``GET /v1/responses/{id}``, ``POST
/v1/responses/{id}/cancel`` and ``DELETE /v1/responses/{id}``, as the openai client's
``client.responses.create`` / ``retrieve`` / ``cancel`` / ``delete`` send them (not
``input_items``: docs/architecture.md, "The Responses store").

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

NOTE(one-id): one id names one response. A request (background or not) whose ``request_id``
names a background run still going is refused with a 400, and GET, a continuation and DELETE
all read the same thing: the run's queued object while it runs (even when the store has
evicted it or a request started before the run has stored a response of that id since; the
run's end replaces that), else the store's.

NOTE(store-slices): a stored response is kept as its JSON bytes (response_store.py
NOTE(response-bytes)), megabytes of it with many logprobs (a 3.6 MB answer, written whole
there, held /health 70-79 ms). So an answer not streamed is written once, in slices past
INLINE_WEIGHT (json_answer.py NOTE(encode-slices)), stored as those bytes and answered with
them: handlers.py ``answer`` hands the body and its bytes to ``_keep`` (its ``written``), the
same bytes as the one ``json.dumps`` before, the store's put before the answer goes out (a GET
right after finds it), and a client that leaves mid-write still has its response stored (the
write runs in a task of its own, shielded from the handler's cancel: json_answer.py
``json_encoded``). A background
run, not streamed, writes its finished object in slices in its own task; its engine request
has ended, so a cancel or DELETE meanwhile waits for the store and then acts as on a finished
response (responses_background.py ``storing``). A streamed response is stored whole at its
end: its last event holds the whole response, one ``json.dumps`` on the loop anyway
(handlers.py's stream writes it), and the client that read it must find it stored.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

from aiohttp import web

from kvpool.errors import RequestError, shown
from kvpool.runtime.model import SamplingParams
from kvpool.server.body_fields import ignored_header
from kvpool.server.chunk_view import SSE_HEADERS
from kvpool.server.field_policy import FieldPolicy
from kvpool.server.handlers import OpenAIRoutes, PromptStreams
from kvpool.server.json_answer import json_encoded
from kvpool.server.logprob_fields import LogprobRequest
from kvpool.server.query_bool import query_bool
from kvpool.server.query_int import query_int
from kvpool.server.parsed_request import ParsedRequest
from kvpool.server.protocol import RequestParser
from kvpool.server.response_store import ResponseStore, StoredResponse
from kvpool.server.responses import ResponseBuilder
from kvpool.server.responses_background import BackgroundRuns, EventLog, api_error
from kvpool.server.responses_input import ResponseNotFoundError, ResponsesInput, responses_to_chat
from kvpool.server.responses_items import item_messages
from kvpool.server.responses_tools import chat_param, text_only_auto
from kvpool.server.responses_view import ResponsesView, cache_block
from kvpool.server.sampling_fields import unheeded_keys
from kvpool.server.tenant import current_tenant

__all__ = ["RESPONSES_KEY", "ResponsesRoute"]

NO_STORE = ("background: this server stores no responses (--max-stored-responses 0 or "
            "--max-stored-response-bytes 0) and therefore does not support the background "
            "mode")  # vLLM's words for its store being off

# chat parameter -> the Responses field a client sent it as
_PARAM_NAMES = {"max_tokens": "max_output_tokens", "messages": "input",
                "response_format": "text.format", "reasoning_effort": "reasoning.effort",
                "truncate_prompt_tokens": "truncation"}


def _field(name: str) -> str:
    """A chat field's name as the Responses client sent it: ``_PARAM_NAMES``'s, and a key
    of ``response_format`` as ``text.format``'s (a json_schema format's keys are not nested
    under ``json_schema``: responses_input.py ``response_format``)."""
    if name.startswith("response_format."):
        return "text.format." + name.removeprefix("response_format.").removeprefix(
            "json_schema.")
    return _PARAM_NAMES.get(name, name)


def _unheeded_format(chat: dict[str, Any], fields: FieldPolicy) -> tuple[str, ...]:
    """NOTE(format-names): the ``text.format`` keys vLLM leaves unheeded (sampling_fields.py
    NOTE(format-unheeded)) under the names the client sent (``text.format.<key>``): found
    as chat's ``response_format`` keys, logged once (a 400 with --reject-unknown-fields) and
    listed under ``text.format``, and dropped from the chat body so its parser does not log
    them again as ``response_format.<key>``. A ``json_schema`` beside json_object is read
    (checked) by that parser, which lists it; ``_field`` renames it."""
    fmt = chat.get("response_format")
    if not isinstance(fmt, dict):
        return ()
    _, found = unheeded_keys({"response_format": fmt}, (), FieldPolicy(quiet=True))
    found = tuple(n for n in found if n != "response_format.json_schema")
    if not found:
        return ()
    nested = "response_format.json_schema."
    inner = {n.removeprefix(nested) for n in found if n.startswith(nested)}
    top = {n.removeprefix("response_format.") for n in found} - {"json_schema"}
    fmt = chat["response_format"] = {k: v for k, v in fmt.items() if k not in top}
    if inner:
        fmt["json_schema"] = {k: v for k, v in fmt["json_schema"].items() if k not in inner}
    return fields.check(dict.fromkeys(map(_field, found)), frozenset())


def _renamed(exc: RequestError) -> RequestError:
    """A chat parser error, naming the Responses field (``max_output_tokens``, ``input``,
    ``text.format``, whose json_schema keys are not nested under ``json_schema``;
    ``tools[i].name``, a function tool's keys not nested under ``function``)."""
    tool_param = chat_param(exc.param or "")
    if tool_param is not None:
        return RequestError(str(exc).replace(exc.param, tool_param, 1), param=tool_param,
                            code=exc.code)
    name = _field(exc.param or "")
    if name == (exc.param or ""):
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


def _hidden(req: ParsedRequest, inp: ResponsesInput, parser: RequestParser) -> ParsedRequest:
    """NOTE(hidden): ``include_reasoning: false``, on a server whose output a parser reads
    (``--reasoning-parser``, or an auto ``--tool-call-parser``), leaves the reasoning out
    (chat's rule: reasoning.py) and every logprob of the output too, streamed or not, as
    vLLM 0.33's Responses route hides them there (responses/serving.py
    _make_response_output_items and its streamed ``hide_stream_metadata``): ``include``'s
    logprobs are not computed, so each part's are null (streamed: each delta's []) as when
    not asked; ``top_logprobs`` is still checked and echoed. On a server with no such
    parser the field changes nothing, as there."""
    if inp.include_reasoning or not (parser.reasoning_parser or parser.tool_parser):
        return req
    return dataclasses.replace(req, logprob=LogprobRequest(),
                               params=dataclasses.replace(req.params, logprobs=None))


class ResponsesRoute:
    """The routes over the app's chat machinery (``routes``) and a response store."""

    def __init__(self, routes: OpenAIRoutes, store: ResponseStore | None = None) -> None:
        self.routes = routes
        self.store = store if store is not None else ResponseStore()
        self.background = BackgroundRuns()  # NOTE(background) in responses_background.py
        self.cache_block = cache_block(routes.engine.config)  # usage's cache_write_tokens

    @classmethod
    def register(cls, app: web.Application, routes: OpenAIRoutes) -> ResponsesRoute:
        route = cls(routes)
        app.router.add_post("/v1/responses", route.create)
        app.router.add_get("/v1/responses/{response_id}", route.retrieve)
        app.router.add_post("/v1/responses/{response_id}/cancel", route.cancel)
        app.router.add_delete("/v1/responses/{response_id}", route.delete)
        app.on_shutdown.append(route.close)  # before the engine stops (app.py NOTE(shutdown))
        app[RESPONSES_KEY] = route
        return route

    async def create(self, request: web.Request) -> web.StreamResponse:
        tenant = current_tenant()  # NOTE(contextvar): read on the loop, not in the parse
        asked: list[ResponsesInput] = []

        def parse(raw: bytes) -> ParsedRequest:
            parser = self.routes.parser
            inp = responses_to_chat(parser.decode_body(raw), parser.fields,
                                    lambda rid: self._lookup(tenant, rid))
            asked.append(inp)
            if parser.tool_parser is None:  # NOTE(auto-text) in responses_tools.py
                text_only_auto(inp.chat)
            try:
                ignored = _unheeded_format(inp.chat, parser.fields)
                req = parser.parse_chat(inp.chat)
            except RequestError as exc:
                raise _renamed(exc) from None
            ignored += tuple(map(_field, req.ignored))
            req = _hidden(req, inp, parser)  # NOTE(hidden)
            return dataclasses.replace(req, ignored=inp.ignored + ignored,
                                       params=_grammar_named(req.params))

        def view(builder: ResponseBuilder) -> ResponsesView:  # stored as it ends, streamed
            return ResponsesView(builder, asked[0], functools.partial(self._keep, tenant,
                                                                      asked[0]),
                                 self.cache_block)

        def whole(builder: ResponseBuilder) -> ResponsesView:  # stored by ``written``
            return ResponsesView(builder, asked[0], _stored_apart, self.cache_block)

        req = await self.routes.prepare(request, parse)
        rid = asked[0].request_id
        if rid is not None and self.background.get((tenant, rid)) is not None:  # NOTE(one-id)
            raise RequestError(f"a background response with id {rid[:80]!r} is still running: "
                               "cancel it or name another", param="request_id")
        if asked[0].background:
            return await self._background(request, tenant, asked[0], req)
        if not req.stream:  # NOTE(store-slices)
            keep = functools.partial(self._keep, tenant, asked[0])
            return await self.routes.answer(request, req, whole, keep)
        return await self.routes.answer(request, req, view)

    async def _background(self, request: web.Request, tenant: str, inp: ResponsesInput,
                          req: ParsedRequest) -> web.StreamResponse:
        """NOTE(background) in responses_background.py: the queued object (or, streamed, the
        run's events) now, the run in a task of its own.

        NOTE(refused-at-once): the engine request is queued here, before the queued object
        is made, as a request not in the background queues it before its first byte: so
        every refusal the plain POST answers at once (the pool's 400 for a request it can
        never hold, --max-queue's 503 queue_full with Retry-After, the 503 of an engine
        stopping or failed) is this POST's answer too, and nothing is stored or run. vLLM
        0.33 has no queue bound: it queues every background response (responses/serving.py);
        a run that could never start would be a "failed" response the client polls for."""
        if not (self.store.max_entries and self.store.max_bytes):
            raise RequestError(NO_STORE, param="background")
        self.background.check_room(req.stream)
        builder, updates = self.routes.open(req)  # the gate's 503 / 429 here
        log = EventLog() if req.stream else None
        keep = functools.partial(self._keep, tenant, inp, log=log)  # failed, cancelled
        finished: list[dict[str, Any]] = []  # a streamed run's body, kept with all its events
        try:
            updates.open()  # NOTE(refused-at-once)
            on_done = _stored_apart if log is None else finished.append
            view = ResponsesView(builder, inp, on_done, self.cache_block)
            body = view.response("queued", [], None)
            queued = StoredResponse(body, inp.conversation)  # output []: no turns of its own
            self.store.put(tenant, view.id, queued)  # NOTE(background): a continuation reads it
            run = functools.partial(self._run, tenant, view, updates, log,
                                    lambda: keep(finished[0]))
            self.background.start((tenant, view.id), body, keep, run, log, queued)
        except BaseException:  # nothing queued, stored or running
            await updates.release()
            raise
        if log is None:
            return web.json_response(body, headers=ignored_header(req.ignored))
        return await self._follow(request, log, -1, req.ignored)

    async def _run(self, tenant: str, view: ResponsesView, updates: PromptStreams,
                   log: EventLog | None, keep_streamed: Callable[[], None]) -> None:
        """One background run to its end; the finished object stored (written in slices,
        NOTE(store-slices); a streamed run's by ``keep_streamed`` once its last event is in
        its log)."""
        if log is None:
            await self.routes.run(view.builder, updates)
            self.background.storing((tenant, view.id))
            body = view.body()
            self._keep(tenant, view.inp, body, await json_encoded(body))
            return
        log.add(view.head())
        try:
            await self.routes.run(view.builder, updates,
                                  lambda chunks: log.add(view.events(chunks)))
        except Exception as exc:
            log.add(view.tail(api_error(exc)))  # the stream's error event; then "failed"
            raise
        log.add(view.tail(None))
        keep_streamed()

    async def _follow(self, request: web.Request, log: EventLog, after: int,
                      ignored: tuple[str, ...] = ()) -> web.StreamResponse:
        """A streamed run's events after number ``after``, as they come, until it ends; a
        client that leaves stops only its own reading."""
        resp = web.StreamResponse(headers={**SSE_HEADERS, **ignored_header(ignored)})
        await self.routes.sse.prepare(request, resp)
        async for data in log.follow(after):
            await self.routes.sse.write(request, resp, data)
        await resp.write_eof()
        return resp

    def _keep(self, tenant: str, inp: ResponsesInput, body: dict[str, Any],
              raw: bytes | None = None, log: EventLog | None = None) -> None:
        """Store the response with its conversation: the input's, then the output items as
        chat messages (its text, its function calls), as a client would send them back; a
        streamed background run's with its events (GET replays them). ``raw``: the body's
        JSON, when written already (NOTE(store-slices))."""
        if inp.store:
            turns = tuple(item_messages(body["output"], "output"))
            events = b"".join(log.events) if log is not None else b""
            self.store.put(tenant, body["id"],
                           StoredResponse(body, inp.conversation + turns, events, raw))

    async def retrieve(self, request: web.Request) -> web.StreamResponse:
        """A background response still running (NOTE(background)), else a stored one; with
        ``?stream=true`` a streamed background run's events after ``starting_after``."""
        rid = request.match_info["response_id"]
        after = _stream_query(request)
        if after is not None:
            return await self._replay(request, rid, after)
        entry = self._lookup(current_tenant(), rid)
        if entry is None:
            raise ResponseNotFoundError(rid, param="response_id")
        return web.Response(body=entry.raw, content_type="application/json", charset="utf-8")

    def _lookup(self, tenant: str, rid: str) -> StoredResponse | None:
        """NOTE(one-id): the response ``rid`` names, the run's while it runs, else the store's
        (also from the parse's worker thread: a dict lookup, then the store's lock)."""
        running = self.background.entry((tenant, rid))
        return running if running is not None else self.store.get(tenant, rid)

    async def _replay(self, request: web.Request, rid: str, after: int) -> web.StreamResponse:
        """vLLM's GET stream: the events of a streamed background run, live while it runs and
        stored after; any other response is its 400 "Unknown response_id"."""
        key = (current_tenant(), rid)
        log = self.background.log(key)
        if log is None and self.background.get(key) is None:
            entry = self.store.get(*key)
            if entry is None:
                raise ResponseNotFoundError(rid, param="response_id")
            if entry.events:
                log = EventLog()
                log.add(entry.events)
                log.end()
        if log is None:
            raise RequestError(f"Unknown response_id: {shown(rid, 80)}", param="response_id")
        return await self._follow(request, log, after)

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

    async def delete(self, request: web.Request) -> web.Response:
        """OpenAI's DELETE: the response is removed (GET and continuations then get the 404 of
        an id never issued; so does another tenant, whose id it never was). NOTE(delete-running):
        a background run still going is cancelled first, its engine request aborted, as cancel
        does: a response removed must not come back when its run ends."""
        rid = request.match_info["response_id"]
        key = (current_tenant(), rid)
        cancelled = await self.background.cancel(key)
        if not self.store.delete(*key) and cancelled is None:
            raise ResponseNotFoundError(rid, param="response_id")
        return web.json_response({"id": rid, "object": "response.deleted", "deleted": True})

    async def close(self, app: web.Application) -> None:
        """The app's shutdown: every background run still going is cancelled."""
        await self.background.close()


def _stored_apart(body: dict[str, Any]) -> None:
    """A view's on_done where the route stores the body itself (``_store``)."""


def _stream_query(request: web.Request) -> int | None:
    """GET's ``stream`` and ``starting_after`` query: None unless it streams, else the event
    number to start after (-1: from the first). Both are read as vLLM's FastAPI reads them
    (NOTE(query-bool), NOTE(lax-int)), ``starting_after`` first and whether or not it streams,
    as vLLM validates its parameters in their order before the route runs."""
    after = query_int(request, "starting_after")
    if not query_bool(request, "stream"):
        return None
    return -1 if after is None else after


RESPONSES_KEY = web.AppKey("kvpool_responses", ResponsesRoute)
