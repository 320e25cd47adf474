"""vLLM 0.33's deployment flags on ``kvpool serve`` (kvpool/server/vllm_flags.py): --log-level in
vLLM's upper case, the device detected as vLLM detects its platform (NOTE(auto-device)),
--uvicorn-log-level for the HTTP server's loggers only (NOTE(uvicorn-level)), and the flags of
deployment manifests, their aliases and companions, each honored, a no-op or refused with a
reason. Parse-level, and the startup path up to a refusal: no server starts."""

from __future__ import annotations

import argparse
import contextlib
import logging
from collections.abc import Iterator

import pytest
import torch

from kvpool import cli
from kvpool.runtime.engine import config as engine_config
from kvpool.runtime.engine.config import EngineConfig
from kvpool.server import serve
from kvpool.server.serve_options import ServeOptions

NO_CUDA = ("--device auto: torch sees no CUDA device (torch.cuda.is_available() is False); "
           "pass --device cuda to require one")
GPU_UTIL = ("--gpu-memory-utilization {}: accepted, no effect on CPU: the KV cache is sized by "
            "--kv-cache-memory (or --num-device-blocks)")
# a value ServeOptions refuses after apply_vllm_flags logged: main returns 2, nothing bound
REFUSED_LAST = ("--override-generation-config", '{"temperature": "hot"}')


def kvpool_serve(*argv: str) -> argparse.Namespace:
    """Parsed as the deployment's `kvpool serve ...` is (kvpool.cli)."""
    return cli.build_parser("serve").parse_args(["serve", *argv])


@pytest.mark.parametrize("given, level", [("DEBUG", "debug"), ("INFO", "info"),
                                          ("WARNING", "warning"), ("ERROR", "error"),
                                          ("CRITICAL", "critical"), ("NOTSET", "notset"),
                                          ("debug", "debug"), ("Warning", "warning")])
def test_log_level_takes_vllms_upper_case_and_kvpools_lower_case(given, level, tmp_path):
    assert kvpool_serve("--log-level", given).log_level == level
    (tmp_path / "vllm.yaml").write_text(f"log-level: {given}\n")
    assert kvpool_serve("--config", str(tmp_path / "vllm.yaml")).log_level == level


def test_the_device_is_auto_cuda_where_torch_sees_it_else_the_cpu(caplog):
    here = "cuda" if torch.cuda.is_available() else "cpu"  # this machine: no GPU, the CPU
    assert EngineConfig().device == EngineConfig(device="auto").device == here
    assert engine_config.resolve_device("auto")[0] == here
    assert (EngineConfig(device="cpu").device, EngineConfig(device="cuda:1").device) == (
        "cpu", "cuda:1")  # an explicit device is kept (checked when the engine is built)
    with caplog.at_level(logging.INFO, logger="kvpool.server"):
        assert serve.config_from_args(kvpool_serve()).device == here
        serve.config_from_args(kvpool_serve("--device", "cpu", "--gpu-memory-utilization", "0.5"))
        serve.config_from_args(kvpool_serve("--device-memory-utilization", "0.8"))
    said = [r.getMessage() for r in caplog.records]
    if here == "cpu":
        assert said == [f"device cpu: {NO_CUDA}", "device cpu: --device cpu",
                        GPU_UTIL.format(0.5), f"device cpu: {NO_CUDA}", GPU_UTIL.format(0.8)]


@contextlib.contextmanager
def process_logging() -> Iterator[None]:
    """kvpool serve's process logging from scratch (no handler on the root logger, as in a
    fresh process: pytest's own are set aside, so serve.main's basicConfig adds its stderr
    handler), every level and handler put back afterwards."""
    root = logging.getLogger()
    names = ("aiohttp.access", "aiohttp.server", "kvpool.server")
    handlers, level, levels = root.handlers[:], root.level, [logging.getLogger(n).level
                                                             for n in names]
    root.handlers = []
    try:
        yield
    finally:
        for handler in root.handlers:
            handler.close()
        root.handlers = handlers
        root.setLevel(level)
        for name, saved in zip(names, levels):
            logging.getLogger(name).setLevel(saved)


def test_uvicorn_log_level_leaves_kvpools_startup_lines_at_info(capsys):
    """NOTE(uvicorn-level): the real startup path (serve.main) up to a refused value."""
    with process_logging():
        assert serve.main(["--uvicorn-log-level", "warning", "--trust-remote-code",
                           "--gpu-memory-utilization", "0.95", *REFUSED_LAST]) == 2
        err = capsys.readouterr().err
        assert "INFO kvpool.server: vLLM's --trust-remote-code: accepted, no effect" in err, err
        if not torch.cuda.is_available():
            assert f"INFO kvpool.server: device cpu: {NO_CUDA}" in err, err
            assert "INFO kvpool.server: " + GPU_UTIL.format(0.95) in err, err
        levels = [logging.getLogger(n).level for n in ("aiohttp.access", "aiohttp.server")]
        assert levels == [logging.WARNING] * 2 and logging.getLogger().level == logging.INFO
        assert ServeOptions().access_log(logging.getLogger("kvpool.server")) is None


