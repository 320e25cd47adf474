"""ServeOptions: every ``kvpool serve`` setting that is not the engine's (EngineConfig's).

One frozen, validated dataclass instead of a keyword argument per flag threaded through
``main -> run_server -> serve``: a new server flag is a field here plus its ``--flag`` in
:func:`add_server_args`, and nothing in between changes. Field names equal the flags' dests,
so :meth:`ServeOptions.from_args` picks them up by name. A bad value raises ConfigError naming
the flag (``kvpool serve`` turns it into exit status 2).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
from dataclasses import dataclass
from typing import Any, Protocol

from kvpool.errors import require
from kvpool.events.config import KVEventsConfig
from kvpool.remote import check_url
# the link's: remote_setup's imports RedisTier (NOTE(lazy-redis) in kvpool/remote/url_forms.py)
from kvpool.runtime.remote.link import DEFAULT_WRITE_POLICY
from kvpool.server.app import DEFAULT_MAX_BODY_BYTES
from kvpool.server.connections import (DEFAULT_HEADER_TIMEOUT, DEFAULT_KEEP_ALIVE_TIMEOUT,
                                       DEFAULT_STREAM_WRITE_TIMEOUT, MIN_SEND_BUFFER,
                                       add_client_timeout_args)
from kvpool.server.cors import CorsPolicy, add_cors_args, cors_list
from kvpool.server.dev_routes import DEV_MODE_ENV, DEV_ROUTES, dev_mode
from kvpool.server.generation_config import check_override
from kvpool.server.json_body import DEFAULT_BODY_TIMEOUT
from kvpool.server.reasoning import NAMES as REASONING
from kvpool.server.response_store import (DEFAULT_MAX_STORED_RESPONSE_BYTES,
                                          DEFAULT_MAX_STORED_RESPONSES)
from kvpool.server.salt_key import SALT_KEY_ENV, SALT_KEY_FLAG, SaltKey, resolve_salt_key
from kvpool.server.tls import add_tls_args, server_context
from kvpool.server.tools.parsers import PARSERS
from kvpool.server.vllm_flags import (HTTP_LOGGERS, LOG_LEVELS, VllmSwitch, add_vllm_args,
                                      apply_vllm_flags)
from kvpool.server.vllm_env import VLLM_API_KEY_ENV, take_vllm_env

__all__ = ["API_KEY_ENV", "DEFAULT_SHUTDOWN_TIMEOUT", "ServeOptions", "add_server_args",
           "loopback_said"]

log = logging.getLogger("kvpool.server")

class _ArgGroup(Protocol):  # argparse's argument group (its class is private)
    def add_argument(self, *flags: str, **options: Any) -> argparse.Action: ...


API_KEY_ENV = "KVPOOL_API_KEY"
DEFAULT_SHUTDOWN_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """The server's settings (the engine's are EngineConfig's); defaults are kvpool serve's."""

    host: str | None = None  # bind address; None: 127.0.0.1, said at start (loopback_said)
    port: int = 8000  # 0: any free port (the READY line says which)
    api_key: tuple[str, ...] | None = None  # Bearer keys, any one of them, on /v1 (None: none)
    shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT  # seconds running requests get on SIGTERM
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES  # larger bodies get 413
    tenant_block_quota: int | None = None  # KV blocks one tenant's in-flight requests may hold
    tenant_header: str | None = None  # trusted header naming the tenant (None: the API key)
    shared_prefix_cache: bool = False  # one prefix cache across tenants (default: per tenant)
    invariant_check_interval: int = 0  # full invariant check every N steps (0: off)
    header_timeout: float = DEFAULT_HEADER_TIMEOUT  # first request head within (0: off)
    body_timeout: float = DEFAULT_BODY_TIMEOUT  # a whole request body within (0: off)
    keep_alive_timeout: float = DEFAULT_KEEP_ALIVE_TIMEOUT  # idle keep-alive (0: never)
    max_connections: int | None = None  # None: the open-file limit minus a reserve
    socket_send_buffer: int | None = None  # SO_SNDBUF of accepted sockets (None: the OS's)
    stream_write_timeout: float = DEFAULT_STREAM_WRITE_TIMEOUT  # one SSE write, at most
    sse_keep_alive_interval: int = 0  # a keep-alive comment per idle interval (0: none)
    chat_template: str | None = None  # a file, template or name overriding the model's own
    trust_request_chat_template: bool = False  # run a request's own chat_template (else 400)
    replica_id: str | None = None  # name in /v1/kvpool/lookup answers (None: HOSTNAME-PID)
    remote_url: str | None = None  # redis://HOST:PORT of the shared prefix tier (None: off)
    remote_write_policy: str = DEFAULT_WRITE_POLICY
    remote_prefetch_timeout_ms: float = 500.0
    remote_op_timeout_ms: float = 250.0  # one Redis round trip's deadline
    remote_blocks_per_object: int = 1
    remote_secret_file: str | None = None  # shared secret signing the tier's values (None: off)
    uvloop: bool | None = None  # None: uvloop when installed
    reject_unknown_fields: bool = False  # 400 for unknown body fields (default: ignored)
    generation_config: str = "auto"  # sampling defaults: auto (the model's file) | vllm | DIR
    # vLLM's request defaults (vllm_flags.py): sampling keys over generation_config's, and
    # logprob tokens spelled token_id:<id> where a request leaves return_tokens_as_token_ids out
    override_generation_config: dict[str, Any] | None = None
    return_tokens_as_token_ids: bool = False
    default_chat_template_kwargs: dict[str, Any] | None = None  # under a request's own
    anthropic_disabled_thinking_effort: str = "auto"  # anthropic_effort.py (vLLM's flag)
    disable_uvicorn_access_log: bool = False  # vLLM's: no access line, even at debug
    # every --served-model-name (clients may send any; /v1/models lists them); None: the
    # engine's names (the model dir's)
    served_model_name: tuple[str, ...] | None = None
    kv_events_config: str | None = None  # vLLM's KVEventsConfig as JSON (None: no events)
    # the tenant salts' shared key (from_args reads the file --kv-events-salt-key-file names,
    # else $KVPOOL_KV_EVENTS_SALT_KEY); None: one drawn at start (NOTE(shared-salt-key))
    kv_events_salt_key: SaltKey | None = None
    max_stored_responses: int = DEFAULT_MAX_STORED_RESPONSES  # Responses API store, all tenants
    max_stored_response_bytes: int = DEFAULT_MAX_STORED_RESPONSE_BYTES  # the same store's bytes
    enable_auto_tool_choice: bool = False  # tool_choice auto read by tool_call_parser
    tool_call_parser: str | None = None  # tools/parsers.py name (hermes, llama3_json, ...)
    reasoning_parser: str | None = None  # reasoning.py name (deepseek_r1, qwen3, ...), or None
    enable_server_load_tracking: bool = False  # GET /load counts generation requests (vLLM's)
    enable_per_request_metrics: bool = False  # answers carry timing metrics (vLLM's)
    dev_routes: bool = False  # vLLM's cache reset routes (from_args: or $VLLM_SERVER_DEV_MODE)
    enable_tokenizer_info_endpoint: bool = False  # GET /tokenizer_info (vLLM's; 404 off)
    # CORS (cors.py), vLLM's flags: JSON lists as given on the command line, or sequences
    allowed_origins: tuple[str, ...] | str = ()  # none (cors.py NOTE(no-origin-default))
    allow_credentials: bool = False
    allowed_methods: tuple[str, ...] | str = ("*",)
    allowed_headers: tuple[str, ...] | str = ("*",)
    # HTTPS (tls.py), vLLM's flags: on with ssl_certfile; every file is read when checked
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_ca_certs: str | None = None
    ssl_cert_reqs: int = 0  # ssl.CERT_NONE; 1 CERT_OPTIONAL, 2 CERT_REQUIRED (client certs)
    ssl_ciphers: str | None = None
    enable_ssl_refresh: bool = False  # reload the files when they change (NOTE(ssl-refresh))

    def __post_init__(self) -> None:
        names = self.served_model_name
        if names is not None:
            names = (names,) if isinstance(names, str) else tuple(names)
            require(bool(names) and all(isinstance(n, str) and n for n in names),
                    "--served-model-name: give one or more non-empty names")
            object.__setattr__(self, "served_model_name", names)
        require(0 <= self.port < 65536, f"--port {self.port}: use 0..65535")
        require(self.shutdown_timeout >= 0, "--shutdown-timeout: use seconds >= 0")
        require(self.max_body_bytes > 0, "--max-body-bytes: use a positive byte count")
        require(self.max_connections is None or self.max_connections >= 1,
                f"--max-connections {self.max_connections}: use a positive count")
        require(min(self.header_timeout, self.keep_alive_timeout, self.body_timeout) >= 0,
                "--header-timeout/--keep-alive-timeout/--body-timeout: use seconds >= 0 "
                "(0: off)")
        require(self.socket_send_buffer is None or self.socket_send_buffer >= MIN_SEND_BUFFER,
                f"--socket-send-buffer {self.socket_send_buffer}: use bytes >= "
                f"{MIN_SEND_BUFFER} (or leave it out for the OS's default)")
        require(self.stream_write_timeout > 0, "--stream-write-timeout: use seconds > 0")
        require(self.sse_keep_alive_interval >= 0, "--sse-keep-alive-interval must be a "
                "non-negative integer (0 disables keep-alive comments)")  # vLLM's words
        require(self.invariant_check_interval >= 0, "--invariant-check-interval: use >= 0")
        require(self.remote_blocks_per_object >= 1, "--remote-blocks-per-object: use N >= 1")
        if self.remote_url:
            check_url(self.remote_url)  # before an engine is built: exit 2 naming the forms
        require(self.remote_prefetch_timeout_ms > 0, "--remote-prefetch-timeout-ms: use > 0")
        require(self.remote_op_timeout_ms > 0, "--remote-op-timeout-ms: use > 0")
        self._check_api_options()
        if self.kv_events_config is not None:
            KVEventsConfig.from_json(self.kv_events_config)  # ConfigError naming the flag
        check_override(self.override_generation_config or {})  # before the model loads
        server_context(self)  # the TLS files: ConfigError naming flag and path, before the model
        for name in ("allowed_origins", "allowed_methods", "allowed_headers"):
            flag = "--" + name.replace("_", "-")  # a ConfigError names the flag
            object.__setattr__(self, name, cors_list(flag, getattr(self, name)))

    def _check_api_options(self) -> None:
        """The flags of _add_api_args: the stored responses' bounds, the tool call parser."""
        require(self.max_stored_responses >= 0, f"--max-stored-responses "
                f"{self.max_stored_responses}: use a count >= 0 (0: store none)")
        require(self.max_stored_response_bytes >= 0, f"--max-stored-response-bytes "
                f"{self.max_stored_response_bytes}: use bytes >= 0 (0: store none)")
        require(not self.enable_auto_tool_choice or self.tool_call_parser is not None,
                "--enable-auto-tool-choice needs --tool-call-parser NAME (one of "
                f"{', '.join(sorted(PARSERS))})")
        require(self.tool_call_parser in (None, *PARSERS), f"--tool-call-parser "
                f"{self.tool_call_parser}: use one of {', '.join(sorted(PARSERS))}")
        require(self.reasoning_parser in (None, *REASONING), f"--reasoning-parser "
                f"{self.reasoning_parser}: use one of {', '.join(sorted(REASONING))}")

    @property
    def auto_tool_parser(self) -> str | None:
        """The parser that reads tool_choice auto, or None where auto is off (vLLM's rule:
        --tool-call-parser alone does not turn it on)."""
        return self.tool_call_parser if self.enable_auto_tool_choice else None

    @property
    def request_defaults(self) -> dict[str, Any]:
        """build_app's keywords for what a request gets where it leaves a field out, what
        every answer carries (vLLM's timing metrics), and vLLM's GET /tokenizer_info."""
        return {"generation_config": self.generation_config,
                "override_generation_config": self.override_generation_config,
                "return_tokens_as_token_ids": self.return_tokens_as_token_ids,
                "default_chat_template_kwargs": self.default_chat_template_kwargs,
                "anthropic_disabled_thinking_effort": self.anthropic_disabled_thinking_effort,
                "per_request_metrics": self.enable_per_request_metrics,
                "tokenizer_info": self.enable_tokenizer_info_endpoint}

    def access_log(self, logger: logging.Logger) -> logging.Logger | None:
        """The logger of the per-request access line: ``logger`` where it logs debug (the
        line's level in kvpool), or aiohttp's access logger where vLLM's --uvicorn-log-level
        set its level (debug, trace), unless vLLM's --disable-uvicorn-access-log was given."""
        http = logging.getLogger(HTTP_LOGGERS[0])
        chosen = http if http.level != logging.NOTSET else logger
        on = chosen.isEnabledFor(logging.DEBUG) and not self.disable_uvicorn_access_log
        return chosen if on else None

    @property
    def cors(self) -> CorsPolicy:
        return CorsPolicy(self.allowed_origins, credentials=self.allow_credentials,
                          methods=self.allowed_methods, headers=self.allowed_headers)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ServeOptions:
        """From parsed ``kvpool serve`` flags; the API key falls back to $KVPOOL_API_KEY, the
        salt key's file to $KVPOOL_KV_EVENTS_SALT_KEY (read here: ConfigError naming either);
        vLLM's flags are checked and their no-op lines logged (vllm_flags.py)."""
        apply_vllm_flags(args)
        given = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)
                 if hasattr(args, f.name)}
        given["api_key"] = resolve_api_key(args)
        given["kv_events_salt_key"] = resolve_salt_key(  # the flag's value is the file's path
            getattr(args, "kv_events_salt_key", None), os.environ)
        given["dev_routes"] = bool(getattr(args, "dev_routes", False)) or dev_mode(os.environ)
        return cls(**given)


