"""Model chat templates: prompt ids equal transformers' ``apply_chat_template(...,
tokenize=True, add_generation_prompt=True)`` for ChatML (Qwen), Llama-3 and Mistral-style
templates, on a tokenizer trained in the test; overrides, errors and the request fields."""

from __future__ import annotations

import json

import pytest

from kvpool.errors import RequestError
from kvpool.runtime.model import load_tokenizer
from kvpool.server.chat_template import (NO_TEMPLATE, ChatTemplateError, MissingChatTemplate,
                                         load_chat_template)
from kvpool.server.protocol import RequestParser
from tests.runtime.model.helpers import train_tokenizer
from tests.server.chat_templates import (CHATML, CONVERSATION, hf_ids, model_dir, parser_for,
                                         transformers)

LLAMA3 = ("{{ bos_token }}{% for message in messages %}"
          "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
          "message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
          "{% if add_generation_prompt %}"
          "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")
MISTRAL = """{{ bos_token }}
{% if messages[0]['role'] == 'system' %}
    {% set system = messages[0]['content'] + '\\n\\n' %}{% set loop_messages = messages[1:] %}
{% else %}
    {% set system = '' %}{% set loop_messages = messages %}
{% endif %}
{% for message in loop_messages %}
    {% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{ raise_exception('Conversation roles must alternate user/assistant/user/assistant') }}
    {% endif %}
    {% if message['role'] == 'user' %}
        {{ '[INST] ' + (system if loop.first else '') + message['content'] + ' [/INST]' }}
    {% else %}
        {{ ' ' + message['content'] + eos_token }}
    {% endif %}
{% endfor %}"""

@pytest.mark.parametrize("name, template, bos, eos, as_file", [
    ("chatml", CHATML, "<|im_start|>", "<|im_end|>", False),
    ("llama3", LLAMA3, "<|begin_of_text|>", "<|eot_id|>", True),
    ("mistral", MISTRAL, "<s>", "</s>", False),
    ("named-list", [{"name": "tool_use", "template": "{{ raise_exception('no') }}"},
                    {"name": "default", "template": CHATML}], "<s>", "</s>", False),
])
def test_prompt_ids_equal_transformers(tmp_path, name, template, bos, eos, as_file):
    d = model_dir(tmp_path, template, bos, eos, as_file=as_file)
    p = parser_for(d)
    for messages in (CONVERSATION, CONVERSATION[1:2], CONVERSATION[:2]):
        if name == "mistral" and messages[-1]["role"] != "user":
            continue
        got = p.parse_chat({"messages": messages, "max_tokens": 4}).prompt_ids
        assert got == hf_ids(d, messages, add_generation_prompt=True)
        off = p.parse_chat({"messages": messages, "max_tokens": 4,
                            "add_generation_prompt": False}).prompt_ids
        assert off == hf_ids(d, messages, add_generation_prompt=False)
    if name != "mistral":
        body = {"messages": CONVERSATION[:3], "max_tokens": 4, "add_generation_prompt": False,
                "continue_final_message": True}
        assert p.parse_chat(body).prompt_ids == hf_ids(d, CONVERSATION[:3],
                                                       continue_final_message=True)


def test_template_errors_are_400s_naming_the_problem(tmp_path):
    d = model_dir(tmp_path, MISTRAL, "<s>", "</s>")
    p = parser_for(d)
    with pytest.raises(RequestError) as err:
        p.parse_chat({"messages": [{"role": "user", "content": "a"},
                                   {"role": "user", "content": "b"}]})
    assert err.value.param == "messages" and "must alternate" in str(err.value)
    with pytest.raises(RequestError) as err:
        p.parse_chat({"messages": CONVERSATION[:3], "add_generation_prompt": True,
                      "continue_final_message": True})
    assert err.value.param == "continue_final_message"
    # a final user message is continued too, as transformers (and so vLLM) continues it
    user_last = {"messages": CONVERSATION[:2], "add_generation_prompt": False,
                 "continue_final_message": True}
    assert CONVERSATION[1]["role"] == "user"
    assert p.parse_chat(user_last).prompt_ids == hf_ids(d, CONVERSATION[:2],
                                                        continue_final_message=True)


def test_sandbox_blocks_escapes(tmp_path):
    evil = "{{ ''.__class__.__mro__[1].__subclasses__() }}"
    p = parser_for(model_dir(tmp_path, evil, "<s>", "</s>"))
    with pytest.raises(RequestError) as err:
        p.parse_chat({"messages": CONVERSATION[1:2]})
    assert err.value.param == "messages" and err.value.code == "chat_template_error"


