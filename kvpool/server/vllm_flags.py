"""vLLM's ``vllm serve`` flags that ``kvpool serve`` takes, so a deployment (docker run, Helm
chart, llm-d manifest) can swap the command and keep its arguments. Each flag gets one
treatment (docs/architecture.md "vLLM's serve flags")::

    honored   the same thing kvpool does: mapped onto it (--uvicorn-log-level sets the HTTP
              server's loggers, --num-gpu-blocks-override is --num-device-blocks), or what
              kvpool always does (--enable-request-id-headers: X-Request-Id on every answer)
    no-op     means nothing here: accepted, and one info line at startup names it and says why
    refused   a value asking what kvpool cannot do (--tensor-parallel-size 2, --quantization
              awq, ...): exit status 2 with argparse's message naming the flag, the value and
              what kvpool supports; the value that is kvpool's own (1, auto, ...) is accepted

:func:`add_vllm_args` adds the group (argparse refuses at parse time; the refused rows are
vllm_flags_refused.py's); :func:`apply_vllm_flags` does what needs every flag parsed
(ServeOptions.from_args calls it): --kv-cache-dtype against --dtype, and the no-op lines.
:func:`set_up_logging` applies --log-level and --uvicorn-log-level (NOTE(uvicorn-level)),
:func:`chosen_device` says the device --device auto chose (NOTE(auto-device)). Names,
defaults and meanings are vLLM's (vllm/engine/arg_utils.py,
vllm/entrypoints/common/cli_args.py); --disable-log-requests,
--disable-frontend-multiprocessing, --cuda-graph-sizes and --max-seq-len-to-capture are older
vLLM's, still in many manifests. vLLM's -O3 / -O 3 / -O=3 is --optimization-level.

NOTE(negations): vLLM's boolean flags are argparse's BooleanOptionalAction, so ``--x`` comes
with ``--no-x``; vLLM's parser (FlexibleArgumentParser's EnableDisableAction) adds the
opposite name too, ``--disable-y`` for ``--enable-y`` and ``--enable-y`` for ``--disable-y``,
both meaning off. :class:`VllmSwitch` takes all three wherever vLLM's flag is such a switch
(not its store_true flags: --disable-log-stats, and older vLLM's --disable-log-requests and
--disable-frontend-multiprocessing); off is off for honored flags, accepted for no-ops, and
for a flag kvpool always honors (ALWAYS) one info line says it stays on.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Sequence
from typing import Any

from kvpool.errors import require
from kvpool.sched.config import POLICIES
from kvpool.server.anthropic_effort import DISABLED_EFFORT_CHOICES
from kvpool.server.vllm_config_file import add_config_flag
from kvpool.server.vllm_dotted import human_int
from kvpool.server.vllm_flags_refused import NO_LORA, REFUSED, REFUSED_ON, SHORT_ON, only

__all__ = ["ALWAYS", "GROUP_TITLE", "HTTP_LOGGERS", "LOG_LEVELS", "NO_OPS", "VllmSwitch",
           "add_vllm_args", "apply_vllm_flags", "chosen_device", "set_up_logging"]

log = logging.getLogger("kvpool.server")

GROUP_TITLE = "vLLM compatibility"
UVICORN_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
_LEVEL_OF = {"trace": "debug"}  # Python's logging has no trace: debug is the most kvpool logs
# --log-level: vLLM 0.33's values (upper case there, logging.LogLevel) in any case
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "notset")
HTTP_LOGGERS = ("aiohttp.access", "aiohttp.server")  # kvpool serve's HTTP server's own
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_NO_REQUEST_LOG = ("kvpool logs no requests (an access line per request only at --log-level "
                   "debug)")
_NO_DOWNLOAD = "kvpool never downloads: --model is a local directory, read as it is"
_NO_COMPILE = ("kvpool compiles nothing: the model runs eagerly (no torch.compile, no CUDA "
               "graphs)")
_NO_GRAPHS = "kvpool captures no CUDA graphs: the model runs eagerly"
_TEXT_ONLY = "kvpool serves text-only models: a message's content is text parts only"
_ONE_ENGINE = "one kvpool serve is one engine (-dp 1): no data-parallel peers to reach"
_NO_LORA_LIMIT = ("kvpool serves no LoRA adapters (--enable-lora is refused), so no LoRA limit "
                  "applies")
# NOTE(vllm-noops): dest -> (argparse kind, why the flag means nothing in kvpool serve); the
# reason is the startup info line and the flag's help. "bool": --x / --no-x, "flag": --x only.
NO_OPS: dict[str, tuple[Any, str]] = {
    "trust_remote_code": ("bool", "kvpool never runs code from the model directory: it reads "
                          "config.json, safetensors and tokenizer.json for the architectures "
                          "it implements"),
    "enforce_eager": ("bool", "kvpool always runs the model eagerly (no CUDA graphs)"),
    "disable_log_requests": ("flag", _NO_REQUEST_LOG),
    "enable_log_requests": ("bool", _NO_REQUEST_LOG),
    "max_log_len": (int, "kvpool logs no prompts"),
    "disable_log_stats": ("flag", "kvpool logs no periodic stats: GET /metrics serves them"),
    "download_dir": (str, "kvpool never downloads: --model is a local directory"),
    "distributed_executor_backend": (str, "kvpool runs the model in this process, on one "
                                          "device"),
    "disable_custom_all_reduce": ("bool", "one device: kvpool does no all-reduce"),
    "disable_frontend_multiprocessing": ("flag", "kvpool's HTTP server and engine share one "
                                                 "process"),
    "prefix_caching_hash_algo": (str, "kvpool's prefix cache keys blocks by its own SHA-256 "
                                      "chains; its KV events carry each block's token_ids "
                                      "(docs/kv_events.md)"),
    "revision": (str, _NO_DOWNLOAD),
    "code_revision": (str, _NO_DOWNLOAD + ", and no code from it runs"),
    "tokenizer_revision": (str, "kvpool never downloads: the tokenizer is the model "
                                "directory's (or --tokenizer's) tokenizer.json"),
    "compilation_config": (str, _NO_COMPILE),
    "optimization_level": (str, _NO_COMPILE),
    "cudagraph_capture_sizes": ("list", _NO_GRAPHS),
    "max_loras": (int, _NO_LORA_LIMIT), "max_lora_rank": (int, _NO_LORA_LIMIT),
    "max_cpu_loras": (int, _NO_LORA_LIMIT),
    "lora_dtype": (str, "kvpool serves no LoRA adapters (--enable-lora is refused)"),
    "async_scheduling": ("bool", "kvpool's step thread schedules each step as the last ends"),
    "prefix_match_unit": (int, "kvpool's prefix cache matches whole blocks (--block-size)"),
    "disable_access_log_for_endpoints": (str, "kvpool writes no access lines but at "
                                              "--log-level debug"),
    "disable_fastapi_docs": ("bool", "kvpool serves no /docs page"),
    "otlp_traces_endpoint": (str, "kvpool exports no traces: GET /metrics serves its figures"),
    "max_parallel_loading_workers": (int, "kvpool loads the model in its own process"),
    "enable_expert_parallel": ("bool", "kvpool runs dense models on one device"),
    "cuda_graph_sizes": ("list", _NO_GRAPHS),
    "max_cudagraph_capture_size": (int, _NO_GRAPHS),
    "max_seq_len_to_capture": (int, _NO_GRAPHS),
    "root_path": (str, "kvpool builds no URLs (no /docs page): its routes are /v1/..., so a "
                       "proxy routing by path prefix strips the prefix"),
    "allowed_local_media_path": (str, _TEXT_ONLY + ", so no media file is read"),
    "limit_mm_per_prompt": (str, _TEXT_ONLY + " (an image or audio part is a 400)"),
    "language_model_only": ("bool", _TEXT_ONLY + ": the language model is all it loads"),
    "mm_processor_kwargs": (str, _TEXT_ONLY + ", so no media processor runs"),
    "mm_processor_cache_gb": (float, _TEXT_ONLY + ", so no media processor output is cached"),
    "attention_backend": (str, "kvpool runs its own paged attention (PyTorch): no backend to "
                               "choose"),
    "hf_token": ("secret", _NO_DOWNLOAD),
    "ignore_patterns": ("list", _NO_DOWNLOAD),
    "safetensors_load_strategy": (str, "kvpool reads the safetensors files itself: no load "
                                       "strategy to choose"),
    "show_hidden_metrics_for_version": (str, "kvpool's GET /metrics hides no metrics"),
    "kv_cache_metrics": ("bool", "GET /metrics always serves kvpool's KV cache figures"),
    "enable_log_outputs": ("bool", "kvpool logs no requests and no outputs"),
    "logging_config": (str, "kvpool's logging is --log-level (and --uvicorn-log-level for its "
                            "HTTP server's loggers)"),
    "structured_outputs_config": (str, "kvpool's structured outputs always run through its "
                                       "own grammar engine (llguidance): no backend to choose"),
    "kv_offloading_backend": (str, "kvpool offloads no KV cache (--kv-offloading-size is "
                                   "refused; --swap-space sizes its host pool)"),
    "sleep_mode_backend": (str, "kvpool has no sleep mode (--enable-sleep-mode is refused)"),
    "data_parallel_address": (str, _ONE_ENGINE), "data_parallel_rpc_port": (int, _ONE_ENGINE),
    "data_parallel_backend": (str, _ONE_ENGINE),
    "enable_eplb": ("bool", "kvpool runs dense models on one device: no experts to balance"),
    "disable_hybrid_kv_cache_manager": ("bool", "kvpool's KV cache is one block pool for every "
                                                "layer"),
}
# vLLM's short spellings of no-op flags, and the metavars the flag's last word does not name
_SHORT = {"compilation_config": "-cc", "optimization_level": "-O",
          "data_parallel_address": "-dpa", "data_parallel_rpc_port": "-dpp",
          "data_parallel_backend": "-dpb"}
_METAVAR = {name: "JSON" for name in ("compilation_config", "limit_mm_per_prompt",
                                      "mm_processor_kwargs", "logging_config",
                                      "structured_outputs_config")} | {"ignore_patterns": "GLOB"}
# vLLM's switches for what kvpool always does: dest -> what; their --no- form changes nothing
ALWAYS = {"enable_request_id_headers": "every answer carries X-Request-Id",
          "enable_prompt_tokens_details": "usage has prompt_tokens_details.cached_tokens",
          # a step's output is the same either way; production-stack's charts send the off form
          "enable_chunked_prefill": "long prompts are split over steps (chunked prefill)"}


def _opposite(dest: str) -> str:
    """enable_x -> disable_x and back (NOTE(negations))."""
    head, _, rest = dest.partition("_")
    return {"enable": "disable", "disable": "enable"}.get(head, head) + "_" + rest


def add_vllm_args(parser: argparse.ArgumentParser) -> None:
    """The "vLLM compatibility" group: vLLM's serve flags kvpool does not have as its own."""
    group = parser.add_argument_group(
        GROUP_TITLE, "vLLM's `vllm serve` flags, so a deployment keeps its command line: each "
        "is honored, accepted with no effect (one info line at startup), or refused (exit 2) "
        "for a value kvpool cannot do")
    add_config_flag(parser, group)  # --config FILE.yaml (vllm_config_file.py)
    _add_honored(group)
    _add_honored_server(group)
    for dest, (kind, why) in NO_OPS.items():
        _add_no_op(group, dest, kind, why)
    _add_refused(group)


