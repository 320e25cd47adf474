"""n > 1 where the sequences cannot run as forks, served as vLLM serves every n: n child
requests of one sequence each (kvpool/server/child_requests.py, NOTE(apart) in
kvpool/sched/request_checker.py). These requests were 400s (n_too_large_for_batch,
n_too_large_for_pool) or got a lowered default max_tokens; a seeded request now answers the
texts the forks answer, and a child that leaves or fails takes its siblings with it."""

from __future__ import annotations

import aiohttp

from kvpool.server.app import GATE_KEY
from tests.server.helpers import Running, post_ok, scrape, sse_chunks, wait_free, wait_until

COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"
SEEDED = {"prompt": "hello there", "max_tokens": 6, "n": 4, "seed": 7, "temperature": 1.0,
          "ignore_eos": True}
LONG = {"prompt": "hold on", "max_tokens": 240, "ignore_eos": True, "n": 4, "stream": True}
# a pool of 8 blocks of 16 tokens, the context capped to it (as serve caps it: context_fit.py)
SMALL = dict(num_device_blocks=8, num_host_blocks=0, preemption_mode="recompute",
             max_model_len=128)


def texts(body: dict) -> list[str]:
    """The choices' texts (or chat contents) in index order."""
    choices = sorted(body["choices"], key=lambda c: c["index"])
    assert [c["index"] for c in choices] == list(range(len(choices))), body
    return [c["text"] if "text" in c else c["message"]["content"] for c in choices]


async def idle(srv: Running, baseline: int) -> None:
    """Every child ended in the engine and every block is back."""
    assert await wait_until(lambda: srv.engine.requests_in_flight() == 0)
    await wait_free(srv, baseline)
    assert srv.free() == baseline


async def test_n_past_max_num_seqs_answers_the_forks_texts(make_server):
    """n=4 under --max-num-seqs 2 was 400 n_too_large_for_batch: the same seeded request
    answers the forks' texts and usage, in JSON, in chat and streamed (indexes interleaved,
    one usage chunk and one [DONE], after every child)."""
    chat = {"messages": [{"role": "user", "content": "hi"}], "n": 3, "seed": 3,
            "temperature": 1.0, "max_tokens": 5, "ignore_eos": True}
    async with make_server() as forks, make_server(max_num_seqs=2) as apart:
        want = await post_ok(forks.url + COMPLETIONS, SEEDED)
        got = await post_ok(apart.url + COMPLETIONS, SEEDED)
        assert texts(got) == texts(want) and got["usage"] == want["usage"], got
        assert got["usage"]["completion_tokens"] == 24
        assert texts(await post_ok(apart.url + CHAT, chat)) == \
            texts(await post_ok(forks.url + CHAT, chat))
        chunks = await sse_chunks(apart.url + COMPLETIONS, {
            **SEEDED, "stream": True, "stream_options": {"include_usage": True}})
    streamed = [""] * 4
    for c in chunks[:-1]:
        for choice in c["choices"]:
            streamed[choice["index"]] += choice["text"]
    assert streamed == texts(want)
    assert [c["usage"] for c in chunks if c.get("usage")] == [want["usage"]]
    assert chunks[-1]["choices"] == []


async def test_n_the_pool_cannot_hold_runs_with_the_full_max_tokens(make_server):
    """A pool of 8 blocks: chat with n=2 and no max_tokens got a default lowered to what both
    sequences held together; n=4 of 32 + 24 tokens was 400 n_too_large_for_pool. Each child
    now gets the max_tokens one sequence gets; best_of picks as the forks do; what one
    sequence can never run is still n=1's 400."""
    chat = {"messages": [{"role": "user", "content": "hi"}], "n": 2, "ignore_eos": True,
            "temperature": 0}
    body = {"prompt": [65] * 32, "max_tokens": 24, "ignore_eos": True, "temperature": 0}
    best = {**body, "n": 1, "best_of": 4, "seed": 5, "temperature": 1.0}
    async with make_server(**SMALL) as small, make_server() as forks:
        resp = await post_ok(small.url + CHAT, chat)
        room = small.engine.max_model_len - resp["usage"]["prompt_tokens"]
        assert [c["finish_reason"] for c in resp["choices"]] == ["length", "length"]
        assert resp["usage"]["completion_tokens"] == 2 * room
        resp = await post_ok(small.url + COMPLETIONS, {**body, "n": 4})
        assert len(texts(resp)) == 4 and resp["usage"]["completion_tokens"] == 96
        assert texts(await post_ok(small.url + COMPLETIONS, best)) == \
            texts(await post_ok(forks.url + COMPLETIONS, best))
        async with aiohttp.ClientSession() as s:
            errors = []
            for n in (1, 3):  # a prompt past the context: one child could never run
                async with s.post(small.url + COMPLETIONS,
                                  json={**body, "prompt": [65] * 130, "n": n}) as r:
                    errors.append((r.status, await r.json()))
            assert errors[0] == errors[1] and errors[0][0] == 400, errors


