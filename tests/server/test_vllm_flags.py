"""vLLM's serve flags on ``kvpool serve`` (kvpool/server/vllm_flags.py): a deployment that swaps
``vllm serve`` for ``kvpool serve`` keeps its flags. Each is honored (lands in the config or
options), accepted with no effect (exactly one info line at startup), or refused (exit status 2
naming the flag, the value and what kvpool supports); and a real server starts with a typical
vLLM command line."""

from __future__ import annotations

import argparse
import json
import logging
import signal

import aiohttp
import pytest

from kvpool import cli
from kvpool.server import serve, vllm_flags
from kvpool.server.generation_config import CEILING_KEY, load_generation_defaults
from kvpool.server.serve_options import ServeOptions
from tests.server.serve_process import read_rest, subprocess_server


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="kvpool serve")
    return serve.add_serve_args(parser).parse_args(list(argv))


def test_uvicorn_log_level_is_the_http_servers_level_never_kvpools():
    """NOTE(uvicorn-level): vLLM hands it to uvicorn alone (tests/server/test_vllm_deploy_flags.py
    reads the startup lines)."""
    assert (parse().log_level, parse().uvicorn_log_level) == (None, None)  # main: info
    args = parse("--uvicorn-log-level", "warning")
    assert (args.log_level, args.uvicorn_log_level) == (None, "warning")
    args = parse("--log-level", "error", "--uvicorn-log-level", "trace")
    assert (args.log_level, args.uvicorn_log_level) == ("error", "trace")


def test_honored_flags_land_in_the_config_and_log_nothing(caplog):
    args = parse("--num-gpu-blocks-override", "77", "--enable-request-id-headers",
                 "--enable-prompt-tokens-details", "--enable-chunked-prefill",
                 "--tensor-parallel-size", "1", "-pp", "1", "--data-parallel-size", "1",
                 "--kv-cache-dtype", "auto", "--response-role", "assistant",
                 "--tokenizer-mode", "hf", "--load-format", "safetensors",
                 "--hf-overrides", "{}", "--model-impl", "vllm",
                 "--chat-template-content-format", "string", "--long-prefill-token-threshold",
                 "0", "--no-enable-force-include-usage", "--no-enable-sleep-mode")
    assert serve.config_from_args(args).num_device_blocks == 77
    assert (args.tensor_parallel_size, args.pipeline_parallel_size) == (1, 1)
    with caplog.at_level(logging.INFO, logger="kvpool.server"):
        ServeOptions.from_args(args)
    assert caplog.records == []
    same = parse("--dtype", "half", "--kv-cache-dtype", "float16")  # vLLM's half: float16
    assert vllm_flags.apply_vllm_flags(same) == []
    assert serve.config_from_args(parse("--num-device-blocks", "5")).num_device_blocks == 5
    assert serve.config_from_args(parse()).scheduling_policy == "fcfs"  # vLLM's default
    assert serve.config_from_args(parse()).stream_interval == 1  # vLLM's default
    assert serve.config_from_args(parse("--stream-interval", "4")).stream_interval == 4
    assert serve.config_from_args(
        parse("--scheduling-policy", "priority")).scheduling_policy == "priority"
    assert parse("--no-enable-lora").enable_lora is False  # vLLM's default: accepted
    assert (args.model_impl, args.chat_template_content_format) == ("vllm", "string")
    assert parse("--chat-template-content-format", "auto").chat_template_content_format == "auto"
    assert (args.long_prefill_token_threshold, args.enable_sleep_mode) == (0, False)


def test_honored_server_flags_land_in_the_serve_options(caplog):
    o = ServeOptions.from_args(parse(
        "--disable-uvicorn-access-log", "--return-tokens-as-token-ids",
        "--override-generation-config", '{"temperature": 0.5, "max_new_tokens": 9}',
        "--default-chat-template-kwargs", '{"enable_thinking": false}',
        "--anthropic-disabled-thinking-effort", "low", "--enable-tokenizer-info-endpoint"))
    assert o.request_defaults == {"generation_config": "auto", "return_tokens_as_token_ids": True,
                                  "override_generation_config": {"temperature": 0.5,
                                                                 "max_new_tokens": 9},
                                  "default_chat_template_kwargs": {"enable_thinking": False},
                                  "anthropic_disabled_thinking_effort": "low",
                                  "per_request_metrics": False, "tokenizer_info": True}
    server = logging.getLogger("kvpool.server")
    with caplog.at_level(logging.DEBUG, logger="kvpool.server"):
        assert o.access_log(server) is None  # no access line, not even at debug
        assert ServeOptions.from_args(parse()).access_log(server) is server
    assert ServeOptions.from_args(parse()).access_log(server) is None  # info: none, as before
    off = ServeOptions.from_args(parse("--no-return-tokens-as-token-ids",
                                       "--no-disable-uvicorn-access-log"))
    assert (off.return_tokens_as_token_ids, off.disable_uvicorn_access_log) == (False, False)
    assert ServeOptions.from_args(parse()).request_defaults == {
        "generation_config": "auto", "return_tokens_as_token_ids": False,
        "override_generation_config": None, "default_chat_template_kwargs": None,
        "anthropic_disabled_thinking_effort": "auto", "per_request_metrics": False,
        "tokenizer_info": False}