def test_override_file_and_fallbacks(tmp_path):
    d = model_dir(tmp_path / "m", CHATML, "<s>", "</s>")
    override = tmp_path / "t.jinja"
    override.write_text("{{ bos_token }}{% for m in messages %}{{ m['content'] | tojson }}"
                        "{% endfor %}")
    p = parser_for(d, override)
    ids = p.parse_chat({"messages": [{"role": "user", "content": "<a & b>"}]}).prompt_ids
    assert p.tokenizer.decode(ids, skip_special_tokens=False) == '<s>"<a & b>"'
    assert load_chat_template(None) is None  # the built-in model: built-in template
    bare = tmp_path / "bare"
    bare.mkdir()
    assert isinstance(load_chat_template(bare), MissingChatTemplate)  # test_no_template_...
    with pytest.raises(ChatTemplateError, match="does not compile"):
        load_chat_template(model_dir(tmp_path / "bad", "{% for %}", "<s>", "</s>"))
    with pytest.raises(ChatTemplateError, match="default"):
        load_chat_template(model_dir(tmp_path / "list", [{"name": "x", "template": "y"}],
                                     "<s>", "</s>"))


def test_default_chat_template_kwargs_go_under_the_requests_own(tmp_path):
    """vLLM's --default-chat-template-kwargs (app.py's default_chat_template_kwargs): the
    template sees them where a request leaves them out, and a request's own win key by key."""
    d = model_dir(tmp_path, "{{ tone }}/{{ size }}:{% for m in messages %}{{ m.content }}"
                            "{% endfor %}", "<s>", "</s>")
    p = RequestParser(load_tokenizer(d), ["m"], 4096, max_n=1, max_tokens_limit=16,
                      max_stop=4, chat_template=load_chat_template(d, None),
                      defaults={"chat_template_kwargs": {"tone": "calm", "size": "s"}})
    tok = load_tokenizer(d)
    ask = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    assert tok.decode(p.parse_chat(ask).prompt_ids).endswith("calm/s:hi")
    mine = {**ask, "chat_template_kwargs": {"size": "xl"}}
    assert tok.decode(p.parse_chat(mine).prompt_ids).endswith("calm/xl:hi")


def test_an_inline_chat_template_is_the_template_itself(tmp_path):
    """vLLM's --chat-template takes "the template in single-line form" too: a value no file
    holds, with a brace or a newline, is the template (it was refused as a missing file);
    a missing file named plainly is still refused."""
    inline = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
    p = parser_for(model_dir(tmp_path, CHATML, "<s>", "</s>"), inline)
    tok = load_tokenizer(tmp_path)
    ask = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    assert tok.decode(p.parse_chat(ask).prompt_ids).endswith("<user>hi")
    with pytest.raises(ChatTemplateError, match="cannot read it"):
        load_chat_template(tmp_path, str(tmp_path / "missing.jinja"))


SPECIALS_SEEN = "{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}"


