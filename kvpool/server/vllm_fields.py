"""vLLM's extra request fields that change how a prompt is built or a response is shaped.

- ``add_special_tokens`` (completions, chat, /tokenize): whether the tokenizer adds its BOS.
  Completions default to true; chat defaults to the template's own rule (a model's template
  carries its BOS, so false; the built-in one is plain text, so true). lm-eval's string mode
  sends ``false`` and scores one BOS token off without it.
- ``truncate_prompt_tokens``: keep only k prompt tokens (1 <= k <= max_model_len); -1 is
  vLLM's "the model's context" less the one position it holds back to generate (k =
  max_model_len - 1, NOTE(clamp) in context_budget.py; k = max_model_len leaves no room and is
  the context-length 400, as in vLLM). ``truncation_side`` picks which: "left"
  (vLLM's default, its tokenizers' side) drops the start and keeps the last k, "right" keeps
  the first k. As in vLLM, null is the default, any other value is a 400, and the side is
  accepted without ``truncate_prompt_tokens`` (nothing is cut then).
- ``chat_template`` (a Jinja source for this request) and ``chat_template_kwargs`` (extra
  variables the template sees; ``messages`` and the other names the server sets are refused).
  ``reasoning_effort`` (none, minimal, low, medium, high, xhigh, max) is the template's
  ``reasoning_effort``, and ``enable_thinking`` (false for "none") unless the kwargs set it.
- chat ``echo``: when the last message is the assistant's, its content comes back in front of
  the generated content (vLLM's rule).
- ``return_tokens_as_token_ids``: logprob tokens spelled ``token_id:<id>``, so clients that
  cannot map a lone byte back to a token still can.
- ``return_token_ids`` (docs/architecture.md "Token ids in the answer"): the prompt's and
  each choice's token ids beside the text (returned_ids.py). Read as vLLM's pydantic model
  reads a bool (json_body.json_bool: ``"yes"`` and ``1`` are true, ``5`` or ``[]`` a 400).
- ``stream_options.continuous_usage_stats`` (with ``include_usage``): every chunk carries the
  usage so far (protocol.py reads it beside ``include_usage``).
- ``request_id``: the answer's ``id`` when no ``X-Request-Id`` header was sent (request_ids.py,
  which reads it; never the engine's id: NOTE(own-engine-id)).
- chat ``return_prompt_text``: the prompt as the chat template rendered it, in the body's and
  each role chunk's ``prompt_text`` (null unless asked, as vLLM writes it).
- chat ``documents`` (vLLM's RAG variable, which Command-R's and Granite's templates read): a
  list of objects of string values, handed to the template as ``documents`` (over a
  ``chat_template_kwargs`` entry of that name, as vLLM merges them); another shape is a 400.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kvpool.errors import RequestError
from kvpool.server.context_budget import truncate_to
from kvpool.server.json_body import bool_field, json_int

_bad = RequestError.field  # errors.py: "param: message", with the param named

__all__ = ["CHAT_EXTRAS", "COMPLETION_EXTRAS", "MAX_TEMPLATE_CHARS", "RESERVED_TEMPLATE_VARS",
           "TRUNCATION_SIDES", "VllmExtras", "parse_vllm_extras", "truncation_side"]

MAX_TEMPLATE_CHARS = 64 * 1024  # one request's chat_template source, at most
MAX_TEMPLATE_KWARGS = 64
RESERVED_TEMPLATE_VARS = frozenset({"messages", "add_generation_prompt", "tools", "bos_token",
                                    "eos_token", "pad_token", "unk_token"})
COMPLETION_EXTRAS = frozenset({"add_special_tokens", "truncate_prompt_tokens",
                               "truncation_side", "return_tokens_as_token_ids",
                               "return_token_ids", "request_id"})
TRUNCATION_SIDES = ("left", "right")
CHAT_EXTRAS = COMPLETION_EXTRAS | {"chat_template", "chat_template_kwargs", "echo",
                                   "reasoning_effort", "documents", "return_prompt_text"}
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")  # vLLM's


@dataclass(frozen=True, slots=True)
class VllmExtras:
    """The vLLM extras of one request (``None``: not given)."""

    add_special_tokens: bool | None = None
    truncate_prompt_tokens: int | None = None
    truncation_side: str = "left"  # which end truncate_prompt_tokens cuts: "left" keeps the last
    chat_template: str | None = None
    chat_template_kwargs: tuple[tuple[str, Any], ...] = ()
    echo: bool = False  # chat: the final assistant message in front of the content
    tokens_as_ids: bool = False  # return_tokens_as_token_ids
    token_ids: bool = False  # return_token_ids: token ids beside the text (returned_ids.py)
    prompt_text: bool = False  # chat return_prompt_text: the rendered prompt in the answer


def parse_vllm_extras(body: dict[str, Any], *, chat: bool, max_model_len: int) -> VllmExtras:
    truncate = body.get("truncate_prompt_tokens")
    if json_int(truncate) == -1:  # NOTE(clamp): one position held back to generate
        truncate = truncate_to(-1, max_model_len)
    if truncate is not None:
        if json_int(truncate) is None or not 1 <= json_int(truncate) <= max_model_len:
            raise _bad("truncate_prompt_tokens", f"must be an integer in [1, {max_model_len}] "
                       f"(the model's context) or -1 (all of it), got "
                       f"{json.dumps(truncate)[:50]}")
        truncate = json_int(truncate)
    side = truncation_side(body)
    # every bool read as vLLM's models read one (NOTE(lax-bool) in json_body.py)
    as_ids = bool_field(body, "return_tokens_as_token_ids", False)
    ids = bool_field(body, "return_token_ids", False)
    if not chat:
        return VllmExtras(bool_field(body, "add_special_tokens"), truncate, side,
                          tokens_as_ids=as_ids, token_ids=ids)
    return VllmExtras(bool_field(body, "add_special_tokens"), truncate, side,
                      template_source(body), template_kwargs(body),
                      bool_field(body, "echo", False), as_ids, ids,
                      bool_field(body, "return_prompt_text", False))


def truncation_side(body: dict[str, Any]) -> str:
    """vLLM's ``truncation_side``: "left" (also for null / absent) or "right"."""
    side = body.get("truncation_side")
    if side is None:
        return "left"
    if not isinstance(side, str) or side not in TRUNCATION_SIDES:
        raise _bad("truncation_side", f'must be "left" or "right", got '
                   f"{json.dumps(side)[:50]}")
    return side