class VllmSwitch(argparse.BooleanOptionalAction):
    """A vLLM boolean flag as vLLM's parser takes it (NOTE(negations)): ``--x`` and ``--no-x``
    (argparse's BooleanOptionalAction), and for ``--enable-y`` also ``--disable-y`` (off), for
    ``--disable-y`` also ``--enable-y`` (off), unless ``opposite`` is False (another flag of
    the parser has that name)."""

    def __init__(self, option_strings: Sequence[str], dest: str, opposite: bool = True,
                 **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.off = {s for s in self.option_strings if s.startswith("--no-")}
        for on, other in (("--enable-", "--disable-"), ("--disable-", "--enable-")):
            if opposite and option_strings[0].startswith(on):
                self.off.add(other + option_strings[0].removeprefix(on))
                self.option_strings.append(other + option_strings[0].removeprefix(on))

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, option_string not in self.off)


class _OnOff(VllmSwitch):
    """vLLM's --x / --no-x where one side asks what kvpool cannot do: that side exits 2."""

    def __init__(self, option_strings: Sequence[str], dest: str, refused: bool = True,
                 why: str = "", **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.refused, self.why = refused, why

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        if (option_string not in self.off) == self.refused:
            raise argparse.ArgumentError(self, f"{option_string}: {self.why}")
        super().__call__(parser, namespace, values, option_string)


def _add_honored(group: Any) -> None:
    group.add_argument("--uvicorn-log-level", choices=UVICORN_LEVELS, default=None,
                       help="the level of kvpool's HTTP server's own loggers ("
                       f"{', '.join(HTTP_LOGGERS)}; trace is debug, which also writes an access "
                       "line per request), as vLLM's goes to uvicorn only: kvpool's own lines "
                       "follow --log-level")
    group.add_argument("--num-gpu-blocks-override", dest="num_device_blocks", type=int,
                       metavar="N", default=argparse.SUPPRESS,
                       help="the same as --num-device-blocks (the later one wins)")
    group.add_argument("--device-memory-utilization", dest="gpu_memory_utilization",
                       type=float, metavar="FRACTION", default=argparse.SUPPRESS,
                       help="the same as --gpu-memory-utilization (vLLM's other name)")
    group.add_argument("--max-num-queued-reqs", dest="max_queue", type=int, metavar="N",
                       default=argparse.SUPPRESS, help="the same as --max-queue: requests in "
                       "flight (running and waiting) before 503 (a request with n > 1 counts "
                       "once; the later flag wins; default 1024, where vLLM's has no bound)")
    group.add_argument("--scheduling-policy", dest="scheduling_policy", choices=POLICIES,
                       default=argparse.SUPPRESS,
                       help="the order waiting requests are served in: fcfs (arrival, the "
                       "default) or priority (the request's priority field, smaller first; a "
                       "waiting request preempts lower-priority running ones)")
    group.add_argument("--stream-interval", dest="stream_interval", type=int, metavar="N",
                       default=argparse.SUPPRESS,
                       help="a stream's chunks carry at least N new tokens each (the first "
                       "and the last aside); a request's stream_interval may raise it")
    for dest, why in ALWAYS.items():
        group.add_argument("--" + dest.replace("_", "-"), action=VllmSwitch, default=None,
                           help=f"honored always: {why} (off: one info line, no effect)")
    group.add_argument("--kv-cache-memory-bytes", dest="kv_cache_memory", type=human_int,
                       metavar="BYTES", default=argparse.SUPPRESS,
                       help="the same as --kv-cache-memory (2G, 2g: vLLM's)")


def _add_honored_server(group: Any) -> None:
    """Honored flags that are ServeOptions fields (their dests are the fields' names)."""
    group.add_argument("--disable-uvicorn-access-log", action=VllmSwitch,
                       default=False, help="no access line per request, not even "
                       "at --log-level debug (the only level kvpool writes one at)")
    group.add_argument("--enable-tokenizer-info-endpoint", action=VllmSwitch, default=False,
                       help="serve GET /tokenizer_info: the tokenizer's configuration and chat "
                       "template, for clients that tokenize through the server (lm-eval's "
                       "remote tokenizer) (default: off, 404)")
    group.add_argument("--return-tokens-as-token-ids", action=VllmSwitch,
                       default=False, help="logprob tokens spelled "
                       "token_id:<id> where a request leaves its return_tokens_as_token_ids "
                       "out (its own value, false too, wins)")
    group.add_argument("--default-chat-template-kwargs", type=_json_object, metavar="JSON",
                       default=None, help="the chat template's keyword arguments where a "
                       "request leaves them out, e.g. '{\"enable_thinking\": false}' (a "
                       "request's chat_template_kwargs win key by key, as in vLLM)")
    group.add_argument("--anthropic-disabled-thinking-effort", default="auto",
                       choices=DISABLED_EFFORT_CHOICES, help="the reasoning_effort of "
                       "thinking {type: disabled} on /v1/messages and count_tokens: auto (low "
                       "where the chat template refuses none or renders it as an effort, else "
                       "none) or that effort")
    group.add_argument("--override-generation-config", type=_json_object, metavar="JSON",
                       default=None, help="sampling defaults over "
                       "--generation-config's, e.g. '{\"temperature\": 0.6}': temperature, "
                       "top_p, top_k, min_p, the three penalties, skip_special_tokens, and "
                       "max_new_tokens (the default max_tokens and a ceiling on it)")


def _json_object(text: str) -> dict[str, Any]:
    """An argparse type: a JSON object (a dict), else exit 2 naming the value."""
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"{text}: not a JSON object")
    return value


