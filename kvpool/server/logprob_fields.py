"""The logprob fields of a request body -> what the engine computes and what the response shows.

Completions (OpenAI legacy): ``logprobs: k`` (the sampled token's logprob and the k most
likely), ``echo: true`` (the prompt comes back in front of the text; with ``logprobs`` its
tokens carry logprobs too, the first one ``null``). Chat: ``logprobs: true`` and
``top_logprobs: k``. Both: vLLM's ``prompt_logprobs: k`` (a ``prompt_logprobs`` list in the
response; not with ``stream``, as in vLLM). Every k is bounded by ``--max-logprobs`` (vLLM's
flag, default 20): past it, 400 naming the field.

NOTE(raw-logprobs): values are of the raw model distribution (vLLM's default), whatever
temperature, penalties or logit_bias the request samples with: runtime/model/logprobs.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kvpool.errors import RequestError, shown
from kvpool.server.json_body import bool_field, json_int

_bad = RequestError.field  # errors.py: "param: message", with the param named

__all__ = ["DEFAULT_MAX_LOGPROBS", "LOGPROB_FIELDS", "NO_LOGPROBS", "LogprobRequest",
           "parse_logprob_fields"]

DEFAULT_MAX_LOGPROBS = 20  # vLLM's --max-logprobs default (and OpenAI's top_logprobs bound)
# every field parse_logprob_fields reads: a body with none of them asks for NO_LOGPROBS
LOGPROB_FIELDS = frozenset({"logprobs", "top_logprobs", "echo", "prompt_logprobs"})


@dataclass(frozen=True, slots=True)
class LogprobRequest:
    """What one request asked for."""

    logprobs: int | None = None  # top-k per generated token; None = no logprobs at all
    echo: bool = False  # completions: the prompt in front of the text
    prompt_logprobs: int | None = None  # vLLM's field as sent (the response shows the list)

    @property
    def engine_prompt_logprobs(self) -> int | None:
        """What the engine computes for the prompt: echo + logprobs needs it as well."""
        ks = [k for k in (self.prompt_logprobs,
                          self.logprobs if self.echo else None) if k is not None]
        return max(ks) if ks else None


NO_LOGPROBS = LogprobRequest()  # what a body without any LOGPROB_FIELDS asks for


def _count(body: dict[str, Any], name: str, bound: int) -> int | None:
    v = body.get(name)
    if v is None:
        return None
    # NOTE(lax-int), less strings: vLLM's check_logprobs refuses a string for these three
    # before its model reads them (so true is 1 here, "3" a 400)
    v = json_int(v, strings=False)
    if v is None:
        raise _bad(name, f"must be an integer, got {json.dumps(body[name])[:50]}")
    if not 0 <= v <= bound:
        raise _bad(name, f"must be between 0 and {bound} (--max-logprobs), got {shown(v)}")
    return v


def parse_logprob_fields(body: dict[str, Any], *, chat: bool, max_logprobs: int,
                         stream: bool) -> LogprobRequest:
    prompt_k = _count(body, "prompt_logprobs", max_logprobs)
    if prompt_k is not None and stream:
        raise _bad("prompt_logprobs", "is not supported with stream")
    if not chat:
        echo = bool_field(body, "echo", False)  # NOTE(lax-bool): "yes", 1 too
        return LogprobRequest(_count(body, "logprobs", max_logprobs), echo, prompt_k)
    want = bool_field(body, "logprobs", False)
    top = _count(body, "top_logprobs", max_logprobs)
    if top is not None and not want:
        raise _bad("top_logprobs", "requires logprobs to be true")
    return LogprobRequest((top or 0) if want else None, False, prompt_k)