def test_override_generation_config_merges_over_the_file(tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps(
        {"temperature": 0.6, "top_p": 0.9, "max_new_tokens": 50}))
    d, o = str(tmp_path), {"temperature": 0.2, "do_sample": True}  # do_sample: vLLM ignores it
    assert load_generation_defaults("auto", d, o) == {"temperature": 0.2, "top_p": 0.9,
                                                      "max_tokens": 50}
    # a named file's max_new_tokens is a ceiling (NOTE(gen-ceiling)); with vllm only the override
    assert load_generation_defaults(d, None, o)[CEILING_KEY] == 50
    assert load_generation_defaults("vllm", d, o) == {"temperature": 0.2}
    # the override's max_new_tokens is a ceiling whatever the source (vLLM's override_max_tokens)
    assert load_generation_defaults("auto", d, {"max_new_tokens": 7}) == {
        "temperature": 0.6, "top_p": 0.9, "max_tokens": 7, CEILING_KEY: 7}
    assert load_generation_defaults("vllm", None, {"max_new_tokens": 7, "top_k": None}) == {
        "max_tokens": 7, CEILING_KEY: 7}
    assert load_generation_defaults("auto", d, {}) == load_generation_defaults("auto", d)


def test_the_penalties_and_skip_special_tokens_are_defaults_too_as_in_vllm(tmp_path):
    """vLLM's ModelConfig.get_diff_sampling_param reads them from the file and the override."""
    (tmp_path / "generation_config.json").write_text(json.dumps(
        {"presence_penalty": 0.5, "frequency_penalty": -1, "skip_special_tokens": False,
         "top_k": 50}))
    d = str(tmp_path)
    assert load_generation_defaults("auto", d) == {"top_k": 50, "presence_penalty": 0.5,
                                                   "frequency_penalty": -1,
                                                   "skip_special_tokens": False}
    # true: every request's default already, left out (a tool parser's false still holds)
    assert load_generation_defaults("auto", d, {"skip_special_tokens": True,
                                                "presence_penalty": 0.25}) == {
        "top_k": 50, "presence_penalty": 0.25, "frequency_penalty": -1}


@pytest.mark.parametrize("value, said", [
    ('{"presence_penalty": "high"}', "--override-generation-config: presence_penalty: use a "
     "number, got 'high'"),
    ('{"skip_special_tokens": "no"}', "--override-generation-config: skip_special_tokens: use "
     "true or false, got 'no'"),
    ('{"temperature": "hot"}', "--override-generation-config: temperature: use a number, got "
                               "'hot'"),
    ('{"max_new_tokens": 0}', "--override-generation-config: max_new_tokens: use an integer "
                              ">= 1, got 0"),
])
def test_an_override_kvpool_cannot_apply_exits_2_before_loading(value, said, capsys):
    assert serve.main(["--port", "0", "--override-generation-config", value]) == 2
    assert said in capsys.readouterr().err


