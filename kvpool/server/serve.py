"""``kvpool serve``: run the OpenAI-compatible server over one AsyncEngine.

::

    kvpool serve --port 8000 --num-device-blocks 512 --preemption-mode swap --api-key KEY
    python -m kvpool.server.serve ...          (the same, without the kvpool CLI)

``run_server`` builds the engine and the app, serves through ``web.AppRunner`` + ``TCPSite``
with ``handler_cancellation=True`` (a client that disconnects cancels its handler, which aborts
its request) on a guarded listener (connections.py: ``--max-connections``, ``--header-timeout``,
``--keep-alive-timeout``, JSON for aiohttp's own 400s), and shuts down gracefully on
SIGTERM/SIGINT on one deadline (shutdown.py): stop listening, answer queued requests 503, let
running ones finish for up to ``shutdown_timeout`` seconds, abort the rest (streams get an error
event and ``[DONE]``), stop the engine (every block back in the pool), exit 0; a second signal
exits at once. The event loop is uvloop when it is installed, chosen once, here at the entry
point.

Flags follow vLLM's spelling; each EngineConfig field has one (``test_serve_args`` checks).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import gc
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from aiohttp import web

from kvpool.errors import ConfigError
from kvpool.runtime.engine_config import EngineConfig
from kvpool.server.app import DEFAULT_MAX_BODY_BYTES, DRAIN_KEY, METRICS_KEY, build_app, \
    start_draining
from kvpool.server.connections import DEFAULT_HEADER_TIMEOUT, DEFAULT_KEEP_ALIVE_TIMEOUT, \
    MIN_SEND_BUFFER, ConnectionLimiter, default_max_connections, start_listener
from kvpool.server.handlers import DEFAULT_STREAM_WRITE_TIMEOUT
from kvpool.server.lookup import REPLICA_ID_KEY, default_replica_id
from kvpool.server.remote_setup import DEFAULT_WRITE_POLICY, add_remote_args, build_link

__all__ = ["add_arguments", "add_serve_args", "config_from_args", "main", "resolve_api_key",
           "run", "run_server", "serve"]

log = logging.getLogger("kvpool.server")

API_KEY_ENV = "KVPOOL_API_KEY"
DEFAULT_SHUTDOWN_TIMEOUT = 10.0
READY_PREFIX = "kvpool serve: listening on http://"  # tests wait for this line on stdout
STOPPED_PREFIX = "kvpool serve: stopped; "
FORCED_EXIT_LINE = "kvpool serve: second signal, exiting now"
FORCED_EXIT_STATUS = 1
# NOTE(grace): after the deadline, aborted handlers get this long to write their error event
# and [DONE], and aiohttp/the engine get it again to close what is left: the whole shutdown
# stays within shutdown_timeout + 4 * GRACE (< 1 s).
SHUTDOWN_GRACE = 0.2
# NOTE(threads): measured with bench.step on the Qwen2-0.5B-shaped model (bench/qwen_shape.py),
# 2-core machine shared with other work (load average ~5), float32, batch 16 x 256 context:
# decode 1001 ms/step with 1 thread, 6424 ms with 2 (OpenMP threads waiting on a core taken by
# another process); a 256-token prefill 7.1 s with 1, 4.3 s with 2. Decode steps dominate
# serving, so the default is 1; pass --num-threads N on a dedicated machine.
DEFAULT_NUM_THREADS = 1
# NOTE(latency): the step thread runs long stretches of Python (scheduling 1000s of sequences);
# a 0.5 ms GIL switch interval (default 5 ms) bounds how long the event loop (HTTP, /metrics)
# waits for it, for a small throughput cost. Process-wide, so set here and nowhere else.
SWITCH_INTERVAL = 0.0005


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
    "served_model_name": (str, "NAME", "the model name clients send (default: the model dir "
                                       "name)"),
    "tokenizer": (str, "DIR", "local directory with tokenizer.json (and the chat template) "
                              "when it is not the model's"),
    "dtype": (str, ("auto", "float32", "bfloat16", "float16"), "weights and KV dtype (auto: "
              "the checkpoint's, float32 where this CPU lacks native bf16)"),
    "device": (str, "DEVICE", "cpu or cuda[:N]"),
    "block_size": (int, "TOKENS", "token slots per KV block"),
    "kv_cache_memory": (_int_or_size, "BYTES", "KV cache budget on CPU, e.g. 256MiB"),
    "gpu_memory_utilization": (float, "FRACTION", "share of GPU memory for the KV cache"),
    "swap_space": (_float_or_size, "GIB", "host swap pool size in GiB (0 disables swapping)"),
    "num_device_blocks": (int, "N", "device KV blocks (overrides the memory budget)"),
    "num_host_blocks": (int, "N", "host swap blocks (overrides --swap-space)"),
    "enable_prefix_caching": ("bool", None, "share full prompt blocks by content hash"),
    "eviction_policy": (str, "POLICY", "which evictable cached block goes first (lru, ...)"),
    "max_num_seqs": (int, "N", "sequences running at once"),
    "tenant_max_running_seqs": (int, "N", "sequences one tenant (--tenant-header, else the API "
                                          "key) may run at once"),
    "max_num_batched_tokens": (int, "N", "tokens per engine step"),
    "max_model_len": (int, "TOKENS", "context length (default: the model's)"),
    "preemption_mode": (str, ("swap", "recompute"), "how to preempt (default: by cost)"),
    "defrag_threshold": (float, "FRACTION", "defragment above this external fragmentation"),
    "seed": (int, "N", "tiny-model weights and the shared sampling RNG"),
    "max_queue": (int, "N", "waiting requests before 503 + Retry-After"),
    "max_n": (int, "N", "completions per request (n), at most"),
    "max_tokens_limit": (int, "N", "max_tokens per request, at most"),
    "max_stop": (int, "N", "stop strings per request, at most"),
    "max_logprobs": (int, "K", "logprobs / top_logprobs / prompt_logprobs k, at most"),
    "num_threads": (int, "N", f"torch intra-op threads (None: {DEFAULT_NUM_THREADS}, measured by "
                              "bench.step)"),
}


def add_serve_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add every ``kvpool serve`` flag to ``parser``."""
    defaults = {f.name: f.default for f in dataclasses.fields(EngineConfig)}
    # vLLM's spelling: `kvpool serve DIR` is `kvpool serve --model DIR`
    parser.add_argument("model_tag", nargs="?", default=None, metavar="MODEL_DIR",
                        help="local Hugging Face model directory (same as --model)")
    eng = parser.add_argument_group("engine")
    for name, (kind, meta, text) in _ENGINE_FLAGS.items():
        flag = "--" + name.replace("_", "-")
        help_text = f"{text} (default: {defaults.get(name)})"
        if kind == "bool":
            eng.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction,
                             default=argparse.SUPPRESS, help=help_text)
        elif isinstance(meta, tuple):
            eng.add_argument(flag, dest=name, type=kind, choices=meta,
                             default=argparse.SUPPRESS, help=help_text)
        else:
            eng.add_argument(flag, dest=name, type=kind, metavar=meta,
                             default=argparse.SUPPRESS, help=help_text)
    srv = parser.add_argument_group("server")
    srv.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    srv.add_argument("--port", type=int, default=8000, help="port (0: any free port; default "
                                                            "8000)")
    srv.add_argument("--api-key", default=None,
                     help=f"require 'Authorization: Bearer KEY' on /v1 (or env {API_KEY_ENV})")
    srv.add_argument("--shutdown-timeout", type=float, default=DEFAULT_SHUTDOWN_TIMEOUT,
                     help="seconds in-flight requests get to finish on SIGTERM/SIGINT before "
                          "they are aborted")
    srv.add_argument("--header-timeout", type=float, default=DEFAULT_HEADER_TIMEOUT,
                     metavar="SECONDS", help="close a new connection that has not sent a "
                     "complete request head within SECONDS (0: off)")
    srv.add_argument("--keep-alive-timeout", type=float, default=DEFAULT_KEEP_ALIVE_TIMEOUT,
                     metavar="SECONDS", help="close a keep-alive connection idle (or sending "
                     "its next request head) for SECONDS (0: never)")
    srv.add_argument("--max-connections", type=int, default=None, metavar="N",
                     help="open connections at most; beyond it new ones get 503 and close "
                          "(default: the open-file limit minus a reserve)")
    srv.add_argument("--socket-send-buffer", type=int, default=None, metavar="BYTES",
                     help="SO_SNDBUF of each accepted connection: bounds the kernel memory one "
                     "client that stops reading can pin, so --stream-write-timeout meets it "
                     "soon (default: the OS's autotuning, up to net.ipv4.tcp_wmem's max)")
    srv.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES,
                     help="request bodies larger than this get 413")
    srv.add_argument("--tenant-block-quota", type=int, default=None, metavar="BLOCKS",
                     help="cap the KV blocks the in-flight requests of one tenant may hold "
                          "(429 beyond it; default: no cap)")
    srv.add_argument("--tenant-header", default=None, metavar="NAME",
                     help="trusted header (set by your proxy) naming the tenant for quotas and "
                          "fair scheduling, e.g. X-Tenant-Id (default: the API key, else one "
                          "anonymous tenant)")
    srv.add_argument("--stream-write-timeout", type=float, default=DEFAULT_STREAM_WRITE_TIMEOUT,
                     metavar="SECONDS", help="close a stream whose client has not read for this "
                     "long (one SSE write waiting on a full socket buffer)")
    srv.add_argument("--invariant-check-interval", type=int, default=0, metavar="STEPS",
                     help="run the full pool/scheduler invariant check every STEPS engine "
                          "steps; failures count in kvpool_invariant_violations_total (0: off)")
    srv.add_argument("--chat-template", default=None, metavar="FILE",
                     help="a Jinja chat template overriding the model directory's own "
                          "(default: the model's, else the built-in one)")
    srv.add_argument("--replica-id", default=None, metavar="ID",
                     help="this replica's name in /v1/kvpool/lookup answers (the router logs "
                          "it; default: HOSTNAME-PID)")
    add_remote_args(parser)
    srv.add_argument("--uvloop", action=argparse.BooleanOptionalAction, default=None,
                     help="use uvloop (default: when installed)")
    srv.add_argument("--log-level", default="info",
                     choices=("debug", "info", "warning", "error"), help="logging level")
    return parser


