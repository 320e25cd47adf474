"""vLLM's ``--config FILE.yaml`` on ``kvpool serve`` (kvpool/server/vllm_config_file.py): the
file's flag: value pairs are read as flags placed before the command line's, which win; each
then gets its usual treatment; a file kvpool cannot read exits 2 naming it."""

from __future__ import annotations

import argparse

import aiohttp
import pytest

from kvpool import cli
from kvpool.server import serve
from kvpool.server.vllm_config_file import dashed
from tests.server.test_vllm_flags_served import as_ids, post, served

YAML = """\
port: 0
max_num_seqs: 3                  # an underscore, read as a dash (vLLM's rule)
max-num-batched-tokens: 512
enable-prefix-caching: false     # --no-enable-prefix-caching
enforce-eager: true              # a no-op flag, accepted as on the command line
disable-log-requests: false      # no --no- form: nothing
served-model-name: [a, b]
allowed-origins: []              # an empty list: nothing
kv-events-config: {enable_kv_cache_events: true, publisher: zmq}
"""


def kvpool_serve(*argv: str) -> argparse.Namespace:
    """Parsed as the deployment's `kvpool serve ...` is (kvpool.cli)."""
    return cli.build_parser("serve").parse_args(["serve", *argv])


@pytest.fixture
def config(tmp_path):
    def write(text: str, name: str = "vllm.yaml") -> str:
        (tmp_path / name).write_text(text)
        return str(tmp_path / name)
    return write


def test_the_files_flags_are_parsed_and_the_command_line_wins(config):
    args = kvpool_serve("--max-num-seqs", "5", "--config", config(YAML), "--port", "8001")
    assert (args.port, args.max_num_seqs, args.max_num_batched_tokens) == (8001, 5, 512)
    assert (args.enable_prefix_caching, args.enforce_eager) == (False, True)
    assert args.disable_log_requests is None and args.allowed_origins == '[]'  # the default
    assert args.served_model_name == ["a", "b"]
    assert args.kv_events_config == '{"enable_kv_cache_events": true, "publisher": "zmq"}'
    assert serve.config_from_args(args).max_num_seqs == 5
    assert kvpool_serve(f"--config={config(YAML)}").max_num_seqs == 3  # the = spelling too
    assert kvpool_serve("--config", config("")).port == 8000  # an empty file: nothing


def test_a_leading_model_dir_stays_the_model(config):
    args = kvpool_serve("/models/m", "--config", config("served-model-name: [x, y]\n"))
    assert (args.model_tag, args.served_model_name) == ("/models/m", ["x", "y"])
    parser = serve.add_serve_args(argparse.ArgumentParser(prog="kvpool serve"))  # serve.main's
    assert parser.parse_args(["--config", config("model: /models/q\n")]).model == "/models/q"


@pytest.mark.parametrize("text, said", [
    ("tensor-parallel-size: 2\n", "argument --tensor-parallel-size/-tp: 2: kvpool serve runs "
                                  "the whole model on one device: use 1"),
    ("enable-lora: true\n", "--disable-lora: --enable-lora: kvpool serves no LoRA"),
    ("swap_space_gb: 4\n", "unrecognized arguments: --swap-space-gb"),
])
def test_the_files_flags_get_their_usual_treatment(config, text, said, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["serve", "--config", config(text)])
    assert exc.value.code == 2
    assert said in capsys.readouterr().err


@pytest.mark.parametrize("argv, said", [
    (["--config", "{dir}/vllm.json"], "--config {dir}/vllm.json: must be a YAML file (.yaml or "
                                      ".yml), as vLLM's"),
    (["--config", "{dir}/none.yaml"], "--config {dir}/none.yaml: cannot read it ("),
    (["--config", "{dir}/list.yaml"], "--config {dir}/list.yaml: must hold a mapping of flag: "
                                      "value, not a list"),
    (["--config", "{dir}/bad.yaml"], "--config {dir}/bad.yaml: not YAML ("),
    (["--config", "{dir}/vllm.yaml", "--config", "{dir}/vllm.yaml"],
     "--config: given 2 times; give one file (as vLLM)"),
    (["--port", "0", "--config"], "--config: expected FILE.yaml"),
])
def test_a_file_kvpool_cannot_read_exits_2_naming_it(config, argv, said, capsys):
    for name, text in (("vllm.yaml", "port: 0\n"), ("vllm.json", "{}"),
                       ("list.yaml", "- port\n"), ("bad.yaml", "port: [0\n")):
        where = config(text, name).rsplit("/", 1)[0]
    with pytest.raises(SystemExit) as exc:
        cli.main(["serve", *(a.format(dir=where) for a in argv)])
    assert exc.value.code == 2
    assert f"kvpool serve: error: {said.format(dir=where)}" in capsys.readouterr().err


def test_a_config_flag_parsed_without_the_expansion_is_an_error_not_ignored(config, capsys):
    parser = serve.add_serve_args(argparse.ArgumentParser(prog="kvpool serve"))
    with pytest.raises(SystemExit) as exc:  # argparse's own method, not the wrapped one
        argparse.ArgumentParser.parse_known_args(parser, ["--config", config(YAML)])
    assert exc.value.code == 2
    assert "--config: the file was not expanded" in capsys.readouterr().err


async def test_a_server_started_from_a_config_file(config):
    """The file's flags change the server's answers; the command line's override wins."""
    path = config("return-tokens-as-token-ids: true\n"
                  "override-generation-config: {max_new_tokens: 2}\n")
    body = {"prompt": "Once upon", "logprobs": 1, "ignore_eos": True}
    async with served("--config", path, "--override-generation-config",
                      '{"max_new_tokens": 4}') as url, aiohttp.ClientSession() as s:
        answer = await post(s, url, "/v1/completions", body)
        assert answer["usage"]["completion_tokens"] == 4  # the command line's, not the file's
        assert as_ids(answer["choices"][0]["logprobs"]["tokens"])  # the file's


def test_underscore_spellings_on_the_command_line_are_read_as_dashes():
    """NOTE(underscores): vLLM's parser takes --max_model_len as --max-model-len; only flag
    names change, never values, and nothing after a bare --."""
    args = kvpool_serve("--max_model_len=300", "--num_device_blocks", "40",
                        "--served_model_name", "my_model", "--enforce_eager")
    assert (args.max_model_len, args.num_device_blocks) == (300, 40)
    assert args.served_model_name == ["my_model"] and args.enforce_eager is True
    assert dashed(["--a_b=c_d", "x_y", "--", "--e_f"]) == ["--a-b=c_d", "x_y", "--", "--e_f"]