NO_OP_ARGV = [
    ["--trust-remote-code"], ["--no-trust-remote-code"], ["--enforce-eager"],
    ["--disable-log-requests"], ["--enable-log-requests"], ["--no-enable-log-requests"],
    ["--max-log-len", "100"], ["--disable-log-stats"], ["--download-dir", "/models"],
    ["--distributed-executor-backend", "mp"], ["--disable-custom-all-reduce"],
    ["--disable-frontend-multiprocessing"], ["--prefix-caching-hash-algo", "sha256_cbor"],
    ["--revision", "main"], ["--code-revision", "v1"], ["--tokenizer-revision", "abc123"],
    ["--compilation-config", '{"level": 3}'], ["--optimization-level", "3"],
    ["--cudagraph-capture-sizes", "1", "2", "4"], ["--cuda-graph-sizes", "8", "16"],
    ["--max-cudagraph-capture-size", "256"], ["--max-seq-len-to-capture", "8192"],
    ["--root-path", "/llama"], ["--allowed-local-media-path", "/data"],
    ["--limit-mm-per-prompt", '{"image": 0}'],
    # on deployment manifests (production-stack, llm-d guides, recipes)
    ["--max-loras", "4"], ["--max-lora-rank", "16"], ["--max-cpu-loras", "2"],
    ["--async-scheduling"], ["--prefix-match-unit", "16"], ["--disable-fastapi-docs"],
    ["--disable-access-log-for-endpoints", "/health,/metrics"],
    ["--otlp-traces-endpoint", "http://127.0.0.1:4317"],
    ["--max-parallel-loading-workers", "2"], ["--enable-expert-parallel"],
    # vLLM 0.33's deployment flags (docs/architecture.md "vLLM's serve flags")
    ["--attention-backend", "FLASHINFER"], ["--language-model-only"],
    ["--mm-processor-kwargs", "{}"], ["--mm-processor-cache-gb", "4.0"], ["--hf-token"],
    ["--ignore-patterns", "original/**/*"], ["--safetensors-load-strategy", "lazy"],
    ["--show-hidden-metrics-for-version", "0.32"], ["--kv-cache-metrics"],
    ["--enable-log-outputs"], ["--logging-config", '{"log_level": "DEBUG"}'],
    ["--structured-outputs-config", '{"backend": "xgrammar"}'],
    ["--kv-offloading-backend", "native"], ["--sleep-mode-backend", "cumem"],
    ["--lora-dtype", "auto"], ["--data-parallel-address", "10.0.0.1"],
    ["--data-parallel-rpc-port", "13345"], ["--data-parallel-backend", "mp"],
    ["--enable-eplb"], ["--disable-hybrid-kv-cache-manager"],
]


def _dest(flag: str) -> str:
    return flag.removeprefix("--").removeprefix("no-").replace("-", "_")


def test_every_no_op_flag_is_listed_here():
    assert {_dest(argv[0]) for argv in NO_OP_ARGV} == set(vllm_flags.NO_OPS)


@pytest.mark.parametrize("argv", NO_OP_ARGV, ids=lambda argv: argv[0])
def test_a_no_op_flag_parses_and_logs_one_line(argv, caplog):
    args = parse(*argv)
    with caplog.at_level(logging.INFO, logger="kvpool.server"):
        ServeOptions.from_args(args)  # where kvpool serve calls apply_vllm_flags
    why = vllm_flags.NO_OPS[_dest(argv[0])][1]
    assert [r.getMessage() for r in caplog.records] == [
        f"vLLM's {' '.join(argv)}: accepted, no effect: {why}"]


@pytest.mark.parametrize("on, off, field", [
    ("--enable-prefix-caching", "--disable-prefix-caching", "enable_prefix_caching"),
    ("--enable-prefix-caching", "--no-enable-prefix-caching", "enable_prefix_caching"),
    ("--trust-request-chat-template", "--no-trust-request-chat-template",
     "trust_request_chat_template"),
    ("--enable-auto-tool-choice", "--no-enable-auto-tool-choice", "enable_auto_tool_choice"),
    ("--enable-auto-tool-choice", "--disable-auto-tool-choice", "enable_auto_tool_choice"),
    ("--enable-server-load-tracking", "--disable-server-load-tracking",
     "enable_server_load_tracking"),
    ("--allow-credentials", "--no-allow-credentials", "allow_credentials"),
    ("--disable-uvicorn-access-log", "--enable-uvicorn-access-log", "disable_uvicorn_access_log"),
    ("--return-tokens-as-token-ids", "--no-return-tokens-as-token-ids",
     "return_tokens_as_token_ids"),
])
def test_a_vllm_switchs_off_forms_turn_an_honored_flag_off(on, off, field):
    """NOTE(negations): vLLM's --no-x, and --disable-y for --enable-y (and back)."""
    def value(*argv: str) -> bool:
        args = parse(*argv)
        if field == "enable_prefix_caching":
            return serve.config_from_args(args).enable_prefix_caching
        return getattr(ServeOptions.from_args(args), field)

    extra = ("--tool-call-parser", "hermes") if "tool" in field else ()
    assert value(on, *extra) is True
    assert value(on, off, *extra) is False  # the later wins, as any repeated flag
    assert value(off, on, *extra) is True