add_arguments = add_serve_args  # the name kvpool.cli's command registry looks for


def config_from_args(args: argparse.Namespace) -> EngineConfig:
    """EngineConfig from the flags that were given (the others keep their defaults)."""
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(EngineConfig)
             if hasattr(args, f.name)}
    tag = getattr(args, "model_tag", None)
    if tag is not None:
        if given.get("model") not in (None, tag):
            raise ConfigError(f"the model is given twice ({tag!r} and --model "
                              f"{given['model']!r}): give one")
        given["model"] = tag
    return EngineConfig(**given)


def resolve_api_key(args: argparse.Namespace) -> str | None:
    """--api-key, else $KVPOOL_API_KEY, else no auth."""
    return args.api_key or os.environ.get(API_KEY_ENV) or None


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


async def serve(config: EngineConfig, host: str = "127.0.0.1", port: int = 8000,
                api_key: str | None = None, *,
                shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT,
                max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
                stop: asyncio.Event | None = None,
                on_ready: Callable[[str, int], None] | None = None,
                handle_signals: bool = True, tenant_block_quota: int | None = None,
                invariant_check_interval: int = 0,
                header_timeout: float = DEFAULT_HEADER_TIMEOUT,
                keep_alive_timeout: float = DEFAULT_KEEP_ALIVE_TIMEOUT,
                max_connections: int | None = None, chat_template: str | None = None,
                tenant_header: str | None = None,
                stream_write_timeout: float = DEFAULT_STREAM_WRITE_TIMEOUT,
                replica_id: str | None = None, remote_url: str | None = None,
                remote_write_policy: str = DEFAULT_WRITE_POLICY,
                remote_prefetch_timeout_ms: float = 500.0,
                remote_blocks_per_object: int = 1,
                socket_send_buffer: int | None = None) -> None:
    """Serve until SIGTERM/SIGINT (or ``stop`` is set), then shut down gracefully."""
    from kvpool.runtime.engine import AsyncEngine  # the heavy import, only when serving

    limiter = ConnectionLimiter(max_connections or default_max_connections())
    engine = AsyncEngine(config)
    engine.invariant_check_interval = invariant_check_interval
    link = None
    if remote_url:
        link = build_link(engine, remote_url, write_policy=remote_write_policy,
                          prefetch_timeout_ms=remote_prefetch_timeout_ms,
                          blocks_per_object=remote_blocks_per_object,
                          metrics=engine.metrics)  # the registry build_app serves
        engine.remote_link = link  # read before engine.start() (the app's startup)
    app = build_app(engine, api_key=api_key, max_body_bytes=max_body_bytes,
                    engine_shutdown_timeout=SHUTDOWN_GRACE,
                    tenant_block_quota=tenant_block_quota, chat_template=chat_template,
                    tenant_header=tenant_header,
                    stream_write_timeout=stream_write_timeout)
    app[REPLICA_ID_KEY] = replica_id or default_replica_id()
    app[METRICS_KEY].add_source(limiter.families)
    freeze_startup_heap()
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=SHUTDOWN_GRACE)
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    installed = []
    if handle_signals:
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, _on_signal, stop)
                installed.append(sig)
    await runner.setup()
    listener: asyncio.AbstractServer | None = None
    try:
        listener = await start_listener(
            runner, host, port, limiter=limiter, header_timeout=header_timeout,
            keep_alive_timeout=keep_alive_timeout, send_buffer=socket_send_buffer,
            access_log=log if log.isEnabledFor(logging.DEBUG) else None)
        bound = listener.sockets[0].getsockname()[1] if listener.sockets else port
        loop_kind = type(loop).__module__.split(".")[0]  # "uvloop" or "asyncio"
        print(f"{READY_PREFIX}{host}:{bound} (model {engine.model_name}, {loop_kind} loop)",
              flush=True)
        if on_ready is not None:
            on_ready(host, bound)
        await stop.wait()
        log.info("shutting down: in-flight requests get %.1fs", shutdown_timeout)
        listener.close()  # stop listening first: nothing new arrives while we drain
        await _drain(app, shutdown_timeout)
    finally:
        if listener is not None:
            listener.close()
        await runner.cleanup()  # close what is left, engine.shutdown (blocks back)
        if link is not None:
            await link.tier.aclose()
        for sig in installed:
            loop.remove_signal_handler(sig)
    print(f"{STOPPED_PREFIX}{engine.num_free_blocks()} device blocks free", flush=True)


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
    gate = app[DRAIN_KEY]
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


