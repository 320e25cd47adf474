"""Model chat templates: prompt ids equal transformers' ``apply_chat_template(...,
tokenize=True, add_generation_prompt=True)`` for ChatML (Qwen), Llama-3 and Mistral-style
templates, on a tokenizer trained in the test; overrides, errors and the request fields."""

from __future__ import annotations

import pytest

from kvpool.errors import RequestError
from kvpool.runtime.model import load_tokenizer
from kvpool.server.chat_template import ChatTemplateError, load_chat_template
from kvpool.server.protocol import RequestParser
from tests.server.chat_templates import CHATML, CONVERSATION, hf_ids, model_dir, parser_for

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
    assert load_chat_template(bare) is None
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