async def test_leaving_mid_stream_or_a_shutdown_aborts_every_child(make_server):
    """A client that leaves after the first chunk, and the drain's abort_all: no child runs
    on (4 children of 240 tokens would generate 960), and every block comes back."""
    async with make_server(max_num_seqs=2) as srv, aiohttp.ClientSession() as s:
        baseline = srv.free()
        resp = await s.post(srv.url + COMPLETIONS, json=LONG)
        assert resp.status == 200 and (await resp.content.readline()).startswith(b"data: {")
        resp.close()
        await idle(srv, baseline)
        left = (await scrape(srv))["kvpool_generation_tokens_total"][()]
        assert left < 4 * 240, left
        async with s.post(srv.url + COMPLETIONS, json=LONG) as resp:
            assert (await resp.content.readline()).startswith(b"data: {")
            await srv.app[GATE_KEY].abort_all()
            tail = (await resp.read()).decode()
        assert '"error"' in tail and tail.endswith("data: [DONE]\n\n"), tail[-300:]
        await idle(srv, baseline)
        assert (await scrape(srv))["kvpool_generation_tokens_total"][()] < left + 4 * 240


async def test_a_child_refused_fails_the_request_and_frees_the_rest(make_server):
    """--max-queue 4 with one request in flight: n=8 as four children of two forks, the
    fourth is refused (503 queue_full, as the forks' request would be with the queue full);
    the three queued are aborted, and the server serves on. More children than --max-queue
    could never all be queued: a 400 naming n, not a 503 a client would retry for ever;
    several prompts' children count together."""
    async with make_server(max_num_seqs=2, max_queue=4, max_n=16) as srv, \
            aiohttp.ClientSession() as s:
        baseline = srv.free()
        async with s.post(srv.url + COMPLETIONS, json={**LONG, "n": 1}) as held:
            assert (await held.content.readline()).startswith(b"data: {")
            async with s.post(srv.url + COMPLETIONS,
                              json={**SEEDED, "n": 8, "max_tokens": 200}) as r:
                assert r.status == 503 and (await r.json())["error"]["code"] == "queue_full"
            held.close()
        await idle(srv, baseline)
        assert len(texts(await post_ok(srv.url + COMPLETIONS, SEEDED))) == 4
        async with s.post(srv.url + COMPLETIONS, json={**SEEDED, "n": 9}) as r:  # 5 children
            err = (await r.json())["error"]
            assert (r.status, err["param"], err["code"]) == (400, "n", "n_too_large_for_queue"), err
            assert err["message"].endswith("use n <= 8"), err  # 4 children of 2 forks
        async with s.post(srv.url + COMPLETIONS,  # 2 prompts x 3 children: 6 past 4
                          json={**SEEDED, "prompt": ["hi", "yo"], "n": 5}) as r:
            err = (await r.json())["error"]
            assert (r.status, err["code"]) == (400, "n_too_large_for_queue"), err
            assert err["message"].endswith("use n <= 4"), err
        assert len(texts(await post_ok(srv.url + COMPLETIONS, {**SEEDED, "n": 8}))) == 8


def _total(got: dict, name: str) -> float:
    return sum(got.get(name, {}).values())


async def test_children_share_the_prompt_and_are_observed_apart(make_server):
    """n=4 past --max-num-seqs 2 runs as two children of two forks (NOTE(fork-groups)): the
    first computes the 40-token prompt once, the second, admitted when the batch has room,
    only past its 32 cached tokens (48 in all; children of one sequence each computed 96).
    NOTE(child-metrics): every choice's per-request series took the last child's timings,
    and the prefill KV histogram read 4 x 8 = 32 where each choice's own sum to 2 x 40 + 2 x 8
    (forks count the prompt per sequence, as vLLM's children each count their own)."""
    async with make_server(max_num_seqs=2) as srv:
        before = await scrape(srv)
        body = {"prompt": list(range(100, 140)), "n": 4, "max_tokens": 3, "ignore_eos": True,
                "temperature": 0}
        assert len(texts(await post_ok(srv.url + COMPLETIONS, body))) == 4
        after = await scrape(srv)
    computed = _total(after, "kvpool_prompt_tokens_computed_total") - \
        _total(before, "kvpool_prompt_tokens_computed_total")
    kv = "vllm:request_prefill_kv_computed_tokens_sum"
    assert computed == 48
    assert _total(after, kv) - _total(before, kv) == 96
