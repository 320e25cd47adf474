"""The Jinja sandbox chat templates are rendered in, with a bound on what one operation builds.

NOTE(template-cost): a chat template is a program someone else wrote (a model directory,
--chat-template, a request's own with --trust-request-chat-template, and in the router the
template its replicas name: kvpool/router/kv_prompt.py). Jinja's sandbox keeps it away from
Python's internals, not from one operation that runs for seconds inside a single C call:
``(messages|length + 9) ** 10000000`` builds a 33-million-bit integer (10 s),
``'x' * 10**9`` or ``'%0999999999d' % 1`` or ``'{:>999999999}'.format(1)`` a GB of text. A C
call holds the GIL until it returns: the router's render budget (kvpool/router/kv_render.py
NOTE(render-budget)) could neither fire nor stop it, and the router froze 10-48 s. So these
are refused before they run, when what they would build passes a bound far above any real
template's (a ruler of ``'-' * 80``, a counter):

    ``a ** b`` (ints)                     more than MAX_INT_BITS bits
    ``a * b`` (ints)                      more than MAX_INT_BITS bits
    ``s * n`` (str, list, tuple)          more than MAX_TEXT characters or items
    ``'%...' % x``, ``|format``           a width or precision over MAX_TEXT
    ``'{...}'.format``, ``format_map``    a width or precision over MAX_TEXT
    ``s.center(n)`` (any str method),     an int argument over MAX_TEXT
      ``|center(n)``, ``|indent(n)``

A refusal is Jinja's SecurityError, which chat_template.py raises as TemplateRefused (any
other sandbox refusal too): the server answers it as any template error (a 400
``chat_template_error``); the router places that chat without the template's keys and says so
once (kvpool/router/kv_render.py).

What this does not do: bound every C call. A template written to hurt still finds operations
whose cost is not in their arguments (``''.replace('', s)``, ``|join``, ``|tojson(indent=n)``,
``list.count`` over two large lists, ``|sum`` over large values): seconds of CPU or a GB, in
one call. The sandbox is a guard against a costly template by mistake, not a boundary against
its author: only templates the operator trusts belong in a server (the model directory's,
``--chat-template``; a request's own only with ``--trust-request-chat-template``, whose help
says the server runs it, as vLLM's does), and the router renders its replicas' templates in a
process it can kill (kv_render.py NOTE(render-budget)).
"""

from __future__ import annotations

import math
import re
import types
from functools import update_wrapper
from typing import Any, Callable

import jinja2.ext
from jinja2.exceptions import SecurityError
from jinja2.filters import do_center, do_format, do_indent
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEscapeFormatter, \
    SandboxedFormatter
from markupsafe import Markup, soft_str

from kvpool.errors import RequestError

__all__ = ["MAX_INT_BITS", "MAX_TEXT", "BoundedSandbox", "TemplateRefused"]

MAX_TEXT = 1 << 20  # characters (or list items) one operation may build: NOTE(template-cost)
MAX_INT_BITS = 1 << 20  # bits of an integer one ``*`` or ``**`` may build (128 KiB)

_SEQUENCES = (str, list, tuple)
# a printf conversion's width and precision: digits, or "*" (taken from the arguments)
_PRINTF = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")
_DIGITS = re.compile(r"\d+")


class TemplateRefused(RequestError):
    """A chat template the sandbox stopped (NOTE(template-cost), or an unsafe attribute): the
    template's fault, not the conversation's. A 400 as any template error."""


def _refuse(what: str) -> None:
    raise SecurityError(f"the chat template builds {what}, past the server's bound "
                        f"(NOTE(template-cost) in kvpool/server/template_sandbox.py)")


def _wide(digits: str) -> bool:
    return len(digits) > 7 or int(digits) > MAX_TEXT


def _is_int(x: Any) -> bool:
    return isinstance(x, int)


def _check_printf(fmt: str, args: Any) -> None:
    """``fmt % args``: refused when a conversion is wider or more precise than MAX_TEXT."""
    star = False
    for m in _PRINTF.finditer(fmt):
        for g in m.groups():
            if g == "*":
                star = True
            elif g and _wide(g):
                _refuse(f"a '%' conversion {g} characters wide")
    values = args if isinstance(args, tuple) else (args,)
    if star and any(_is_int(v) and abs(v) > MAX_TEXT for v in values):
        _refuse("a '%*' conversion wider than the bound")


