"""``kvpool serve``: run the OpenAI-compatible server over one AsyncEngine.

::

    kvpool serve --port 8000 --num-device-blocks 512 --preemption-mode swap --api-key KEY
    python -m kvpool.server.serve ...          (the same, without the kvpool CLI)

``run_server`` builds the engine and the app, serves through ``web.AppRunner`` + ``TCPSite``
with ``handler_cancellation=True`` (a client that disconnects cancels its handler, which aborts
its request) on a guarded listener (connections.py: ``--max-connections``, ``--header-timeout``,
``--keep-alive-timeout``, JSON for aiohttp's own 400s; HTTPS with vLLM's ``--ssl-certfile``
and its other TLS flags: tls.py), and shuts down gracefully on
SIGTERM/SIGINT on one deadline (request_gate.py): stop listening, answer queued requests 503, let
running ones finish for up to ``shutdown_timeout`` seconds, abort the rest (streams get an error
event and ``[DONE]``), stop the engine (every block back in the pool), exit 0; a second signal
exits at once. The event loop is uvloop when it is installed, chosen once, here at the entry
point.

Flags follow vLLM's spelling; each EngineConfig field has one (``test_serve_args`` checks).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from aiohttp import web

from kvpool.runtime.engine.config import EngineConfig
from kvpool.runtime.engine.context_fit import require_context_fits, require_within_model
from kvpool.runtime.model.hf_cache import cached_snapshot
from kvpool.server.app import GATE_KEY, METRICS_KEY, ROUTES_KEY, build_app, start_draining
from kvpool.server.bind_first import Bound, build_on, stop_listening
from kvpool.server.connections import ConnectionLimiter, default_max_connections, start_listener
from kvpool.server.kv_events_route import KVEventsRoute
from kvpool.server.listen_errors import listening, require_own_port
from kvpool.server.lookup import REPLICA_ID_KEY, default_replica_id
from kvpool.server.process_tuning import loop_factory, tune_process
from kvpool.server.remote_setup import add_remote_args, build_link, require_tier_runs
from kvpool.server.responses_api import RESPONSES_KEY
from kvpool.server.serve_options import (API_KEY_ENV, DEFAULT_SHUTDOWN_TIMEOUT, ServeOptions,
                                         add_server_args, loopback_said, resolve_api_key)
from kvpool.server.tls import ServerTLS
from kvpool.server.vllm_dotted import human_int, human_int_or_auto
from kvpool.server.vllm_flags import VllmSwitch, chosen_device, set_up_logging
from kvpool.signals import install_stop_signals

if TYPE_CHECKING:
    from kvpool.runtime.engine.async_engine import AsyncEngine

__all__ = ["API_KEY_ENV", "DEFAULT_SHUTDOWN_TIMEOUT", "ServeOptions", "add_arguments",
           "add_serve_args", "config_from_args", "main", "resolve_api_key", "run", "run_server",
           "serve"]

log = logging.getLogger("kvpool.server")

READY_PREFIX = "kvpool serve: listening on http://"  # tests wait for this line on stdout
READY_TLS_PREFIX = "kvpool serve: listening on https://"  # the same with --ssl-certfile
STOPPED_PREFIX = "kvpool serve: stopped; "
FORCED_EXIT_LINE = "kvpool serve: second signal, exiting now"
FORCED_EXIT_STATUS = 1
# NOTE(grace): after the deadline, aborted handlers get this long to write their error event
# and [DONE], and aiohttp/the engine get it again to close what is left: the whole shutdown
# stays within shutdown_timeout + 4 * GRACE (< 1 s).
SHUTDOWN_GRACE = 0.2


def _int_or_size(text: str) -> int | str:
    """``1073741824`` -> int; ``"1GiB"``/``"256MiB"`` stay strings (EngineConfig parses them)."""
    return int(text) if text.isdigit() else text


def _float_or_size(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


# EngineConfig field -> (argparse type or "bool", metavar/choices, help). One row per field.
_ENGINE_FLAGS: dict[str, tuple[Any, Any, str]] = {
    "model": (str, "DIR", "local Hugging Face model directory (default: the built-in tiny "
                          "model); never downloads"),
    "served_model_name": (str, "NAME", "the model name(s) clients send, vLLM's spelling: "
                          "several are all accepted and /v1/models lists them (put the model "
                          "dir first); the first is the engine's (default: --model as given)"),
    "tokenizer": (str, "DIR", "local directory with tokenizer.json (and the chat template) "
                              "when it is not the model's"),
    "dtype": (lambda t: DTYPE_ALIASES.get(t, t), ("auto", "float32", "bfloat16", "float16"),
              "weights and KV dtype; vLLM's half and float mean float16 and float32 (auto: "
              "the checkpoint's, float32 where this CPU lacks native bf16)"),
    "device": (str, "DEVICE", "auto (CUDA where torch sees it, else the CPU), cpu or cuda[:N]"),
    "block_size": (int, "TOKENS", "token slots per KV block"),
    "kv_cache_memory": (_int_or_size, "BYTES", "KV cache budget on CPU, e.g. 256MiB"),
    "gpu_memory_utilization": (float, "FRACTION", "share of GPU memory for the KV cache"),
    "swap_space": (_float_or_size, "GIB", "host swap pool size in GiB (0 disables swapping)"),
    "num_device_blocks": (int, "N", "device KV blocks (overrides the memory budget)"),
    "num_host_blocks": (int, "N", "host swap blocks (overrides --swap-space)"),
    "enable_prefix_caching": ("bool", None, "share full prompt blocks by content hash"),
    "eviction_policy": (str, "POLICY", "which evictable cached block goes first (lru, ...)"),
    "max_num_seqs": (int, "N", "sequences running at once (default: 64, or the budget below)"),
    "tenant_max_running_seqs": (int, "N", "sequences one tenant (--tenant-header, else the API "
                                          "key) may run at once"),
    "max_num_batched_tokens": (human_int, "N", "tokens per engine step, at least --max-num-seqs "
                               "(8k, 8K: vLLM's; default: 2048, or --max-num-seqs above)"),
    "max_model_len": (human_int_or_auto, "TOKENS", "context length (default, auto or -1: the "
                                                   "model's; 32k, 32K: vLLM's)"),
    "preemption_mode": (str, ("swap", "recompute"), "how to preempt (default: by cost); swap "
                        "still recomputes a request preempted while prefilling (nothing "
                        "generated yet) or one the host pool has no room for"),
    "defrag_threshold": (float, "FRACTION", "defragment above this external fragmentation"),
    "seed": (int, "N", "tiny-model weights and the shared sampling RNG"),
    "max_queue": (int, "N", "requests in flight (running and waiting) before 503 + "
                          "Retry-After (default 1024; vLLM's has no bound)"),
    "max_n": (int, "N", "completions per request (n), at most"),
    "max_tokens_limit": (int, "N", "max_tokens per request, at most"),
    "max_stop": (int, "N", "stop strings per request, at most"),
    "max_logprobs": (int, "K", "logprobs / top_logprobs / prompt_logprobs k, at most (-1: no "
                               "cap, the vocabulary's size)"),
    "num_threads": (int, "N", "torch intra-op threads (None: the usable cores minus one)"),
}


DTYPE_ALIASES = {"half": "float16", "float": "float32"}  # vLLM's other spellings


def add_serve_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add every ``kvpool serve`` flag to ``parser``."""
    defaults = {f.name: f.default for f in dataclasses.fields(EngineConfig)}
    # vLLM's spelling: `kvpool serve DIR` is `kvpool serve --model DIR`
    parser.add_argument("model_tag", nargs="?", default=None, metavar="MODEL_DIR",
                        help="local Hugging Face model directory (same as --model)")
    eng = parser.add_argument_group("engine")
    for name, (kind, meta, text) in _ENGINE_FLAGS.items():
        flag = "--" + name.replace("_", "-")
        help_text = text if "default" in text else f"{text} (default: {defaults.get(name)})"
        if kind == "bool":
            eng.add_argument(flag, dest=name, action=VllmSwitch,  # vLLM's --disable- too
                             default=argparse.SUPPRESS, help=help_text)
        elif name == "served_model_name":  # vLLM's nargs: every name is accepted
            eng.add_argument(flag, dest=name, nargs="+", metavar=meta, default=None,
                             help=help_text)
        elif isinstance(meta, tuple):
            eng.add_argument(flag, dest=name, type=kind, choices=meta,
                             default=argparse.SUPPRESS, help=help_text)
        else:
            eng.add_argument(flag, dest=name, type=kind, metavar=meta,
                             default=argparse.SUPPRESS, help=help_text)
    add_server_args(parser)
    add_remote_args(parser)
    return parser