def loopback_said() -> str:
    """NOTE(loopback): without --host kvpool binds 127.0.0.1, where vLLM binds every
    interface, so a manifest written for vLLM gave a server nothing outside its pod or
    container could reach, and nothing said why. Said once: a warning where a container or
    Kubernetes is detected, else an info line."""
    contained = bool(os.environ.get("KUBERNETES_SERVICE_HOST")) or os.path.exists("/.dockerenv")
    log.log(logging.WARNING if contained else logging.INFO,
            "listening on 127.0.0.1 only (kvpool's default; vLLM's is every interface): pass "
            "--host 0.0.0.0 to be reached from other machines (a Service, a published port)")
    return "127.0.0.1"


def resolve_api_key(args: argparse.Namespace) -> tuple[str, ...] | None:
    """--api-key's keys, else $KVPOOL_API_KEY, else $VLLM_API_KEY (a deployment written for
    vLLM passes its key so), else no auth. Empty keys are dropped, as vLLM drops them."""
    given = getattr(args, "api_key", None)
    keys = [given] if isinstance(given, str) else list(given or ())
    if not keys:
        keys = [os.environ.get(API_KEY_ENV) or os.environ.get(VLLM_API_KEY_ENV)]
    return tuple(k for k in keys if k) or None


def add_server_args(parser: argparse.ArgumentParser) -> None:
    """The ``server`` group of ``kvpool serve``'s flags: one per ServeOptions field (the remote
    tier's are remote_setup.add_remote_args's group), plus --log-level; then vllm_flags.py's
    "vLLM compatibility" group; vLLM's variables stand for flags not given (vllm_env.py)."""
    srv = parser.add_argument_group("server")
    _add_connection_args(srv)
    add_cors_args(srv)
    _add_tenant_args(srv)
    _add_request_args(srv)
    _add_events_args(srv)
    _add_api_args(srv)
    _add_process_args(srv)
    add_tls_args(srv, VllmSwitch)
    add_vllm_args(parser)
    take_vllm_env(parser)


