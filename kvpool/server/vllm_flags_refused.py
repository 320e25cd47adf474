"""The refused rows of ``kvpool serve``'s "vLLM compatibility" group (vllm_flags.py adds them):
vLLM flags whose value asks what kvpool cannot do exit 2 naming the flag, the value and what
kvpool supports; the value that is kvpool's own (1, auto, ...) is accepted silently
(docs/architecture.md "vLLM's serve flags")."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["REFUSED", "REFUSED_ON", "SHORT_ON", "only"]


def only(allowed: Sequence[str], why: str, *,
         number: Callable[[str], Any] | None = None) -> Callable[[str], Any]:
    """An argparse type: a value in ``allowed`` passes, any other exits 2 naming it and why;
    ``number`` (int, float): the value is that number, compared as its ``str``."""

    def value(text: str) -> Any:
        if number is not None:
            try:
                text = str(number(text))
            except ValueError:
                raise argparse.ArgumentTypeError(
                    f"invalid {number.__name__} value: {text!r}") from None
        if text not in allowed:
            raise argparse.ArgumentTypeError(f"{text}: {why}")
        return text if number is None else number(text)

    return value


_ONE_DEVICE = "kvpool serve runs the whole model on one device: use 1"
_ONE_ENGINE = ("one kvpool serve is one engine: use {}, and run replicas behind `kvpool router` "
               "for data parallelism")
_NO_SPEC = "kvpool has no speculative decoding: leave it out"
_NO_PLUGIN = ("kvpool loads no parser plugins (Python files): its parsers are built in "
              "(--tool-call-parser NAME, --reasoning-parser NAME): leave it out")
# flags, allowed values, why any other is refused; number: the values are ints (or floats)
REFUSED: tuple[tuple[tuple[str, ...], tuple[str, ...], str, Any], ...] = (
    (("--tensor-parallel-size", "-tp"), ("1",), _ONE_DEVICE + " (no tensor parallelism)", int),
    (("--pipeline-parallel-size", "-pp"), ("1",), _ONE_DEVICE + " (no pipeline parallelism)",
     int),
    (("--data-parallel-size", "-dp"), ("1",), _ONE_ENGINE.format(1), int),
    # vLLM's companions of -dp: one engine is replica 0 of 1, on this node
    (("--data-parallel-size-local", "-dpl"), ("1",), _ONE_ENGINE.format(1), int),
    (("--data-parallel-rank", "-dpn"), ("0",), _ONE_ENGINE.format(0), int),
    (("--data-parallel-start-rank", "-dpr"), ("0",), _ONE_ENGINE.format(0), int),
    (("--api-server-count", "-asc"), ("1",), "kvpool serve's HTTP server and engine share "
     "one process: use 1, and scale with replicas behind `kvpool router`", int),
    (("--kv-cache-dtype",), ("auto", "float16", "bfloat16"), "kvpool keeps the KV cache in the "
     "model's dtype: use auto (or --dtype's value)", None),
    (("--quantization", "-q"), (), "kvpool runs unquantized weights only (--dtype float32, "
     "bfloat16 or float16): leave --quantization out", None),
    (("--cpu-offload-gb",), ("0.0",), "kvpool keeps every weight on the device: use 0", float),
    (("--kv-offloading-size",), (), "kvpool's host memory holds the KV blocks of preempted "
     "requests (--swap-space GIB), not an offloaded prefix cache: leave it out", None),
    (("--response-role",), ("assistant",), "kvpool's chat answers always carry role "
     "assistant (vLLM's default): leave --response-role out", None),
    (("--tokenizer-mode",), ("auto", "hf"), "kvpool reads the model's Hugging Face "
     "tokenizer.json only: use auto or hf", None),
    (("--config-format",), ("auto", "hf"), "kvpool reads the model directory's Hugging Face "
     "config.json only: use auto or hf", None),
    (("--load-format",), ("auto", "safetensors"), "kvpool loads safetensors weights only: use "
     "auto or safetensors", None),
    (("--kv-transfer-config",), (), "kvpool runs no vLLM KV connector (NIXL, LMCache, ...): "
     "replicas share prefixes through --remote-url and publish KV events with "
     "--kv-events-config", None),
    (("--speculative-config",), (), _NO_SPEC, None),
    (("-sc",), (), _NO_SPEC, None),  # its own row: the long flag's message names it alone
    (("--spec-method",), (), _NO_SPEC, None),
    (("--spec-tokens",), (), _NO_SPEC, None),
    (("--hf-overrides",), ("{}",), "kvpool reads the model's config.json as it is: edit a "
     "copy of the model directory instead", None),
    (("--model-impl",), ("auto", "vllm"), "kvpool runs its own implementation of the "
     "architectures it knows (Llama, Qwen2, Qwen3, Granite, Phi-3, Mistral), as vLLM runs "
     "its own: use auto or vllm", None),
    (("--runner",), ("auto", "generate"), "kvpool serves generative models only (no pooling "
     "runner: embeddings, scores, rewards; no draft runner): use auto or generate", None),
    (("--chat-template-content-format",), ("auto", "string"), "kvpool hands the template "
     "each message's content as one string (text parts joined by newlines), vLLM's string "
     "format: use auto or string", None),
    (("--long-prefill-token-threshold",), ("0",), "kvpool bounds a prompt's chunk by the "
     "step's budget (--max-num-batched-tokens) only: use 0", int),
    (("--max-num-queued-tokens",), (), "kvpool has no prompt-token admission limit (vLLM's "
     "503 once the prompts waiting for prefill hold this many tokens): bound the requests "
     "in flight with --max-queue (vLLM's --max-num-queued-reqs) instead", None),
    (("--tool-parser-plugin",), (), _NO_PLUGIN, None),
    (("--reasoning-parser-plugin",), (), _NO_PLUGIN, None),
)
NO_LORA = "kvpool serves no LoRA adapters: serve a checkpoint with the adapter merged"
_EXTERNAL_LB = "one kvpool serve is one engine with its own API server: " + (
    "run replicas behind `kvpool router`, which balances them")
_NO_SCALE_OUT = ("kvpool does not implement vLLM's scale-out endpoints (/v1/*/render, "
                 "/v1/*/derender, /inference/v1/generate): they answer 403, as vLLM's do "
                 "without --enable-scale-out")
# vLLM's --x / --no-x whose --x asks what kvpool cannot do: dest -> why
REFUSED_ON = {
    "enable_lora": NO_LORA,
    "enable_force_include_usage": "kvpool puts usage in a stream only when the request's "
    "stream_options.include_usage asks for it (continuous_usage_stats: in every chunk): leave "
    "it out",
    "enable_sleep_mode": "kvpool has no sleep mode (no /sleep or /wake_up; the weights and KV "
    "cache stay on the device): leave it out",
    "headless": "kvpool serve always runs its API server (no multi-node data parallelism): "
    "leave it out, and run replicas behind `kvpool router`",
    "data_parallel_hybrid_lb": _EXTERNAL_LB,
    "data_parallel_external_lb": _EXTERNAL_LB,
    # NOTE(scale-out) in scale_out_routes.py: the paths are there, answering vLLM's 403
    "enable_scale_out": _NO_SCALE_OUT + ": leave it out",
    "tokens_only": _NO_SCALE_OUT + "; its OpenAI routes are always served: leave it out",
}
SHORT_ON = {"data_parallel_hybrid_lb": "-dph", "data_parallel_external_lb": "-dpe"}  # vLLM's
