"""Every int and float field of /v1/completions and /v1/chat/completions read as vLLM 0.33's
request models read one (pydantic's lax int and float: NOTE(lax-int), NOTE(lax-float) in
kvpool/server/query_int.py), on a real server: ``"3"``, ``3.0`` and ``true`` (1) answer as 3
does, ``"0.5"`` as 0.5; a value vLLM refuses (``3.5``, ``"abc"``, a string for the logprob
counts, which vLLM's check_logprobs refuses) is a 400 OpenAI error naming the field."""

from __future__ import annotations

import json

import aiohttp
import pytest

from tests.server.test_lax_bool_fields import CHAT, COMPLETION, post, same

C, H = "/v1/completions", "/v1/chat/completions"
SAMPLED = {"temperature": 1, "seed": 7}
# (path, body, field, the plain value, spellings vLLM reads as it)
INTS = [(p, b, f, v, spellings) for p, b in ((C, COMPLETION), (H, CHAT)) for f, v, spellings in (
    ("max_tokens", 2, ["2", 2.0, " +2 ", "2.00"]),
    ("n", 1, ["1", 1.0, True]),
    ("seed", 3, ["3", 3.0, "0_3"]),
    ("top_k", 2, ["2", 2.0]),
    ("min_tokens", 1, ["1", True]),
    ("truncate_prompt_tokens", 3, ["3", 3.0]),
    ("priority", 1, ["1", True]),
    ("prompt_logprobs", 1, [True, 1.0]),
)] + [(C, COMPLETION, "logprobs", 1, [True, 1.0]), (C, COMPLETION, "best_of", 2, ["2", 2.0]),
      (H, {**CHAT, "logprobs": True}, "top_logprobs", 1, [True, 1.0]),
      (H, CHAT, "max_completion_tokens", 2, ["2", 2.0]),
      (C, COMPLETION, "stop_token_ids", [5], [["5"], [5.0]]),
      (H, CHAT, "allowed_token_ids", [5, 6], [["5", 6.0], ["05", "6.0"]])]
FLOATS = [(p, {**b, **SAMPLED}, f, v, spellings) for p, b in ((C, COMPLETION), (H, CHAT))
          for f, v, spellings in (
    ("temperature", 0.5, ["0.5", " .5", "5e-1"]),
    ("top_p", 0.5, ["0.5", "0_.5"]),
    ("presence_penalty", 1, ["1", True, "1.0"]),
    ("frequency_penalty", 0.5, ["0.5"]),
    ("repetition_penalty", 1.5, ["1.5"]),
    ("min_p", 0.5, ["0.5"]),
    ("logit_bias", {"5": 10}, [{"5": "10"}, {"5": "1e1"}]))]
CASES = INTS + FLOATS


@pytest.mark.parametrize("path, body, field, value, spellings", CASES,
                         ids=[f"{p[4:8]}-{f}" for p, _, f, _, _ in CASES])
async def test_a_number_field_takes_what_vllm_reads_as_its_number(srv, path, body, field,
                                                                   value, spellings):
    async with aiohttp.ClientSession() as s:
        status, want = await post(s, srv, path, {**body, field: value})
        assert status == 200, want
        for other in spellings:
            status, got = await post(s, srv, path, {**body, field: other})
            assert status == 200 and same(got) == same(want), (other, got)


# (path, body, field, a value vLLM refuses)
REFUSED = [(p, b, f, bad) for p, b in ((C, COMPLETION), (H, CHAT)) for f, bad in (
    ("max_tokens", 2.5), ("max_tokens", "1e3"), ("n", "two"), ("n", [1]), ("seed", "3.5"),
    ("top_k", "0x10"), ("min_tokens", ""), ("truncate_prompt_tokens", "1__0"),
    ("priority", {}), ("prompt_logprobs", "1"), ("temperature", "hot"), ("top_p", " 1_0"),
    ("presence_penalty", []), ("min_p", "1,5"))] + [
    (C, COMPLETION, "logprobs", "1"),
    (H, {**CHAT, "logprobs": True}, "top_logprobs", "1"), (H, CHAT, "seed", 2.0 ** 63),
    (C, COMPLETION, "stop_token_ids", ["five"]), (H, CHAT, "allowed_token_ids", [1.5]),
    (C, COMPLETION, "logit_bias", {"5": "ten"})]


async def test_what_vllm_refuses_is_a_400_naming_the_field(srv):
    async with aiohttp.ClientSession() as s:
        for path, body, field, bad in REFUSED:
            status, got = await post(s, srv, path, {**body, field: bad})
            assert status == 400 and set(got) == {"error"}, (field, bad, got)
            error = got["error"]
            assert set(error) == {"message", "type", "param", "code"}
            assert error["param"] == field and error["type"] == "invalid_request_error", error
            if not isinstance(bad, (list, dict)):  # the value is shown
                assert json.dumps(bad) in error["message"], error
        status, got = await post(s, srv, C, COMPLETION)
        assert status == 200 and got["usage"]["completion_tokens"] == 3  # still serving