def _add_connection_args(srv: _ArgGroup) -> None:
    """Where to listen, who may connect, and how long connections and shutdown may take."""
    srv.add_argument("--host", default=None, help="address to bind (default: 127.0.0.1, where "
                     "vLLM binds every interface: 0.0.0.0 to be reached from other machines)")
    srv.add_argument("--port", type=int, default=8000, help="port (0: any free port; default 8000)")
    srv.add_argument("--api-key", default=None, nargs="+", metavar="KEY",
                     help="require 'Authorization: Bearer KEY' on /v1, KEY one of those given "
                     f"(or env {API_KEY_ENV}, else {VLLM_API_KEY_ENV})")
    srv.add_argument("--shutdown-timeout", type=float, default=DEFAULT_SHUTDOWN_TIMEOUT,
                     help="seconds in-flight requests get to finish on SIGTERM/SIGINT before "
                          "they are aborted")
    add_client_timeout_args(srv)
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


def _add_tenant_args(srv: _ArgGroup) -> None:
    """Who a request's tenant is, its block quota and its prefix-cache namespace."""
    srv.add_argument("--tenant-block-quota", type=int, default=None, metavar="BLOCKS",
                     help="cap the KV blocks the in-flight requests of one tenant may hold "
                          "(429 beyond it; default: no cap)")
    srv.add_argument("--tenant-header", default=None, metavar="NAME",
                     help="trusted header (set by your proxy) naming the tenant for quotas and "
                          "fair scheduling, e.g. X-Tenant-Id (default: the API key, else one "
                          "anonymous tenant)")
    srv.add_argument("--shared-prefix-cache", action="store_true",
                     help="let tenants (--api-key / --tenant-header) share one prefix cache: "
                          "faster for common prefixes, but cached_tokens and "
                          "/v1/kvpool/lookup then tell a tenant whether another sent a prompt "
                          "(default: one prefix-cache namespace per tenant)")


