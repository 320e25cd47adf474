"""The logprob fields of a request body -> what the engine computes and what the response shows.

Completions (OpenAI legacy): ``logprobs: k`` (the sampled token's logprob and the k most
likely), ``echo: true`` (the prompt comes back in front of the text; with ``logprobs`` its
tokens carry logprobs too, the first one ``null``). Chat: ``logprobs: true`` and
``top_logprobs: k``. Both: vLLM's ``prompt_logprobs: k`` (a ``prompt_logprobs`` list in the
response; not with ``stream``, as in vLLM, but for 0, which a stream never shows). Every k is
bounded by ``--max-logprobs`` (vLLM's flag, default 20; -1: no cap): past it, 400 naming the
field.

NOTE(whole-vocab): as in vLLM 0.33, each k may be -1, the whole vocabulary (every token's
logprob), which ``--max-logprobs`` must then allow (at least the vocabulary's size; else a 400
naming the field, as vLLM's SamplingParams refuses it). ``--max-logprobs -1`` is vLLM's "no
cap" (ModelConfig.max_logprobs): the bound is then the vocabulary's size, so -1 and every k up
to the vocabulary are taken. Chat's ``top_logprobs`` asks for
``logprobs: true`` only when it asks for something (-1 or above 0: vLLM's rule), so
``top_logprobs: 0`` (or null) without it is taken.

NOTE(chat-echo): vLLM 0.33's chat asks its engine for prompt logprobs whenever ``echo`` is true
and ``prompt_logprobs`` is not given (``top_logprobs`` of them, 0 by default), and its body
shows them as ``prompt_logprobs``: so does kvpool's (not in a stream, which shows none).

vLLM's ``logprob_token_ids`` (at most 128 ids of the vocabulary; with completions'
``logprobs`` set, or chat's ``logprobs`` true): each generated position's ``top_logprobs``
holds the chosen token and then these, each once, instead of the top k (vLLM's order).

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
LOGPROB_FIELDS = frozenset({"logprobs", "top_logprobs", "echo", "prompt_logprobs",
                            "logprob_token_ids"})
# vLLM's bound on logprob_token_ids, as SamplingParams' (kvpool/runtime/model/sampling.py);
# not imported from there: the router and the picker import this module without torch
MAX_LOGPROB_TOKEN_IDS = 128


@dataclass(frozen=True, slots=True)
class LogprobRequest:
    """What one request asked for."""

    logprobs: int | None = None  # top-k per generated token; None = no logprobs at all
    echo: bool = False  # completions: the prompt in front of the text
    prompt_logprobs: int | None = None  # vLLM's field as sent (the response shows the list)
    # vLLM's logprob_token_ids: these tokens' logprobs, after the chosen one's, instead of the
    # top k at each generated position (runtime/model/logprobs.py NOTE(picks))
    token_ids: tuple[int, ...] = ()

    @property
    def engine_prompt_logprobs(self) -> int | None:
        """What the engine computes for the prompt: echo + logprobs needs it as well."""
        ks = [k for k in (self.prompt_logprobs,
                          self.logprobs if self.echo else None) if k is not None]
        return max(ks) if ks else None


NO_LOGPROBS = LogprobRequest()  # what a body without any LOGPROB_FIELDS asks for


def _count(body: dict[str, Any], name: str, bound: int, vocab_size: int) -> int | None:
    v = body.get(name)
    if v is None:
        return None
    # NOTE(lax-int), less strings: vLLM's check_logprobs refuses a string for these three
    # before its model reads them (so true is 1 here, "3" a 400)
    v = json_int(v, strings=False)
    if v is None:
        raise _bad(name, f"must be an integer, got {json.dumps(body[name])[:50]}")
    if v == -1 and vocab_size > bound:  # NOTE(whole-vocab)
        raise _bad(name, f"-1 asks for the whole vocabulary ({vocab_size} tokens), more than "
                   f"--max-logprobs allows ({bound})")
    if v == -1:
        return vocab_size
    if not 0 <= v <= bound:
        raise _bad(name, f"must be between 0 and {bound} (--max-logprobs), or -1 (the whole "
                   f"vocabulary), got {shown(v)}")
    return v


def parse_logprob_fields(body: dict[str, Any], *, chat: bool, max_logprobs: int,
                         stream: bool, vocab_size: int) -> LogprobRequest:
    if max_logprobs == -1:  # NOTE(whole-vocab): no cap, the vocabulary's size
        max_logprobs = vocab_size
    prompt_k = _count(body, "prompt_logprobs", max_logprobs, vocab_size)
    if prompt_k and stream:  # 0 is taken: a stream shows no prompt logprobs (vLLM's rule)
        raise _bad("prompt_logprobs", "is not supported with stream")
    prompt_k = None if stream else prompt_k
    picks = _picks(body, vocab_size)
    if not chat:
        echo = bool_field(body, "echo", False)  # NOTE(lax-bool): "yes", 1 too
        k = _count(body, "logprobs", max_logprobs, vocab_size)
        if picks and k is None:  # vLLM's rules
            raise _bad("logprob_token_ids", "when using logprob_token_ids, logprobs must be set")
        if picks and echo and body.get("max_tokens") == 0:
            raise _bad("logprob_token_ids", "is not supported when echo is true and max_tokens "
                       "is 0: no output tokens are generated")
        return LogprobRequest(k, echo, prompt_k, picks)
    want = bool_field(body, "logprobs", False)
    top = _count(body, "top_logprobs", max_logprobs, vocab_size)
    if top and not want:  # NOTE(whole-vocab): 0 asks for nothing
        raise _bad("top_logprobs", "requires logprobs to be true")
    if picks and not want:
        raise _bad("logprob_token_ids", "when using logprob_token_ids, logprobs must be set "
                   "to true")
    if prompt_k is None and not stream and bool_field(body, "echo", False):  # NOTE(chat-echo)
        prompt_k = top or 0
    return LogprobRequest((top or 0) if want else None, False, prompt_k, picks)


def _picks(body: dict[str, Any], vocab_size: int) -> tuple[int, ...]:
    """vLLM's logprob_token_ids: null or [] is none; else at most MAX_LOGPROB_TOKEN_IDS token
    ids of the vocabulary, each read as pydantic reads an int (NOTE(lax-int))."""
    raw = body.get("logprob_token_ids")
    if raw is None or raw == []:
        return ()
    ids = [json_int(t) for t in raw] if isinstance(raw, list) else None
    if ids is None or None in ids:
        raise _bad("logprob_token_ids", "must be a list of token ids")
    if len(ids) > MAX_LOGPROB_TOKEN_IDS:
        raise _bad("logprob_token_ids", f"{len(ids)} token ids, more than the "
                   f"{MAX_LOGPROB_TOKEN_IDS} allowed")
    outside = [t for t in ids if not 0 <= t < vocab_size]
    if outside:
        raise _bad("logprob_token_ids", f"token id(s) {outside[:8]} are outside the vocabulary "
                   f"[0, {vocab_size})", "invalid_token_id")
    return tuple(ids)