@pytest.mark.parametrize("argv, line", [
    (["--no-enable-request-id-headers"], "--no-enable-request-id-headers: accepted, no effect: "
     "kvpool always does this (every answer carries X-Request-Id)"),
    (["--disable-prompt-tokens-details"], "--no-enable-prompt-tokens-details: accepted, no "
     "effect: kvpool always does this (usage has prompt_tokens_details.cached_tokens)"),
    (["--enable-custom-all-reduce"], "--no-disable-custom-all-reduce: accepted, no effect: one "
     "device: kvpool does no all-reduce"),
    (["--disable-log-requests"], "--disable-log-requests: accepted, no effect: kvpool logs no "
     "requests"),  # older vLLM's flag of its own, not --enable-log-requests' opposite here
    # production-stack's charts send it: a step's output is the same either way
    (["--no-enable-chunked-prefill"], "--no-enable-chunked-prefill: accepted, no effect: "
     "kvpool always does this (long prompts are split over steps (chunked prefill))"),
    (["--disable-chunked-prefill"], "--no-enable-chunked-prefill: accepted, no effect"),
    (["--async-scheduling"], "--async-scheduling: accepted, no effect: kvpool's step thread"),
    (["--max_loras", "4"], "--max-loras 4: accepted, no effect: kvpool serves no LoRA"),
], ids=lambda v: v[0] if isinstance(v, list) else "")
def test_off_forms_of_always_honored_and_no_op_switches_log_one_line(argv, line, caplog):
    with caplog.at_level(logging.INFO, logger="kvpool.server"):
        ServeOptions.from_args(parse(*argv))
    assert [r.getMessage()[:len("vLLM's " + line)] for r in caplog.records] == [
        "vLLM's " + line]


def test_off_forms_of_refused_switches_are_accepted():
    args = parse("--disable-lora", "--disable-force-include-usage", "--disable-sleep-mode")
    assert (args.enable_lora, args.enable_force_include_usage, args.enable_sleep_mode) == (
        False, False, False)


@pytest.mark.parametrize("argv, flag", [
    (["-O3"], "--optimization-level 3"), (["-O", "0"], "--optimization-level 0"),
    (["-O=2"], "--optimization-level 2"), (["-Odecode"], "--optimization-level decode"),
    (["-cc", '{"level": 0}'], '--compilation-config {"level": 0}'),
], ids=lambda v: v[0] if isinstance(v, list) else "")
def test_vllm_short_spellings_of_no_op_flags_log_the_long_flag(argv, flag, caplog):
    with caplog.at_level(logging.INFO, logger="kvpool.server"):
        ServeOptions.from_args(parse(*argv))
    assert [r.getMessage() for r in caplog.records] == [
        f"vLLM's {flag}: accepted, no effect: kvpool compiles nothing: the model runs eagerly "
        "(no torch.compile, no CUDA graphs)"]