def _add_no_op(group: Any, dest: str, kind: Any, why: str) -> None:
    flags = ("--" + dest.replace("_", "-"), *([_SHORT[dest]] if dest in _SHORT else []))
    text = f"accepted, no effect: {why}"
    if kind == "bool":  # --enable-log-requests: older vLLM's --disable-log-requests is its own
        opposite = _opposite(dest) not in NO_OPS
        group.add_argument(*flags, action=VllmSwitch, default=None, opposite=opposite, help=text)
    elif kind == "flag":
        group.add_argument(*flags, action="store_const", const=True, default=None, help=text)
    elif kind == "secret":  # vLLM's --hf-token [TOKEN]: never logged (apply_vllm_flags)
        group.add_argument(*flags, nargs="?", const=True, default=None, metavar="TOKEN",
                           help=text)
    elif kind == "list":
        group.add_argument(*flags, nargs="+", default=None, metavar=_METAVAR.get(dest, "N"),
                           help=text)
    else:
        metavar = "N" if kind is int else _METAVAR.get(dest, dest.split("_")[-1].upper())
        group.add_argument(*flags, type=kind, default=None, metavar=metavar, help=text)


def _add_refused(group: Any) -> None:
    for flags, allowed, why, number in REFUSED:
        text = f"only {'|'.join(allowed)}, else refused: {why}" if allowed else f"refused: {why}"
        group.add_argument(*flags, type=only(allowed, why, number=number), default=None,
                           metavar="N" if number else "VALUE", help=text)
    for dest, why in REFUSED_ON.items():
        flag = dest.replace("_", "-")
        group.add_argument(f"--{flag}", *([SHORT_ON[dest]] if dest in SHORT_ON else []),
                           action=_OnOff, refused=True, default=None, why=why,
                           help=f"refused: {why} (--no-{flag} is accepted)")
    group.add_argument("--lora-modules", nargs="+", type=only((), NO_LORA), default=None,
                       metavar="MODULE", help="refused")


