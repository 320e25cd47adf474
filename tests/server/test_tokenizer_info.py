"""vLLM's GET /tokenizer_info on the real server (kvpool/server/tokenizer_info.py): absent (404)
without ``--enable-tokenizer-info-endpoint``, as in vLLM; with it, the tokenizer's
tokenizer_config.json (saved AddedTokens as their content, no path of the server's machine),
``tokenizer_class`` and the chat template the server renders with. The built-in model's
template is served as Jinja that renders what the server's chat renders
(NOTE(builtin-jinja))."""

from __future__ import annotations

import json

import aiohttp
import jinja2
import pytest

from kvpool import cli
from kvpool.runtime.model.tiny import save_tiny_model
from kvpool.server.builtin_template import JINJA_SOURCE, ChatTemplate
from kvpool.server.chat_template import ModelChatTemplate
from kvpool.server.serve_options import ServeOptions

TEMPLATE = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{{ eos_token }}{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")
SAVED = {"content": "<s>", "lstrip": False, "normalized": False, "rstrip": False,
         "single_word": False, "special": True}
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {
    "type": "object", "properties": {"x": {"type": "string"}}}}}, {"name": "g"}]
CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": "é"}'}}
CHATS = [  # (messages, render options)
    ([("user", "hi")], {}),
    ([("developer", "be brief"), ("user", "hi"), ("assistant", "yo"), ("user", "and")], {}),
    ([("user", "what")], {"tools": TOOLS}),
    ([("system", "sys"), ("user", "q")], {"tools": TOOLS}),
    ([("user", "q"), ("assistant", "", {"tool_calls": [CALL]}),
      ("tool", "42", {"tool_call_id": "c1"})], {"tools": TOOLS}),
    ([("user", "q"), ("assistant", "so far")], {"continue_final_message": True,
                                                 "add_generation_prompt": False}),
    ([("user", "q")], {"add_generation_prompt": False, "tools": []}),
]


def serve_options(*argv: str) -> dict:
    """build_app's keywords from a `kvpool serve ...` command line."""
    args = cli.build_parser("serve").parse_args(["serve", *argv])
    return ServeOptions.from_args(args).request_defaults


async def get_info(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as s, s.get(url + "/tokenizer_info") as r:
        return r.status, await r.text()


async def test_off_by_default_on_with_vllms_flag(make_server):
    for argv, status in [((), 404), (("--enable-tokenizer-info-endpoint",), 200),
                         (("--no-enable-tokenizer-info-endpoint",), 404)]:
        async with make_server(app_options=serve_options(*argv)) as srv:
            assert (await get_info(srv.url))[0] == status, argv


async def test_built_in_model_says_its_tokenizer_and_template(make_server):
    async with make_server(app_options={"tokenizer_info": True}) as srv, \
            aiohttp.ClientSession() as s:
        status, text = await get_info(srv.url)
        info = json.loads(text)
        assert status == 200 and info == {
            "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>",
            "eos_token": "</s>", "pad_token": "<pad>", "model_max_length": 8192,
            "split_special_tokens": True, "chat_template": JINJA_SOURCE}
        # lm-eval's RemoteTokenizer renders it so (StrictUndefined), then tokenizes the text
        env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
        messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
        text = env.from_string(info["chat_template"]).render(messages=messages,
                                                             add_generation_prompt=True)
        ids = []
        for body in ({"prompt": text}, {"messages": messages}):
            async with s.post(srv.url + "/tokenize", json=body) as r:
                ids.append((await r.json())["tokens"])
        assert ids[0] == ids[1]  # what chat renders for the conversation


@pytest.mark.parametrize("messages, options", CHATS)
def test_built_in_jinja_renders_as_the_built_in_template(messages, options):
    jinja = ModelChatTemplate(JINJA_SOURCE)  # the server's sandbox, transformers' tojson
    assert jinja.render(messages, **options) == ChatTemplate().render(messages, **options)


async def test_hf_directory_answers_its_config_without_paths(make_server, tmp_path):
    d = save_tiny_model(tmp_path / "model")
    config = json.loads((d / "tokenizer_config.json").read_text())
    (d / "tokenizer_config.json").write_text(json.dumps({
        **config, "bos_token": {**SAVED, "__type": "AddedToken"}, "chat_template": TEMPLATE,
        "added_tokens_decoder": {"0": SAVED, "1": {**SAVED, "content": "</s>"}},
        "clean_up_tokenization_spaces": False, "vocab_file": str(d / "vocab.json"),
        "special_tokens_map_file": str(d / "special_tokens_map.json"),
        "name_or_path": str(d)}))
    want = {**config, "added_tokens_decoder": {"0": "<s>", "1": "</s>"},
            "clean_up_tokenization_spaces": False}
    inline = "{{ messages[0].content }}"
    for app_options, template in [({}, TEMPLATE), ({"chat_template": inline}, inline)]:
        async with make_server(model=str(d), app_options={"tokenizer_info": True,
                                                          **app_options}) as srv:
            status, text = await get_info(srv.url)
        assert status == 200 and json.loads(text) == {**want, "chat_template": template}
        assert str(tmp_path) not in text  # NOTE(no-paths)
