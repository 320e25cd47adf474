"""A model's own chat template: found in its directory, rendered with Jinja2 in a sandbox.

Where the template comes from, first match wins::

    --chat-template FILE                       an override (any model)
    <dir>/chat_template.jinja                  transformers' newer layout
    <dir>/tokenizer_config.json "chat_template"  a string, or a list of {"name", "template"}
                                               (the one named "default" is used)
    none of those                              None: the caller falls back to the built-in one

The environment mirrors transformers' ``apply_chat_template`` (a model's template was written
for it): ``ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)`` with the
``loopcontrols`` extension, a ``tojson`` filter that does not HTML-escape, ``raise_exception``
and ``strftime_now``; the variables are ``messages``, ``add_generation_prompt``, ``tools``
(the request's, else None), ``documents`` (the request's, else None: vllm_fields.py), the
tokenizer's special-token strings (``bos_token``, ``eos_token``, ...) and the request's
``chat_template_kwargs``.
A rendered template already holds its BOS, so it is encoded without adding special tokens,
as transformers does with ``tokenize=True``.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any, Sequence

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

from kvpool.errors import RequestError
from kvpool.server.chat_messages import message_dict

__all__ = ["ChatTemplateError", "ModelChatTemplate", "load_chat_template"]

_SPECIALS = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token",
             "mask_token")
# transformers' trick for continue_final_message: tag the last message, cut the render there
_CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "


class ChatTemplateError(ValueError):
    """A template that cannot be read or compiled (a startup error, naming the file)."""


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: Any = None, sort_keys: bool = False) -> str:
    # NOTE(tojson): Jinja's own filter HTML-escapes '<', '>', '&'; templates expect plain JSON.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


def _token_string(value: Any) -> str | None:
    """tokenizer_config.json writes a special token as a string or as {"content": ...}."""
    content = value.get("content") if isinstance(value, dict) else value
    return content if isinstance(content, str) else None


class ModelChatTemplate:
    """One compiled template plus the special-token strings it is rendered with."""

    add_special_tokens = False  # the rendered text carries its own BOS

    def __init__(self, source: str, special_tokens: dict[str, str] | None = None,
                 origin: str = "<string>") -> None:
        self.source = source
        self.origin = origin  # where it came from, for messages
        try:
            self._template = _environment().from_string(source)
        except jinja2.TemplateSyntaxError as exc:
            raise ChatTemplateError(f"{origin}: the chat template does not compile: "
                                    f"{exc.message} (line {exc.lineno})") from exc
        self.special_tokens = dict(special_tokens or {})

    def render(self, messages: Sequence[tuple], *, add_generation_prompt: bool = True,
               continue_final_message: bool = False,
               variables: dict[str, Any] | None = None,
               tools: Sequence[dict[str, Any]] | None = None) -> str:
        """Render messages (chat_messages.ChatMessage, or ``(role, content)`` pairs); a
        template error is a 400 naming it. ``variables``: vLLM's chat_template_kwargs
        (reserved names refused by the caller). ``tools``: the request's, as sent (the
        ``tools`` transformers' apply_chat_template hands a template; None without any)."""
        chat = [message_dict(m) for m in messages]
        kw = dict(variables or {})
        if continue_final_message:  # whoever's it is: vLLM checks the role for Mistral's
            final = chat[-1]["content"]  # tokenizers only, transformers continues any
            chat[-1]["content"] = final + _CONTINUE_TAG
        try:
            text = self._template.render(messages=chat, add_generation_prompt=add_generation_prompt,
                                         tools=list(tools) if tools else None,
                                         documents=kw.pop("documents", None),
                                         **self.special_tokens, **kw)
        except jinja2.TemplateError as exc:
            raise RequestError(f"messages: the model's chat template rejected the conversation: "
                               f"{exc}", "messages", "chat_template_error") from None
        except Exception as exc:  # noqa: BLE001 - a template is untrusted code: any failure is its
            raise RequestError(f"messages: the model's chat template failed: "
                               f"{type(exc).__name__}: {exc}", "messages",
                               "chat_template_error") from None
        if continue_final_message:
            tag = text.rfind(_CONTINUE_TAG.strip())
            if tag < 0 or final.strip() not in text:
                raise RequestError("continue_final_message: the chat template drops part of the "
                                   "final message, so it cannot be continued",
                                   "continue_final_message")
            text = text[:tag] if text[tag:tag + len(_CONTINUE_TAG)] == _CONTINUE_TAG \
                else text[:tag].rstrip()
        return text


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ChatTemplateError(f"{path}: invalid JSON ({exc})") from exc
    return data if isinstance(data, dict) else {}


def _pick(value: Any, origin: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list):  # [{"name": "default", "template": ...}, {"name": "tool_use"...}]
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
        chosen = named.get("default")
        if isinstance(chosen, str):
            return chosen
        raise ChatTemplateError(f"{origin}: chat_template is a list without a 'default' "
                                f"template (names: {sorted(map(str, named))})")
    raise ChatTemplateError(f"{origin}: chat_template must be a string or a list of named "
                            "templates")


def load_chat_template(model_dir: str | Path | None,
                       override: str | Path | None = None) -> ModelChatTemplate | None:
    """The template for a model directory (``None`` model: the built-in model, no template)."""
    tcfg = _read_json(Path(model_dir) / "tokenizer_config.json") if model_dir else {}
    specials = {k: s for k in _SPECIALS if (s := _token_string(tcfg.get(k))) is not None}
    if override is not None:
        path = Path(override)
        try:
            return ModelChatTemplate(path.read_text(encoding="utf-8"), specials, str(path))
        except (OSError, UnicodeDecodeError) as exc:
            if isinstance(override, str) and any(c in override for c in "{}\n"):
                # vLLM's rule: a value no file holds, with a brace or a newline, is the
                # template itself (a Helm value or compose file inlines it so)
                return ModelChatTemplate(override, specials, "--chat-template (inline)")
            raise ChatTemplateError(f"--chat-template {path}: cannot read it ({exc})") from exc
    if model_dir is None:
        return None
    jinja_file = Path(model_dir) / "chat_template.jinja"
    if jinja_file.is_file():
        return ModelChatTemplate(jinja_file.read_text(encoding="utf-8"), specials,
                                 str(jinja_file))
    origin = str(Path(model_dir) / "tokenizer_config.json")
    source = _pick(tcfg.get("chat_template"), origin)
    return None if source is None else ModelChatTemplate(source, specials, origin)
