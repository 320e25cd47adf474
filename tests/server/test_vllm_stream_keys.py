"""The keys of each kind of completions / chat stream chunk, field by field against what vLLM
0.33 writes: every chunk is its stream model dumped with exclude_unset (the usage chunk also
without nulls), so a chunk holds the keys its kind sets (NOTE(vllm-chunk-keys) in
kvpool/server/vllm_keys.py). Raw SSE from a real server, n=1 and n=2, usage off, asked, and
asked with continuous_usage_stats."""

from __future__ import annotations

import pytest

from tests.server.helpers import sse_chunks

ENVELOPE = {"id", "object", "created", "model", "choices"}
USAGE = {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details"}
USAGE_CHUNK = ENVELOPE | {"usage"}
# continuous_usage_stats: the usage vLLM sets on each chunk (chat sets the details, null)
EVERY_USAGE = {False: {"prompt_tokens", "completion_tokens", "total_tokens"},
               True: {"prompt_tokens", "completion_tokens", "total_tokens",
                      "completion_tokens_details"}}
COMPLETION_CHUNK = ENVELOPE | {"kv_transfer_params"}
COMPLETION_CHOICE = {"index", "text", "logprobs", "finish_reason", "stop_reason",
                     "prompt_token_ids", "token_ids", "weight_versions"}
ROLE_CHUNK = ENVELOPE | {"prompt_token_ids", "prompt_text"}
ROLE_CHOICE = {"index", "delta", "logprobs", "finish_reason"}
CHAT_CHUNK = ENVELOPE | {"kv_transfer_params"}
CHAT_CHOICE = {"index", "delta", "logprobs", "finish_reason", "token_ids"}
CHAT_FINAL = CHAT_CHOICE | {"stop_reason", "weight_versions"}
MODES = {"off": None, "usage": {"include_usage": True},
         "every": {"include_usage": True, "continuous_usage_stats": True}}


async def chunks(srv, path: str, body: dict, mode: str) -> list[dict]:
    body = {"model": srv.engine.model_name, "max_tokens": 4, "stream": True, **body}
    if MODES[mode] is not None:
        body["stream_options"] = MODES[mode]
    return await sse_chunks(srv.url + path, body)


def keys(obj: dict, want: set, kind: str) -> None:
    assert set(obj) == want, (kind, sorted(set(obj) ^ want), obj)


def usage_of(chunk: dict, mode: str, chat: bool, want: set) -> None:
    """A choice chunk carries usage only with continuous_usage_stats, its own key set."""
    if mode == "every":
        keys(chunk, want | {"usage"}, "chunk")
        keys(chunk["usage"], EVERY_USAGE[chat], "usage")
    else:
        keys(chunk, want, "chunk")


def usage_chunk(got: list[dict], mode: str) -> list[dict]:
    """The usage chunk, last, when asked; the chunks before it."""
    if mode == "off":
        assert all(c["choices"] for c in got)
        return got
    keys(got[-1], USAGE_CHUNK, "usage chunk")
    keys(got[-1]["usage"], USAGE, "usage chunk's usage")
    assert got[-1]["choices"] == []
    return got[:-1]


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("n", [1, 2])
async def test_completion_chunks_have_vllms_keys(srv, n, mode):
    got = usage_chunk(await chunks(srv, "/v1/completions", {"prompt": "Once", "n": n}, mode),
                      mode)
    finals = 0
    for chunk in got:
        usage_of(chunk, mode, False, COMPLETION_CHUNK)
        (choice,) = chunk["choices"]
        keys(choice, COMPLETION_CHOICE, "choice")
        finals += choice["finish_reason"] is not None
        assert chunk["kv_transfer_params"] is None and choice["weight_versions"] is None
    assert finals == n and len(got) > n


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("n", [1, 2])
async def test_chat_chunks_have_vllms_keys(srv, n, mode):
    body = {"messages": [{"role": "user", "content": "Once"}], "n": n}
    got = usage_chunk(await chunks(srv, "/v1/chat/completions", body, mode), mode)
    roles, finals = got[:n], 0
    for chunk in roles:
        usage_of(chunk, mode, True, ROLE_CHUNK)
        keys(chunk["choices"][0], ROLE_CHOICE, "role choice")
        keys(chunk["choices"][0]["delta"], {"role", "content"}, "role delta")
        assert chunk["prompt_text"] is None
    for chunk in got[n:]:
        usage_of(chunk, mode, True, CHAT_CHUNK)
        (choice,) = chunk["choices"]
        final = choice["finish_reason"] is not None
        finals += final
        keys(choice, CHAT_FINAL if final else CHAT_CHOICE, "final" if final else "choice")
        keys(choice["delta"], {"content"}, "delta")
    assert finals == n and len(got) > 2 * n
