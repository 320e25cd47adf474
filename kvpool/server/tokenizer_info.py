"""vLLM's ``GET /tokenizer_info``, served with ``--enable-tokenizer-info-endpoint`` only
(without it the path is a 404, as in vLLM): the tokenizer's configuration as its
tokenizer_config.json holds it, for clients that tokenize through the server (lm-eval's
``tokenizer_backend=remote`` reads ``eos_token``, ``bos_token``, ``pad_token`` and
``chat_template``, then counts with POST /tokenize and /detokenize)::

    GET /tokenizer_info -> {<tokenizer_config.json's keys>, tokenizer_class, chat_template?}

``chat_template`` is the template the server renders chat with (``--chat-template``'s, else
the model directory's: chat_template.py); none when it has none. Special tokens are strings
(an ``AddedToken`` object's ``content``), as the loader reads them (NOTE(special-tokens-map)).
The built-in model answers the tokenizer_config.json ``save_tiny_model`` writes, with
``split_special_tokens: true`` (its tokenizer encodes ``</s>`` in text as bytes) and the
built-in template as Jinja (NOTE(builtin-jinja)). The answer is read once, when the app is
built. Like /tokenize, it needs no API key (not under /v1).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aiohttp import web

from kvpool.runtime.engine.config import EngineConfig
from kvpool.runtime.model.loader import special_token_strings
from kvpool.runtime.model.tiny import tiny_tokenizer_config

__all__ = ["TOKENIZER_INFO_PATH", "TokenizerInfoRoute", "tokenizer_info"]

TOKENIZER_INFO_PATH = "/tokenizer_info"
SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token",
                "mask_token")
# what transformers saves of an AddedToken ({"content": ..., "lstrip": ..., "__type": ...})
_ADDED_TOKEN_KEYS = frozenset({"content", "single_word", "lstrip", "rstrip", "normalized",
                               "special", "__type"})
# the class transformers loads a tokenizer.json with when tokenizer_config.json names none
_FAST = "PreTrainedTokenizerFast"


def tokenizer_info(tokenizer_dir: str | Path | None, chat_template: str | None
                   ) -> dict[str, Any]:
    """The answer for a tokenizer directory (None: the built-in model's tokenizer) and the
    template the server renders chat with (None: it has none)."""
    if tokenizer_dir is None:
        info = {**tiny_tokenizer_config(), "split_special_tokens": True}
    else:
        info = _directory_config(Path(tokenizer_dir))
    info.pop("chat_template", None)  # a list of named ones, or one the server does not use
    if chat_template:
        info["chat_template"] = chat_template
    return info


def _directory_config(directory: Path) -> dict[str, Any]:
    """tokenizer_config.json's keys, JSON-plain and with no path of this machine.

    NOTE(no-paths): vLLM answers transformers' ``init_kwargs`` less ``vocab_file`` and
    ``merges_file``; those still hold ``name_or_path`` (the model's directory, for a local
    one), and files saved by older transformers hold ``special_tokens_map_file`` or
    ``tokenizer_file`` as absolute paths of the machine that saved them. Every ``*_file``
    key and ``name_or_path`` are left out, so no path of this server's machine is said."""
    try:
        raw = json.loads((directory / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):  # absent or unreadable: the loader already said so at start
        raw = {}
    raw = raw if isinstance(raw, dict) else {}
    info = {key: _plain(value) for key, value in raw.items()
            if not key.endswith("_file") and key != "name_or_path"}
    info.update(special_token_strings(directory, SPECIAL_KEYS))
    named = raw.get("tokenizer_class")
    info["tokenizer_class"] = named if isinstance(named, str) and named else _FAST
    return info


def _plain(value: Any) -> Any:
    """``value`` with each saved AddedToken as its content (vLLM's serialization)."""
    if isinstance(value, dict):
        if isinstance(value.get("content"), str) and value.keys() <= _ADDED_TOKEN_KEYS:
            return value["content"]
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


class TokenizerInfoRoute:
    """``GET /tokenizer_info``: the answer built once (tokenizer_info)."""

    def __init__(self, info: dict[str, Any]) -> None:
        self.body = json.dumps(info, ensure_ascii=False)

    @classmethod
    def register(cls, app: web.Application, config: EngineConfig, chat_template: Any) -> None:
        """``chat_template``: the request parser's (its ``source``, if it has one)."""
        directory = None if config.model is None else config.tokenizer or config.model
        route = cls(tokenizer_info(directory, getattr(chat_template, "source", None)))
        app.router.add_get(TOKENIZER_INFO_PATH, route.answer)

    async def answer(self, request: web.Request) -> web.Response:
        return web.Response(text=self.body, content_type="application/json")