def _check_binop(op: str, a: Any, b: Any) -> None:
    if op == "**" and _is_int(a) and _is_int(b) and b > 0 and abs(a) > 1:
        bits = b * math.log2(abs(a)) if b.bit_length() < 64 else math.inf
        if bits > MAX_INT_BITS:
            _refuse(f"an integer power of about {bits:.3g} bits")
    elif op == "*" and _is_int(a) and _is_int(b):
        if a.bit_length() + b.bit_length() > MAX_INT_BITS:
            _refuse("an integer product too many bits long")
    elif op == "*" and (isinstance(a, _SEQUENCES) and _is_int(b)
                        or isinstance(b, _SEQUENCES) and _is_int(a)):
        seq, n = (a, b) if isinstance(a, _SEQUENCES) else (b, a)
        if len(seq) * n > MAX_TEXT:
            _refuse(f"a {type(seq).__name__} repeated to {len(seq) * n} items")
    elif op == "%" and isinstance(a, str):
        _check_printf(a, b)


class _BoundedFormatter(SandboxedFormatter):
    """str.format's fields, each spec's width and precision bounded (after nested fields
    are filled in: vformat hands ``format_field`` the spec it will use)."""

    def format_field(self, value: Any, format_spec: str) -> Any:
        if any(_wide(d) for d in _DIGITS.findall(format_spec)):
            _refuse(f"a '{{:{format_spec[:20]}}}' field wider than the bound")
        return super().format_field(value, format_spec)


class _BoundedEscapeFormatter(_BoundedFormatter, SandboxedEscapeFormatter):
    """The same, for a Markup string's format (escaping its arguments)."""


def _int_args(args: tuple, kwargs: dict[str, Any]) -> list[int]:
    return [v for v in (*args, *kwargs.values()) if _is_int(v)]


def _bounded_filter(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """Jinja's filter ``fn`` (a width argument: center, indent), refused past MAX_TEXT."""

    def filtered(value: Any, *args: Any, **kwargs: Any) -> Any:
        if any(abs(n) > MAX_TEXT for n in _int_args(args, kwargs)):
            _refuse(f"{name} with a width over {MAX_TEXT}")
        return fn(value, *args, **kwargs)

    return update_wrapper(filtered, fn)


def _format_filter(value: Any, *args: Any, **kwargs: Any) -> str:
    _check_printf(soft_str(value), kwargs or args)
    return do_format(value, *args, **kwargs)


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """transformers' environment (chat_template.py) with NOTE(template-cost)'s bounds."""

    intercepted_binops = frozenset({"**", "*", "%"})

    def __init__(self, **options: Any) -> None:
        """``options``: jinja2.Environment's; the loopcontrols extension is always on."""
        super().__init__(extensions=[jinja2.ext.loopcontrols], **options)
        self.filters["format"] = _format_filter
        self.filters["center"] = _bounded_filter(do_center, "|center")
        self.filters["indent"] = _bounded_filter(do_indent, "|indent")

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        """Jinja's hook for ``intercepted_binops``: the bound first, then the operator."""
        _check_binop(operator, left, right)
        return super().call_binop(context, operator, left, right)

    def call(self, context: Context, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        """A str method (``center``, ``ljust``, ``zfill``, ``expandtabs``...) given a
        width over MAX_TEXT is refused; every call is Jinja's sandboxed one."""
        if isinstance(obj, types.BuiltinMethodType) and isinstance(obj.__self__, str) \
                and any(abs(n) > MAX_TEXT for n in _int_args(args, kwargs)):
            _refuse(f"str.{obj.__name__} with a width over {MAX_TEXT}")
        return super().call(context, obj, *args, **kwargs)

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        """Jinja's str.format / format_map wrapper, its formatter bounded (_BoundedFormatter)."""
        if super().wrap_str_format(value) is None:
            return None  # not a str's format or format_map
        text, by_map = value.__self__, value.__name__ == "format_map"
        formatter = _BoundedEscapeFormatter(self, escape=text.escape) \
            if isinstance(text, Markup) else _BoundedFormatter(self)

        def wrapper(*args: Any, **kwargs: Any) -> str:
            if by_map:
                if kwargs or len(args) != 1:
                    raise TypeError("format_map() takes exactly one mapping")
                args, kwargs = (), args[0]
            return type(text)(formatter.vformat(text, args, kwargs))

        return update_wrapper(wrapper, value)
