"""``build_app``: the aiohttp application around one AsyncEngine, wired at the edge.

::

    request -> count answers     (vLLM's http_requests_total & co.: http_counting.py)
            -> error_middleware  (every failure -> OpenAI error JSON, see middleware.py)
            -> CORS preflight    (OPTIONS + Origin + Access-Control-Request-Method, any path:
                                  answered here, before the key is asked for; cors.py)
            -> auth_middleware   (only with an API key; /v1, /v2, /inference, /cohere...)
            -> tenant_middleware (who sent it: tenant.py)
            -> count_load        (only with server_load_tracking: GET /load; server_load.py)
            -> OpenAIRoutes      (handlers.py) -> RequestGate.admit (request_gate.py)
                                               -> engine.generate / metrics.render

    app[ENGINE_KEY]   the engine (EngineClient)   app[METRICS_KEY]  the metrics registry
    app[ROUTES_KEY]   the handlers                app[GATE_KEY]     tenant, quota and drain
    cleanup_ctx       engine.start() ... engine.shutdown()

``build_app``'s options::

    api_key                  a path under /v1, /v2, /inference, /cohere or /invocations needs
                             ``Authorization: Bearer <api_key>`` (one key, or a tuple of keys
                             any of which will do; api_key.py NOTE(guarded-prefixes))
    max_body_bytes           larger bodies get 413
    metrics                  the registry /metrics renders (default: the engine's)
    manage_engine            start the engine with the app and shut it down (waiting
                             ``engine_shutdown_timeout`` for in-flight requests) when the app
                             stops; False when the caller owns the engine's lifetime
    tenant_block_quota       cap the KV blocks the in-flight requests of one tenant may hold
                             (quota.py); None = no cap
    tenant_header            the trusted header naming the tenant (tenant.py); None = the API
                             key, else anonymous
    shared_prefix_cache      one prefix cache for all tenants even where an API key or tenant
                             header tells them apart (default: one namespace per tenant,
                             cache_namespace.py)
    chat_template            a Jinja file, template or template name that overrides the model
                             directory's own (chat_template.py); the built-in template for the
                             built-in model only (NOTE(no-template))
    stream_write_timeout     seconds one SSE write may wait for a client that does not read
                             before its connection is closed (handlers.py, NOTE(slow-reader))
    sse_keep_alive           seconds of an idle stream before a keep-alive comment (0: none;
                             sse_answer.py NOTE(keep-alive))
    reject_unknown_fields    400 for body fields this server does not know (default: ignored
                             and listed in a response header, as vLLM ignores them)
    generation_config        where request sampling defaults come from (generation_config.py):
                             ``auto`` the model directory's generation_config.json, ``vllm``
                             none, or a directory
    override_generation_config  sampling defaults over that file's (vLLM's
                             --override-generation-config; generation_config.py)
    return_tokens_as_token_ids  the default of the request field of that name: logprob tokens
                             spelled ``token_id:<id>`` (vLLM's --return-tokens-as-token-ids)
    default_chat_template_kwargs  the chat template's kwargs under a request's own, key by
                             key (vLLM's --default-chat-template-kwargs)
    anthropic_disabled_thinking_effort  the reasoning_effort of a Messages request's disabled
                             thinking: auto (probed) or an effort (anthropic_effort.py)
    trust_request_chat_template  run a ``chat_template`` a request sends (template_cache.py
                             NOTE(untrusted-template)); default: refused with a 400
    tool_call_parser         reads ``tool_choice: auto`` output (tools/parsers.py); None: auto
                             is a 400, as without vLLM's --enable-auto-tool-choice
    cors                     the CORS policy (cors.py): preflights, and the Access-Control-*
                             headers of every answer to a request with ``Origin``; default
                             vLLM's (any origin, method and header; no credentials)
    server_load_tracking     GET /load counts the requests in the generation routes (vLLM's
                             --enable-server-load-tracking; server_load.py); default: it says 0
    dev_routes               vLLM's development cache routes (POST /reset_prefix_cache, ...;
                             dev_routes.py); default: absent (404), as without vLLM's
                             VLLM_SERVER_DEV_MODE
    tokenizer_info           GET /tokenizer_info, the tokenizer's configuration (vLLM's
                             --enable-tokenizer-info-endpoint; tokenizer_info.py); default:
                             absent (404)
    per_request_metrics      completions and chat answers carry vLLM's timing ``metrics``
                             (--enable-per-request-metrics; request_timing.py)
    reasoning_parser         reads chat output's thinking apart (reasoning.py's NAMES:
                             vLLM's --reasoning-parser names); None: all of it is content

NOTE(shutdown): ``kvpool serve`` drives its own drain on one deadline first (request_gate.py), so
by the time aiohttp's cleanup runs there is little left. aiohttp's runner cleanup runs in this order: stop listening -> on_shutdown
(we mark the app draining: /health says 503, new requests get 503) -> wait up to the runner's
``shutdown_timeout`` for in-flight handlers, then cancel them (each cancelled handler aborts its
request) -> cleanup_ctx exit, where ``engine.shutdown`` aborts whatever is left and every block
returns to the pool. Serve with ``handler_cancellation=True`` (``run_server`` does; aiohttp's
test server does too) so a client that disconnects cancels its handler and frees its blocks.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from aiohttp import web

from kvpool.metrics import KVPoolMetrics
from kvpool.metrics.http_series import HttpSeries
from kvpool.metrics.request_metrics import RequestMetrics
from kvpool.runtime.engine.model_name import name_aliases
from kvpool.server.anthropic_api import MessagesRoute
from kvpool.server.api_key import auth_middleware
from kvpool.server.cache_namespace import CacheNamespace
from kvpool.server.chat_template import load_chat_template
from kvpool.server.engine_client import EngineClient
from kvpool.server.generation_config import load_generation_defaults
from kvpool.server.connections import DEFAULT_STREAM_WRITE_TIMEOUT
from kvpool.server.cors import CorsPolicy
from kvpool.server.dev_routes import DevRoutes
from kvpool.server.expect import readable_expectations
from kvpool.server.handlers import OpenAIRoutes
from kvpool.server.http_counting import HttpCounting
from kvpool.server.json_body import DEFAULT_MAX_BODY_BYTES, MAX_JSON_DEPTH
from kvpool.server.lookup import LookupRoute
from kvpool.server.middleware import error_middleware, json_errors
from kvpool.server.protocol import RequestParser
from kvpool.server.quota import TenantBlockQuota
from kvpool.server.request_gate import RequestGate
from kvpool.server.request_ids import add_request_id
from kvpool.server.responses_api import ResponsesRoute
from kvpool.server.server_load import ServerLoad
from kvpool.server.tenant import tenant_middleware
from kvpool.server.tokenizer_info import TokenizerInfoRoute
from kvpool.server.reasoning import ReasoningParser
from kvpool.server.tools.parsers import tool_parser

__all__ = ["DEFAULT_MAX_BODY_BYTES", "ENGINE_KEY", "GATE_KEY", "METRICS_KEY", "ROUTES_KEY",
           "build_app", "start_draining"]

DEFAULT_ENGINE_SHUTDOWN_TIMEOUT = 10.0
DEFAULT_CORS = CorsPolicy()  # vLLM's defaults: no origin, any method and header, no credentials

Middleware = Callable[[web.Request, Callable[[web.Request], Awaitable[web.StreamResponse]]],
                     Awaitable[web.StreamResponse]]

# the engine's contract, not the class: the stress harness reuses the app
ENGINE_KEY: web.AppKey[EngineClient] = web.AppKey("kvpool_engine")
METRICS_KEY = web.AppKey("kvpool_metrics", KVPoolMetrics)
ROUTES_KEY = web.AppKey("kvpool_routes", OpenAIRoutes)
GATE_KEY = web.AppKey("kvpool_gate", RequestGate)  # the edge's rules; serve's drain reads it
NAMESPACE_KEY = web.AppKey("kvpool_cache_namespace", CacheNamespace)  # the salts' rule
_ENGINE_SHUTDOWN_KEY = web.AppKey("kvpool_engine_shutdown_timeout", float)
_MANAGE_ENGINE_KEY = web.AppKey("kvpool_manage_engine", bool)


def build_app(engine: EngineClient, *, api_key: str | tuple[str, ...] | None = None,
              max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, metrics: KVPoolMetrics | None = None,
              served_model_names: tuple[str, ...] | None = None, manage_engine: bool = True,
              max_json_depth: int = MAX_JSON_DEPTH, per_request_metrics: bool = False,
              engine_shutdown_timeout: float = DEFAULT_ENGINE_SHUTDOWN_TIMEOUT,
              tenant_block_quota: int | None = None, chat_template: str | Path | None = None,
              tenant_header: str | None = None, shared_prefix_cache: bool = False,
              stream_write_timeout: float = DEFAULT_STREAM_WRITE_TIMEOUT, sse_keep_alive: float = 0,
              reject_unknown_fields: bool = False, return_tokens_as_token_ids: bool = False,
              generation_config: str | None = "auto", reasoning_parser: str | None = None,
              override_generation_config: Mapping[str, Any] | None = None, dev_routes: bool = False,
              tool_call_parser: str | None = None, cors: CorsPolicy = DEFAULT_CORS,
              trust_request_chat_template: bool = False, server_load_tracking: bool = False,
              default_chat_template_kwargs: Mapping[str, Any] | None = None,
              anthropic_disabled_thinking_effort: str = "auto",
              tokenizer_info: bool = False) -> web.Application:
    """The OpenAI-compatible app (each option: the module docstring's table)."""
    app = _edge(api_key, tenant_header, cors, max_body_bytes, ServerLoad(server_load_tracking))
    names = served_model_names or _engine_names(engine)
    parser = _parser(engine, names, max_json_depth, chat_template, trust_request_chat_template,
                     reject_unknown_fields, tool_call_parser, generation_config,
                     override_generation_config, return_tokens_as_token_ids, reasoning_parser,
                     default_chat_template_kwargs)
    metrics = metrics if metrics is not None else engine.metrics
    namespace = CacheNamespace(identity=bool(api_key or tenant_header), shared=shared_prefix_cache)
    gate = RequestGate(engine, namespace,
                       TenantBlockQuota(tenant_block_quota) if tenant_block_quota else None)
    routes = OpenAIRoutes(engine, gate, parser, metrics.render, names,
                          stream_write_timeout=stream_write_timeout, sse_keep_alive=sse_keep_alive,
                          request_metrics=RequestMetrics(metrics, names[0], engine.max_model_len),
                          per_request_metrics=per_request_metrics)
    routes.register(app)
    ResponsesRoute.register(app, routes)  # POST /v1/responses, GET /v1/responses/{id}, cancel
    # POST /v1/kvpool/lookup (the router asks): the generation routes' parse pool and salts
    LookupRoute.register(app, engine, parser, routes.parse_pool, namespace)
    _wire(app, engine, metrics, routes, gate, dev_routes, anthropic_disabled_thinking_effort,
          tokenizer_info)
    app[_ENGINE_SHUTDOWN_KEY] = float(engine_shutdown_timeout)
    app[_MANAGE_ENGINE_KEY] = manage_engine
    return app


def _engine_names(engine: EngineClient) -> tuple[str, ...]:
    """The names the engine serves under (its model's, then its config's), each once."""
    return tuple(dict.fromkeys(n for n in (engine.model_name, engine.config.served_model_name)
                               if n))


def _edge(api_key: str | tuple[str, ...] | None, tenant_header: str | None, cors: CorsPolicy,
          max_body_bytes: int, load: ServerLoad) -> web.Application:
    """The app with its edge: the middlewares, the CORS headers of every answer, GET /load."""
    if max_body_bytes < 1:
        raise ValueError(f"max_body_bytes={max_body_bytes!r}: use a positive byte count")
    # NOTE(order): first = outermost; a preflight carries no key, so it is answered before auth
    middlewares: list[Middleware] = [error_middleware, cors.middleware()]
    keys = (api_key,) if isinstance(api_key, str) else tuple(api_key or ())
    if keys:
        middlewares.append(auth_middleware(keys))
    # NOTE(order): after auth, so the API key it reads is a checked one
    middlewares.append(tenant_middleware(tenant_header, keyed=bool(keys)))
    if load.tracking:  # innermost: what reached a handler (server_load.py NOTE(server-load))
        middlewares.append(load.middleware())
    # NOTE(expect-bound) in expect.py: the routes' Expect handler refuses what the body
    # reader would (413, 501) before a 100 Continue
    app = readable_expectations(web.Application(middlewares=middlewares,
                                                client_max_size=max_body_bytes))
    app.on_response_prepare.append(cors.on_response_prepare)
    load.register(app)
    return app


def _parser(engine: EngineClient, names: tuple[str, ...], max_json_depth: int,
            chat_template: str | Path | None, trust_request_template: bool,
            reject_unknown_fields: bool, tool_call_parser: str | None,
            generation_config: str | None, override: Mapping[str, Any] | None,
            tokens_as_ids: bool, reasoning: str | None,
            template_kwargs: Mapping[str, Any] | None = None) -> RequestParser:
    """The request parser, bounded by the engine's config and context; the request fields'
    defaults: generation_config.py's, return_tokens_as_token_ids, and vLLM's
    --default-chat-template-kwargs (under a request's own: body_fields.with_defaults)."""
    config = engine.config
    defaults = load_generation_defaults(generation_config, config.model, override)
    if tokens_as_ids:  # a request's own value (false too) wins, as in vLLM
        defaults["return_tokens_as_token_ids"] = True
    if template_kwargs:
        defaults["chat_template_kwargs"] = dict(template_kwargs)
    # a request's prompts fit the queue bound (each is a request in flight); with no bound,
    # RequestParser's own cap on prompts per request
    queue_bound = {"max_prompts": config.max_queue} if config.max_queue else {}
    return RequestParser(engine.tokenizer, names, engine.max_model_len,
                         logits_size=engine.core.model.config.vocab_size,  # NOTE(logits-size)
                         max_n=config.max_n, max_num_seqs=config.max_num_seqs,
                         max_tokens_limit=config.max_tokens_limit or engine.max_model_len,
                         max_stop=config.max_stop, max_json_depth=max_json_depth,
                         chat_template=load_chat_template(config.tokenizer or config.model,
                                                          chat_template),
                         max_logprobs=config.max_logprobs,
                         **queue_bound,
                         reject_unknown_fields=reject_unknown_fields,
                         defaults=defaults,
                         tool_parser=tool_call_parser and tool_parser(tool_call_parser),
                         trust_request_chat_template=trust_request_template,
                         model_aliases=name_aliases(config),  # NOTE(served-name)
                         reasoning_parser=reasoning and ReasoningParser(reasoning,
                                                                        engine.tokenizer))


def _wire(app: web.Application, engine: EngineClient, metrics: KVPoolMetrics,
          routes: OpenAIRoutes, gate: RequestGate, dev_routes: bool = False,
          disabled_effort: str = "auto", tokenizer_info: bool = False) -> None:
    """The app's keys and its lifetime hooks (and vLLM's development routes and
    /tokenizer_info, if asked)."""
    if dev_routes:  # POST /reset_prefix_cache, /reset_mm_cache, /reset_encoder_cache
        DevRoutes.register(app, engine)
    if tokenizer_info:  # GET /tokenizer_info: the template chat renders with
        TokenizerInfoRoute.register(app, engine.config, routes.parser.chat_template)
    app[ENGINE_KEY] = engine
    app[METRICS_KEY] = metrics
    app[ROUTES_KEY] = routes
    app[GATE_KEY] = gate
    app[NAMESPACE_KEY] = gate.namespace
    app.on_response_prepare.append(add_request_id)  # X-Request-Id, echoed or made up
    app.on_response_prepare.append(json_errors)  # NOTE(expect): errors before the middleware
    app.on_shutdown.append(_start_draining)
    app.on_cleanup.append(_close_routes)
    app.cleanup_ctx.append(_engine_lifetime)
    # POST /v1/messages, /v1/messages/count_tokens: last, so its error hook follows json_errors
    MessagesRoute.register(app, routes, disabled_effort)  # (NOTE(anthropic-errors))
    # vLLM's http_requests_total & co.: its middleware outermost, its hook after every other
    # (NOTE(http-counting) in http_counting.py)
    HttpCounting(HttpSeries.attach(metrics)).register(app)


def start_draining(app: web.Application) -> None:
    """New requests get 503 shutting_down and /health 503 from now on."""
    app[GATE_KEY].draining = True


async def _start_draining(app: web.Application) -> None:
    start_draining(app)


async def _close_routes(app: web.Application) -> None:
    app[ROUTES_KEY].close()


async def _engine_lifetime(app: web.Application) -> AsyncIterator[None]:
    """Start the engine's step loop with the app; stop it (blocks back to the pool) after."""
    engine = app[ENGINE_KEY]
    if not app[_MANAGE_ENGINE_KEY]:
        yield
        return
    await engine.start()
    try:
        yield
    finally:
        await engine.shutdown(timeout=app[_ENGINE_SHUTDOWN_KEY])