def test_uvicorn_debug_writes_the_access_lines_on_the_http_servers_logger(capsys):
    access = logging.getLogger("aiohttp.access")
    with process_logging():
        assert serve.main(["--uvicorn-log-level", "trace", "--log-level", "ERROR",
                           *REFUSED_LAST]) == 2
        assert access.level == logging.DEBUG and logging.getLogger().level == logging.ERROR
        assert ServeOptions().access_log(logging.getLogger("kvpool.server")) is access
    assert "--override-generation-config" in capsys.readouterr().err
    off = ServeOptions(disable_uvicorn_access_log=True)
    assert off.access_log(logging.getLogger("kvpool.server")) is None


def test_deployment_flags_kvpool_does_as_vllm_are_honored():
    config = serve.config_from_args(kvpool_serve("--max-num-queued-reqs", "7",
                                                 "--device-memory-utilization", "0.8"))
    assert (config.max_queue, config.gpu_memory_utilization) == (7, 0.8)
    args = kvpool_serve("-dp", "1", "--data-parallel-size-local", "1", "--data-parallel-rank",
                        "0", "-dpr", "0", "--api-server-count", "1", "--cpu-offload-gb", "0",
                        "--runner", "generate", "--config-format", "hf", "--no-headless",
                        "--no-data-parallel-external-lb", "--disable-tokenizer-info-endpoint")
    assert (args.data_parallel_size_local, args.api_server_count, args.runner) == (
        1, 1, "generate")
    assert kvpool_serve("--runner", "auto").runner == "auto"


def test_hf_tokens_no_op_line_never_shows_the_token(caplog):
    with caplog.at_level(logging.INFO, logger="kvpool.server"):
        ServeOptions.from_args(kvpool_serve("--hf-token", "hf_secret"))
    assert [r.getMessage()[:31] for r in caplog.records] == ["vLLM's --hf-token: accepted, no"]
    assert "hf_secret" not in caplog.text


def test_vllms_dotted_forms_of_json_flags_kvpool_takes():
    options = ServeOptions.from_args(kvpool_serve(
        "--default-chat-template-kwargs.enable_thinking", "false"))
    assert options.default_chat_template_kwargs == {"enable_thinking": False}
    args = kvpool_serve("--structured-outputs-config.backend", "xgrammar",
                        "--logging-config.log_level=DEBUG", "--mm-processor-kwargs.fps", "1")
    assert (args.structured_outputs_config, args.logging_config, args.mm_processor_kwargs) == (
        '{"backend": "xgrammar"}', '{"log_level": "DEBUG"}', '{"fps": 1}')


@pytest.mark.parametrize("argv, said", [
    (["-sc", "{}"], "-sc: {}: kvpool has no speculative decoding"),
    (["-sc.method", "ngram"], '--speculative-config: {"method": "ngram"}: kvpool has no '
                              "speculative decoding"),  # dotted: the long flag (JSON_FLAGS)
    (["--spec-method", "ngram"], "--spec-method: ngram: kvpool has no speculative decoding"),
    (["--spec-tokens", "3"], "--spec-tokens: 3: kvpool has no speculative decoding"),
    (["-asc", "4"], "--api-server-count/-asc: 4: kvpool serve's HTTP server and engine share "
                    "one process: use 1"),
    (["--data-parallel-size-local", "2"], "--data-parallel-size-local/-dpl: 2: one kvpool "
                                          "serve is one engine: use 1"),
    (["-dp", "1", "--data-parallel-rank", "1"], "--data-parallel-rank/-dpn: 1: one kvpool "
                                                "serve is one engine: use 0"),
    (["--headless"], "--headless: kvpool serve always runs its API server"),
    (["-dpe"], "-dpe: one kvpool serve is one engine with its own API server"),
    (["--runner", "pooling"], "--runner: pooling: kvpool serves generative models only"),
    (["--cpu-offload-gb", "4"], "--cpu-offload-gb: 4.0: kvpool keeps every weight on the "
                                "device: use 0"),
    (["--kv-offloading-backend", "native", "--kv-offloading-size", "8"],
     "--kv-offloading-size: 8: kvpool's host memory holds the KV blocks of preempted requests "
     "(--swap-space GIB)"),
    (["--config-format", "mistral"], "--config-format: mistral: kvpool reads the model "
                                     "directory's Hugging Face config.json only"),
    (["--tool-parser-plugin", "p.py"], "--tool-parser-plugin: p.py: kvpool loads no parser "
                                       "plugins"),
    (["--max-num-queued-tokens", "8192"], "--max-num-queued-tokens: 8192: kvpool has no "
                                          "prompt-token admission limit"),
    (["--reasoning-parser-plugin", "p.py"], "--reasoning-parser-plugin: p.py: kvpool loads no "
                                            "parser plugins"),
], ids=lambda v: v[0] if isinstance(v, list) else "")
def test_a_deployment_flag_kvpool_cannot_honor_exits_2_with_the_reason(argv, said, capsys):
    with pytest.raises(SystemExit) as exc:
        kvpool_serve(*argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "kvpool serve: error: argument " in err and said in err, err
