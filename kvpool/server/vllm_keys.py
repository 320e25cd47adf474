"""Which keys a completions / chat answer carries: those vLLM 0.33's server writes
(docs/architecture.md "Bool fields and vLLM's null keys"). responses.py builds the values.

NOTE(vllm-nulls): a body not streamed is vLLM's response model dumped whole (model_dump:
CompletionResponse / ChatCompletionResponse, their choices and chat's ChatMessage), so the keys
it has no value for are there, null; a body here carries them too.

NOTE(vllm-chunk-keys): a stream chunk is vLLM's stream model dumped with ``exclude_unset``, so
each kind of chunk holds the keys its code sets, null or not:

=================  ========================================================================
chunk              keys beside id, object, created, model, choices
=================  ========================================================================
completions text   ``kv_transfer_params``; its choice: index, text, logprobs, finish_reason,
and final          stop_reason, prompt_token_ids, token_ids, weight_versions (an ``echo``
                   rides in each choice's first one: NOTE(echo-chunk) in responses.py)
chat role          ``prompt_token_ids``, ``prompt_text``; its choice: index, delta (role,
                   content), logprobs, finish_reason
chat echo          none; its choice: index, delta (content: the echo), logprobs, finish_reason
chat content       ``kv_transfer_params``; its choice: index, delta, logprobs, finish_reason,
                   token_ids; the choice's final chunk adds stop_reason and weight_versions
usage (last)       ``usage`` only (dumped without nulls); choices ``[]``
=================  ========================================================================

Every update that brings a choice tokens gets its chunk, text or not (a stop string held back,
a stop token's): a chat delta is then ``{"content": ""}``; ``{}`` only where no token came yet
(a choice that finished without any), and on an update read for tool calls that holds its
text back (vLLM's parser's ``DeltaMessage()``).

``usage`` is on a choice chunk only with ``continuous_usage_stats``: prompt_tokens,
completion_tokens, total_tokens, and on chat ``completion_tokens_details`` (null without
``--reasoning-parser``; with it the choice's ``reasoning_tokens`` so far). Without it no chunk
but the last has the key. Its counts are the choice's own, as
vLLM's generators keep them: its prompt's tokens, and the tokens that choice generated so far
(0 on chat's role chunk), not the request's totals (those are the last chunk's).
"""

from __future__ import annotations

from typing import Any

__all__ = ["BODY_NULLS", "CHOICE_NULLS", "choice_chunk", "chunk_choice", "echo_choice",
           "usage_so_far", "with_nulls"]

_NULLS = dict.fromkeys(("service_tier", "system_fingerprint", "kv_transfer_params",
                        "ec_transfer_params", "metrics"))
BODY_NULLS = {False: _NULLS, True: {**_NULLS, "prompt_text": None}}
_CHOICE = dict.fromkeys(("routed_experts", "weight_versions"))
CHOICE_NULLS = {False: {**_CHOICE, "prompt_logprobs": None}, True: _CHOICE}
MESSAGE_NULLS = dict.fromkeys(("refusal", "annotations", "audio", "function_call", "reasoning"))


def with_nulls(obj: dict[str, Any], nulls: dict[str, None]) -> dict[str, Any]:
    """``obj`` with each of vLLM's keys it lacks, null (NOTE(vllm-nulls)); chat's message too."""
    for key in nulls:
        obj.setdefault(key, None)
    if "message" in obj:
        with_nulls(obj["message"], MESSAGE_NULLS)
    return obj


def chunk_choice(choice: dict[str, Any], stop_reason: Any, *, chat: bool,
                 final: bool) -> dict[str, Any]:
    """A stream choice's finish keys (NOTE(vllm-chunk-keys)): every completions choice has
    them, a chat choice on its final chunk only."""
    if final or not chat:
        choice["stop_reason"] = stop_reason
        choice["weight_versions"] = None
    return choice


def echo_choice(index: int, delta: dict[str, Any]) -> dict[str, Any]:
    """The choice of chat's role chunk and of its echo chunk (NOTE(vllm-chunk-keys))."""
    return {"index": index, "delta": delta, "logprobs": None, "finish_reason": None}


def choice_chunk(chunk: dict[str, Any], choice: dict[str, Any], usage: dict[str, Any] | None,
                 *, chat: bool) -> dict[str, Any]:
    """A text / content chunk (NOTE(vllm-chunk-keys)): ``usage`` the usage so far when
    continuous_usage_stats asked for it, else None (no key)."""
    chunk["choices"] = [choice]
    chunk["kv_transfer_params"] = None
    if usage is not None:
        chunk["usage"] = usage_so_far(usage, chat=chat)
    return chunk


def usage_so_far(usage: dict[str, Any], *, chat: bool) -> dict[str, Any]:
    """A choice chunk's usage with continuous_usage_stats (NOTE(vllm-chunk-keys)): ``usage``,
    the three counts, and on chat ``completion_tokens_details`` (null without a reasoning
    parser)."""
    return {**usage, "completion_tokens_details": usage.get("completion_tokens_details")} \
        if chat else usage
