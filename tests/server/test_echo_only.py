"""Completions ``echo`` with ``max_tokens: 0`` (what lm-eval's ``local-completions`` sends for
loglikelihood requests): the prompt and its logprobs only, through the official ``openai``
client on a real server, checked against transformers' log_softmax (within 1e-4)."""

from __future__ import annotations

import aiohttp
import pytest
from openai import AsyncOpenAI

from tests.runtime.model.helpers import SENTENCES, ref_logprobs

transformers = pytest.importorskip("transformers")
TOL = 1e-4



async def test_echo_with_max_tokens_zero_returns_prompt_logprobs_only(make_server, hf_dir):
    d, hf = hf_dir
    async with make_server(model=str(d)) as srv, \
            AsyncOpenAI(base_url=srv.v1, api_key="x", max_retries=0, timeout=30) as c:
        tok = srv.engine.tokenizer
        prompts = [tok.encode(s) for s in SENTENCES[:3]]
        r = await c.completions.create(model=srv.engine.model_name, prompt=prompts,
                                       max_tokens=0, echo=True, logprobs=1, temperature=0)
        assert len(r.choices) == 3 and r.usage.completion_tokens == 0
        assert r.usage.prompt_tokens == sum(map(len, prompts))
        for ch, ids in zip(sorted(r.choices, key=lambda x: x.index), prompts):
            assert ch.text == tok.decode(ids) and ch.finish_reason == "length"
            lp = ch.logprobs
            assert len(lp.tokens) == len(ids) == len(lp.token_logprobs)
            assert lp.token_logprobs[0] is None
            ref = ref_logprobs(hf, ids)
            for p in range(1, len(ids)):
                assert abs(lp.token_logprobs[p] - float(ref[p - 1, ids[p]])) < TOL
                # top-1 plus the chosen token (keyed by vLLM's names: NOTE(logprob-names))
                best = float(ref[p - 1].max())
                assert min(abs(v - best) for v in lp.top_logprobs[p].values()) < TOL

        # a text prompt, streamed: one chunk, the echo, ends it (NOTE(echo-chunk))
        text = SENTENCES[4]
        chunks = [ch async for ch in await c.completions.create(
            model=srv.engine.model_name, prompt=text, max_tokens=0, echo=True, stream=True)]
        assert [(ch.choices[0].text, ch.choices[0].finish_reason) for ch in chunks] == [
            (text, "length")]

        # max_tokens 0 without echo stays a 400 naming max_tokens, and says why
        async with aiohttp.ClientSession() as s, s.post(srv.v1 + "/completions", json={
                "prompt": "hi", "max_tokens": 0, "echo": False}) as resp:
            assert resp.status == 400
            err = (await resp.json())["error"]
            assert err["param"] == "max_tokens" and "echo" in err["message"]
