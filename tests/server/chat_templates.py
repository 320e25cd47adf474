"""Chat templates and conversations the chat tests share: a tokenizer directory trained in
the test with a given template (``model_dir``), the RequestParser over it, the ids
transformers' ``apply_chat_template`` gives for the same messages, and a ChatML template with
tools plus a conversation that calls one."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from kvpool.runtime.model import load_tokenizer
from kvpool.server.chat_template import load_chat_template
from kvpool.server.protocol import RequestParser
from tests.runtime.model.helpers import train_tokenizer

transformers = pytest.importorskip("transformers")

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
SPECIALS = ["<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|start_header_id|>",
            "<|end_header_id|>", "<|eot_id|>", "[INST]", "[/INST]"]
CONVERSATION = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Hello, world! 🎉"},
                {"role": "assistant", "content": "Hi. The cat sat on the mat."},
                {"role": "user", "content": "What do blocks store?"}]
# a ChatML template with tools, written for these tests in the shape of Qwen 2.5's
TOOL_CHATML = """{%- if tools %}<|im_start|>system
{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}

{% endif %}# Tools
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>
Call a function with <tool_call>{"name": ..., "arguments": ...}</tool_call>.<|im_end|>
{% elif messages[0]['role'] == 'system' %}<|im_start|>system
{{ messages[0]['content'] }}<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message['role'] == 'tool' %}<|im_start|>user
<tool_response>
{{ message['content'] }}
</tool_response><|im_end|>
{% elif message['role'] == 'assistant' %}<|im_start|>assistant
{{ message['content'] or '' }}{% for tc in message['tool_calls'] or [] %}<tool_call>
{"name": "{{ tc['function']['name'] }}", "arguments": {{ tc['function']['arguments'] | tojson }}}
</tool_call>{% endfor %}<|im_end|>
{% elif message['role'] != 'system' %}<|im_start|>{{ message['role'] }}
{{ message['content'] }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""
CALLED = [  # as an OpenAI client sends it: arguments are JSON text
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "18 C, clear"},
]


def model_dir(tmp_path: Path, template, bos: str, eos: str, *, as_file: bool = False) -> Path:
    from tokenizers import AddedToken, Tokenizer

    tmp_path.mkdir(parents=True, exist_ok=True)
    train_tokenizer(tmp_path)
    tok = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    tok.save(str(tmp_path / "tokenizer.json"))
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": bos, "eos_token": eos,
           "add_bos_token": False}
    if as_file:
        (tmp_path / "chat_template.jinja").write_text(template)
    else:
        cfg["chat_template"] = template
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(cfg))
    return tmp_path


def think_dir(d: Path, template: str, tags: bool | tuple[str, ...] = True,
              special: bool = False) -> Path:
    """A ChatML tokenizer directory whose tokenizer has ``tags`` (True: ``<think>`` and
    ``</think>``) as added tokens: plain, as Qwen3's and DeepSeek-R1's are (they stay in
    decoded text), or ``special`` as Mistral's ``[THINK]`` is."""
    from tokenizers import AddedToken, Tokenizer

    model_dir(d, template, "<|im_start|>", "<|im_end|>")
    if tags:
        tok = Tokenizer.from_file(str(d / "tokenizer.json"))
        names = ("<think>", "</think>") if tags is True else tags
        add = tok.add_special_tokens if special else tok.add_tokens
        add([AddedToken(t, special=special, normalized=False) for t in names])
        tok.save(str(d / "tokenizer.json"))
    return d


def parser_for(d: Path, override=None) -> RequestParser:
    return RequestParser(load_tokenizer(d), ["m"], 4096, max_n=1, max_tokens_limit=16,
                         max_stop=4, chat_template=load_chat_template(d, override))


def hf_ids(d: Path, messages, **kw) -> list[int]:
    tok = transformers.AutoTokenizer.from_pretrained(str(d))
    out = tok.apply_chat_template(messages, tokenize=True, **kw)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def as_template_sees(messages):
    """What transformers is handed for the same conversation (arguments as objects)."""
    out = copy.deepcopy(messages)
    for m in out:
        for tc in m.get("tool_calls") or ():
            tc["function"]["arguments"] = json.loads(tc["function"]["arguments"])
    return out
