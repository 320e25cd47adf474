"""The keys of a completions / chat body not streamed, field by field against vLLM 0.33's
response models, which its server dumps whole (model_dump: every field, null when unset):
CompletionResponse / CompletionResponseChoice, ChatCompletionResponse /
ChatCompletionResponseChoice / ChatMessage (tool_calls left out when empty). NOTE(vllm-nulls)
in kvpool/server/vllm_keys.py. On a real server, n=1 and n=2."""

from __future__ import annotations

import aiohttp
import pytest

COMPLETION_BODY = {"id", "object", "created", "model", "choices", "service_tier",
                   "system_fingerprint", "usage", "kv_transfer_params", "ec_transfer_params",
                   "metrics"}
COMPLETION_CHOICE = {"index", "text", "logprobs", "finish_reason", "stop_reason", "token_ids",
                     "prompt_logprobs", "prompt_token_ids", "routed_experts",
                     "weight_versions"}
CHAT_BODY = COMPLETION_BODY | {"prompt_logprobs", "prompt_token_ids", "prompt_text"}
CHAT_CHOICE = {"index", "message", "logprobs", "finish_reason", "stop_reason", "token_ids",
               "routed_experts", "weight_versions"}
MESSAGE = {"role", "content", "refusal", "annotations", "audio", "function_call", "reasoning"}
# kvpool's own values where vLLM's are null too when nothing asks for them
VALUED = {"id", "object", "created", "model", "choices", "usage", "index", "text", "message",
          "finish_reason", "role", "content", "stop_reason"}


async def post(srv, path: str, body: dict) -> dict:
    async with aiohttp.ClientSession() as s, s.post(
            srv.url + path, json={"model": srv.engine.model_name, "max_tokens": 3,
                                  **body}) as r:
        assert r.status == 200, await r.text()
        return await r.json()


def nulls(obj: dict) -> None:
    for key, value in obj.items():
        assert key in VALUED or key == "logprobs" or value is None, (key, value)


@pytest.mark.parametrize("n", [1, 2])
async def test_completion_body_has_vllms_keys(srv, n):
    got = await post(srv, "/v1/completions", {"prompt": "Once upon", "n": n})
    assert set(got) == COMPLETION_BODY, set(got) ^ COMPLETION_BODY
    assert len(got["choices"]) == n
    for choice in got["choices"]:
        assert set(choice) == COMPLETION_CHOICE, set(choice) ^ COMPLETION_CHOICE
        nulls(choice)
    nulls({k: v for k, v in got.items() if k not in VALUED})


@pytest.mark.parametrize("n", [1, 2])
async def test_chat_body_has_vllms_keys(srv, n):
    got = await post(srv, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Once upon"}], "n": n})
    assert set(got) == CHAT_BODY, set(got) ^ CHAT_BODY
    assert len(got["choices"]) == n
    for choice in got["choices"]:
        assert set(choice) == CHAT_CHOICE, set(choice) ^ CHAT_CHOICE
        assert set(choice["message"]) == MESSAGE, set(choice["message"]) ^ MESSAGE
        nulls(choice)
        nulls(choice["message"])
    nulls({k: v for k, v in got.items() if k not in VALUED})


async def test_asked_for_values_keep_their_place(srv):
    """prompt_logprobs asked: the list, where it was (completions: each choice; chat: the
    body)."""
    got = await post(srv, "/v1/completions", {"prompt": "Once upon", "prompt_logprobs": 1})
    assert isinstance(got["choices"][0]["prompt_logprobs"], list)
    got = await post(srv, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Once upon"}], "prompt_logprobs": 1})
    assert isinstance(got["prompt_logprobs"], list) and set(got) == CHAT_BODY