def tune_process(config: EngineConfig) -> None:
    """The process-wide settings of a server process (torch threads, GIL switch interval):
    only the entry point owns the process, library classes never touch them."""
    import torch

    threads = config.num_threads or DEFAULT_NUM_THREADS
    torch.set_num_threads(threads)
    if sys.getswitchinterval() > SWITCH_INTERVAL:
        sys.setswitchinterval(SWITCH_INTERVAL)
    log.info("torch threads: %d (%s), GIL switch interval %.1f ms", threads,
             "--num-threads" if config.num_threads else "default, see bench.step",
             sys.getswitchinterval() * 1e3)


def _loop_factory(use_uvloop: bool | None) -> Callable[[], asyncio.AbstractEventLoop] | None:
    if use_uvloop is False:
        return None
    try:
        import uvloop
    except ImportError:
        if use_uvloop:
            raise SystemExit("--uvloop was asked for but uvloop is not installed") from None
        return None
    return uvloop.new_event_loop


def run_server(config: EngineConfig, host: str = "127.0.0.1", port: int = 8000,
               api_key: str | None = None, *, shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT,
               max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, use_uvloop: bool | None = None,
               on_ready: Callable[[str, int], None] | None = None,
               tenant_block_quota: int | None = None, invariant_check_interval: int = 0,
               **edge: Any) -> None:
    """Blocking entry point: pick the event loop once (uvloop when installed) and serve.
    ``edge``: header_timeout, keep_alive_timeout, max_connections, chat_template,
    tenant_header, stream_write_timeout, replica_id, socket_send_buffer (see
    :func:`serve`)."""
    tune_process(config)
    with asyncio.Runner(loop_factory=_loop_factory(use_uvloop)) as runner:
        runner.run(serve(config, host, port, api_key, shutdown_timeout=shutdown_timeout,
                         max_body_bytes=max_body_bytes, on_ready=on_ready,
                         tenant_block_quota=tenant_block_quota,
                         invariant_check_interval=invariant_check_interval, **edge))


