"""The official ``openai`` client against a real server on a model directory that carries its
own chat template (ChatML, as Qwen's): the prompt the engine runs is transformers'
``apply_chat_template`` ids (usage, vLLM's /tokenize over raw HTTP), the greedy reply is
transformers' greedy continuation of those ids, and ``continue_final_message`` /
``add_generation_prompt`` reach the template through ``extra_body``; without a template, chat
is vLLM's 400 and the server says so once at start."""

from __future__ import annotations

import json
import shutil

import aiohttp
import pytest
import torch
from openai import AsyncOpenAI

from kvpool.server.chat_template import NO_TEMPLATE
from tests.runtime.model.helpers import hf_greedy, save_hf_model
from tests.server.chat_templates import CHATML, CONVERSATION, hf_ids, model_dir

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("hf_chatml")
    save_hf_model(d, "qwen2", vocab_size=320)  # room for the template's special tokens
    model_dir(d, CHATML, "<|im_start|>", "<|im_end|>")  # its tokenizer, with the template
    hf = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    return d, hf


async def test_chat_uses_the_model_template(make_server, chat_dir):
    d, hf = chat_dir
    async with make_server(model=str(d)) as srv, \
            AsyncOpenAI(base_url=srv.v1, api_key="x", max_retries=0, timeout=30) as c:
        model = srv.engine.model_name
        want = hf_ids(d, CONVERSATION, add_generation_prompt=True)
        r = await c.chat.completions.create(model=model, messages=CONVERSATION, max_tokens=4,
                                            temperature=0, extra_body={"ignore_eos": True})
        assert r.usage.prompt_tokens == len(want)
        tok = srv.engine.tokenizer
        assert r.choices[0].message.content == tok.decode(hf_greedy(hf, [want], 4)[0])

        async with aiohttp.ClientSession() as s, s.post(srv.url + "/tokenize", json={
                "model": model, "messages": CONVERSATION}) as resp:
            assert resp.status == 200
            assert (await resp.json())["tokens"] == want

        # continue the assistant's last message: the template leaves its turn open
        cont = CONVERSATION[:3]
        want_cont = hf_ids(d, cont, continue_final_message=True)
        r = await c.chat.completions.create(
            model=model, messages=cont, max_tokens=2, temperature=0,
            extra_body={"add_generation_prompt": False, "continue_final_message": True,
                        "ignore_eos": True})
        assert r.usage.prompt_tokens == len(want_cont)
        assert r.choices[0].message.content == tok.decode(hf_greedy(hf, [want_cont], 2)[0])


async def test_no_template_is_vllms_400_and_one_warning(make_server, chat_dir, tmp_path, caplog):
    """NOTE(no-template): the same directory without its template is not served the built-in
    one (whose markers this tokenizer reads as its own control tokens)."""
    d = shutil.copytree(chat_dir[0], tmp_path / "no_template")
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    del cfg["chat_template"]
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    with caplog.at_level("WARNING", logger="kvpool.server"):
        async with make_server(model=str(d)) as srv, aiohttp.ClientSession() as s:
            body = {"model": srv.engine.model_name, "messages": CONVERSATION, "max_tokens": 2}
            async with s.post(srv.v1 + "/chat/completions", json=body) as resp:
                assert resp.status == 400
                err = (await resp.json())["error"]
            assert err["message"] == NO_TEMPLATE and err["type"] == "invalid_request_error"
            async with s.post(srv.v1 + "/completions", json={
                    "model": srv.engine.model_name, "prompt": "Hi", "max_tokens": 2}) as resp:
                assert resp.status == 200
    said = [r for r in caplog.records if "no chat template" in r.getMessage()]
    assert len(said) == 1 and said[0].levelname == "WARNING"
