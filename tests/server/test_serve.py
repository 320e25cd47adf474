"""``kvpool serve``: flags in vLLM's spelling for every EngineConfig field, and a real
subprocess that shuts down gracefully on SIGTERM (in-flight requests finish, or are aborted
after --shutdown-timeout; every block back in the pool; exit status 0)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import signal

import aiohttp
import pytest

from kvpool.runtime.engine.config import EngineConfig
from kvpool.server import serve
from tests.server.serve_process import read_rest, subprocess_server


def parse(*argv: str) -> argparse.Namespace:
    return serve.add_serve_args(argparse.ArgumentParser()).parse_args(list(argv))


def test_every_engine_config_field_has_a_flag():
    parser = serve.add_serve_args(argparse.ArgumentParser())
    dests = {a.dest for a in parser._actions}
    missing = [f.name for f in dataclasses.fields(EngineConfig) if f.name not in dests]
    assert not missing, f"EngineConfig fields without a `kvpool serve` flag: {missing}"


def test_vllm_spelling_reaches_engine_config():
    args = parse("--model", "/models/x", "--served-model-name", "x", "--block-size", "32",
                 "--kv-cache-memory", "1GiB", "--gpu-memory-utilization", "0.5",
                 "--swap-space", "2", "--no-enable-prefix-caching", "--max-num-seqs", "8",
                 "--max-num-batched-tokens", "512", "--preemption-mode", "swap",
                 "--max-model-len", "1024", "--num-device-blocks", "100",
                 "--num-host-blocks", "50", "--eviction-policy", "lru",
                 "--defrag-threshold", "0.3", "--seed", "7", "--max-queue", "9", "--max-n", "2",
                 "--max-tokens-limit", "99", "--max-stop", "3", "--dtype", "bfloat16",
                 "--device", "cpu", "--num-threads", "2", "--host", "127.0.0.1", "--port", "0",
                 "--api-key", "k")
    cfg = serve.config_from_args(args)
    assert (cfg.model, cfg.served_model_name, cfg.block_size, cfg.kv_cache_memory) == (
        "/models/x", "x", 32, "1GiB")
    assert (cfg.gpu_memory_utilization, cfg.swap_space, cfg.enable_prefix_caching) == (
        0.5, 2.0, False)
    assert (cfg.max_num_seqs, cfg.max_num_batched_tokens, cfg.preemption_mode) == (
        8, 512, "swap")
    assert (cfg.max_model_len, cfg.num_device_blocks, cfg.num_host_blocks) == (1024, 100, 50)
    assert (cfg.defrag_threshold, cfg.seed, cfg.max_queue, cfg.max_n) == (0.3, 7, 9, 2)
    assert (cfg.max_tokens_limit, cfg.max_stop, cfg.dtype, cfg.num_threads) == (
        99, 3, "bfloat16", 2)
    assert (args.port, args.api_key) == (0, ["k"])


def test_model_positional_tokenizer_and_max_logprobs(capsys):
    # vLLM's spellings: `kvpool serve DIR`, --tokenizer, --max-logprobs
    cfg = serve.config_from_args(parse("/models/q", "--tokenizer", "/tok", "--max-logprobs",
                                       "5", "--served-model-name", "q"))
    assert (cfg.model, cfg.tokenizer, cfg.max_logprobs, cfg.served_model_name) == (
        "/models/q", "/tok", 5, "q")
    assert serve.config_from_args(parse("/m", "--model", "/m")).model == "/m"
    # the positional wins, as vLLM's serve makes it (a --config file's model: the same args)
    assert serve.config_from_args(parse("/a", "--model", "/b")).model == "/a"
    with pytest.raises(ValueError, match="--tokenizer"):
        serve.config_from_args(parse("--tokenizer", "/tok"))  # the tiny model has its own
    assert EngineConfig().max_logprobs == 20
    # vLLM's -1: no cap (logprob_fields.py NOTE(whole-vocab)); any other negative exits 2
    assert serve.config_from_args(parse("--max-logprobs", "-1")).max_logprobs == -1
    for bad in ("-2", "-20"):
        assert serve.main(["--max-logprobs", bad]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"kvpool serve: --max-logprobs {bad}: use an int >= 0, or -1")
        assert err.count("\n") == 1, err


def test_defaults_and_api_key_env(monkeypatch):
    args = parse()
    assert serve.config_from_args(args) == EngineConfig()
    assert (args.host, args.port) == (None, 8000)  # 127.0.0.1, said at start (loopback)
    assert parse("--enable-prefix-caching").enable_prefix_caching is True
    assert parse("--kv-cache-memory", "1048576").kv_cache_memory == 1048576
    monkeypatch.delenv(serve.API_KEY_ENV, raising=False)
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    assert serve.resolve_api_key(args) is None
    monkeypatch.setenv("VLLM_API_KEY", "from-vllm")  # vLLM's variable, as vLLM reads it
    assert serve.resolve_api_key(args) == ("from-vllm",)
    monkeypatch.setenv(serve.API_KEY_ENV, "from-env")  # kvpool's own comes first
    assert serve.resolve_api_key(args) == ("from-env",)
    assert serve.resolve_api_key(parse("--api-key", "flag")) == ("flag",)
    assert serve.resolve_api_key(parse("--api-key", "k1", "k2", "--port", "0")) == ("k1", "k2")
    assert serve.resolve_api_key(parse("/models/m", "--api-key", "k1", "k2")) == ("k1", "k2")


def test_vllms_human_readable_numbers_and_auto():
    """vLLM 0.33's human_readable_int(_or_auto): 32k 32000, 32K 32768; auto and -1 derive the
    context (they were argparse's 'invalid int value')."""
    cfg = serve.config_from_args(parse("--max-model-len", "32k", "--max-num-batched-tokens",
                                       "8K", "--kv-cache-memory-bytes", "2G"))
    assert (cfg.max_model_len, cfg.max_num_batched_tokens) == (32000, 8192)
    assert cfg.kv_cache_memory == 2 << 30
    assert serve.config_from_args(parse("--max-model-len", "25.6k")).max_model_len == 25600
    for derived in ("auto", "-1", "AUTO"):
        assert serve.config_from_args(parse("--max-model-len", derived)).max_model_len is None


def test_bad_flags_exit_with_a_message(capsys):
    with pytest.raises(SystemExit):
        parse("--preemption-mode", "teleport")
    assert serve.main(["--max-queue", "0", "--port", "0"]) == 2
    assert "--max-queue" in capsys.readouterr().err


async def test_sigterm_lets_in_flight_requests_finish():
    async with subprocess_server("--shutdown-timeout", "20") as (proc, url, lines):
        assert ("uvloop loop" if _has_uvloop() else "asyncio loop") in lines[-1]
        async with aiohttp.ClientSession() as s:
            body = {"prompt": "hello", "max_tokens": 60, "ignore_eos": True, "stream": True,
                    "temperature": 0}
            async with s.post(url + "/v1/completions", json=body) as resp:
                assert resp.status == 200
                assert (await resp.content.readline()).startswith(b"data: {")
                proc.send_signal(signal.SIGTERM)  # mid-stream
                rest = await asyncio.wait_for(resp.read(), timeout=30)
            assert rest.endswith(b"data: [DONE]\n\n") and b'"finish_reason":"length"' in rest
        assert await asyncio.wait_for(proc.wait(), timeout=30) == 0
        out = await read_rest(proc, lines)
        assert f"{serve.STOPPED_PREFIX}32 device blocks free" in out, out


async def test_sigterm_aborts_what_outlives_the_timeout():
    async with subprocess_server("--shutdown-timeout", "0.5", blocks=160,
                                 context=2048) as (proc, url, lines):
        async with aiohttp.ClientSession() as s:
            body = {"prompt": "hello", "max_tokens": 2000, "ignore_eos": True, "stream": True,
                    "temperature": 0}
            async with s.post(url + "/v1/completions", json=body) as resp:
                assert resp.status == 200
                await resp.content.readline()
                proc.send_signal(signal.SIGTERM)
                with contextlib.suppress(aiohttp.ClientError):
                    rest = await asyncio.wait_for(resp.read(), timeout=30)
                    assert b'"finish_reason":"length"' not in rest  # cut short, not finished
        assert await asyncio.wait_for(proc.wait(), timeout=30) == 0
        out = await read_rest(proc, lines)
        assert f"{serve.STOPPED_PREFIX}160 device blocks free" in out, out


def _has_uvloop() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.parametrize("flags, named", [
    (["--max-connections", "0"], "--max-connections"),
    (["--socket-send-buffer", "100"], "--socket-send-buffer"),
    (["--header-timeout", "-1"], "--header-timeout"),
    (["--stream-write-timeout", "0"], "--stream-write-timeout"),
    (["--sse-keep-alive-interval", "-1"], "--sse-keep-alive-interval"),
    (["--remote-blocks-per-object", "0"], "--remote-blocks-per-object"),
    (["--remote-op-timeout-ms", "0"], "--remote-op-timeout-ms"),
    (["--port", "70000"], "--port"),
    (["--max-stored-response-bytes", "-1"], "--max-stored-response-bytes"),
])
def test_a_bad_server_flag_exits_2_naming_it(flags, named, capsys):
    """ServeOptions validates every server flag before anything is built (exit 2, one line)."""
    assert serve.main(flags) == 2
    err = capsys.readouterr().err
    assert err.startswith("kvpool serve: ") and named in err, err


def test_serve_options_take_every_server_flag_by_name():
    """A ServeOptions field is filled from the flag of the same dest (no hand-copied list)."""
    args = serve.add_serve_args(argparse.ArgumentParser()).parse_args(
        ["--port", "0", "--replica-id", "r1", "--socket-send-buffer", "8192",
         "--remote-url", "redis://127.0.0.1:1", "--no-uvloop", "--shared-prefix-cache"])
    o = serve.ServeOptions.from_args(args)
    assert (o.port, o.replica_id, o.socket_send_buffer, o.remote_url, o.uvloop) == \
        (0, "r1", 8192, "redis://127.0.0.1:1", False)
    assert o.shared_prefix_cache and not serve.ServeOptions().shared_prefix_cache
    fields = {f.name for f in dataclasses.fields(serve.ServeOptions)}
    assert fields <= set(vars(args)), fields - set(vars(args))


def test_the_loopback_default_is_said_louder_in_a_pod(monkeypatch, caplog):
    """NOTE(loopback): without --host kvpool binds 127.0.0.1 where vLLM binds every
    interface; a manifest written for vLLM gave an unreachable pod and nothing said why."""
    from kvpool.server.serve_options import loopback_said
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with caplog.at_level(logging.INFO, logger="kvpool.server"):
        assert loopback_said() == "127.0.0.1"
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
        loopback_said()
    levels = [r.levelno for r in caplog.records if "--host 0.0.0.0" in r.getMessage()]
    assert levels[-1] == logging.WARNING and len(levels) == 2


def test_a_hub_id_the_local_cache_holds_is_read_from_its_snapshot(tmp_path, monkeypatch):
    """NOTE(hf-cache): a manifest written for vLLM passes a hub id with the cache mounted
    (HF_HOME); it exited 2 ("download the model yourself") though the model was on disk.
    Nothing is downloaded: an id the cache lacks is left as it is (the loader's error)."""
    snap = tmp_path / "hub" / "models--org--tiny" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    (snap.parents[1] / "refs").mkdir()
    (snap.parents[1] / "refs" / "main").write_text("abc123\n")
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    cfg = serve.config_from_args(parse("org/tiny"))
    assert (cfg.model, cfg.served_model_name) == (str(snap), "org/tiny")
    named = serve.config_from_args(parse("org/tiny", "--served-model-name", "t"))
    assert named.served_model_name == "t"
    assert serve.config_from_args(parse("org/other")).model == "org/other"  # not cached
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))  # wins over HF_HOME
    monkeypatch.setenv("HF_HOME", str(tmp_path / "elsewhere"))
    assert serve.config_from_args(parse("--model", "org/tiny")).model == str(snap)