def _add_request_args(srv: _ArgGroup) -> None:
    """How requests are parsed, streamed and checked."""
    srv.add_argument("--stream-write-timeout", type=float, default=DEFAULT_STREAM_WRITE_TIMEOUT,
                     metavar="SECONDS", help="close a stream whose client has not read for this "
                     "long (one SSE write waiting on a full socket buffer)")
    srv.add_argument("--sse-keep-alive-interval", type=int, default=0, metavar="SECONDS",
                     help="vLLM's: send the SSE comment ': keep-alive' when a stream has been "
                     "idle this long (queued, prefill, between tokens), so a proxy's read "
                     "timeout does not cut it (default 0: none)")
    srv.add_argument("--invariant-check-interval", type=int, default=0, metavar="STEPS",
                     help="run the full pool/scheduler invariant check every STEPS engine "
                          "steps; failures count in kvpool_invariant_violations_total (0: off)")
    srv.add_argument("--chat-template", default=None, metavar="FILE|TEMPLATE|NAME",
                     help="a Jinja chat template overriding the model directory's own: a "
                          "file, the template itself, or one of the tokenizer's template "
                          "names (default: the model's; a model without one refuses chat, "
                          "as vLLM does; the built-in model has its own)")
    srv.add_argument("--trust-request-chat-template", action=VllmSwitch, default=False,
                     help="run the chat_template a request sends, as vLLM's flag of this name "
                     "does: a template is code, and a hostile one can hold the server's CPU "
                     "or memory; only for clients trusted like the operator (default: 400)")
    srv.add_argument("--replica-id", default=None, metavar="ID",
                     help="this replica's name in /v1/kvpool/lookup answers (the router logs "
                          "it; default: HOSTNAME-PID)")
    srv.add_argument("--reject-unknown-fields", action="store_true", default=False,
                     help="answer 400 unknown_parameter for a body field this server does not "
                     "know, as OpenAI does (default: ignore it as vLLM does, log it once and "
                     "list it in the X-Kvpool-Ignored-Fields response header)")
    srv.add_argument("--generation-config", default="auto", metavar="auto|vllm|DIR",
                     help="request sampling defaults (temperature, top_p, top_k, min_p, "
                     "repetition_penalty, presence_penalty, frequency_penalty, "
                     "skip_special_tokens, max_new_tokens): auto reads the model directory's "
                     "generation_config.json, vllm uses none, DIR reads DIR's, whose "
                     "max_new_tokens also caps every request's max_tokens (vLLM's spelling "
                     "and rule; default: auto)")


