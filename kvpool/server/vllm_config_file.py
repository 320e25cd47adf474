"""vLLM's ``--config FILE.yaml`` on ``kvpool serve`` (docs/architecture.md "vLLM's serve
flags"): a YAML mapping of flag: value, expanded into command-line arguments before parsing as
vLLM's FlexibleArgumentParser expands it (vllm/utils/argparse_utils.py)::

    port: 8001                      --port 8001
    max_model_len: 4096             --max-model-len 4096          (underscores read as dashes)
    enforce-eager: true             --enforce-eager
    enable-prefix-caching: false    --no-enable-prefix-caching    (nothing without a --no- form)
    served-model-name: [a, b]       --served-model-name a b       (an empty list: nothing)
    kv-events-config: {...}         --kv-events-config '{...}'    (a mapping: its JSON)

NOTE(config-order): the file's arguments go before the command line's (after a leading
MODEL_DIR, which stays first so a list flag from the file cannot take it), so a flag given in
both places takes the command line's value, as in vLLM. Each expanded flag then gets its usual
treatment: one kvpool does not know is argparse's unrecognized argument, a refused value exits
2. PyYAML is a dependency (pyproject.toml).

NOTE(underscores): as vLLM's parser, a command-line flag may be spelled with underscores
(``--max_model_len 4096``, ``--max_model_len=4096``): the flag's name up to its first dot,
never its value nor a dotted form's keys (``-cc.pass_config``), is read with dashes. kvpool's
own flags all have dashes, so no spelling changes meaning.

argparse has no hook that rewrites the arguments before parsing, so :func:`take_config_files`
wraps the parser's ``parse_known_args``, the method both ``parse_args`` and kvpool.cli's
subcommand dispatch call with the subcommand's arguments; it also reads underscores as dashes,
and then vLLM's dotted forms of JSON flags (``-cc.level 3``: vllm_dotted.py NOTE(dotted)), from
the file too, as vLLM reads them after expanding the file.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kvpool.server.vllm_dotted import expand_dotted

__all__ = ["CONFIG_FLAG", "add_config_flag", "config_args", "dashed", "expand_config"]

CONFIG_FLAG = "--config"


def add_config_flag(parser: argparse.ArgumentParser, group: Any) -> None:
    """``--config FILE.yaml`` in ``group``'s help, expanded by the wrapped parse."""
    group.add_argument(CONFIG_FLAG, action=_NotExpanded, metavar="FILE.yaml",
                       default=argparse.SUPPRESS,
                       help="vLLM's config file: a YAML mapping of flag: value, read as those "
                       "flags placed before the command line's (which win)")
    take_config_files(parser)


class _NotExpanded(argparse.Action):
    """Reached only where the arguments were parsed without the expansion: an error, never a
    silently ignored file."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        raise argparse.ArgumentError(self, "the file was not expanded: give it to `kvpool "
                                     f"serve ... {CONFIG_FLAG} FILE.yaml`")


def take_config_files(parser: argparse.ArgumentParser) -> None:
    parse = parser.parse_known_args

    def parse_known_args(args: Sequence[str] | None = None,
                         namespace: argparse.Namespace | None = None) -> Any:
        if args is None:  # argparse reads the process's arguments itself (kvpool never
            return parse(None, namespace)  # does): `kvpool serve` hands its subparser a list
        try:
            argv = expand_dotted(expand_config(dashed(args), lambda: _no_forms(parser)))
        except ValueError as exc:
            parser.error(str(exc))  # exit 2, as vLLM's FlexibleArgumentParser.error
        return parse(argv, namespace)

    parser.parse_known_args = parse_known_args  # type: ignore[method-assign]


def dashed(argv: Sequence[str]) -> list[str]:
    """NOTE(underscores): each ``--flag_name`` (or ``--flag_name=value``) as ``--flag-name``;
    values and everything after a bare ``--`` stay as they are."""
    out: list[str] = []
    for i, arg in enumerate(argv):
        if arg == "--":
            return out + list(argv[i:])
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            arg = _dash(name) + eq + value
        out.append(arg)
    return out


def _dash(name: str) -> str:
    """A flag's name with dashes for underscores up to its first dot: a dotted form's keys
    (``--compilation-config.pass_config``) are JSON keys, kept as they are (NOTE(dotted))."""
    flag, dot, keys = name.partition(".")
    return flag.replace("_", "-") + dot + keys


def _no_forms(parser: argparse.ArgumentParser) -> set[str]:
    """The parser's ``--no-x`` spellings, from its usage line (argparse lists every one)."""
    return set(re.findall(r"--no-[\w-]+", parser.format_usage()))


def expand_config(argv: list[str], no_forms: Callable[[], set[str]]) -> list[str]:
    """``argv`` with its ``--config FILE`` (or ``--config=FILE``) replaced by the file's
    arguments, placed first (NOTE(config-order)); ValueError names what is wrong."""
    at = [i for i, a in enumerate(argv) if a == CONFIG_FLAG or a.startswith(CONFIG_FLAG + "=")]
    if not at:
        return argv
    if len(at) > 1:
        raise ValueError(f"{CONFIG_FLAG}: given {len(at)} times; give one file (as vLLM)")
    i = at[0]
    if argv[i] == CONFIG_FLAG:
        if i + 1 == len(argv) or argv[i + 1].startswith("-"):
            raise ValueError(f"{CONFIG_FLAG}: expected FILE.yaml")
        path, rest = argv[i + 1], argv[:i] + argv[i + 2:]
    else:
        path, rest = argv[i].split("=", 1)[1], argv[:i] + argv[i + 1:]
    head = 1 if rest and not rest[0].startswith("-") else 0  # MODEL_DIR stays first
    return rest[:head] + config_args(path, no_forms()) + rest[head:]


def config_args(path: str, no_forms: set[str]) -> list[str]:
    """The arguments a config file spells (the module docstring's table)."""
    doc = _read(path)
    out: list[str] = []
    for key, value in doc.items():
        flag = "--" + _dash(str(key))
        if isinstance(value, bool):
            no = "--no-" + flag[2:]
            out += [flag] if value else [no] if no in no_forms else []
        elif isinstance(value, list):
            out += [flag, *map(str, value)] if value else []
        elif isinstance(value, dict):
            out += [flag, json.dumps(value)]
        else:
            out += [flag, str(value)]
    return out


def _read(path: str) -> dict[Any, Any]:
    where = f"{CONFIG_FLAG} {path}"
    if not path.endswith((".yaml", ".yml")):
        raise ValueError(f"{where}: must be a YAML file (.yaml or .yml), as vLLM's")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{where}: cannot read it ({exc})") from None
    try:
        import yaml  # PyYAML: a dependency (pyproject.toml)
    except ImportError:
        raise ValueError(f"{where}: reading YAML needs PyYAML (pip install pyyaml)") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"{where}: not YAML ({exc})") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ValueError(f"{where}: must hold a mapping of flag: value, not a "
                         f"{type(doc).__name__}")
    return doc
