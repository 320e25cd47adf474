"""Chat ``documents`` reach the model's chat template as vLLM 0.33 hands them (over a
``chat_template_kwargs`` entry of that name), on a real server over a model directory whose
template reads them (written here in the shape of the RAG templates, Command-R's and
Granite's): the prompt the engine runs is transformers' ``apply_chat_template`` with the same
documents; a shape vLLM's model refuses is a 400 naming ``documents``."""

from __future__ import annotations

import aiohttp
import pytest

from tests.runtime.model.helpers import save_hf_model
from tests.server.chat_templates import hf_ids, model_dir

pytest.importorskip("transformers")

RAG = ("{% if documents %}<|im_start|>system\n{% for doc in documents %}"
       "[{{ loop.index0 }}] {{ doc['title'] }}: {{ doc['text'] }}\n{% endfor %}<|im_end|>\n"
       "{% endif %}{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
       "{{ message['content'] }}<|im_end|>\n{% endfor %}"
       "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
ASK = [{"role": "user", "content": "Where is it?"}]
DOCS = [{"title": "Tower", "text": "It is in Paris."}, {"title": "Bridge", "text": "Old."}]


@pytest.fixture(scope="module")
def rag_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("hf_rag")
    save_hf_model(d, "qwen2", vocab_size=320)
    return model_dir(d, RAG, "<|im_start|>", "<|im_end|>")


async def prompt_of(s, url: str, body: dict) -> tuple[list[int], str]:
    """The ids chat ran (return_token_ids) and their text (/detokenize)."""
    async with s.post(url + "/v1/chat/completions",
                      json={"messages": ASK, "max_tokens": 1, "return_token_ids": True,
                            **body}) as r:
        out = await r.json()
        assert r.status == 200, out
        assert "documents" not in r.headers.get("X-Kvpool-Ignored-Fields", "")
    ids = out["prompt_token_ids"]
    async with s.post(url + "/detokenize", json={"tokens": ids}) as r:
        return ids, (await r.json())["prompt"]


async def test_documents_are_rendered_as_transformers_renders_them(make_server, rag_dir):
    want = hf_ids(rag_dir, ASK, documents=DOCS, add_generation_prompt=True)
    async with make_server(model=str(rag_dir)) as srv, aiohttp.ClientSession() as s:
        ids, text = await prompt_of(s, srv.url, {"documents": DOCS})
        assert ids == want
        assert "[0] Tower: It is in Paris.\n[1] Bridge: Old.\n" in text
        _, text = await prompt_of(s, srv.url, {})
        assert "Tower" not in text  # none given: None, the template's own branch
        for empty in (None, []):
            assert (await prompt_of(s, srv.url, {"documents": empty}))[1] == text
        # vLLM's merge: a chat_template_kwargs entry is used, the field wins over it
        kw = {"chat_template_kwargs": {"documents": DOCS[1:]}}
        assert (await prompt_of(s, srv.url, kw))[1].count("Bridge: Old.") == 1
        assert (await prompt_of(s, srv.url, {**kw, "documents": DOCS}))[0] == want
        async with s.post(srv.url + "/tokenize", json={
                "messages": ASK, "chat_template_kwargs": {"documents": DOCS}}) as r:
            assert (await r.json())["tokens"] == want


async def test_a_bad_documents_shape_is_a_400(make_server, rag_dir):
    bad = ["a doc", {"title": "x"}, [1], ["x"], [{"title": 5}], [{"text": None}],
           [{"text": ["x"]}], [DOCS[0], {"n": {"a": "b"}}]]
    async with make_server(model=str(rag_dir)) as srv, aiohttp.ClientSession() as s:
        for docs in bad:
            async with s.post(srv.url + "/v1/chat/completions",
                              json={"messages": ASK, "max_tokens": 1,
                                    "documents": docs}) as r:
                out = await r.json()
                assert r.status == 400, (docs, out)
                assert set(out["error"]) == {"message", "type", "param", "code"}
                assert out["error"]["param"] == "documents"
                assert out["error"]["type"] == "invalid_request_error"
        ids, _ = await prompt_of(s, srv.url, {"documents": DOCS})  # still serving
        assert ids
