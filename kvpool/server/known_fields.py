"""Which body fields each endpoint knows, and the two checks on them.

Unknown fields are **rejected** (400, code ``unknown_parameter``, param = the field), as
OpenAI's own API does; known OpenAI features this server does not implement are rejected
(``unsupported_parameter``) when set to anything but their default.
"""

from __future__ import annotations

from typing import Any

from kvpool.errors import RequestError
from kvpool.server.sampling_fields import SAMPLING_FIELDS

__all__ = ["KNOWN_CHAT", "KNOWN_COMPLETION", "KNOWN_DETOKENIZE", "KNOWN_TOKENIZE",
           "UNSUPPORTED_CHAT", "UNSUPPORTED_COMPLETION", "check_known", "check_unsupported"]

# field -> (allowed default values) for OpenAI features this server does not implement
UNSUPPORTED_COMPLETION = {"suffix": ("",)}
UNSUPPORTED_CHAT = {"tools": ([],), "functions": ([],)}
_COMMON = {"model", "n", "seed", "stop", "max_tokens", "temperature", "top_p", "top_k",
           "stream", "stream_options", "user", "cache_salt", "priority", "ignore_eos",
           "stop_token_ids", "logprobs", "prompt_logprobs"} | SAMPLING_FIELDS
KNOWN_COMPLETION = frozenset(_COMMON | {"prompt", "best_of", "echo"}
                             | set(UNSUPPORTED_COMPLETION))
KNOWN_CHAT = frozenset(_COMMON | {"messages", "max_completion_tokens", "tool_choice",
                                  "top_logprobs", "parallel_tool_calls",
                                  "add_generation_prompt", "continue_final_message"}
                       | set(UNSUPPORTED_CHAT))
KNOWN_TOKENIZE = frozenset({"model", "prompt", "messages", "add_special_tokens",
                            "add_generation_prompt", "continue_final_message"})
KNOWN_DETOKENIZE = frozenset({"model", "tokens"})


def _bad(param: str, message: str, code: str) -> RequestError:
    return RequestError(f"{param}: {message}", param=param, code=code)


def check_known(body: dict[str, Any], known: frozenset[str]) -> None:
    unknown = sorted(k for k in body if k not in known)
    if unknown:
        name = unknown[0][:64]
        raise _bad(name, f"unrecognized request argument supplied: {name}",
                   "unknown_parameter")


def check_unsupported(body: dict[str, Any], fields: dict[str, tuple]) -> None:
    for name, defaults in fields.items():
        value = body.get(name)
        if value is not None and value not in defaults:
            raise _bad(name, "is not supported by this server", "unsupported_parameter")
