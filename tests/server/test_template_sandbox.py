"""The chat-template sandbox refuses an operation that would spend seconds in one C call
(kvpool/server/template_sandbox.py NOTE(template-cost)). Before, ``(n + 9) ** 10000000`` held
the GIL ~10 s and ``'x' * 10**9`` built a GB: the router's render budget could neither fire nor
stop them (it froze 10-48 s) and the server rendered them too. Now each is a 400
``chat_template_error`` in the server (a request's own template over real HTTP) and a
TemplateRefused wherever a template renders; real templates render as Jinja renders them."""

from __future__ import annotations

import aiohttp
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from kvpool.server.chat_template import ModelChatTemplate
from kvpool.server.template_sandbox import BoundedSandbox, TemplateRefused
from tests.server.chat_templates import CALLED, CHATML, CONVERSATION, TOOL_CHATML

COSTLY = {  # the outside probe's templates and their kin, each a GB or a 10 s C call
    "pow": "{{ (messages|length + 9) ** 10000000 }}",
    "pow-in-if": "{% if (messages|length + 9) ** 30000000 > 0 %}{% endif %}",
    "pow-huge-exponent": "{{ 2 ** (10 ** 100) }}",
    "int-product": "{{ (2 ** 600000) * (2 ** 600000) }}",
    "str-repeat": "{{ 'x' * 10 ** 9 }}",
    "repeat-str": "{{ 10 ** 9 * 'x' }}",
    "list-repeat": "{{ messages * 10 ** 9 }}",
    "printf-width": "{{ '%0999999999d' % 1 }}",
    "printf-star": "{{ '%*d' % (999999999, 1) }}",
    "printf-named": "{{ '%(a)0999999999d' % {'a': 1} }}",
    "format-filter": "{{ '%0999999999d'|format(1) }}",
    "str-format": "{{ '{:>999999999}'.format(1) }}",
    "str-format-nested": "{{ '{:>{w}}'.format(1, w=999999999) }}",
    "str-format-precision": "{{ '{:.999999999f}'.format(1.0) }}",
    "format-map": "{{ '{a:>999999999}'.format_map({'a': 1}) }}",
    "str-method": "{{ 'x'.center(999999999) }}",
    "center-filter": "{{ 'x'|center(999999999) }}",
    "indent-filter": "{{ 'x\ny'|indent(999999999) }}",
}
# what real templates do with these operators: small, and rendered exactly as before
SMALL = ("{{ '-' * 80 }}|{{ 2 ** 10 }}|{{ 3 * 4 }}|{{ [0] * 3 }}|{{ '%05d' % 3 }}|"
         "{{ '%s-%s'|format(1, 2) }}|{{ '{:>5}'.format(1) }}|{{ '{a}'.format_map({'a': 1}) }}|"
         "{{ 'a'|center(5) }}|{{ 'x'.ljust(4) }}|{{ 1.5 ** 2 }}|{{ 7 % 3 }}|{{ 2 ** -1 }}")


@pytest.mark.parametrize("template", list(COSTLY.values()), ids=list(COSTLY))
def test_costly_operations_are_refused(template):
    with pytest.raises(TemplateRefused) as err:
        ModelChatTemplate(template).render([("user", "hi")])
    assert err.value.code == "chat_template_error" and err.value.param == "messages"
    assert "NOTE(template-cost)" in str(err.value)


@pytest.mark.parametrize("template, messages", [
    (CHATML, CONVERSATION), (TOOL_CHATML, CALLED), (SMALL, CONVERSATION)],
    ids=["chatml", "tool-chatml", "small-operators"])
def test_real_templates_render_as_jinja_renders_them(template, messages):
    outputs = [env(trim_blocks=True, lstrip_blocks=True).from_string(template).render(
        messages=messages, add_generation_prompt=True, tools=None)
        for env in (ImmutableSandboxedEnvironment, BoundedSandbox)]
    assert outputs[0] == outputs[1] and outputs[0]


async def test_the_server_answers_a_costly_template_400(make_server):
    async with make_server(app_options={"trust_request_chat_template": True}) as srv, \
            aiohttp.ClientSession() as s:
        body = {"model": srv.engine.model_name, "max_tokens": 1,
                "messages": [{"role": "user", "content": "hi"}]}
        for name in ("pow", "str-repeat", "printf-width", "str-format"):
            async with s.post(srv.v1 + "/chat/completions",
                              json={**body, "chat_template": COSTLY[name]}) as r:
                out = await r.json()
            assert r.status == 400 and out["error"]["code"] == "chat_template_error", out
            assert "NOTE(template-cost)" in out["error"]["message"], out
        async with s.post(srv.v1 + "/chat/completions",
                          json={**body, "chat_template": SMALL}) as r:
            assert r.status == 200, await r.text()