def apply_vllm_flags(args: argparse.Namespace) -> list[str]:
    """What needs every flag parsed: --kv-cache-dtype float16/bfloat16 is kvpool's only with
    the same --dtype (else ConfigError, exit 2), and --enable-per-request-metrics not with
    --disable-log-stats (vLLM's refusal); then one info line per no-op flag given, and per
    ALWAYS flag turned off. Returns those lines."""
    kv, dtype = getattr(args, "kv_cache_dtype", None), getattr(args, "dtype", None)
    require(kv in (None, "auto", dtype),
            f"--kv-cache-dtype {kv}: kvpool keeps the KV cache in the model's dtype, so it "
            f"needs --dtype {kv} too (--dtype is {dtype or 'auto'}); or --kv-cache-dtype auto")
    require(not (getattr(args, "enable_per_request_metrics", False)  # vLLM's refusal, words
                 and getattr(args, "disable_log_stats", None)),
            "--enable-per-request-metrics requires engine statistics logging; remove "
            "--disable-log-stats to enable per-request metrics.")
    lines = [f"vLLM's --no-{dest.replace('_', '-')}: accepted, no effect: kvpool always does "
             f"this ({why})" for dest, why in ALWAYS.items() if getattr(args, dest, None) is False]
    for dest, (_kind, why) in NO_OPS.items():
        value = getattr(args, dest, None)
        if value is None:
            continue
        flag = "--" + ("" if value is not False else "no-") + dest.replace("_", "-")
        shown = ("" if isinstance(value, bool) or _kind == "secret" else
                 f" {' '.join(value) if isinstance(value, list) else value}")
        lines.append(f"vLLM's {flag}{shown}: accepted, no effect: {why}")
    for line in lines:
        log.info("%s", line)
    return lines