add_arguments = add_serve_args  # the name kvpool.cli's command registry looks for


def config_from_args(args: argparse.Namespace) -> EngineConfig:
    """EngineConfig from the flags that were given (the others keep their defaults)."""
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(EngineConfig)
             if hasattr(args, f.name)}
    if isinstance(given.get("served_model_name"), list):  # the engine's name: the first
        given["served_model_name"] = given["served_model_name"][0]
    tag = getattr(args, "model_tag", None)
    if tag is not None:  # the positional wins, as in vLLM (a --config file's model too)
        if given.get("model") not in (None, tag):
            log.info("the model is %r (the positional), not --model %r", tag, given["model"])
        given["model"] = tag
    _from_hf_cache(given)
    given["device"] = chosen_device(given)  # auto resolved, and said (NOTE(auto-device))
    return EngineConfig(**given)


def _from_hf_cache(given: dict) -> None:
    """NOTE(hf-cache) in kvpool/runtime/model/hf_cache.py: a hub id the local cache holds is
    read from its snapshot, served under the hub id's name (vLLM's) unless one is given."""
    for key in ("model", "tokenizer"):
        snapshot = cached_snapshot(given[key]) if given.get(key) else None
        if snapshot is not None:
            log.info("--%s %s: the Hugging Face cache's snapshot %s", key, given[key], snapshot)
            if key == "model" and not given.get("served_model_name"):
                given["served_model_name"] = given[key]
            given[key] = str(snapshot)


