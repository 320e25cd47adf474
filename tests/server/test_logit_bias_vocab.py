"""logit_bias against the model's vocabulary, as vLLM checks it (NOTE(logits-size) in
kvpool/server/sampling_fields.py), on a real server over a model directory whose config has
more rows (320) than its tokenizer has tokens (300): an id in the gap is served, and one past
the model's rows is a 400 OpenAI error naming logit_bias."""

from __future__ import annotations

import aiohttp
import pytest

from kvpool.runtime.model.loader import load_tokenizer
from tests.runtime.model.helpers import save_hf_model

pytest.importorskip("transformers")

ROWS = 320  # the model's vocab_size (embedding and lm_head rows)


@pytest.fixture(scope="module")
def padded_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("hf_padded")
    save_hf_model(d, "qwen2", vocab_size=ROWS)
    assert load_tokenizer(d).vocab_size < ROWS - 1  # the gap the test needs
    return d


async def complete(s, url: str, bias: dict) -> tuple[int, dict]:
    body = {"prompt": [5, 6, 7], "max_tokens": 2, "temperature": 0, "logit_bias": bias}
    async with s.post(url + "/v1/completions", json=body) as r:
        return r.status, await r.json()


async def test_logit_bias_ids_are_checked_against_the_models_rows(make_server, padded_dir):
    async with make_server(model=str(padded_dir)) as srv, aiohttp.ClientSession() as s:
        status, out = await complete(s, srv.url, {str(ROWS - 1): 100})  # in the gap: served,
        assert status == 200, out  # the biased id sampled (decoded as no text)
        assert out["usage"]["completion_tokens"] == 2
        for bad in (ROWS, -1):
            status, out = await complete(s, srv.url, {str(bad): 1})
            assert status == 400, out
            err = out["error"]
            assert (err["param"], err["code"], err["type"]) == \
                ("logit_bias", "invalid_token_id", "invalid_request_error")
            assert f"[0, {ROWS})" in err["message"]
