"""A model's own chat template: found in its directory, rendered with Jinja2 in a sandbox.

Where the template comes from, first match wins::

    --chat-template VALUE                      an override (any model): a file, else the
                                               template inline, else a template's name
    <dir>/chat_template.jinja and              transformers 5's files: "default" and
      <dir>/additional_chat_templates/*.jinja  the named ones (NAME.jinja)
    <dir>/tokenizer_config.json "chat_template"  a string, or a list of {"name", "template"}
    none of those                              MissingChatTemplate: chat is a 400, as in vLLM
    no directory (the built-in model)          None: the caller uses the built-in template

Of named templates, "default" renders a request, and "tool_use" one that brings ``tools``
(``[]`` too: it is not None), as transformers' ``get_chat_template(tools=...)`` chooses (and so
vLLM). A request's own ``chat_template`` may name one of them instead (template_cache.py).

The environment mirrors transformers' ``apply_chat_template`` (a model's template was written
for it): ``ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)`` with the
``loopcontrols`` extension, a ``tojson`` filter that does not HTML-escape, ``raise_exception``
and ``strftime_now``, plus a bound on what one operation builds (template_sandbox.py
NOTE(template-cost): a refusal is a 400 ``chat_template_error``); the variables are
``messages``, ``add_generation_prompt``, ``tools`` (the request's as sent, ``[]`` included; None without any), ``documents`` (the request's,
else None: vllm_fields.py), the tokenizer's special-token strings (``bos_token``,
``eos_token``, ...: NOTE(special-tokens-map)) and the request's ``chat_template_kwargs``.
A rendered template already holds its BOS, so it is encoded without adding special tokens,
as transformers does with ``tokenize=True``.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from pathlib import Path
from typing import Any, Sequence

import jinja2

from kvpool.errors import RequestError
from kvpool.runtime.model.loader import special_token_strings
from kvpool.server.chat_messages import message_dict
from kvpool.server.template_sandbox import BoundedSandbox, TemplateRefused

__all__ = ["NO_TEMPLATE", "ChatTemplateError", "MissingChatTemplate", "ModelChatTemplate",
           "load_chat_template"]

log = logging.getLogger("kvpool.server")

# vLLM 0.33's words (vllm/renderers/hf.py), then this server's fix
NO_TEMPLATE = ("As of transformers v4.44, default chat template is no longer allowed, so you "
               "must provide a chat template if the tokenizer does not define one. (This "
               "server: start it with --chat-template.)")
_TEMPLATE_DIR = "additional_chat_templates"  # transformers 5's named templates, NAME.jinja
_Named = dict[str, tuple[str, str]]  # a template's name -> (its source, where it came from)

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


def _environment() -> BoundedSandbox:
    env = BoundedSandbox(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


def _compile(source: str, origin: str) -> jinja2.Template:
    try:
        return _environment().from_string(source)
    except jinja2.TemplateSyntaxError as exc:
        raise ChatTemplateError(f"{origin}: the chat template does not compile: "
                                f"{exc.message} (line {exc.lineno})") from exc


class ModelChatTemplate:
    """One compiled template (with the tokenizer's "tool_use" one, if any) plus the
    special-token strings it is rendered with."""

    add_special_tokens = False  # the rendered text carries its own BOS

    def __init__(self, source: str, special_tokens: dict[str, str] | None = None,
                 origin: str = "<string>", *, tool_use: tuple[str, str] | None = None,
                 named: _Named | None = None) -> None:
        """``tool_use``: the (source, origin) of the template a request with ``tools``
        renders with; ``named``: the tokenizer's templates a request's ``chat_template`` may
        name (NOTE(request-template-name)), compiled only when one is named."""
        self.source = source
        self.origin = origin  # where it came from, for messages
        self._template = _compile(source, origin)
        self._tool_template = None if tool_use is None else _compile(*tool_use)
        self.special_tokens = dict(special_tokens or {})
        self.named = dict(named or {})

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
        # NOTE(empty-tools): ``tools=[]`` is tools, as transformers' get_chat_template reads
        # ``tools is not None`` (vLLM's /tokenize hands its template the [] a client sent)
        tool_use = tools is not None and self._tool_template is not None
        template = self._tool_template if tool_use else self._template
        try:
            text = template.render(messages=chat, add_generation_prompt=add_generation_prompt,
                                   tools=None if tools is None else list(tools),
                                   documents=kw.pop("documents", None),
                                   **self.special_tokens, **kw)
        except jinja2.TemplateError as exc:  # the sandbox's refusals: NOTE(template-cost)
            sandbox = isinstance(exc, jinja2.exceptions.SecurityError)
            raise (TemplateRefused if sandbox else RequestError)(
                f"messages: the model's chat template rejected the conversation: {exc}",
                "messages", "chat_template_error") from None
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


class MissingChatTemplate:
    """A model directory whose tokenizer has no chat template.

    NOTE(no-template): kvpool's built-in template is for the built-in model only. On a model
    that never saw it, its markers may even encode as the model's own control tokens, so, as
    vLLM 0.33 does, every chat render is a 400 (the server logs the fix once at start:
    docs/architecture.md "A request's path"). A request's own ``chat_template`` (with
    ``--trust-request-chat-template``) still renders, with these special tokens."""

    def __init__(self, special_tokens: dict[str, str]) -> None:
        self.special_tokens = dict(special_tokens)

    def render(self, messages: Sequence[tuple], **options: Any) -> str:
        """ModelChatTemplate.render's arguments; there is nothing to render them with."""
        raise RequestError(NO_TEMPLATE)


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ChatTemplateError(f"{path}: invalid JSON ({exc})") from exc
    return data if isinstance(data, dict) else {}