def set_up_logging(args: argparse.Namespace) -> None:
    """The process's logging (``kvpool serve``'s entry point owns it): every logger at
    --log-level (info when not given), and the HTTP server's own (HTTP_LOGGERS) at vLLM's
    --uvicorn-log-level where that is given.

    NOTE(uvicorn-level): vLLM hands --uvicorn-log-level to uvicorn alone, its own startup
    lines stay at info; mapped onto kvpool's --log-level, ``--uvicorn-log-level warning`` hid
    every no-op flag's line and the KV capacity line. The root level is basicConfig's, so a
    process whose logging is set up already (one embedding kvpool, a test run) keeps its own."""
    logging.basicConfig(level=(args.log_level or "info").upper(), format=LOG_FORMAT)
    uvicorn = getattr(args, "uvicorn_log_level", None)
    for name in HTTP_LOGGERS if uvicorn is not None else ():
        logging.getLogger(name).setLevel(_LEVEL_OF.get(uvicorn, uvicorn).upper())


def chosen_device(given: dict[str, Any]) -> str:
    """--device as EngineConfig's ``given`` names it (auto when left out) resolved, with one
    info line naming the device and why (NOTE(auto-device) in runtime/engine/config.py); on
    the CPU, --gpu-memory-utilization (or its alias) given gets its no-op line."""
    # here, not at the top: kvpool router imports this module (through cors.py) and no engine
    from kvpool.runtime.engine.config import AUTO_DEVICE, resolve_device

    device, why = resolve_device(given.get("device", AUTO_DEVICE))
    log.info("device %s: %s", device, why)
    if device == "cpu" and "gpu_memory_utilization" in given:
        log.info("--gpu-memory-utilization %s: accepted, no effect on CPU: the KV cache is sized "
                 "by --kv-cache-memory (or --num-device-blocks)", given["gpu_memory_utilization"])
    return device
