"""vLLM's dotted spelling of its JSON-valued flags on ``kvpool serve`` (docs/architecture.md
"vLLM's serve flags"): vLLM's FlexibleArgumentParser (vllm/utils/argparse_utils.py) reads a
flag's keys one by one and builds the JSON object itself::

    --compilation-config.level 3                    --compilation-config '{"level": 3}'
    -cc.level=3                                      (the same; -cc is its short flag)
    -O.level=3                                       (older vLLM's -O: --compilation-config)
    --kv-events-config.publisher zmq                 --kv-events-config '{"publisher": "zmq",
    --kv-events-config.endpoint tcp://*:5557             "endpoint": "tcp://*:5557"}'
    -cc.pass_config.fuse_norm_quant true             '{"pass_config": {"fuse_norm_quant": true}}'
    -cc.cudagraph_capture_sizes+ 1,2                 '{"cudagraph_capture_sizes": ["1", "2"]}'

NOTE(dotted): as vLLM, a value is read as JSON (``3``, ``true``, ``[1, 2]``), else as vLLM's
human-readable integer (``1k`` 1000, ``2K`` 2048, ``25.6k`` 25600), else kept as the string it
is; a key ending in ``+`` takes comma-separated items as a list of strings. Every dotted form of
one flag is merged into one object (a nested key into its mapping, a list onto a list, anything
else replaced), and the flag with that object's JSON goes after the other arguments (before a
bare ``--``), so it wins over the same flag given whole, as in vLLM, where argparse keeps the
last. Only the flags of :data:`JSON_FLAGS` are read this way, the JSON-valued ones kvpool takes;
each then gets its usual treatment (a no-op's info line, a refused value's exit 2). Any other
argument, values included (``--served-model-name -my.model``, ``-0.5``), stays as it is: vLLM
would read any ``-x.y`` so.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Sequence
from typing import Any

__all__ = ["JSON_FLAGS", "expand_dotted", "flag_value", "human_int", "human_int_or_auto"]

# the option strings whose dotted forms are read, -> the flag that takes the object
JSON_FLAGS = {
    "--compilation-config": "--compilation-config",
    "-cc": "--compilation-config",
    "-O": "--compilation-config",  # older vLLM's short flag of --compilation-config
    "--kv-events-config": "--kv-events-config",
    "--override-generation-config": "--override-generation-config",
    "--limit-mm-per-prompt": "--limit-mm-per-prompt",
    "--hf-overrides": "--hf-overrides",
    "--kv-transfer-config": "--kv-transfer-config",
    "--speculative-config": "--speculative-config",
    "-sc": "--speculative-config",
    "--default-chat-template-kwargs": "--default-chat-template-kwargs",
    "--mm-processor-kwargs": "--mm-processor-kwargs",
    "--logging-config": "--logging-config",
    "--structured-outputs-config": "--structured-outputs-config",
}
_HUMAN = re.compile(r"(\d+(?:\.\d+)?)([kmgtKMGT])")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def expand_dotted(argv: Sequence[str]) -> list[str]:
    """``argv`` with each dotted form of a JSON_FLAGS flag replaced by one ``--flag JSON`` per
    flag, after the rest (NOTE(dotted)); ValueError names a dotted flag with no value or an
    empty key."""
    out: list[str] = []
    objects: dict[str, dict[str, Any]] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        root, dot, keys = name.partition(".")
        if arg == "--":
            break
        if not dot or root not in JSON_FLAGS:
            out.append(arg)
            i += 1
            continue
        if not eq:
            if i + 1 == len(argv):
                raise ValueError(f"{name}: expected a value")
            value, i = argv[i + 1], i + 1
        i += 1
        path = keys.removesuffix("+").split(".")
        if not all(path):
            raise ValueError(f"{name}: a key is empty")
        item = value.split(",") if keys.endswith("+") else flag_value(value)
        for key in reversed(path):
            item = {key: item}
        _merge(objects.setdefault(JSON_FLAGS[root], {}), item)
    for flag, obj in objects.items():
        out += [flag, json.dumps(obj)]
    return out + list(argv[i:])


def flag_value(text: str) -> Any:
    """A dotted flag's value as vLLM reads it: JSON, else a human-readable integer, else the
    string itself."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    match = _HUMAN.fullmatch(text.strip())
    if match is None:
        return text
    number, suffix = match.groups()
    if suffix in _DECIMAL:
        return int(float(number) * _DECIMAL[suffix])
    return int(number) * _BINARY[suffix] if number.isdigit() else text  # 1.5K: vLLM's string


def _merge(into: dict[str, Any], update: dict[str, Any]) -> None:
    """vLLM's merge of one dotted form into the flag's object."""
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        elif isinstance(value, list) and isinstance(into.get(key), list):
            into[key] += value
        else:
            into[key] = value


def human_int(text: str) -> int:
    """An argparse type: vLLM's human-readable integer (``8192``, ``8k`` 8000, ``8K`` 8192,
    ``25.6k`` 25600), else exit 2 naming the value."""
    value = flag_value(text)
    if isinstance(value, bool) or not isinstance(value, int):
        raise argparse.ArgumentTypeError(f"{text}: want an integer such as 8192, 8k (8000) "
                                         "or 8K (8192)")
    return value


def human_int_or_auto(text: str) -> int | None:
    """``human_int``, or None for vLLM's ``auto`` / ``-1`` (the value derived: the model's)."""
    return None if text.strip().lower() in ("auto", "-1") else human_int(text)
