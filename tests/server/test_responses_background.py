"""The Responses fields vLLM 0.33 refuses or runs apart from the request: ``prompt`` (a stored
prompt template) is vLLM's 400, and ``background``."""

from __future__ import annotations

import aiohttp
import pytest


@pytest.mark.parametrize("prompt", [{"id": "pmpt_1"}, {"id": "pmpt_1", "version": "2"}, "p"])
async def test_a_prompt_template_is_vllms_400_in_its_words(srv, prompt):
    body = {"model": srv.engine.model_name, "input": "x", "max_output_tokens": 2}
    async with aiohttp.ClientSession() as s:
        async with s.post(srv.v1 + "/responses", json={**body, "prompt": prompt}) as r:
            err = (await r.json())["error"]
            assert r.status == 400 and err["param"] == "prompt", err
            assert "prompt template is not supported" in err["message"], err
        async with s.post(srv.v1 + "/responses", json={**body, "prompt": None}) as r:
            assert r.status == 200, await r.text()  # null is not a template
