"""The hostile-input table: malformed or abusive requests and the answer each must get.

Every case is one HTTP request with the status set it must be answered with; 4xx answers must
carry OpenAI's error JSON (``{"error": {"message", "type", "param", "code"}}``). The server must
keep serving afterwards: the harness and the tests send a normal request after each one.

Policy notes (kvpool/server/protocol.py decides, this table checks):

- Unknown fields are ignored (vLLM's default; listed in a response header), prototype-pollution
  style keys included: the request succeeds as if they were absent.
- Issue 12 item 3: prompts that cannot fit ``max_model_len`` (a ~4 MB string, 2M token ids, a
  ~4 MB chat message; each scaled to stay under the body limit) get 400
  ``context_length_exceeded`` before the server tokenizes or walks them.
- Numbers JSON cannot spell (NaN, Infinity) are invalid JSON; ``1e999`` parses as infinity and
  is rejected by the field's range check; a 5000-digit integer trips Python's int-parsing
  limit and is invalid JSON.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["HostileCase", "hostile_cases"]

COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"
JSON_HEADERS = {"Content-Type": "application/json"}
OVERSIZED = 20_000  # bytes of one header value / of the URL: over aiohttp's 8190-byte limits
BAD = frozenset({400})  # most cases' one acceptable answer


@dataclass(frozen=True, slots=True)
class HostileCase:
    name: str
    path: str
    body: Callable[[], bytes]  # built lazily (some are megabytes)
    expect: frozenset[int]  # acceptable statuses
    method: str = "POST"
    headers: dict[str, str] = field(default_factory=lambda: dict(JSON_HEADERS))
    weight: float = 1.0  # relative frequency in the load mix (huge bodies are rarer)

    @property
    def expects_error(self) -> bool:
        return all(s >= 400 for s in self.expect)


def _j(obj: object) -> Callable[[], bytes]:
    return lambda: json.dumps(obj).encode()


def _raw(data: bytes) -> Callable[[], bytes]:
    return lambda: data


def _completion(**extra: object) -> Callable[[], bytes]:
    return _j({"prompt": "hello", "max_tokens": 2, **extra})


# Bytes, token ids and counts no server may accept: encodings, the vocabulary, max_tokens, n.
TOKEN_CASES = (
    HostileCase("non_utf8_bytes", COMPLETIONS, _raw(b'{"prompt": "\xff\xfe\xc3\x28"}'), BAD),
    HostileCase("lone_surrogate", COMPLETIONS, _raw(b'{"prompt": "\\ud800"}'), BAD),
    HostileCase("token_id_out_of_vocab", COMPLETIONS, _completion(prompt=[1, 2, 10**9]),
                BAD),
    HostileCase("token_id_negative", COMPLETIONS, _completion(prompt=[5, -1]), BAD),
    HostileCase("token_id_enormous", COMPLETIONS, _completion(prompt=[10**30]), BAD),
    HostileCase("stop_token_id_out_of_vocab", COMPLETIONS,
                _completion(stop_token_ids=[10**12]), BAD),
    HostileCase("max_tokens_negative", COMPLETIONS, _completion(max_tokens=-1), BAD),
    HostileCase("max_tokens_enormous", COMPLETIONS, _completion(max_tokens=10**30), BAD),
    HostileCase("max_tokens_float", COMPLETIONS, _completion(max_tokens=1e300), BAD),
    HostileCase("max_tokens_5000_digits", COMPLETIONS,
                _raw(b'{"prompt": "hi", "max_tokens": ' + b"9" * 5000 + b"}"), BAD),
    HostileCase("n_enormous", COMPLETIONS, _completion(n=10**9), BAD),
    HostileCase("n_negative", COMPLETIONS, _completion(n=-3), BAD),
    HostileCase("n_with_stream_enormous", COMPLETIONS, _completion(n=10**6, stream=True),
                BAD),
)
# Sampling and output fields out of range or of the wrong type.
SAMPLING_CASES = (
    HostileCase("temperature_nan", COMPLETIONS,
                _raw(b'{"prompt": "hi", "max_tokens": 2, "temperature": NaN}'), BAD),
    HostileCase("temperature_infinity", COMPLETIONS,
                _raw(b'{"prompt": "hi", "max_tokens": 2, "temperature": Infinity}'), BAD),
    HostileCase("temperature_1e999", COMPLETIONS,
                _raw(b'{"prompt": "hi", "max_tokens": 2, "temperature": 1e999}'), BAD),
    HostileCase("temperature_negative", COMPLETIONS, _completion(temperature=-0.5), BAD),
    HostileCase("temperature_string_nan", COMPLETIONS, _completion(temperature="NaN"), BAD),
    HostileCase("temperature_1e300", COMPLETIONS, _completion(temperature=1e300), BAD),
    HostileCase("repetition_penalty_1e300", COMPLETIONS,
                _completion(repetition_penalty=1e300), BAD),
    HostileCase("repetition_penalty_1e-300", COMPLETIONS,
                _completion(repetition_penalty=1e-300), BAD),
    HostileCase("grammar_huge_repeat", COMPLETIONS, _completion(response_format={
        "type": "json_schema", "json_schema": {"name": "r", "schema": {
            "type": "string", "pattern": "^(abc){1000000000}$"}}}), BAD, weight=0.3),
    HostileCase("grammar_ref_loop", COMPLETIONS, _completion(response_format={
        "type": "json_schema", "json_schema": {"name": "r", "schema": {
            "$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}}}}), BAD),
    HostileCase("top_p_out_of_range", COMPLETIONS, _completion(top_p=7.5), BAD),
    HostileCase("top_k_enormous", COMPLETIONS,
                _completion(top_k=10**40, top_p=0.5, temperature=1.0), BAD),
    HostileCase("seed_enormous", COMPLETIONS, _completion(seed=2**80), BAD),
    HostileCase("priority_enormous", COMPLETIONS, _completion(priority=2**63), BAD),
    HostileCase("thousands_of_stop_strings", COMPLETIONS,
                _completion(stop=[f"s{i}" for i in range(5000)]), BAD),
    HostileCase("empty_stop_string", COMPLETIONS, _completion(stop=[""]), BAD),
    HostileCase("cache_salt_too_long", COMPLETIONS, _completion(cache_salt="s" * 5000), BAD),
    HostileCase("cache_salt_not_a_string", COMPLETIONS, _completion(cache_salt=["a"]), BAD),
    HostileCase("logprobs_enormous", COMPLETIONS, _completion(logprobs=10**9), BAD),
)
# Bodies of the wrong shape, wrong methods and routes, and what the transport must refuse.
REQUEST_CASES = (
    HostileCase("prompt_batch_mixed", COMPLETIONS, _completion(prompt=["a", [1]]), BAD),
    HostileCase("prompt_object", COMPLETIONS, _completion(prompt={"$ne": 1}), BAD),
    HostileCase("unknown_model", COMPLETIONS, _completion(model="../../etc/passwd"),
                frozenset({400, 404})),
    HostileCase("body_is_array", COMPLETIONS, _j([{"prompt": "hi"}]), BAD),
    HostileCase("body_is_null", COMPLETIONS, _raw(b"null"), BAD),
    HostileCase("body_empty", COMPLETIONS, _raw(b""), BAD),
    HostileCase("truncated_json", COMPLETIONS, _raw(b'{"prompt": "hi", "max_tok'), BAD),
    HostileCase("messages_not_a_list", CHAT, _j({"messages": "hi"}), BAD),
    # any role string is taken, as vLLM takes it (the template decides); a role that is
    # no string is not
    HostileCase("message_bad_role", CHAT,
                _j({"messages": [{"role": {"$ne": "user"}, "content": "x"}]}), BAD),
    HostileCase("wrong_method", COMPLETIONS, _raw(b""), frozenset({405}), method="GET"),
    HostileCase("unknown_route", "/v1/../../admin", _raw(b"{}"), frozenset({404})),
    # issue 12 item 8: a body that claims gzip but is not: 400, never 500 + a traceback
    HostileCase("corrupt_gzip_body", COMPLETIONS,
                _raw(b"\x1f\x8b\x08\x00" + b"not really gzip" * 8), BAD,
                headers={**JSON_HEADERS, "Content-Encoding": "gzip"}),
    # issue 12 item 9: aiohttp's own parser errors are OpenAI error JSON too (answered by
    # the guarded listener, kvpool/server/connections.py), never plain text + a traceback
    HostileCase("header_oversized", COMPLETIONS, _completion(), frozenset({400, 431}),
                headers={**JSON_HEADERS, "X-Oversized": "a" * OVERSIZED}, weight=0.2),
    HostileCase("url_oversized", COMPLETIONS + "?q=" + "u" * OVERSIZED, _completion(),
                frozenset({400, 414}), weight=0.2),
    HostileCase("unknown_fields", COMPLETIONS,
                _completion(zz_unknown={"a": [1, 2, 3]}, __proto__={"admin": True},
                            constructor=1), frozenset({200})),
)


def hostile_cases(max_body_bytes: int = 4 * 1024 * 1024) -> list[HostileCase]:
    """The table. ``max_body_bytes``: the server's body limit (the 413 case exceeds it; the
    other large cases stay below it, so they reach the parser)."""
    return [*_sized_cases(max_body_bytes), *TOKEN_CASES, *SAMPLING_CASES, *REQUEST_CASES]


def _sized_cases(max_body_bytes: int) -> list[HostileCase]:
    """Deep nesting and large prompts, sized against the server's body limit."""
    room = int(max_body_bytes * 0.8)
    deep = min(100_000, room // 2)
    chars = min(100_000, room)
    ids = min(20_000, room // 3)
    msgs = min(5000, room // 40)
    big_chars = min(4 * 1024 * 1024, room)
    big_ids = min(2_000_000, room // 2)  # "0," per id
    return [
        HostileCase("nested_json_deep", COMPLETIONS,
                    _raw(b'{"prompt": ' + b"[" * deep + b"]" * deep + b"}"), BAD),
        HostileCase("nested_object_64", COMPLETIONS,
                    _raw(b'{"x":' * 64 + b"1" + b"}" * 64), BAD),
        HostileCase("nested_in_messages", CHAT,
                    _j({"messages": [{"role": "user", "content": [[[[[[[[[["x"]]]]]]]]]]}]}),
                    BAD),
        HostileCase("body_over_limit", COMPLETIONS,
                    lambda: b'{"prompt": "' + b"a" * (max_body_bytes + 4096) + b'"}',
                    frozenset({413}), weight=0.1),
        HostileCase("prompt_many_token_ids", COMPLETIONS,
                    _j({"prompt": [7] * ids, "max_tokens": 1}), BAD, weight=0.5),
        HostileCase("prompt_many_chars", COMPLETIONS,
                    _j({"prompt": "x" * chars, "max_tokens": 1}), BAD, weight=0.5),
        HostileCase("prompt_4mb_string", COMPLETIONS,
                    _j({"prompt": "hello world, " * (big_chars // 13), "max_tokens": 1}), BAD,
                    weight=0.1),
        HostileCase("prompt_2m_token_ids", COMPLETIONS,
                    lambda: b'{"max_tokens": 1, "prompt": [' + b"0," * (big_ids - 1) + b"0]}",
                    BAD, weight=0.1),
        HostileCase("chat_4mb_message", CHAT,
                    _j({"messages": [{"role": "user", "content": "hi " * (big_chars // 3)}]}),
                    BAD, weight=0.1),
        HostileCase("chat_many_messages", CHAT,
                    _j({"messages": [{"role": "user", "content": "hi"}] * msgs}), BAD,
                    weight=0.5),
    ]
