"""Sampling defaults from a model's ``generation_config.json``, as vLLM applies them.

``--generation-config auto`` (the default, vLLM's): the model directory's file; ``vllm``: none
(OpenAI's defaults: temperature 1, top_p 1, ...); ``DIR``: that directory's file (a
directory without one gives no defaults, as vLLM's, with one WARNING line). What a
request sends always wins; a field the request leaves out (or sends as ``null``) takes the
file's value. The fields vLLM reads (ModelConfig.get_diff_sampling_param): ``temperature``,
``top_p``, ``top_k``, ``min_p``, ``repetition_penalty``, ``presence_penalty``,
``frequency_penalty``, ``skip_special_tokens``, and ``max_new_tokens`` (the default
``max_tokens``, still capped by the room the context leaves). Anything else in the file
(``do_sample``, ``eos_token_id``...) is not a request default. ``skip_special_tokens: false``
is a default; ``true`` is every request's default already, and left out so a tool parser whose
markers are special tokens still gets them (vLLM's parsers set the request's field, which
beats any default).

NOTE(gen-ceiling): as vLLM's ``get_max_tokens`` (its ``override_max_tokens``): a file named by
``--generation-config DIR`` makes ``max_new_tokens`` a ceiling too, so a request's larger
``max_tokens`` is lowered to it (finish_reason ``length``), as the flag's help says: "a
server-wide limit". With ``auto`` the model's own file only sets the default: vLLM stopped
capping an explicit ``max_tokens`` by it (a model's file often carries a small value), and so
does this server (NOTE(clamp), context_budget.py).

vLLM's ``--override-generation-config JSON`` (vllm_flags.py): its keys win over the file's
(with ``vllm``: they are the only defaults), and its ``max_new_tokens`` is a ceiling too,
whatever ``--generation-config`` says (vLLM's ``override_max_tokens``). A key vLLM reads
holding the wrong type (a number's, skip_special_tokens' bool) is refused at startup.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kvpool.errors import ConfigError

__all__ = ["CEILING_KEY", "GENERATION_CONFIG_OFF", "OVERRIDE_FLAG", "SAMPLING_KEYS", "SKIP_KEY",
           "check_override", "load_generation_defaults"]

log = logging.getLogger("kvpool.server")

GENERATION_CONFIG_OFF = "vllm"  # vLLM's spelling for "ignore the model's file"
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty",
                 "presence_penalty", "frequency_penalty")
SKIP_KEY = "skip_special_tokens"
_FILE = "generation_config.json"
CEILING_KEY = "max_tokens_ceiling"  # NOTE(gen-ceiling): not a request field, the parser's cap
OVERRIDE_FLAG = "--override-generation-config"


def load_generation_defaults(setting: str | None, model_dir: str | None,
                             override: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Request-field defaults: the file's, ``override``'s on top (``max_new_tokens`` as
    ``max_tokens``, and as CEILING_KEY when the file was named or the override sets it:
    NOTE(gen-ceiling)); ``{}`` when there is neither. A file that is not a JSON object, or an
    override :func:`check_override` refuses, is a ConfigError naming the flag."""
    override = dict(override or {})
    check_override(override)
    path, raw = _read_file(setting, model_dir)
    merged = {**raw, **override}
    out = {k: merged[k] for k in SAMPLING_KEYS if _number(merged.get(k))}
    if merged.get(SKIP_KEY) is False:  # true: every request's default already
        out[SKIP_KEY] = False
    if _count(merged.get("max_new_tokens")):
        out["max_tokens"] = merged["max_new_tokens"]
        if setting not in (None, "auto", GENERATION_CONFIG_OFF) or "max_new_tokens" in override:
            out[CEILING_KEY] = merged["max_new_tokens"]
    if out:
        sources = [str(path)] * bool(raw) + [OVERRIDE_FLAG] * bool(override)
        log.info("sampling defaults from %s: %s (--generation-config %s turns the file's off)",
                 " and ".join(sources), out, GENERATION_CONFIG_OFF)
    return out


def check_override(override: Mapping[str, Any]) -> None:
    """vLLM's keys, each a number (``max_new_tokens`` a count >= 1, skip_special_tokens a
    bool) or null; other keys are ignored, as vLLM ignores them. ConfigError names the flag
    and the key."""
    for key, value in override.items():
        if value is None:
            continue
        if key == SKIP_KEY and not isinstance(value, bool):
            raise ConfigError(f"{OVERRIDE_FLAG}: {key}: use true or false, got {value!r}")
        if key in SAMPLING_KEYS and not _number(value):
            raise ConfigError(f"{OVERRIDE_FLAG}: {key}: use a number, got {value!r}")
        if key == "max_new_tokens" and not _count(value):
            raise ConfigError(f"{OVERRIDE_FLAG}: max_new_tokens: use an integer >= 1, got "
                              f"{value!r}")


def _read_file(setting: str | None, model_dir: str | None) -> tuple[Path | None, dict]:
    """(the file, its JSON object); (None, {}) when off or when ``auto`` finds no file."""
    if setting in (None, GENERATION_CONFIG_OFF):
        return None, {}
    where = model_dir if setting == "auto" else setting
    if where is None:  # the built-in model has no directory
        return None, {}
    path = Path(where) / _FILE
    if not path.is_file():
        if setting != "auto" and not Path(where).is_dir():
            raise ConfigError(f"--generation-config {setting}: no such directory (use auto, "
                              f"{GENERATION_CONFIG_OFF}, or a directory holding {_FILE})")
        if setting != "auto":  # vLLM starts with no defaults from it too
            log.warning("--generation-config %s: no %s there, so no sampling defaults come "
                        "from it; pass --generation-config %s to say so", setting, _FILE,
                        GENERATION_CONFIG_OFF)
        return None, {}
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--generation-config: {path} is not readable JSON ({exc}); fix it "
                          f"or pass --generation-config {GENERATION_CONFIG_OFF}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"--generation-config: {path} must hold a JSON object")
    return path, raw


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
