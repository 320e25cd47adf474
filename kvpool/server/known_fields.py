"""Which body fields each endpoint knows, and the checks on them.

Unknown fields are **ignored** by default, as vLLM does: gateways and clients add their own
(OpenAI's ``metadata``, ``store``, ``service_tier``; SGLang's ``no_stop_trim``), and a 400 for
each one stopped them fronting this server. Each ignored name is logged once (a warning) and
listed in the response's ``X-Kvpool-Ignored-Fields`` header, so a typo such as ``max_token`` is
still visible to whoever looks. ``--reject-unknown-fields`` restores OpenAI's own strictness
(400, code ``unknown_parameter``, param = the field). Known OpenAI features this server does
not implement are rejected (``unsupported_parameter``) when set to anything but their default.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import quote

from kvpool.errors import RequestError
from kvpool.server.sampling_fields import SAMPLING_FIELDS
from kvpool.server.vllm_fields import CHAT_EXTRAS, COMPLETION_EXTRAS

__all__ = ["IGNORED_FIELDS_HEADER", "KNOWN_CHAT", "KNOWN_COMPLETION", "KNOWN_DETOKENIZE",
           "KNOWN_TOKENIZE", "UNSUPPORTED_CHAT", "UNSUPPORTED_COMPLETION", "FieldPolicy",
           "check_unsupported", "ignored_header"]

log = logging.getLogger("kvpool.server")

IGNORED_FIELDS_HEADER = "X-Kvpool-Ignored-Fields"
MAX_LOGGED_NAMES = 1024  # distinct names warned about; a client inventing names grows nothing
MAX_HEADER_NAMES = 32  # names listed in one response header
MAX_NAME_CHARS = 64

# field -> (allowed default values) for OpenAI features this server does not implement
UNSUPPORTED_COMPLETION = {"suffix": ("",)}
UNSUPPORTED_CHAT = {"functions": ([],)}
_COMMON = {"model", "n", "seed", "stop", "max_tokens", "temperature", "top_p", "top_k",
           "stream", "stream_options", "user", "cache_salt", "priority", "ignore_eos",
           "stop_token_ids", "logprobs", "prompt_logprobs"} | SAMPLING_FIELDS
KNOWN_COMPLETION = frozenset(_COMMON | {"prompt", "best_of", "echo"} | COMPLETION_EXTRAS
                             | set(UNSUPPORTED_COMPLETION))
KNOWN_CHAT = frozenset(_COMMON | {"messages", "max_completion_tokens", "tools", "tool_choice",
                                  "top_logprobs", "parallel_tool_calls",
                                  "add_generation_prompt", "continue_final_message"}
                       | CHAT_EXTRAS | set(UNSUPPORTED_CHAT))
KNOWN_TOKENIZE = frozenset({"model", "prompt", "messages", "add_special_tokens",
                            "add_generation_prompt", "continue_final_message",
                            "return_token_strs", "chat_template", "chat_template_kwargs",
                            "truncate_prompt_tokens", "tools"})
KNOWN_DETOKENIZE = frozenset({"model", "tokens"})


def _bad(param: str, message: str, code: str) -> RequestError:
    return RequestError(f"{param}: {message}", param=param, code=code)


class FieldPolicy:
    """Unknown body fields: ignored (logged once per name) or, with ``reject``, a 400."""

    def __init__(self, reject: bool = False) -> None:
        self.reject = reject
        self._warned: set[str] = set()

    def check(self, body: dict[str, Any], known: frozenset[str]) -> tuple[str, ...]:
        """The unknown field names of ``body`` (sorted), or a 400 naming the first."""
        unknown = [k for k in body if k not in known]
        if not unknown:
            return ()
        unknown.sort()
        if self.reject:
            name = unknown[0][:MAX_NAME_CHARS]
            raise _bad(name, f"unrecognized request argument supplied: {name}",
                       "unknown_parameter")
        for name in unknown:
            self._warn_once(name[:MAX_NAME_CHARS])
        return tuple(unknown)

    def _warn_once(self, name: str) -> None:
        if name in self._warned or len(self._warned) > MAX_LOGGED_NAMES:
            return
        self._warned.add(name)
        if len(self._warned) > MAX_LOGGED_NAMES:
            log.warning("more than %d distinct unknown request fields; no more are logged",
                        MAX_LOGGED_NAMES)
            return
        log.warning("ignoring the unknown request field %r (logged once; the response lists "
                    "it in %s; --reject-unknown-fields makes it a 400)", name,
                    IGNORED_FIELDS_HEADER)


def ignored_header(names: tuple[str, ...]) -> dict[str, str]:
    """The response header listing ignored fields (empty when none). Names are
    percent-encoded: a field name may hold any character, a header value may not."""
    if not names:
        return {}
    shown = [quote(n[:MAX_NAME_CHARS], safe="_-.") for n in names[:MAX_HEADER_NAMES]]
    if len(names) > MAX_HEADER_NAMES:
        shown.append(f"...{len(names) - MAX_HEADER_NAMES}-more")
    return {IGNORED_FIELDS_HEADER: ",".join(shown)}


def check_unsupported(body: dict[str, Any], fields: dict[str, tuple]) -> None:
    for name, defaults in fields.items():
        value = body.get(name)
        if value is not None and value not in defaults:
            raise _bad(name, "is not supported by this server", "unsupported_parameter")