@pytest.mark.parametrize("config_tokens, decoder", [
    ({}, False),  # the older layout: special_tokens_map.json only
    ({"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}, False),  # both: the map wins
    ({}, True),  # with added_tokens_decoder transformers does not read the map at all
])
def test_special_tokens_map_is_read_as_transformers_reads_it(tmp_path, config_tokens, decoder):
    d = model_dir(tmp_path, SPECIALS_SEEN, "x", "x")
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg = {k: v for k, v in cfg.items() if k not in ("bos_token", "eos_token")} | config_tokens
    if decoder:
        cfg["added_tokens_decoder"] = {"0": {"content": "<s>", "special": True}}
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    (d / "special_tokens_map.json").write_text(json.dumps({"bos_token": {"content": "<s>"},
                                                           "eos_token": "</s>"}))
    ids = parser_for(d).parse_chat({"messages": CONVERSATION[1:2]}).prompt_ids
    assert ids == hf_ids(d, CONVERSATION[1:2])
    if not decoder:
        assert load_tokenizer(d).decode(ids[:1], skip_special_tokens=False) == "<s>"


def test_no_template_refuses_chat_as_vllm_does(tmp_path, caplog):
    """A tokenizer without a template: chat and /tokenize messages are vLLM's 400, the fix is
    logged once at load; a request's own template still renders (with the tokenizer's
    special tokens), and the built-in model keeps its built-in template."""
    train_tokenizer(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>"}))
    with caplog.at_level("WARNING", logger="kvpool.server"):
        template = load_chat_template(tmp_path)
    said = [r for r in caplog.records if "no chat template" in r.getMessage()]
    assert len(said) == 1 and "--chat-template" in said[0].getMessage()
    p = RequestParser(load_tokenizer(tmp_path), ["m"], 4096, max_n=1, max_tokens_limit=16,
                      max_stop=4, chat_template=template, trust_request_chat_template=True)
    for parse in (p.parse_chat, p.parse_tokenize):
        with pytest.raises(RequestError) as err:
            parse({"messages": CONVERSATION[1:2]})
        assert str(err.value) == NO_TEMPLATE and err.value.param is None
    own = p.parse_chat({"messages": CONVERSATION[1:2], "chat_template": SPECIALS_SEEN})
    assert p.tokenizer.decode(own.prompt_ids, skip_special_tokens=False).startswith("<s>Hello")
    assert load_chat_template(None) is None  # the built-in model: the built-in template


TOOL_USE = "TOOLS:{{ tools[0].function.name if tools }}\n" + CHATML
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]


def _named_dir(d, layout):
    """A tokenizer whose "default" is CHATML and "tool_use" TOOL_USE, in either layout."""
    if layout == "tokenizer_config list":
        return model_dir(d, [{"name": "default", "template": CHATML},
                             {"name": "tool_use", "template": TOOL_USE}], "<s>", "</s>")
    model_dir(d, CHATML, "<s>", "</s>", as_file=True)
    (d / "additional_chat_templates").mkdir()
    (d / "additional_chat_templates" / "tool_use.jinja").write_text(TOOL_USE)
    return d


@pytest.mark.parametrize("layout", ["tokenizer_config list", "additional_chat_templates"])
def test_tool_use_template_renders_requests_with_tools(tmp_path, layout):
    """transformers' get_chat_template(tools=...): "tool_use" when tools are given, else
    "default"; --chat-template NAME picks one by name (a file of that name would win)."""
    d = _named_dir(tmp_path, layout)
    hf = transformers.AutoTokenizer.from_pretrained(str(d))
    ask = CONVERSATION[1:2]
    want_tools = hf.apply_chat_template(ask, tools=TOOLS, add_generation_prompt=True,
                                        tokenize=False)
    assert want_tools.startswith("TOOLS:get_weather\n")
    p = parser_for(d)
    got = p.parse_tokenize({"messages": ask, "tools": TOOLS})
    assert p.tokenizer.decode(got, skip_special_tokens=False) == want_tools
    assert p.parse_tokenize({"messages": ask}) == hf_ids(d, ask, add_generation_prompt=True)
    named = parser_for(d, "tool_use").parse_tokenize({"messages": ask})  # no tools: by name
    assert p.tokenizer.decode(named, skip_special_tokens=False).startswith("TOOLS:")
    with pytest.raises(ChatTemplateError, match="tool_use"):
        load_chat_template(d, "tool_usage")  # neither a file nor a name: the names are listed


def _trusting(d, override=None) -> RequestParser:
    return RequestParser(load_tokenizer(d), ["m"], 4096, max_n=1, max_tokens_limit=16,
                         max_stop=4, chat_template=load_chat_template(d, override),
                         trust_request_chat_template=True)


@pytest.mark.parametrize("layout", ["tokenizer_config list", "additional_chat_templates"])
def test_a_requests_chat_template_may_name_a_template(tmp_path, layout):
    """NOTE(request-template-name): vLLM hands a request's chat_template to transformers'
    get_chat_template, which reads one of the tokenizer's names as that template (and then
    does not switch on tools); still refused without --trust-request-chat-template."""
    d, ask = _named_dir(tmp_path, layout), CONVERSATION[1:2]
    for override in (None, "default"):  # --chat-template does not change the tokenizer's names
        p = _trusting(d, override)
        for name, tools in (("tool_use", None), ("default", TOOLS), ("tool_use", TOOLS)):
            got = p.parse_tokenize({"messages": ask, "chat_template": name, "tools": tools})
            assert got == hf_ids(d, ask, chat_template=name, tools=tools,
                                 add_generation_prompt=True), (override, name, tools)
        text = p.tokenizer.decode(p.parse_chat({"messages": ask, "chat_template": "tool_use"})
                                  .prompt_ids, skip_special_tokens=False)
        assert text.startswith("TOOLS:\n<|im_start|>user")
    with pytest.raises(RequestError) as err:
        parser_for(d).parse_chat({"messages": ask, "chat_template": "tool_use"})
    assert err.value.code == "untrusted_chat_template"


def test_a_lone_template_reads_a_name_as_text(tmp_path):
    """NOTE(request-template-name): a tokenizer with one template (a string in transformers)
    resolves no name: "default" is the template's whole text, as vLLM renders it."""
    d, ask = model_dir(tmp_path, CHATML, "<s>", "</s>", as_file=True), CONVERSATION[1:2]
    got = _trusting(d).parse_tokenize({"messages": ask, "chat_template": "default"})
    assert got == hf_ids(d, ask, chat_template="default")
    assert load_tokenizer(d).decode(got, skip_special_tokens=False) == "default"


EMPTY_TOOLS = [{"name": "default", "template": "DEFAULT"},
               {"name": "tool_use", "template": "TOOLS:{{ tools | length }}"}]


def test_empty_tools_are_tools_to_the_template(tmp_path):
    """NOTE(empty-tools): transformers' get_chat_template picks "tool_use" for ``tools=[]``
    and hands the template [] (``tools | length`` fails on None); no tools: "default"."""
    d = model_dir(tmp_path, EMPTY_TOOLS, "<s>", "</s>")
    hf = transformers.AutoTokenizer.from_pretrained(str(d))
    tpl, ask = load_chat_template(d), CONVERSATION[1:2]
    for tools in ([], TOOLS, None):
        want = hf.apply_chat_template(ask, tools=tools, tokenize=False)
        assert tpl.render([("user", ask[0]["content"])], tools=tools) == want
    assert tpl.render([("user", "hi")], tools=[]) == "TOOLS:0"
    p = parser_for(d)  # /tokenize hands the template the [] a client sent, as vLLM does
    got = p.parse_tokenize({"messages": ask, "tools": []})
    assert p.tokenizer.decode(got, skip_special_tokens=False) == hf.apply_chat_template(
        ask, tools=[], tokenize=False, add_generation_prompt=True)
