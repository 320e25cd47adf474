"""The routes: OpenAI completions and chat (JSON or SSE), vLLM's batch chat, SageMaker's
/invocations (either body: route_bodies.py), models, tokenize/detokenize (vLLM's shapes),
version, health and metrics, and vLLM's scale-out paths' 403 (scale_out_routes.py).
``generate`` is the one engine-and-stream path; the Responses API (responses_api.py) runs
through it with its own view of the answer.

Life of a generation request::

    read body (413 past client_max_size) -> RequestParser (400s) -> gate.admit (503 while
      draining, tenant quota 400/429; request_gate.py) -> every prompt's pool check (400)
      -> ticket.open per prompt -> first update awaited *before* any byte is sent, so
         QueueFullError still becomes a proper status -> JSON body, or SSE chunks until the
         last update -> [DONE]

NOTE(abort): every path that leaves before the request finished -- the client disconnects
(aiohttp cancels the handler: the runner is built with ``handler_cancellation=True``), a stream
write fails, the server shuts down, a bug -- runs the ``finally`` that closes the engine's
iterator and calls ``engine.abort``, so the request's blocks go back to the pool at once.

NOTE(slow-reader): a client that opens a stream and never reads fills the socket buffers, and
``resp.write`` then waits for the transport to drain. Each write gets ``stream_write_timeout``
seconds; past it the connection is closed and the handler ends (its ``finally`` releases the
request). The engine's --max-queue slot does not wait for this: it is freed when the engine
finishes the request (AsyncEngine._deliver), whatever the client reads.

NOTE(parse-off-loop): a large body is parsed (JSON, validation, tokenization) on the app's
ParsePool, off the event loop (json_body.py); /tokenize and the lookup route share the pool.

Several prompts in one completions request: each is its own engine request (``<id>-<i>``;
prefix sharing between them is the prefix cache's). All are validated before any is queued,
every first update is awaited before a byte is sent, then their updates are interleaved as
they arrive (PromptStreams, below); leaving early aborts every one that has not finished.

PromptStreams: the engine streams of one HTTP request's prompts, read as one stream.

::

    start()     every prompt's pool rules asked first (NOTE(all-or-nothing): one that can
                never fit fails the request before any is queued), then the ticket opens
                <id>, <id>-1 ... <id>-<P-1> (request_gate.py) and each one's first update is
                awaited (the engine's own errors surface before any byte is sent)
    firsts()    [(0, first_0), ..., (P-1, first_P-1)]
    async for   (prompt index, update) as the engine delivers them, until every prompt finished
    release()   close every stream; abort every prompt that has not finished; close the
                ticket (idempotent)

One prompt reads its stream directly (the common path adds no task). Several are pumped by one
task each into a queue, so a slow prompt never holds back another's chunks.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from aiohttp import web

from kvpool import __version__
from kvpool.metrics import CONTENT_TYPE
from kvpool.metrics.request_metrics import RequestMetrics
from kvpool.runtime.engine.output_processor import RequestOutput, aclose_updates
from kvpool.runtime.model import TINY_MODEL_NAME
from kvpool.server.body_fields import ignored_header
from kvpool.server.chunk_view import ChunkView
from kvpool.server.connections import DEFAULT_STREAM_WRITE_TIMEOUT
from kvpool.server.engine_client import EngineClient
from kvpool.server.first_updates import FirstUpdates
from kvpool.server.json_answer import bytes_answer, json_encoded
from kvpool.server.json_body import ParsePool
from kvpool.server.load_counts import load_counts
from kvpool.server.merged_updates import MergedUpdates
from kvpool.server.logprob_format import LogprobFormatter
from kvpool.server.middleware import APIError
from kvpool.server.parsed_request import ParsedRequest
from kvpool.server.protocol import RequestParser
from kvpool.server.request_gate import GatedStream, RequestGate, Ticket
from kvpool.server.request_ids import shown_request_id
from kvpool.server.responses import ResponseBuilder
from kvpool.server.route_bodies import RouteBodies
from kvpool.server.scale_out_routes import register_scale_out_refusals
from kvpool.server.sse_answer import SSEAnswer
from kvpool.server.tokenize_routes import TokenizeRoutes

if TYPE_CHECKING:
    from kvpool.runtime.model import SamplingParams

__all__ = ["OpenAIRoutes", "PromptStreams"]

log = logging.getLogger("kvpool.server")


class OpenAIRoutes:
    """Request handlers bound to one engine and its edge gate; ``register(app)`` adds the
    routes."""

    def __init__(self, engine: EngineClient, gate: RequestGate, parser: RequestParser,
                 render_metrics: Callable[[], bytes], model_names: Sequence[str], *,
                 stream_write_timeout: float = DEFAULT_STREAM_WRITE_TIMEOUT,
                 sse_keep_alive: float = 0.0,
                 request_metrics: RequestMetrics | None = None,
                 per_request_metrics: bool = False) -> None:
        if not stream_write_timeout > 0:
            raise ValueError(f"stream_write_timeout={stream_write_timeout!r}: use seconds > 0")
        self.engine = engine
        self.gate = gate  # tenant, quota and drain: asked once per generation request
        # how streams are written: each write bounded, keep-alive comments (sse_answer.py)
        self.firsts = FirstUpdates()  # NOTE(format-off-loop): prompt logprobs, off the loop
        self.sse = SSEAnswer(float(stream_write_timeout), float(sse_keep_alive), self.firsts)
        self.parser = parser
        self.render_metrics = render_metrics
        self.model_names = tuple(model_names)
        self.created = int(time.time())
        # vLLM's model card ``root``: the model as given to the server (--model / the
        # positional DIR), whatever name it is served under; the built-in model's own name
        self.model_root = engine.config.model or TINY_MODEL_NAME
        self.parse_pool = ParsePool()  # every route that parses a client body shares it
        self.encoding = 0  # JSON answers being written now (tests watch it)
        self.bodies = RouteBodies(parser)  # what the generation routes parse, on the pool
        self.request_metrics = request_metrics  # vLLM-meaning request series, or None
        self.per_request_metrics = per_request_metrics  # request_timing.py's, on answers
        self.formatter = LogprobFormatter(parser.tokenizer)
        self.id_formatter = LogprobFormatter(parser.tokenizer, as_token_ids=True)

    def register(self, app: web.Application) -> None:
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_post("/v1/chat/completions/batch", self.batch_chat)  # route_bodies.py
        app.router.add_post("/invocations", self.invocations)  # SageMaker's: route_bodies.py
        app.router.add_get("/v1/models", self.list_models)
        app.router.add_get("/v1/models/{model}", self.get_model)
        app.router.add_get("/health", self.health)
        # vLLM's SageMaker-style liveness probe (GET and POST): /health's answer
        app.router.add_get("/ping", self.health)
        app.router.add_post("/ping", self.health)
        app.router.add_get("/version", self.version)
        TokenizeRoutes(self.parser, self.parse_pool).register(app)
        # NOTE(metrics-path): vLLM mounts its registry on ^/metrics(?P<path>.*)$, so
        # /metrics/ and /metrics<anything> answer it too (a scrape config's metrics_path:
        # /metrics/ works); the template still holds /metrics: HTTP series leave it out
        app.router.add_get("/metrics{path:.*}", self.metrics)
        register_scale_out_refusals(app)  # vLLM's 403 without --enable-scale-out

    # ---- generation ---------------------------------------------------------------------------
    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self.generate(request, self.bodies.completion)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self.generate(request, self.bodies.chat)

    async def batch_chat(self, request: web.Request) -> web.StreamResponse:
        return await self.generate(request, self.bodies.batch_chat)  # NOTE(batch-chat)

    async def invocations(self, request: web.Request) -> web.StreamResponse:
        return await self.generate(request, self.bodies.invocation)  # NOTE(invocations)

    async def generate(self, request: web.Request, parse: Callable[[bytes], ParsedRequest],
                       view: Callable[[ResponseBuilder], Any] = ChunkView
                       ) -> web.StreamResponse:
        """Parse the body with ``parse`` (on the parse pool), run it, answer through
        ``view(builder)``: chunk_view.py ChunkView (completions, chat), or another shape of the
        same updates (responses_api.py)."""
        return await self.answer(request, await self.prepare(request, parse), view)

    async def prepare(self, request: web.Request,
                      parse: Callable[[bytes], ParsedRequest]) -> ParsedRequest:
        """The request, parsed and its grammar compiled (off the loop: grammar_compile.py)."""
        req = await self.parse_pool.read_and_parse(request, parse)
        if req.params.response_format is not None:
            req = dataclasses.replace(req, params=await self.engine.compile_grammar(req.params))
        return req

    def open(self, req: ParsedRequest,
             shown_id: str | None = None) -> tuple[ResponseBuilder, PromptStreams]:
        """The request's builder and its streams, admitted by the gate (its 503 / 429s here);
        the caller runs them (``run``, ``answer``), whose end releases them."""
        builder = ResponseBuilder(req, formatter=self.id_formatter
                                  if req.extras.tokens_as_ids else self.formatter,
                                  shown_id=shown_id, metrics=self.per_request_metrics)
        params = [req.params_at(i) for i in range(len(req.prompts))]
        ticket = self.gate.admit(req.prompts, params, req.cache_salt)
        return builder, PromptStreams(self.engine, ticket, builder.engine_id, req.prompts, params,
                                      priority=req.priority)

    async def answer(self, request: web.Request, req: ParsedRequest,
                     view: Callable[[ResponseBuilder], Any],
                     written: Callable[[Any, bytes], None] | None = None) -> web.StreamResponse:
        """Run a prepared request and answer it: JSON, or SSE when it streams. ``written``:
        handed a JSON answer's body and its bytes before they are sent (json_encoded)."""
        builder, updates = self.open(req, shown_request_id(request, req.request_id))
        if not req.stream:
            await self.run(builder, updates)
            body = view(builder).body()
            self.encoding += 1
            try:  # a huge answer's JSON is written in slices, the loop free between them
                raw = await json_encoded(body, written)
            finally:  # (NOTE(encode-slices) in json_answer.py)
                self.encoding -= 1
            return bytes_answer(raw, ignored_header(req.ignored))
        try:  # validation, QueueFullError and first updates surface as statuses there
            return await self.sse.stream(request, view(builder), updates)
        finally:
            await updates.release()
            self._observe(builder)

    async def run(self, builder: ResponseBuilder, updates: PromptStreams,
                  each: Callable[[list[dict[str, Any]]], None] | None = None) -> None:
        """Every update of a request into ``builder``, to the end, each one's chunks to
        ``each`` (if given); its failure raised. The streams are released however it ends
        (NOTE(abort))."""
        try:
            await updates.start()
            chunks = await self.firsts.fold(builder, updates)
            if each is not None:
                each(chunks)
            async for i, out in updates:
                chunks = builder.update(out, i)
                if each is not None and chunks:
                    each(chunks)
            failure = builder.failure()
            if failure is not None:
                raise failure
        finally:
            await updates.release()
            self._observe(builder)

    def _observe(self, builder: ResponseBuilder) -> None:
        """Each finished prompt of the request into the request metrics."""
        rm = self.request_metrics
        if rm is None:
            return
        n, req = builder.n, builder.req
        for p, done in enumerate(builder.prompt_finished):
            if not done:
                continue
            params = req.params_at(p)
            choices = range(p * n, (p + 1) * n)
            rm.observe(prompt_tokens=builder.prompt_tokens[p],
                       generated=[builder.num_generated[i] for i in choices],
                       n=params.n, max_tokens=params.max_tokens or 0,
                       reasons=[builder.finish[i] for i in choices],
                       timings=builder.timings.get(p, [{}] * n))

    def close(self) -> None:
        """Stop the parse and format pools (the app's cleanup); what runs there finishes."""
        self.parse_pool.close()
        self.firsts.close()

    # ---- the rest -----------------------------------------------------------------------------
    def _model_card(self, name: str) -> dict[str, Any]:
        """vLLM's model card, with its one permission entry (the fields vLLM fills in)."""
        permission = {"id": f"modelperm-{uuid.uuid4().hex}", "object": "model_permission",
                      "created": self.created, "allow_create_engine": False,
                      "allow_sampling": True, "allow_logprobs": True,
                      "allow_search_indices": False, "allow_view": True,
                      "allow_fine_tuning": False, "organization": "*", "group": None,
                      "is_blocking": False}
        return {"id": name, "object": "model", "created": self.created, "owned_by": "kvpool",
                "root": self.model_root, "parent": None,
                "max_model_len": self.parser.max_model_len,
                "permission": [permission]}

    async def list_models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list",
                                  "data": [self._model_card(n) for n in self.model_names]})

    async def get_model(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        name = self.parser.models.aliases.get(name, name)  # NOTE(served-name): an old name
        if name not in self.model_names:
            raise APIError(404, f"the model '{name}' does not exist", param="model",
                           code="model_not_found")
        return web.json_response(self._model_card(name))

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": __version__})

    async def health(self, request: web.Request) -> web.Response:
        healthy = not self.gate.draining and bool(self.engine.is_healthy())
        # the load too: a router or endpoint picker that sends this replica only part of its
        # traffic (kvpool router --kv-events, kvpool epp) balances on it between requests
        # (sequences, as /metrics' vllm:* gauges count them: NOTE(load-counts))
        return web.json_response({"status": "ok" if healthy else "unhealthy",
                                  **load_counts(self.engine)}, status=200 if healthy else 503)

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.render_metrics(), headers={"Content-Type": CONTENT_TYPE})