def freeze_startup_heap() -> int:
    """NOTE(gc-freeze): the model, tokenizer and app leave ~400k long-lived objects; every
    full (generation 2) collection walks them all with the GIL held, ~0.7 s on a loaded
    machine: each one stalled every stream and /health that long (the stress run's /health
    max). Once everything built at startup is collected and frozen (the permanent
    generation, as vLLM does after loading), a full collection walks only what serving
    allocated since. Returns how many objects are frozen now."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


async def serve(config: EngineConfig, options: ServeOptions | None = None, *,
                stop: asyncio.Event | None = None,
                on_ready: Callable[[str, int], None] | None = None,
                handle_signals: bool = True) -> None:
    """Serve until SIGTERM/SIGINT (or ``stop`` is set), then shut down gracefully."""
    o = options if options is not None else ServeOptions()
    if o.host is None:  # NOTE(loopback) in serve_options.py
        o = dataclasses.replace(o, host=loopback_said())
    tls = ServerTLS(o)  # HTTPS with --ssl-certfile (tls.py), before the model loads
    limiter = ConnectionLimiter(o.max_connections or default_max_connections())
    socks, (engine, app) = build_on(o.host, o.port, lambda: _build(config, o, limiter))
    freeze_startup_heap()
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=SHUTDOWN_GRACE)
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    installed = install_stop_signals(loop, _on_signal, stop) if handle_signals else []
    await runner.setup()
    listener: asyncio.AbstractServer | None = None
    try:
        listener = await _listen(runner, o, socks, tls, limiter, engine.model_name, on_ready)
        tls.start()  # --enable-ssl-refresh's watch (NOTE(ssl-refresh))
        await stop.wait()
        log.info("shutting down: in-flight requests get %.1fs", o.shutdown_timeout)
        listener.close()  # stop listening first: nothing new arrives while we drain
        await _drain(app, o.shutdown_timeout)
    finally:
        await tls.close()
        stop_listening(listener, socks)
        await runner.cleanup()  # close what is left, engine.shutdown (blocks back, tier closed)
        for sig in installed:
            loop.remove_signal_handler(sig)
    print(f"{STOPPED_PREFIX}{engine.num_free_blocks()} device blocks free", flush=True)


def _require_context(engine: AsyncEngine, block_size: int) -> None:
    """vLLM refuses to start when max_model_len outgrows the KV cache (a derived one was
    capped) or the model's own context (NOTE(long-context) in context_fit.py)."""
    require_context_fits(engine.max_model_len, engine.num_device_blocks, block_size)
    require_within_model(engine.max_model_len, engine.core.model.config.context_length,
                         os.environ)


