"""vLLM's dotted spelling of its JSON-valued flags on ``kvpool serve`` (kvpool/server/
vllm_dotted.py NOTE(dotted)): ``-cc.level=3`` is ``--compilation-config '{"level": 3}'``, and
each such flag then gets the treatment its whole-JSON form gets (no-op line, refusal, honored);
no other argument, and no value, changes."""

from __future__ import annotations

import argparse
import json
import logging

import aiohttp
import pytest

from kvpool import cli
from kvpool.server import serve
from kvpool.server.serve_options import ServeOptions
from kvpool.server.vllm_config_file import dashed
from kvpool.server.vllm_dotted import JSON_FLAGS, expand_dotted, flag_value
from kvpool.server.vllm_flags import NO_OPS
from tests.server.test_vllm_flags_served import post, served


def kvpool_serve(*argv: str) -> argparse.Namespace:
    """Parsed as the deployment's `kvpool serve ...` is (kvpool.cli)."""
    return cli.build_parser("serve").parse_args(["serve", *argv])


def info_lines(args: argparse.Namespace, caplog) -> list[str]:
    with caplog.at_level(logging.INFO, logger="kvpool.server"):
        ServeOptions.from_args(args)  # where kvpool serve calls apply_vllm_flags
    return [r.getMessage() for r in caplog.records]


@pytest.mark.parametrize("argv", [
    ["--compilation-config.level", "3"], ["--compilation-config.level=3"], ["-cc.level", "3"],
    ["-cc.level=3"], ["-O.level=3"], ["--compilation_config.level=3"],
    ["--compilation-config", '{"level": 3}'],  # the whole form: the same line
], ids=" ".join)
def test_dotted_compilation_config_is_the_no_op_with_its_one_line(argv, caplog):
    assert info_lines(kvpool_serve(*argv), caplog) == [
        "vLLM's --compilation-config {\"level\": 3}: accepted, no effect: "
        + NO_OPS["compilation_config"][1]]


def test_dotted_keys_merge_into_one_object_with_values_as_vllm_reads_them(caplog):
    args = kvpool_serve("-cc.pass_config.fuse_norm_quant", "true", "-cc.mode=3",
                        "--compilation-config.cudagraph_capture_sizes+", "1,2",
                        "-cc.cudagraph_capture_sizes+=4", "-cc.pass_config.x_y", "1k",
                        "--limit-mm-per-prompt.image", "0", "-O3")
    assert json.loads(args.compilation_config) == {
        "pass_config": {"fuse_norm_quant": True, "x_y": 1000}, "mode": 3,
        "cudagraph_capture_sizes": ["1", "2", "4"]}  # keys keep their underscores
    assert (args.limit_mm_per_prompt, args.optimization_level) == ('{"image": 0}', "3")
    assert len(info_lines(args, caplog)) == 3  # one line per flag, as before


@pytest.mark.parametrize("argv, said", [
    (["--speculative-config.model", "eagle", "--speculative-config.num_speculative_tokens",
      "3"], '--speculative-config: {"model": "eagle", "num_speculative_tokens": 3}: kvpool has '
     "no speculative decoding"),
    (["--hf-overrides.max_position_embeddings", "4096"],
     '--hf-overrides: {"max_position_embeddings": 4096}: kvpool reads the model\'s config.json'),
    (["--kv-transfer-config.kv_connector=NixlConnector"],
     '--kv-transfer-config: {"kv_connector": "NixlConnector"}: kvpool runs no vLLM KV '),
    (["--override-generation-config.temperature", "hot"], None),
    (["--port", "0", "-cc.level"], "-cc.level: expected a value"),
    (["-cc..level", "3"], "-cc..level: a key is empty"),
], ids=lambda v: v[0] if isinstance(v, list) else "")
def test_dotted_forms_of_refused_flags_exit_2_as_the_whole_form(argv, said, capsys):
    if said is None:  # refused after parsing, as the whole form is (exit 2, no model loaded)
        assert serve.main(argv) == 2
        assert "--override-generation-config: temperature: use a number, got 'hot'" in (
            capsys.readouterr().err)
        return
    with pytest.raises(SystemExit) as exc:
        cli.main(["serve", "--port", "0", *argv])
    assert exc.value.code == 2
    assert said in capsys.readouterr().err


def test_honored_flags_take_their_dotted_forms_and_those_win_as_in_vllm():
    o = ServeOptions.from_args(kvpool_serve(
        "--override-generation-config", '{"top_p": 0.5}',
        "--override-generation-config.temperature", "0.6",
        "--kv-events-config.enable_kv_cache_events", "true",
        "--kv-events-config.publisher=zmq", "--kv-events-config.endpoint", "tcp://*:5557"))
    assert o.override_generation_config == {"temperature": 0.6}  # argparse keeps the last
    assert json.loads(o.kv_events_config) == {"enable_kv_cache_events": True,
                                              "publisher": "zmq", "endpoint": "tcp://*:5557"}


def test_no_other_argument_nor_value_changes():
    argv = ["/models/m.v1", "--served-model-name", "-my.model_x", "--root-path", "/a.b_c",
            "--defrag-threshold=0.5", "--port.x", "1", "-cc", '{"a.b": 1}']
    assert expand_dotted(argv) == argv  # --port is not a JSON flag: argparse refuses it
    assert expand_dotted(["-cc.a", "1", "MODEL", "--", "-cc.b", "2"]) == [
        "MODEL", "--compilation-config", '{"a": 1}', "--", "-cc.b", "2"]
    assert dashed(["--compilation_config.pass_config.x_y=a_b"]) == [
        "--compilation-config.pass_config.x_y=a_b"]
    assert [flag_value(v) for v in ("3", "true", "[1, 2]", "2K", "25.6k", "1.5K", "tcp://*:1",
                                    "null")] == [3, True, [1, 2], 2048, 25600, "1.5K",
                                                 "tcp://*:1", None]
    assert set(JSON_FLAGS.values()) <= set(
        serve.add_serve_args(argparse.ArgumentParser()).format_help().split())


def test_a_config_files_dotted_key_is_read_as_the_command_lines(tmp_path):
    path = tmp_path / "vllm.yaml"
    path.write_text("compilation_config.pass_config: {fuse_x: true}\n"
                    "compilation-config.level: 3\n")
    args = kvpool_serve("--config", str(path))
    assert json.loads(args.compilation_config) == {"pass_config": {"fuse_x": True}, "level": 3}


async def test_a_server_takes_a_dotted_honored_flag():
    body = {"prompt": "Once upon", "ignore_eos": True}
    async with served("--override-generation-config.max_new_tokens", "3",
                      "--generation-config", "vllm") as url, aiohttp.ClientSession() as s:
        assert (await post(s, url, "/v1/completions", body))["usage"]["completion_tokens"] == 3
