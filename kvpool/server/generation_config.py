"""Sampling defaults from a model's ``generation_config.json``, as vLLM applies them.

``--generation-config auto`` (the default, vLLM's): the model directory's file; ``vllm``: none
(OpenAI's defaults: temperature 1, top_p 1, ...); ``DIR``: that directory's file. What a
request sends always wins; a field the request leaves out (or sends as ``null``) takes the
file's value. The fields vLLM reads: ``temperature``, ``top_p``, ``top_k``, ``min_p``,
``repetition_penalty``, and ``max_new_tokens`` (the default ``max_tokens``, still capped by
the room the context leaves). Anything else in the file (``do_sample``, ``eos_token_id``...)
is not a request default.

NOTE(gen-ceiling): as vLLM's ``get_max_tokens`` (its ``override_max_tokens``): a file named by
``--generation-config DIR`` makes ``max_new_tokens`` a ceiling too, so a request's larger
``max_tokens`` is lowered to it (finish_reason ``length``), as the flag's help says: "a
server-wide limit". With ``auto`` the model's own file only sets the default: vLLM stopped
capping an explicit ``max_tokens`` by it (a model's file often carries a small value), and so
does this server (NOTE(clamp), context_budget.py).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from kvpool.errors import ConfigError

__all__ = ["CEILING_KEY", "GENERATION_CONFIG_OFF", "SAMPLING_KEYS",
           "load_generation_defaults"]

log = logging.getLogger("kvpool.server")

GENERATION_CONFIG_OFF = "vllm"  # vLLM's spelling for "ignore the model's file"
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")
_FILE = "generation_config.json"
CEILING_KEY = "max_tokens_ceiling"  # NOTE(gen-ceiling): not a request field, the parser's cap


def load_generation_defaults(setting: str | None, model_dir: str | None) -> dict[str, Any]:
    """Request-field defaults (``max_new_tokens`` as ``max_tokens``, and as CEILING_KEY when
    the file was named: NOTE(gen-ceiling)); ``{}`` when off or when there is no file. A file
    that is not a JSON object is a ConfigError naming the flag."""
    if setting in (None, GENERATION_CONFIG_OFF):
        return {}
    where = model_dir if setting == "auto" else setting
    if where is None:  # the built-in model has no directory
        return {}
    path = Path(where) / _FILE
    if not path.is_file():
        if setting != "auto":
            raise ConfigError(f"--generation-config {setting}: no {_FILE} there (use auto, "
                              f"{GENERATION_CONFIG_OFF}, or a directory holding one)")
        return {}
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--generation-config: {path} is not readable JSON ({exc}); fix it "
                          f"or pass --generation-config {GENERATION_CONFIG_OFF}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"--generation-config: {path} must hold a JSON object")
    out = {k: raw[k] for k in SAMPLING_KEYS if _number(raw.get(k))}
    if isinstance(raw.get("max_new_tokens"), int) and raw["max_new_tokens"] >= 1:
        out["max_tokens"] = raw["max_new_tokens"]
        if setting != "auto":
            out[CEILING_KEY] = raw["max_new_tokens"]
    if out:
        log.info("sampling defaults from %s: %s (--generation-config %s turns them off)",
                 path, out, GENERATION_CONFIG_OFF)
    return out


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