def _engine(config: EngineConfig, events: KVEventsRoute) -> AsyncEngine:
    """The engine, its pool observed by ``events``' recorder; their publisher closed when
    the engine cannot be built."""
    # the heavy import, only when serving
    from kvpool.runtime.engine.async_engine import AsyncEngine
    try:
        return AsyncEngine(config, pool_observer=events.recorder)
    except BaseException:
        if events.publisher is not None:
            events.publisher.close()
        raise


def _build(config: EngineConfig, o: ServeOptions,
           limiter: ConnectionLimiter) -> tuple[AsyncEngine, web.Application]:
    """The engine (its remote link and KV events wired) and the app over it."""
    events = KVEventsRoute.start(o.kv_events_config, config.block_size, o.kv_events_salt_key,
                                 config.enable_prefix_caching)
    require_own_port(o.host, o.port, events.publisher)  # before the model loads, not after
    engine = _engine(config, events)
    _require_context(engine, config.block_size)
    engine.invariant_check_interval = o.invariant_check_interval
    if o.remote_url:
        require_tier_runs(engine)  # NOTE(tier-needs) in remote_setup.py
        engine.remote_link = build_link(  # read before engine.start() (the app's startup)
            engine, o.remote_url, write_policy=o.remote_write_policy,
            prefetch_timeout_ms=o.remote_prefetch_timeout_ms,
            op_timeout_ms=o.remote_op_timeout_ms,
            blocks_per_object=o.remote_blocks_per_object, secret_file=o.remote_secret_file,
            metrics=engine.metrics)  # the registry build_app serves
    app = build_app(engine, api_key=o.api_key, max_body_bytes=o.max_body_bytes,
                    engine_shutdown_timeout=SHUTDOWN_GRACE,
                    tenant_block_quota=o.tenant_block_quota, chat_template=o.chat_template,
                    tenant_header=o.tenant_header, shared_prefix_cache=o.shared_prefix_cache,
                    stream_write_timeout=o.stream_write_timeout,
                    sse_keep_alive=o.sse_keep_alive_interval,
                    reject_unknown_fields=o.reject_unknown_fields,
                    trust_request_chat_template=o.trust_request_chat_template,
                    tool_call_parser=o.auto_tool_parser, **o.request_defaults,
                    reasoning_parser=o.reasoning_parser,
                    served_model_names=o.served_model_name, cors=o.cors,
                    server_load_tracking=o.enable_server_load_tracking, dev_routes=o.dev_routes)
    _set_server_options(app, o, limiter)
    events.register(app, engine, replica_id=app[REPLICA_ID_KEY], chat_template=o.chat_template,
                    tenant_header=o.tenant_header, tenants=bool(o.api_key or o.tenant_header),
                    model_names=o.served_model_name or ())
    if events.publisher is not None:
        app[METRICS_KEY].add_source(events.publisher.families)
    return engine, app


def _set_server_options(app: web.Application, o: ServeOptions,
                        limiter: ConnectionLimiter) -> None:
    """The options build_app does not take: set on what it built."""
    app[REPLICA_ID_KEY] = o.replica_id or default_replica_id()
    app[RESPONSES_KEY].store.set_bounds(o.max_stored_responses, o.max_stored_response_bytes)
    app[ROUTES_KEY].parse_pool.body_timeout = o.body_timeout  # every route's bodies
    app[METRICS_KEY].add_source(limiter.families)
    limiter.flush_at_cleanup(app)


