"""vLLM's environment variables on ``kvpool serve`` (docs/architecture.md "vLLM's environment
variables"): a deployment moving from vLLM keeps its environment, and each variable that changes
what vLLM's server answers (or how long it keeps a connection, what it logs) and has a kvpool
flag is read as that flag's value where the flag is not given, as vLLM's flags win over its
variables.

NOTE(env-defaults): argparse sets a flag's default only on a namespace that lacks its dest, and
a flag given overwrites whatever is there. So the variables' values are put on the namespace
before the arguments are parsed (:func:`take_vllm_env` wraps the parser's
``parse_known_args``, the method ``parse_args`` and kvpool.cli's subcommand dispatch call): a
flag on the command line or in a ``--config`` file (expanded into arguments) wins, and the
engine's flags, whose default is argparse.SUPPRESS (``kvpool serve`` passes only those given),
pass the variable's value on as if given. A malformed value exits 2 naming the variable before
anything is built, where vLLM fails when it first reads it.

NOTE(env-help): the malformed value is said once the arguments are parsed, so ``kvpool serve
--help`` still prints (vLLM reads its variables lazily: its --help never reads them).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kvpool.errors import ConfigError
from kvpool.server.vllm_flags import LOG_LEVELS

__all__ = ["ENV_FLAGS", "VLLM_API_KEY_ENV", "env_values", "take_vllm_env"]

VLLM_API_KEY_ENV = "VLLM_API_KEY"  # --api-key's fallback after $KVPOOL_API_KEY (serve_options)


def _count(text: str) -> int:
    value = int(text)  # vLLM's int(); a ValueError is the caller's message
    if value < 1:
        raise ValueError
    return value


def _seconds(text: str) -> float:
    """NOTE(keep-alive-zero): vLLM hands the value to uvicorn, where 0 closes an idle
    connection at once; kvpool's --keep-alive-timeout 0 never closes it, so 0 is refused rather
    than read as its opposite. vLLM reads it with int(), so ``inf`` (never close, as 0 here)
    or ``1e3`` fail there and are refused here too."""
    return float(_count(text))


# NOTE(level-aliases): vLLM upper-cases the value into logging's dictConfig, which also takes
# WARN and FATAL (Python's aliases of WARNING and CRITICAL): a deployment that sets them
# starts under vLLM, so it starts here
_LEVEL_ALIASES = {"warn": "warning", "fatal": "critical"}


def _level(text: str) -> str:
    value = text.strip().lower()  # vLLM upper-cases it; kvpool's --log-level takes any case
    value = _LEVEL_ALIASES.get(value, value)
    if value not in LOG_LEVELS:
        raise ValueError
    return value


# variable -> (dest, the flag it stands for, reader, what a good value is)
ENV_FLAGS: dict[str, tuple[str, str, Callable[[str], Any], str]] = {
    "VLLM_MAX_STOP_STRINGS": ("max_stop", "--max-stop", _count, "an integer >= 1"),
    "VLLM_MAX_N_SEQUENCES": ("max_n", "--max-n", _count, "an integer >= 1"),
    "VLLM_HTTP_TIMEOUT_KEEP_ALIVE": ("keep_alive_timeout", "--keep-alive-timeout", _seconds,
                                     "whole seconds >= 1 (kvpool's --keep-alive-timeout 0 "
                                     "never closes an idle connection, where uvicorn's "
                                     "closes it)"),
    "VLLM_LOGGING_LEVEL": ("log_level", "--log-level", _level,
                           "one of " + ", ".join(level.upper() for level in LOG_LEVELS)),
}


def env_values(environ: Mapping[str, str]) -> dict[str, Any]:
    """dest -> value for each ENV_FLAGS variable set in ``environ``; ConfigError naming the
    variable, the flag and a good value for a malformed one."""
    values: dict[str, Any] = {}
    for name, (dest, flag, read, good) in ENV_FLAGS.items():
        text = environ.get(name)
        if text is None:
            continue
        try:
            values[dest] = read(text)
        except ValueError:
            raise ConfigError(f"{name}={text!r} (vLLM's variable, read as {flag}): use "
                              f"{good}") from None
    return values


def take_vllm_env(parser: argparse.ArgumentParser,
                  environ: Mapping[str, str] = os.environ) -> None:
    """Make ``parser`` read ENV_FLAGS' variables as its flags' values where the flags are not
    given (NOTE(env-defaults))."""
    parse = parser.parse_known_args

    def parse_known_args(args: Sequence[str] | None = None,
                         namespace: argparse.Namespace | None = None) -> Any:
        namespace = argparse.Namespace() if namespace is None else namespace
        try:
            values, bad = env_values(environ), None
        except ConfigError as exc:
            values, bad = {}, exc
        for dest, value in values.items():
            if not hasattr(namespace, dest):
                setattr(namespace, dest, value)
        parsed = parse(args, namespace)  # --help prints and exits here (NOTE(env-help))
        if bad is not None:
            parser.error(str(bad))  # exit 2, as a refused flag's value
        return parsed

    parser.parse_known_args = parse_known_args  # type: ignore[method-assign]