class PromptStreams:
    """Owned by one handler; not shared."""

    def __init__(self, engine: EngineClient, ticket: Ticket, request_id: str,
                 prompts: Sequence[list[int]], params: Sequence[SamplingParams], *,
                 priority: int) -> None:
        self.engine = engine
        self.ticket = ticket  # the gate's admission of this request
        self.prompts = list(prompts)
        self.params = list(params)  # each prompt's (NOTE(clamp): its own max_tokens)
        self.priority = priority
        one = len(self.prompts) == 1
        self.ids = [request_id] if one else [f"{request_id}-{i}" for i in range(len(prompts))]
        self.streams: list[GatedStream] = []
        self.done = [False] * len(self.prompts)  # saw the prompt's finished update
        self._firsts: list[RequestOutput] = []
        self._merged: MergedUpdates | None = None  # several prompts' streams, read as one

    def check(self) -> None:
        """Every prompt's pool rules (NOTE(all-or-nothing)): their 400 before any is queued."""
        for ids, params in zip(self.prompts, self.params):
            self.engine.check_pool(ids, params)

    async def start(self) -> None:
        if not self.streams:  # else opened by its caller already (responses_api.py)
            self.open()
        await self.firsts_awaited()

    def open(self) -> None:
        """The pool checks, then every prompt's stream opened (a full queue raises here)."""
        self.check()
        for i, (rid, ids) in enumerate(zip(self.ids, self.prompts)):
            self.streams.append(self.ticket.open(i, rid, ids, self.params[i],
                                                 priority=self.priority, checked=True))

    async def firsts_awaited(self) -> None:
        for i, s in enumerate(self.streams):
            first = await anext(s)
            self.done[i] = first.finished
            self._firsts.append(first)

    def firsts(self) -> list[tuple[int, RequestOutput]]:
        return list(enumerate(self._firsts))

    def __aiter__(self) -> PromptStreams:
        return self

    async def __anext__(self) -> tuple[int, RequestOutput]:
        if len(self.streams) == 1:
            return 0, await self._read(0)
        if self._merged is None:
            self._merged = MergedUpdates(self.streams, self.done)
        while True:
            i, item = await self._merged.get()
            if isinstance(item, BaseException):
                raise item
            self.done[i] = True if item is None else item.finished
            if item is not None:  # None: ended without finished=True (failure: an abort)
                return i, item

    async def _read(self, i: int) -> RequestOutput:
        if self.done[i]:
            raise StopAsyncIteration
        try:
            out = await anext(self.streams[i])
        except StopAsyncIteration:
            self.done[i] = True  # ended without finished=True: failure() reports an abort
            raise
        self.done[i] = out.finished
        return out

    async def release(self) -> None:
        """Stop the pumps, close the streams, abort every unfinished prompt."""
        if self._merged is not None:
            await self._merged.stop()
        for i, s in enumerate(self.streams):
            try:
                await aclose_updates(s)
                if not self.done[i]:
                    await self.engine.abort(self.ids[i])
            except Exception:  # noqa: BLE001 - never mask the handler's own outcome
                log.exception("releasing request %s failed", self.ids[i])
        self.ticket.close()