def main(args: argparse.Namespace | Sequence[str] | None = None) -> int:
    """``kvpool serve``: ``args`` from :func:`add_serve_args` (or an argv list)."""
    if not isinstance(args, argparse.Namespace):
        parser = add_serve_args(argparse.ArgumentParser(prog="kvpool serve"))
        args = parser.parse_args(None if args is None else list(args))
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = config_from_args(args)
    except ValueError as exc:  # ConfigError names the flag and the fix
        print(f"kvpool serve: {exc}", file=sys.stderr)
        return 2
    api_key = resolve_api_key(args)
    if args.max_connections is not None and args.max_connections < 1:
        print(f"kvpool serve: --max-connections {args.max_connections}: use a positive count",
              file=sys.stderr)
        return 2
    if args.header_timeout < 0 or args.keep_alive_timeout < 0:
        print("kvpool serve: --header-timeout/--keep-alive-timeout: use seconds >= 0 "
              "(0: off)", file=sys.stderr)
        return 2
    if args.socket_send_buffer is not None and args.socket_send_buffer < MIN_SEND_BUFFER:
        print(f"kvpool serve: --socket-send-buffer {args.socket_send_buffer}: use bytes >= "
              f"{MIN_SEND_BUFFER} (or leave it out for the OS's default)", file=sys.stderr)
        return 2
    try:
        run_server(config, args.host, args.port, api_key,
                   shutdown_timeout=args.shutdown_timeout, max_body_bytes=args.max_body_bytes,
                   use_uvloop=args.uvloop, tenant_block_quota=args.tenant_block_quota,
                   invariant_check_interval=args.invariant_check_interval,
                   header_timeout=args.header_timeout,
                   keep_alive_timeout=args.keep_alive_timeout,
                   max_connections=args.max_connections, chat_template=args.chat_template,
                   tenant_header=args.tenant_header,
                   stream_write_timeout=args.stream_write_timeout,
                   replica_id=args.replica_id, remote_url=args.remote_url,
                   remote_write_policy=args.remote_write_policy,
                   remote_prefetch_timeout_ms=args.remote_prefetch_timeout_ms,
                   remote_blocks_per_object=args.remote_blocks_per_object,
                   socket_send_buffer=args.socket_send_buffer)
    except ValueError as exc:  # ConfigError from building the engine (model dir, budget)
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