async def _listen(runner: web.AppRunner, o: ServeOptions, socks: Bound, tls: ServerTLS,
                  limiter: ConnectionLimiter, model_name: str,
                  on_ready: Callable[[str, int], None] | None) -> asyncio.AbstractServer:
    """The guarded listener on ``socks`` (HTTPS with ``tls.context``), and the READY line."""
    with listening(o.host, o.port):  # listen() on a port another start bound meanwhile
        listener = await start_listener(
            runner, o.host, o.port, limiter=limiter, header_timeout=o.header_timeout,
            keep_alive_timeout=o.keep_alive_timeout, send_buffer=o.socket_send_buffer,
            access_log=o.access_log(log),  # at debug, unless --disable-uvicorn-access-log
            ssl=tls.context, socks=socks)
    bound = listener.sockets[0].getsockname()[1] if listener.sockets else o.port
    loop_kind = type(asyncio.get_running_loop()).__module__.split(".")[0]  # uvloop | asyncio
    ready = READY_PREFIX if tls.context is None else READY_TLS_PREFIX
    print(f"{ready}{o.host}:{bound} (model {model_name}, {loop_kind} loop)", flush=True)
    if on_ready is not None:
        on_ready(o.host, bound)
    return listener


def _on_signal(stop: asyncio.Event) -> None:
    """First SIGTERM/SIGINT: drain. Second: the operator means it, exit now."""
    if not stop.is_set():
        stop.set()
        return
    print(FORCED_EXIT_LINE, flush=True)
    logging.shutdown()
    os._exit(FORCED_EXIT_STATUS)  # NOTE(exit): no cleanup; the process and its pool go away


async def _drain(app: web.Application, timeout: float) -> None:
    """Queued requests get 503 now, running ones until ``timeout``, then they are aborted
    (streams: error event + [DONE]); returns within timeout + SHUTDOWN_GRACE."""
    gate = app[GATE_KEY]
    deadline = time.monotonic() + max(0.0, timeout)
    start_draining(app)
    shed = await gate.shed_queued()
    if shed:
        log.info("shutting down: %d queued request(s) answered 503", shed)
    while gate.live and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    if gate.live:
        log.warning("shutting down: aborting %d request(s) still running after %.1fs",
                    await gate.abort_all(), timeout)
        grace_end = time.monotonic() + SHUTDOWN_GRACE
        while gate.live and time.monotonic() < grace_end:
            await asyncio.sleep(0.01)
    # NOTE(drain): a handler whose stream just ended still writes its tail; yield once so it
    # does before aiohttp's cleanup starts cancelling
    await asyncio.sleep(SHUTDOWN_GRACE / 4)


def run_server(config: EngineConfig, options: ServeOptions | None = None, *,
               on_ready: Callable[[str, int], None] | None = None) -> None:
    """Blocking entry point: tune the process, pick the event loop once (uvloop when
    installed) and serve."""
    o = options if options is not None else ServeOptions()
    tune_process(config)
    with asyncio.Runner(loop_factory=loop_factory(o.uvloop)) as runner:
        runner.run(serve(config, o, on_ready=on_ready))


def main(args: argparse.Namespace | Sequence[str] | None = None) -> int:
    """``kvpool serve``: ``args`` from :func:`add_serve_args` (or an argv list)."""
    if not isinstance(args, argparse.Namespace):
        parser = add_serve_args(argparse.ArgumentParser(prog="kvpool serve"))
        args = parser.parse_args(None if args is None else list(args))
    set_up_logging(args)  # --log-level, and vLLM's --uvicorn-log-level (vllm_flags.py)
    try:
        run_server(config_from_args(args), ServeOptions.from_args(args))
    except ValueError as exc:  # ConfigError naming the flag (or the model dir, the budget)
        print(f"kvpool serve: {exc}", file=sys.stderr)
        return 2
    _exit_now(0)
    return 0  # not reached


def _exit_now(status: int) -> None:
    """End the process after a clean shutdown without interpreter teardown.

    NOTE(exit): by now the drain has answered every client, the engine has stopped and every
    block is back in the pool (the STOPPED line says so). What is left is finalizing torch's
    modules and freeing the KV tensors, which took ~1 s on a busy 2-core machine and pushed the
    exit past ``--shutdown-timeout + 1 s``; the operating system frees that memory at once."""
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(status)


run = main  # the name kvpool.cli's command registry looks for

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
