"""RequestParser against the real built-in tokenizer: every rejection is a RequestError naming
the field (the error middleware turns it into a 400), and no body makes it raise anything else."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvpool.errors import RequestError
from kvpool.server.protocol import ChatTemplate
from tests.server.parsers import MODEL, P, TOK, parser


def rejects(fn, body, param, code=None):
    with pytest.raises(RequestError) as info:
        fn(body)
    assert info.value.param == param, (body, str(info.value))
    if code is not None:
        assert info.value.code == code
    return info.value


@pytest.mark.parametrize("raw, code", [
    (b"\xff\xfe{}", "invalid_encoding"),
    (b'{"prompt": "a"', "invalid_json"),
    (b'{"temperature": NaN}', "invalid_json"),
    (b'{"temperature": Infinity}', "invalid_json"),
    (b"[1, 2]", "invalid_json"),
    (b'"just a string"', "invalid_json"),
    (b"", "invalid_json"),
    (b"[" * 10_000 + b"]" * 10_000, "invalid_json"),  # deeper than the C parser allows
    (b'{"a":' * 129 + b"1" + b"}" * 129, "invalid_json"),  # deeper than max_json_depth
    (b'{"prompt": "a\\ud800b"}', "invalid_encoding"),  # a lone surrogate: not encodable
    (b'{"messages": [{"role": "user", "content": "\\uDFFF"}]}', "invalid_encoding"),
])
def test_body_decoding_rejects(raw, code):
    rejects(P.decode_body, raw, None, code)


def test_body_decoding_accepts_utf8_and_moderate_nesting():
    body = P.decode_body('{"prompt": "héllo ✓", "x": [[[{"y": [1]}]]]}'.encode())
    assert body["prompt"] == "héllo ✓"
    assert P.decode_body(b'{"prompt": "\\ud83d\\ude00"}')["prompt"] == "\U0001F600"  # a pair


@pytest.mark.parametrize("prompt", ["hello world", [0, 72, 101], ["hello world"], [[0, 72, 101]]])
def test_prompt_forms(prompt):
    req = P.parse_completion({"model": MODEL, "prompt": prompt})
    expect = TOK.encode("hello world") if "hello world" in json.dumps(prompt) else [0, 72, 101]
    assert req.prompt_ids == expect
    assert req.params.max_tokens == 16 and req.kind == "completion" and not req.stream


@pytest.mark.parametrize("prompt, code", [
    (["a", [1]], None), (["a", ""], None), ([[1], []], None), ("", None), ([], None),
    (None, None), (5, None), ({"text": "a"}, None), ([1, True], None), ([1, "a"], None),
    ([1, 512], "invalid_token_id"), ([-1], "invalid_token_id"),
])
def test_bad_prompts(prompt, code):
    rejects(P.parse_completion, {"prompt": prompt}, "prompt", code)


@pytest.mark.parametrize("field, value", [
    ("max_tokens", "1e1"), ("max_tokens", 1.5), ("max_tokens", [1]), ("temperature", "hot"),
    ("top_p", "x"), ("top_k", 1.5), ("n", 1.5), ("n", "2.5"), ("seed", 1.5), ("stream", "maybe"),
    ("stop", 5), ("stop", [1]), ("stop", [""]), ("user", 5), ("cache_salt", 5),
    ("cache_salt", ""), ("cache_salt", "a/b"), ("cache_salt", "x" * 129),
    ("priority", "high"), ("priority", 2**63), ("seed", 2**63), ("model", 5),
    ("stream_options", [1]), ("stop_token_ids", "1"), ("stop_token_ids", [600]),
    ("ignore_eos", 2), ("temperature", -1), ("top_p", 2),
])
def test_wrong_types_name_the_field(field, value):
    rejects(P.parse_completion, {"prompt": "hi", field: value}, field)


@pytest.mark.parametrize("field, value", [
    ("n", 0), ("n", 5), ("max_tokens", 0), ("max_tokens", -3), ("max_tokens", 101),
    ("stop", ["a", "b", "c", "d"]),
])
def test_engine_config_bounds(field, value):
    rejects(P.parse_completion, {"prompt": "hi", field: value}, field)


def test_null_means_default():
    req = P.parse_completion({"prompt": "hi", "model": None, "n": None, "temperature": None,
                              "stop": None, "echo": False,
                              "logprobs": None, "best_of": 1, "presence_penalty": 0})
    assert req.model == MODEL and req.params.n == 1 and req.params.temperature == 1.0


def test_unknown_fields_are_ignored_or_rejected_by_name():
    req = P.parse_completion({"prompt": "hi", "max_token": 5, "metadata": {}})
    assert req.ignored == ("max_token", "metadata") and req.params.max_tokens == 16
    strict = parser(reject_unknown_fields=True)
    rejects(strict.parse_completion, {"prompt": "hi", "max_token": 5}, "max_token",
            "unknown_parameter")
    rejects(strict.parse_chat, {"messages": [{"role": "user", "content": "x"}],
                                "frobnicate": {"deep": [1, 2]}}, "frobnicate",
            "unknown_parameter")


def test_all_supported_fields_reach_the_request():
    req = P.parse_completion({
        "model": "alias", "prompt": "hi", "n": 2, "max_tokens": 5, "temperature": 0.5,
        "top_p": 0.9, "top_k": 7, "seed": 3, "stop": "x", "stream": True,
        "stream_options": {"include_usage": True}, "user": "u1", "cache_salt": "tenant-a",
        "priority": -2, "ignore_eos": True, "stop_token_ids": [1]})
    p = req.params
    assert (p.n, p.max_tokens, p.temperature, p.top_p, p.top_k, p.seed, p.stop) == (
        2, 5, 0.5, 0.9, 7, 3, ("x",))
    assert p.ignore_eos and p.stop_token_ids == (1,)
    assert req.model == MODEL and req.stream and req.include_usage  # NOTE(first-name)
    assert (req.user, req.cache_salt, req.priority) == ("u1", "tenant-a", -2)


@pytest.mark.parametrize("field, value", [
    ("suffix", "x"),
])
def test_unimplemented_openai_features_are_rejected(field, value):
    rejects(P.parse_completion, {"prompt": "hi", field: value}, field, "unsupported_parameter")


def test_best_of_runs_more_and_returns_n():
    req = P.parse_completion({"prompt": "hi", "n": 2, "best_of": 3})
    assert req.params.n == 3 and req.return_n == 2 and req.params.logprobs == 0
    # NOTE(best-of): what kvpool cannot act on runs n, listed as ignored (vLLM 0.33 has no
    # such field), never a 400
    for body in ({"n": 2, "best_of": 1}, {"best_of": 99}, {"best_of": 3, "stream": True}):
        req = P.parse_completion({"prompt": "hi", **body})
        assert req.params.n == body.get("n", 1) and req.return_n is None
        assert req.ignored == ("best_of",)


def test_unknown_model():
    e = rejects(P.parse_completion, {"prompt": "hi", "model": "gpt-4"}, "model",
                "model_not_found")
    assert e.http_status == 404


def test_context_length():
    # 64-token context: a 70-token prompt cannot fit, nor a 64-token one (no room for one
    # token); 40 + 30 is served with max_tokens lowered to the 24 left (NOTE(clamp), vLLM's)
    rejects(P.parse_completion, {"prompt": [5] * 70}, "prompt", "context_length_exceeded")
    rejects(P.parse_completion, {"prompt": [5] * 64, "max_tokens": 1}, "prompt",
            "context_length_exceeded")
    assert P.parse_completion({"prompt": [5] * 40, "max_tokens": 30}).params.max_tokens == 24
    assert P.parse_completion({"prompt": [5] * 40, "max_tokens": 24}).params.max_tokens == 24
    several = P.parse_completion({"prompt": [[5] * 40, [5] * 10], "max_tokens": 30})
    assert [several.params_at(i).max_tokens for i in (0, 1)] == [24, 30]
    # the default shrinks to the room left instead of failing
    assert P.parse_completion({"prompt": [5] * 60}).params.max_tokens == 4


def test_stream_options_need_stream():
    rejects(P.parse_completion, {"prompt": "hi", "stream_options": {"include_usage": True}},
            "stream_options")
    rejects(P.parse_completion, {"prompt": "hi", "stream": True,
                                 "stream_options": {"include_usage": "maybe"}},
            "stream_options.include_usage")
    # an empty object passes without stream, as vLLM's check (SDK wrappers always send it)
    assert P.parse_completion({"prompt": "hi", "stream_options": {}}).params is not None
    assert P.parse_chat({"messages": [{"role": "user", "content": "hi"}],
                         "stream": False, "stream_options": {}}).params is not None
    rejects(P.parse_completion, {"prompt": "hi", "stream_options": []}, "stream_options")


def test_chat_messages_and_template():
    msgs = [{"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hi "},
                                         {"type": "text", "text": "there"}]},
            {"role": "assistant", "content": None}, {"role": "developer", "content": "x"}]
    big = parser(max_model_len=1000, max_tokens_limit=2000)
    req = big.parse_chat({"model": MODEL, "messages": msgs})
    text = ChatTemplate().render([("system", "be brief"), ("user", "hi \nthere"),
                                  ("assistant", ""), ("system", "x")])
    assert req.prompt_ids == TOK.encode(text) and req.kind == "chat"
    assert text.endswith("<|assistant|>\n")
    # chat has no 16-token default: it may use the whole room, up to max_tokens_limit
    assert req.params.max_tokens == 1000 - len(req.prompt_ids)
    assert P.parse_chat({"messages": [{"role": "user", "content": "hi"}]}).params.max_tokens \
        == 64 - len(TOK.encode(ChatTemplate().render([("user", "hi")])))


@pytest.mark.parametrize("messages, param", [
    (None, "messages"), ([], "messages"), ("hi", "messages"), ([5], "messages[0]"),
    ([{"role": 7, "content": "x"}], "messages[0].role"),
    ([{"role": "", "content": "x"}], "messages[0].role"),
    ([{"role": "user", "content": 5}], "messages[0].content"),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
     "messages[0].content"),
])
def test_bad_messages(messages, param):
    rejects(P.parse_chat, {"messages": messages}, param)


def test_null_or_missing_content_is_empty_for_every_role():
    """vLLM reads a null or missing content as empty for any role (a 400 here before)."""
    empty = P.parse_chat({"messages": [{"role": "system", "content": ""},
                                       {"role": "user", "content": ""}]})
    for messages in ([{"role": "system"}, {"role": "user", "content": None}],
                     [{"role": "system", "content": None}, {"role": "user"}]):
        assert P.parse_chat({"messages": messages}).prompt_ids == empty.prompt_ids


def test_chat_max_completion_tokens_wins_and_is_named():
    m = [{"role": "user", "content": "hi"}]
    req = P.parse_chat({"messages": m, "max_tokens": 3, "max_completion_tokens": 5})
    assert req.params.max_tokens == 5
    rejects(P.parse_chat, {"messages": m, "max_completion_tokens": 0}, "max_completion_tokens")
    rejects(P.parse_chat, {"messages": m, "max_tokens": 0}, "max_tokens")
    rejects(P.parse_chat, {"messages": m, "tools": [{"type": "function"}]}, "tools[0].function")
    # NOTE(legacy-functions): vLLM 0.33 serves the pre-tools fields unheeded: listed
    assert P.parse_chat({"messages": m, "functions": [{"name": "f"}]}).ignored == ("functions",)


FIELDS = ["model", "prompt", "messages", "n", "max_tokens", "max_completion_tokens",
          "temperature", "top_p", "top_k", "seed", "stop", "stream", "stream_options", "user",
          "cache_salt", "priority", "echo", "logprobs", "best_of", "ignore_eos",
          "stop_token_ids", "tools", "response_format", "unknown"]
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**65, 2**65) | st.floats(allow_nan=False)
    | st.text(max_size=8) | st.sampled_from([MODEL, "hi", "user", "text"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["role", "content", "type", "text", "include_usage"]), inner,
        max_size=3),
    max_leaves=12)


@settings(max_examples=120, deadline=None)
@given(st.dictionaries(st.sampled_from(FIELDS), JSON, max_size=8), st.booleans())
def test_any_body_is_accepted_or_a_request_error(body, chat):
    try:
        req = (P.parse_chat if chat else P.parse_completion)(body)
    except RequestError as exc:
        assert exc.param is None or isinstance(exc.param, str)
        return
    assert 1 <= req.params.max_tokens <= 100 and len(req.prompt_ids) + req.params.max_tokens <= 64


def test_sampling_controls_reach_the_params():
    for parse, body in ((P.parse_completion, {"prompt": "hi"}),
                        (P.parse_chat, {"messages": [{"role": "user", "content": "hi"}]})):
        p = parse({**body, "max_tokens": 8, "presence_penalty": 0.5, "frequency_penalty": -1,
                   "repetition_penalty": 1.2, "min_p": 0.05, "min_tokens": 3,
                   "logit_bias": {"7": -100, "300": 2.5}}).params
        assert (p.presence_penalty, p.frequency_penalty, p.repetition_penalty, p.min_p,
                p.min_tokens) == (0.5, -1.0, 1.2, 0.05, 3)
        assert p.logit_bias == ((7, -100.0), (300, 2.5))
    defaults = P.parse_completion({"prompt": "hi", "logit_bias": None, "min_p": None}).params
    assert not defaults.adjusts_logits and defaults.min_p == 0.0


@pytest.mark.parametrize("field, value, code", [
    ("presence_penalty", 2.5, None), ("presence_penalty", "1 .0", None),
    ("frequency_penalty", -3, None), ("frequency_penalty", [1], None),
    ("repetition_penalty", 0, None), ("repetition_penalty", -1, None),
    ("min_p", 1.5, None), ("min_p", [0.1], None),
    ("min_tokens", -1, None), ("min_tokens", 2.5, None), ("min_tokens", 9, None),
    ("logit_bias", {"7": "one"}, None),  # {"7": 101} is clamped: NOTE(bias-clamp)
    ("logit_bias", {"-1": 1}, None), ("logit_bias", {"x": 1}, None),
    ("logit_bias", {"512": 1}, "invalid_token_id"), ("logit_bias", [1, 2], None),
    ("logit_bias", {str(i): 1 for i in range(1025)}, None),
])
def test_sampling_controls_bad_values_name_the_field(field, value, code):
    rejects(P.parse_completion, {"prompt": "hi", "max_tokens": 8, field: value}, field, code)
    rejects(P.parse_chat, {"messages": [{"role": "user", "content": "x"}], "max_tokens": 8,
                           field: value}, field, code)