def _add_events_args(srv: _ArgGroup) -> None:
    """The KV events a replica publishes (kv_events_route.py, salt_key.py)."""
    srv.add_argument("--kv-events-config", default=None, metavar="JSON",
                     help="publish KV cache events in vLLM's format (ZMQ PUB, msgpack): "
                     "vLLM's keys, e.g. '{\"enable_kv_cache_events\": true, \"publisher\": "
                     "\"zmq\", \"endpoint\": \"tcp://*:5557\", \"replay_endpoint\": "
                     "\"tcp://*:5558\"}'; a wildcard host, port 0 or ipc:// binds, any other "
                     "is connected to (an indexer's bound SUB, vLLM's rule); "
                     "GET /v1/kvpool/kv_events tells subscribers where")
    srv.add_argument(SALT_KEY_FLAG, dest="kv_events_salt_key", default=None, metavar="PATH",
                     help="a file holding a secret (16 bytes or more) shared by the replicas: "
                     "the salts of named tenants' chains in KV events are keyed by it, so every "
                     "replica given it publishes the same extra_keys for a tenant's prompt, "
                     "across restarts too (or env " + SALT_KEY_ENV + "; default: a key drawn "
                     "at every start, shared with no one)")


def _add_api_args(srv: _ArgGroup) -> None:
    """The OpenAI API features a server turns on or sizes: stored responses, tool calls."""
    srv.add_argument("--max-stored-responses", type=int, default=DEFAULT_MAX_STORED_RESPONSES,
                     metavar="N", help="Responses API results kept in memory for "
                     "previous_response_id and GET /v1/responses/{id}, all tenants together; "
                     "when full, the least recently used of the tenant holding the most goes "
                     f"(0: none; default {DEFAULT_MAX_STORED_RESPONSES})")
    srv.add_argument("--max-stored-response-bytes", type=int,
                     default=DEFAULT_MAX_STORED_RESPONSE_BYTES, metavar="BYTES",
                     help="the same store bounded by size, what a response holds in memory "
                     "(its JSON body, its conversation's Python objects; 32 MiB measured 33.5 "
                     "MiB of RSS): when over, the least recently used of the tenant holding "
                     "the most bytes goes; a response larger than this is not stored "
                     "(a continuation naming it gets 404) (0: none; default "
                     f"{DEFAULT_MAX_STORED_RESPONSE_BYTES}, 256 MiB)")
    srv.add_argument("--enable-auto-tool-choice", action=VllmSwitch, default=False,
                     help="let the model decide to call tools (tool_choice auto, the default "
                     "when tools are sent), its output read by --tool-call-parser")
    srv.add_argument("--tool-call-parser", default=None, metavar="NAME",
                     help=f"how the model writes tool calls: {', '.join(sorted(PARSERS))} "
                     "(vLLM's names; required and named tool_choice need none)")
    srv.add_argument("--reasoning-parser", default=None, choices=sorted(REASONING),
                     help=f"read a reasoning model's thinking apart from its answer: "
                     f"{', '.join(sorted(REASONING))} (vLLM's names; chat's message.reasoning "
                     "and delta.reasoning)")
    srv.add_argument("--enable-server-load-tracking", action=VllmSwitch, default=False,
                     help="GET /load answers {\"server_load\": N}, N the requests in "
                     "/v1/completions, /v1/chat/completions and /v1/responses now, as vLLM's "
                     "flag of this name (default: off, /load says 0)")
    srv.add_argument("--enable-per-request-metrics", action=VllmSwitch, default=False,
                     help="completions and chat answers carry vLLM's \"metrics\" object "
                     "(queue_time_ms, time_to_first_token_ms, ...; one prompt, n 1): in the "
                     "body, and a stream's usage chunk (default: off)")
    srv.add_argument("--dev-routes", action="store_true", default=False,
                     help=f"serve vLLM's development routes {', '.join(DEV_ROUTES)} (POST), "
                     "as vLLM does with " + DEV_MODE_ENV + "=1 (also read here); they need no "
                     "API key: trusted clients only (default: off, 404)")


def _add_process_args(srv: _ArgGroup) -> None:
    """The event loop and what the process logs."""
    srv.add_argument("--uvloop", action=argparse.BooleanOptionalAction, default=None,
                     help="use uvloop (default: when installed)")
    srv.add_argument("--log-level", default=None, type=str.lower, choices=LOG_LEVELS,
                     help="logging level, in any case (vLLM's DEBUG too; default: info)")

