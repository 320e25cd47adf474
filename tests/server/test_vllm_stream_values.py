"""What completions / chat stream chunks hold beside their keys (those:
test_vllm_stream_keys.py), against vLLM 0.33's stream generators: continuous_usage_stats counts
per choice, a token that brings no text still gets its chunk (chat's delta ``{"content": ""}``),
and a chat echo comes in a chunk of its own after the role chunks
(NOTE(vllm-chunk-keys) in kvpool/server/vllm_keys.py). Raw SSE from a real server."""

from __future__ import annotations

from tests.server.helpers import sse_chunks

ENVELOPE = {"id", "object", "created", "model", "choices"}
EVERY = {"include_usage": True, "continuous_usage_stats": True}
CHAT = [{"role": "user", "content": "Once"}]
NEVER = "\u2603 a stop string this tiny model will not write \u2603"  # held back, never met


async def chunks(srv, path: str, body: dict) -> list[dict]:
    body = {"model": srv.engine.model_name, "stream": True, "temperature": 0, **body}
    return await sse_chunks(srv.url + path, body)


def usage(prompt: int, done: int, chat: bool) -> dict:
    out = {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done}
    return {**out, "completion_tokens_details": None} if chat else out


async def test_completions_usage_counts_each_choice(srv):
    prompts = ["Once", "Tell me a story"]
    body = {"prompt": prompts, "n": 2, "max_tokens": 5, "temperature": 1.0, "seed": 3,
            "return_token_ids": True, "stream_options": EVERY}
    got = await chunks(srv, "/v1/completions", body)
    done = [0] * 4
    for chunk in got[:-1]:
        (choice,) = chunk["choices"]
        i = choice["index"]
        done[i] += len(choice["token_ids"])
        prompt = len(srv.engine.tokenizer.encode(prompts[i // 2]))
        assert chunk["usage"] == usage(prompt, done[i], False), (i, chunk)
    assert done == [5] * 4 and got[-1]["usage"]["completion_tokens"] == 20


async def test_chat_usage_counts_each_choice(srv):
    body = {"messages": CHAT, "n": 2, "max_tokens": 5, "temperature": 1.0, "seed": 3,
            "return_token_ids": True, "stream_options": EVERY}
    got = await chunks(srv, "/v1/chat/completions", body)
    prompt = got[-1]["usage"]["prompt_tokens"]
    done = [0, 0]
    for chunk in got[:-1]:
        (choice,) = chunk["choices"]
        i = choice["index"]
        done[i] += len(choice.get("token_ids") or ())
        assert chunk["usage"] == usage(prompt, done[i], True), (i, chunk)
    assert done == [5, 5] and got[-1]["usage"]["completion_tokens"] == 10


async def test_a_token_without_text_still_gets_its_chunk(srv):
    """A stop string held back: its tokens bring no text yet, and vLLM sends each update a
    chunk all the same (chat: ``{"content": ""}``, never ``{}`` once a token came)."""
    got = await chunks(srv, "/v1/chat/completions",
                       {"messages": CHAT, "max_tokens": 8, "stop": [NEVER]})
    deltas = [c["choices"][0]["delta"] for c in got[1:]]
    assert len(deltas) > 1 and {"content": ""} in deltas[:-1], deltas
    assert all(set(d) == {"content"} for d in deltas), deltas
    got = await chunks(srv, "/v1/completions", {"prompt": "Once", "max_tokens": 8,
                                                "stop": [NEVER]})
    texts = [c["choices"][0]["text"] for c in got]
    assert len(texts) > 1 and "" in texts[:-1], texts


async def test_a_stop_token_ends_the_chat_with_empty_content(srv):
    """The stop token adds no text (NOTE(stop-token-text)): the final chunk's delta is
    ``{"content": ""}``, as vLLM's for every chunk after the first token."""
    ids = {"return_token_ids": True}
    got = await chunks(srv, "/v1/chat/completions", {"messages": CHAT, "max_tokens": 6, **ids})
    tokens = [t for c in got[1:] for t in c["choices"][0]["token_ids"]]
    stop = next(t for k, t in enumerate(tokens) if k and t not in tokens[:k])
    got = await chunks(srv, "/v1/chat/completions",
                       {"messages": CHAT, "max_tokens": 6, "stop_token_ids": [stop]})
    final = got[-1]["choices"][0]
    assert final["finish_reason"] == "stop" and final["stop_reason"] == stop
    assert all(set(c["choices"][0]["delta"]) == {"content"} for c in got[1:]), got


async def test_a_streamed_chat_echo_has_its_own_chunk(srv):
    """vLLM's role chunks carry content "" and the echo follows, one chunk per choice with
    only the envelope (and usage so far, no token counted) beside its choice."""
    echo = "Once upon a time"
    msgs = CHAT + [{"role": "assistant", "content": echo}]
    body = {"messages": msgs, "n": 2, "max_tokens": 3, "echo": True,
            "continue_final_message": True, "add_generation_prompt": False}
    for options in (None, EVERY):
        got = await chunks(srv, "/v1/chat/completions", {**body, "stream_options": options})
        for chunk in got[:2]:
            assert chunk["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        for k, chunk in enumerate(got[2:4]):
            want = ENVELOPE | ({"usage"} if options else set())
            assert set(chunk) == want, chunk
            assert chunk["choices"] == [{"index": k, "delta": {"content": echo},
                                         "logprobs": None, "finish_reason": None}]
            if options:
                assert chunk["usage"] == usage(got[-1]["usage"]["prompt_tokens"], 0, True)
        assert all(echo not in str(c["choices"][0]["delta"]) for c in got[4:] if c["choices"])