def template_source(body: dict[str, Any]) -> str | None:
    source = body.get("chat_template")
    if source is None:
        return None
    if not isinstance(source, str) or not source:
        raise _bad("chat_template", "must be a non-empty string (a Jinja template)")
    if len(source) > MAX_TEMPLATE_CHARS:
        raise _bad("chat_template", f"at most {MAX_TEMPLATE_CHARS} characters, got "
                   f"{len(source)}")
    return source


def template_kwargs(body: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    kw = body.get("chat_template_kwargs")
    if kw is None:
        return tuple(reasoning_variables(body, with_documents(body, {})).items())
    if not isinstance(kw, dict) or len(kw) > MAX_TEMPLATE_KWARGS:
        raise _bad("chat_template_kwargs", f"must be an object of at most "
                   f"{MAX_TEMPLATE_KWARGS} variables")
    reserved = sorted(set(kw) & RESERVED_TEMPLATE_VARS)
    if reserved:
        raise _bad("chat_template_kwargs", f"{reserved[0]!r} is set by the server and cannot "
                   "be overridden")
    return tuple(reasoning_variables(body, with_documents(body, kw)).items())


def reasoning_variables(body: dict[str, Any], kw: dict[str, Any]) -> dict[str, Any]:
    """vLLM's ``reasoning_effort``: the template sees it (over a ``chat_template_kwargs`` of
    that name) and ``enable_thinking`` (effort not "none") unless the kwargs set that."""
    effort = body.get("reasoning_effort")
    if effort is None:
        return kw
    if effort not in REASONING_EFFORTS:
        raise _bad("reasoning_effort", f"must be one of {', '.join(REASONING_EFFORTS)}, got "
                   f"{json.dumps(effort)[:40]}")
    return {"enable_thinking": effort != "none", **kw, "reasoning_effort": effort}


def with_documents(body: dict[str, Any], kw: dict[str, Any]) -> dict[str, Any]:
    """vLLM's merge: a ``documents`` field (when not null) over a kwargs entry of that name."""
    docs = documents(body)
    return kw if docs is None else {**kw, "documents": docs}


def documents(body: dict[str, Any]) -> list[dict[str, str]] | None:
    """vLLM's chat ``documents``: null, or a list of objects whose values are strings."""
    docs = body.get("documents")
    if docs is None:
        return None
    if not isinstance(docs, list):
        raise _bad("documents", f"must be a list of objects, got {json.dumps(docs)[:50]}")
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict):
            raise _bad("documents", f"documents[{i}] must be an object of strings, got "
                       f"{json.dumps(doc)[:50]}")
        bad = next((k for k, v in doc.items() if not isinstance(v, str)), None)
        if bad is not None:
            raise _bad("documents", f"documents[{i}].{bad[:40]} must be a string, got "
                       f"{json.dumps(doc[bad])[:50]}")
    return docs
