"""An n > 1 stream from a real server (NOTE(child-finish) in
kvpool/runtime/engine/output_processor.py): a choice that ends before its siblings (a stop
token, a stop string) gets its one finish_reason chunk when it ends, before the others' later
tokens, never again at the request's end; the usage comes once, last. Its latency series are
its own: each choice's decode time is its own first-to-last token time (its ITL sum), not the
slowest sibling's."""

from __future__ import annotations

import asyncio

from tests.server.helpers import post_ok, scrape, sse_chunks

MAX = 120
ASK = {"prompt": "Once upon a time", "n": 2, "max_tokens": MAX, "temperature": 1.0,
       "seed": 7, "ignore_eos": True, "return_token_ids": True}


async def reference(srv) -> list[dict]:
    body = {"model": srv.engine.model_name, **ASK}
    return sorted((await post_ok(srv.v1 + "/completions", body))["choices"],
                  key=lambda c: c["index"])


async def settled(srv, before: dict, name: str, lab: tuple, more: int) -> dict:
    """/metrics once ``name`` rose by ``more`` (the handler observes a request after its
    answer went out); a bounded wait."""
    for _ in range(1000):
        got = await scrape(srv)
        if got.get(name, {}).get(lab, 0) == before.get(name, {}).get(lab, 0) + more:
            return got
        await asyncio.sleep(0.01)
    raise AssertionError(f"{name} never rose by {more}")


async def stream(srv, **extra) -> list[dict]:
    body = {"model": srv.engine.model_name, **ASK, "stream": True,
            "stream_options": {"include_usage": True}, **extra}
    return await sse_chunks(srv.v1 + "/completions", body)


def events(chunks: list[dict]) -> list[tuple[int, int, str | None, str]]:
    """(choice, tokens, finish_reason, text) per choice entry, in stream order."""
    return [(c["index"], len(c.get("token_ids") or ()), c["finish_reason"], c["text"])
            for chunk in chunks for c in chunk["choices"]]


def check_early_finish(chunks: list[dict], stop_reason) -> None:
    """Choice 0 ends early, choice 1 runs to max_tokens: one finish each, choice 0's before
    choice 1's later tokens; the usage once, in the last chunk."""
    got = events(chunks)
    ends = {i: [k for k, e in enumerate(got) if e[0] == i and e[2]] for i in (0, 1)}
    assert [len(ends[0]), len(ends[1])] == [1, 1], got  # before: choice 0's came twice
    assert got[ends[0][0]][2] == "stop" and got[ends[1][0]][2] == "length"
    # choice 0's finish went out in the step that ended it: every token choice 1 generated
    # after that step came after it (before, it came with choice 1's last token)
    early = sum(n for i, n, _, _ in got if i == 0)
    assert sum(n for i, n, _, _ in got[ends[0][0] + 1:] if i == 1) >= MAX - early
    assert sum(n for i, n, _, _ in got if i == 1) == MAX
    assert [c for c in chunks if "usage" in c and c["usage"]] == chunks[-1:]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == \
        sum(n for _, n, _, _ in got)
    assert all(c["stop_reason"] == stop_reason for ch in chunks for c in ch["choices"]
               if c["index"] == 0 and c["finish_reason"])


async def test_a_stop_token_ends_its_choice_at_once_with_its_own_latency(srv):
    ref = await reference(srv)
    stop = next(t for t in ref[0]["token_ids"][:3] if t not in ref[1]["token_ids"])
    lab = (("model_name", srv.engine.model_name),)
    before = await scrape(srv)
    check_early_finish(await stream(srv, stop_token_ids=[stop]), stop)
    names = ("kvpool_request_decode_time_seconds", "kvpool_inter_token_latency_seconds",
             "kvpool_e2e_request_latency_seconds", "kvpool_time_to_first_token_seconds")
    got = await settled(srv, before, names[0] + "_count", lab, 2)
    decode, itl, e2e, ttft = (got[n + "_sum"][lab] - before.get(n + "_sum", {}).get(lab, 0.0)
                              for n in names)
    # each choice's decode is its first-to-last token time, its ITL sum: before, both were
    # timed to the request's end, so the early choice read as long as the other (about 2x)
    assert decode < 1.5 * itl
    assert e2e < 1.5 * (ttft + itl)  # likewise the engine's e2e of each child


async def test_a_stop_string_ends_its_choice_once(srv):
    ref = await reference(srv)
    text0, text1 = ref[0]["text"], ref[1]["text"]
    stop = next(text0[j:j + 2] for j in range(min(6, len(text0) - 1))
                if text0[j:j + 2] not in text1 and text0[j:j + 2].strip())
    chunks = await stream(srv, stop=[stop])
    check_early_finish(chunks, stop)
    # the hold-back rule: what choice 0 showed is its text up to the stop string, no more
    assert "".join(t for i, _, _, t in events(chunks) if i == 0) == text0[:text0.index(stop)]