@pytest.mark.parametrize("argv, said", [
    (["--tensor-parallel-size", "2"], "--tensor-parallel-size/-tp: 2: kvpool serve runs the "
                                      "whole model on one device: use 1"),
    (["-tp", "8"], "--tensor-parallel-size/-tp: 8: "),
    (["--pipeline-parallel-size", "2"], "--pipeline-parallel-size/-pp: 2: "),
    (["--data-parallel-size", "4"], "--data-parallel-size/-dp: 4: one kvpool serve is one "
                                    "engine: use 1"),
    (["--kv-cache-dtype", "fp8"], "--kv-cache-dtype: fp8: kvpool keeps the KV cache in the "
                                  "model's dtype: use auto"),
    (["--quantization", "awq"], "--quantization/-q: awq: kvpool runs unquantized weights"),
    (["-q", "fp8"], "--quantization/-q: fp8: "),
    (["--response-role", "bot"], "--response-role: bot: kvpool's chat answers always carry "
                                 "role assistant"),
    (["--tokenizer-mode", "mistral"], "--tokenizer-mode: mistral: kvpool reads the model's "
                                      "Hugging Face tokenizer.json only: use auto or hf"),
    (["--load-format", "pt"], "--load-format: pt: kvpool loads safetensors weights only"),
    (["--kv-transfer-config", '{"kv_connector":"NixlConnector"}'],
     "--kv-transfer-config: {\"kv_connector\":\"NixlConnector\"}: kvpool runs no vLLM KV "
     "connector"),
    (["--speculative-config", "{}"], "--speculative-config: {}: kvpool has no speculative"),
    (["--reasoning-parser", "hunyuan_a13b"], "--reasoning-parser: invalid choice: "
     "'hunyuan_a13b' (choose from 'deepseek_r1', 'deepseek_v3', 'glm45', 'granite', "
     "'kimi_k2', 'minimax_m2', 'mistral', 'qwen3', 'seed_oss', 'step3', 'step5')"),
    (["--enable-lora"], "--enable-lora: kvpool serves no LoRA adapters"),
    (["--lora-modules", "sql=/lora/sql"], "--lora-modules: sql=/lora/sql: kvpool serves no "
                                          "LoRA"),
    (["--disable-lora", "--enable-lora"], "--enable-lora: kvpool serves no LoRA adapters"),
    (["--hf-overrides", '{"max_position_embeddings": 4096}'],
     '--hf-overrides: {"max_position_embeddings": 4096}: kvpool reads the model\'s config.json '
     "as it is"),
    (["--model-impl", "transformers"], "--model-impl: transformers: kvpool runs its own "
                                       "implementation"),
    (["--chat-template-content-format", "openai"], "--chat-template-content-format: openai: "
     "kvpool hands the template each message's content as one string"),
    (["--long-prefill-token-threshold", "2048"], "--long-prefill-token-threshold: 2048: kvpool "
     "bounds a prompt's chunk by the step's budget (--max-num-batched-tokens) only: use 0"),
    (["--enable-force-include-usage"], "--enable-force-include-usage: kvpool puts usage in a "
                                       "stream only when the request's"),
    (["--enable-sleep-mode"], "--enable-sleep-mode: kvpool has no sleep mode"),
    (["--override-generation-config", "[1]"], "--override-generation-config: [1]: not a "
                                              "JSON object"),
    (["--override-generation-config", "{"], "--override-generation-config: {: not a JSON "),
    (["--scheduling-policy", "lifo"], "--scheduling-policy: invalid choice: 'lifo' (choose "
                                      "from 'fcfs', 'priority')"),  # vLLM's two, as vLLM says
], ids=lambda v: v[0] if isinstance(v, list) else "")
def test_a_refused_value_exits_2_naming_flag_value_and_what_is_supported(argv, said, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["serve", "--port", "0", *argv])  # the deployment's path: kvpool serve ...
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "kvpool serve: error: argument " in err and said in err, err


def test_kv_cache_dtype_must_match_the_dtype_given(capsys):
    assert serve.main(["--port", "0", "--kv-cache-dtype", "bfloat16"]) == 2
    assert ("--kv-cache-dtype bfloat16: kvpool keeps the KV cache in the model's dtype, so it "
            "needs --dtype bfloat16 too (--dtype is auto)") in capsys.readouterr().err
    assert serve.main(["--port", "0", "--dtype", "float16", "--kv-cache-dtype", "bfloat16"]) == 2
    assert "(--dtype is float16)" in capsys.readouterr().err


VLLM_COMMAND_LINE = ("--trust-remote-code", "--tensor-parallel-size", "1", "--enforce-eager",
                     "--disable-log-requests", "--enable-request-id-headers",
                     "--uvicorn-log-level", "warning", "--disable-log-stats",
                     "--kv-cache-dtype", "auto", "--response-role", "assistant")


async def test_a_server_starts_with_a_typical_vllm_command_line():
    async with subprocess_server(*VLLM_COMMAND_LINE) as (proc, url, lines):
        async with aiohttp.ClientSession() as s:
            async with s.get(url + "/health") as resp:
                assert resp.status == 200
            async with s.get(url + "/v1/models") as resp:
                assert resp.status == 200
                assert resp.headers["X-Request-Id"]  # --enable-request-id-headers: always
                assert [m["id"] for m in (await resp.json())["data"]] == ["kvpool-tiny"]
        proc.send_signal(signal.SIGTERM)  # stopped by its pid
        assert await proc.wait() == 0
        assert serve.STOPPED_PREFIX in await read_rest(proc, lines)


def test_readme_and_docs_name_every_flag_of_the_group():
    """New serve flags go into the README's flag list and docs/architecture.md's table."""
    import re
    from pathlib import Path

    text = serve.add_serve_args(argparse.ArgumentParser()).format_help()
    group = text.split(f"\n{vllm_flags.GROUP_TITLE}:\n", 1)[1].split("\n\n", 2)[1]
    flags = re.findall(r"^  (--[a-z-]+)", group, flags=re.M)
    assert len(flags) > 20 and "--trust-remote-code" in flags and "--lora-modules" in flags
    root = Path(__file__).resolve().parents[2]
    for doc in ("README.md", "docs/architecture.md"):
        text = (root / doc).read_text()
        assert [f for f in flags if f"`{f}" not in text] == [], doc
