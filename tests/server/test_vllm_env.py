"""vLLM's environment variables on ``kvpool serve`` (kvpool/server/vllm_env.py): each one kvpool
honours is its flag's value where the flag is not given, through ``kvpool serve``'s parser and
kvpool.cli's; a flag on the command line or in a --config file wins, as vLLM's flags win over
its variables; a malformed value exits 2 naming the variable before anything is built."""

from __future__ import annotations

import argparse

import pytest

from kvpool import cli
from kvpool.runtime.engine.config import EngineConfig
from kvpool.server import serve
from kvpool.server.connections import DEFAULT_KEEP_ALIVE_TIMEOUT
from kvpool.server.vllm_env import ENV_FLAGS

# variable -> (its value here, the flag given instead, what the server is set to: from the
# variable, from the flag, without either)
CASES = {
    "VLLM_MAX_STOP_STRINGS": ("8", ["--max-stop", "2"], (8, 2, 4)),
    "VLLM_MAX_N_SEQUENCES": ("3", ["--max-n", "5"], (3, 5, EngineConfig().max_n)),
    "VLLM_HTTP_TIMEOUT_KEEP_ALIVE": ("5", ["--keep-alive-timeout", "30"],
                                     (5.0, 30.0, DEFAULT_KEEP_ALIVE_TIMEOUT)),
    "VLLM_LOGGING_LEVEL": ("DEBUG", ["--log-level", "WARNING"], ("debug", "warning", None)),
}


def parse(*argv: str) -> argparse.Namespace:
    return serve.add_serve_args(argparse.ArgumentParser()).parse_args(list(argv))


def setting(name: str, args: argparse.Namespace) -> object:
    """What ``kvpool serve`` runs with for the flag ``name`` stands for."""
    dest = ENV_FLAGS[name][0]
    if dest in ("max_stop", "max_n"):
        return getattr(serve.config_from_args(args), dest)
    if dest == "keep_alive_timeout":
        return serve.ServeOptions.from_args(args).keep_alive_timeout
    return args.log_level  # set_up_logging's


@pytest.fixture
def no_vllm_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ENV_FLAGS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_every_honoured_variable_is_tested():
    assert set(CASES) == set(ENV_FLAGS)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_variable_stands_for_its_flag_and_the_flag_wins(name, no_vllm_env):
    value, flag, (from_env, from_flag, default) = CASES[name]
    assert setting(name, parse()) == default
    no_vllm_env.setenv(name, value)
    assert setting(name, parse()) == from_env
    assert setting(name, parse(*flag)) == from_flag
    # kvpool.cli's dispatch parses the subcommand's arguments with the same parser
    assert setting(name, cli.build_parser("serve").parse_args(["serve"])) == from_env


def test_a_config_files_flag_wins_too(no_vllm_env, tmp_path):
    no_vllm_env.setenv("VLLM_MAX_STOP_STRINGS", "8")
    path = tmp_path / "vllm.yaml"
    path.write_text("max-stop: 6\n")
    assert serve.config_from_args(parse("--config", str(path))).max_stop == 6


@pytest.mark.parametrize("name, value, good", [
    ("VLLM_MAX_STOP_STRINGS", "four", "an integer >= 1"),
    ("VLLM_MAX_N_SEQUENCES", "0", "an integer >= 1"),
    ("VLLM_HTTP_TIMEOUT_KEEP_ALIVE", "0", "whole seconds >= 1"),
    ("VLLM_HTTP_TIMEOUT_KEEP_ALIVE", "inf", "whole seconds >= 1"),
    ("VLLM_LOGGING_LEVEL", "LOUD", "one of CRITICAL, ERROR, WARNING, INFO, DEBUG, NOTSET"),
])
def test_a_malformed_value_exits_2_naming_it(name, value, good, no_vllm_env, capsys):
    no_vllm_env.setenv(name, value)
    with pytest.raises(SystemExit) as exc:  # `kvpool serve`'s arguments, parsed first
        cli.build_parser("serve").parse_args(["serve", "--port", "0"])
    assert exc.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]
    flag = ENV_FLAGS[name][1]
    assert last.startswith(f"kvpool serve: error: {name}={value!r} (vLLM's variable, read as "
                           f"{flag}): use {good}"), last


@pytest.mark.parametrize("value, level", [("WARN", "warning"), ("fatal", "critical")])
def test_pythons_level_aliases_start_as_under_vllm(value, level, no_vllm_env):
    """Probe P5: vLLM hands the level to logging.dictConfig, which takes WARN and FATAL, so a
    deployment setting them starts under vLLM (NOTE(level-aliases))."""
    no_vllm_env.setenv("VLLM_LOGGING_LEVEL", value)
    assert parse().log_level == level


def test_help_prints_with_a_malformed_variable(no_vllm_env, capsys):
    """Probe P5: a malformed value made `kvpool serve --help` exit 2 (NOTE(env-help))."""
    no_vllm_env.setenv("VLLM_MAX_N_SEQUENCES", "abc")
    with pytest.raises(SystemExit) as exc:
        cli.build_parser("serve").parse_args(["serve", "--help"])
    assert exc.value.code == 0 and "--max-n" in capsys.readouterr().out