def _read_template(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ChatTemplateError(f"{path}: cannot read it ({exc})") from exc


def _config_templates(value: Any, origin: str) -> _Named:
    """tokenizer_config.json's "chat_template": a string (the "default" one) or a list of
    ``{"name", "template"}`` objects."""
    if value is None:
        return {}
    if isinstance(value, str):
        return {"default": (value, origin)}
    if isinstance(value, list):
        return {t["name"]: (t["template"], origin) for t in value if isinstance(t, dict)
                and isinstance(t.get("name"), str) and isinstance(t.get("template"), str)}
    raise ChatTemplateError(f"{origin}: chat_template must be a string or a list of named "
                            "templates")


def _named_templates(model_dir: Path, tcfg: dict[str, Any]) -> _Named:
    """The tokenizer's templates by name, as transformers loads them: its files when there are
    any (chat_template.jinja is "default", additional_chat_templates/NAME.jinja is NAME, and
    then tokenizer_config.json's are not read), else tokenizer_config.json's."""
    named: _Named = {}
    single = model_dir / "chat_template.jinja"
    if single.is_file():
        named["default"] = (_read_template(single), str(single))
    extra = model_dir / _TEMPLATE_DIR
    for path in sorted(extra.glob("*.jinja")) if extra.is_dir() else ():
        named[path.name.removesuffix(".jinja")] = (_read_template(path), str(path))
    return named or _config_templates(tcfg.get("chat_template"),
                                      str(model_dir / "tokenizer_config.json"))


def _request_names(model_dir: Path, tcfg: dict[str, Any], named: _Named) -> _Named:
    """The templates a request's ``chat_template`` may name.

    NOTE(request-template-name): vLLM 0.33 hands a request's chat_template to transformers'
    get_chat_template, which maps a name to its template only when the tokenizer holds a dict
    of them: a tokenizer_config.json list, or template files other than chat_template.jinja
    alone. A lone template is a string there, so a request's "default" is rendered as that
    text; so it is here. The names are the tokenizer's, whatever --chat-template says."""
    single = set(named) == {"default"} and (
        (model_dir / "chat_template.jinja").is_file()
        or not isinstance(tcfg.get("chat_template"), list))
    return {} if single else named


def _override(value: str | Path, named: _Named, specials: dict[str, str],
              names: _Named) -> ModelChatTemplate:
    """--chat-template: a file; else, with a brace or a newline, the template itself (vLLM's
    rule: a Helm value or compose file inlines it so); else one of the tokenizer's names.
    ``names``: what a request's chat_template may name (_request_names)."""
    path = Path(value)
    try:
        return ModelChatTemplate(path.read_text(encoding="utf-8"), specials, str(path),
                                 named=names)
    except (OSError, UnicodeDecodeError) as exc:
        if isinstance(value, str) and any(c in value for c in "{}\n"):
            return ModelChatTemplate(value, specials, "--chat-template (inline)", named=names)
        if isinstance(value, str) and value in named:
            # NOTE(template-name): transformers' get_chat_template takes a template's name
            # where it takes a template ("tool_use"); vLLM 0.33 resolves one only in a
            # request's chat_template, its --chat-template refuses it as a missing file
            source, origin = named[value]
            return ModelChatTemplate(source, specials, origin, named=names)
        listed = f", nor a template name of the tokenizer ({sorted(named)})" if named else ""
        raise ChatTemplateError(f"--chat-template {path}: cannot read it ({exc}){listed}") \
            from exc


def load_chat_template(model_dir: str | Path | None, override: str | Path | None = None
                       ) -> ModelChatTemplate | MissingChatTemplate | None:
    """The template for a model directory (``None`` model: the built-in model, no template;
    a directory without one: :class:`MissingChatTemplate`, logged once)."""
    model_dir = None if model_dir is None else Path(model_dir)
    tcfg = _read_json(model_dir / "tokenizer_config.json") if model_dir else {}
    specials = {} if model_dir is None else special_token_strings(model_dir, _SPECIALS)
    named = {} if model_dir is None else _named_templates(model_dir, tcfg)
    names = {} if model_dir is None else _request_names(model_dir, tcfg, named)
    if override is not None:
        return _override(override, named, specials, names)
    if model_dir is None:
        return None
    if not named:
        log.warning("%s: the tokenizer has no chat template (no chat_template.jinja, no "
                    "chat_template in tokenizer_config.json): chat requests are refused (400), "
                    "as vLLM refuses them; to serve chat, start with --chat-template FILE",
                    model_dir)
        return MissingChatTemplate(specials)
    if "default" not in named:
        raise ChatTemplateError(f"{model_dir}: the tokenizer's chat templates have no 'default' "
                                f"(names: {sorted(named)}); name one with --chat-template NAME")
    source, origin = named["default"]
    return ModelChatTemplate(source, specials, origin, tool_use=named.get("tool_use"),
                             named=names)
