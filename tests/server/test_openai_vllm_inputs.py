"""Request shapes vLLM's OpenAI server answers 200 to, sent to a real kvpool server through
the openai client (or aiohttp where the client has no call for it): each one is a 200 here
too, and does what vLLM does with it."""

from __future__ import annotations

import json
import re

import aiohttp
import openai
import pytest

from tests.server.helpers import openai_client as client

USER = {"role": "user", "content": "Tell me a story"}


async def post(srv, path: str, body: dict | None = None) -> tuple[int, dict | str]:
    async with aiohttp.ClientSession() as s:
        async with s.post(srv.url + path, json=body) as r:
            is_json = r.content_type == "application/json"
            return r.status, await (r.json() if is_json else r.text())


async def rendered(srv, messages: list[dict]) -> str:
    status, body = await post(srv, "/tokenize", {"messages": messages})
    assert status == 200, body
    status, text = await post(srv, "/detokenize", {"tokens": body["tokens"]})
    assert status == 200, text
    return text["prompt"]


async def test_text_parts_of_every_kind_join_with_newlines(srv):
    parts = ["one", {"type": "text", "text": "two"}, {"type": "input_text", "text": "three"},
             {"type": "output_text", "text": "four"}, {"type": "text", "text": None}]
    said = [{"type": "refusal", "refusal": "no"}, {"type": "thinking", "thinking": "hmm"}]
    messages = [{"role": "user", "content": parts}, {"role": "assistant", "content": said},
                USER]
    flat = [{"role": "user", "content": "one\ntwo\nthree\nfour"},
            {"role": "assistant", "content": "no\nhmm"}, USER]
    assert await rendered(srv, messages) == await rendered(srv, flat)
    async with client(srv) as c:
        out = await c.chat.completions.create(model=srv.engine.model_name, messages=messages,
                                              max_tokens=2)
    assert out.usage.completion_tokens == 2


async def test_any_role_reaches_the_template(srv):
    messages = [USER, {"role": "ipython", "content": "42", "name": "calc"},
                {"role": "function", "name": "get", "content": "sunny"}]
    text = await rendered(srv, messages)
    assert "<|ipython|>\n42\n" in text and "<|function|>\nsunny\n" in text
    async with client(srv) as c:
        out = await c.chat.completions.create(model=srv.engine.model_name, messages=messages,
                                              max_tokens=2)
    assert out.usage.completion_tokens == 2


async def test_truncate_prompt_tokens_minus_one_keeps_the_whole_context(srv):
    m = srv.engine.model_name
    async with client(srv) as c:
        whole = await c.completions.create(model=m, prompt="Hello there", max_tokens=1)
        cut = await c.completions.create(model=m, prompt="Hello there", max_tokens=1,
                                         extra_body={"truncate_prompt_tokens": -1})
        chat = await c.chat.completions.create(model=m, messages=[USER], max_tokens=1,
                                               extra_body={"truncate_prompt_tokens": -1})
    assert cut.usage.prompt_tokens == whole.usage.prompt_tokens and chat.usage.prompt_tokens


async def test_ping_answers_as_health_does(srv):
    async with aiohttp.ClientSession() as s:
        for method in ("GET", "POST"):
            async with s.request(method, srv.url + "/ping") as r:
                assert r.status == 200 and (await r.json())["status"] == "ok"


GBNF = 'root ::= "(" num ("+" num)* ")"\nnum ::= [1-9]'


@pytest.mark.parametrize("extra", [{"guided_grammar": GBNF},
                                   {"structured_outputs": {"grammar": GBNF}}])
async def test_a_gbnf_grammar_constrains_the_output(srv, extra):
    async with client(srv) as c:
        r = await c.completions.create(model=srv.engine.model_name, prompt="x", max_tokens=64,
                                       seed=1, extra_body=extra)
        assert re.fullmatch(r"\([1-9](\+[1-9])*\)", r.choices[0].text), r.choices[0].text
        with pytest.raises(openai.BadRequestError) as info:
            await c.completions.create(model=srv.engine.model_name, prompt="x", max_tokens=4,
                                       extra_body={"guided_grammar": "root ::= ("})
    assert info.value.body["param"] == "guided_grammar"


async def test_structured_outputs_take_vllms_option_keys(srv):
    schema = {"type": "object", "required": ["a"],
              "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9}}}
    so = {"json": schema, "disable_any_whitespace": True, "disable_fallback": True,
          "whitespace_pattern": None, "disable_additional_properties": True}
    async with client(srv) as c:
        r = await c.completions.create(model=srv.engine.model_name, prompt="x", max_tokens=48,
                                       n=4, seed=1, temperature=1.5,
                                       extra_body={"structured_outputs": so})
        for ch in r.choices:  # closed: "a" and nothing else (open, the model adds keys)
            assert ch.finish_reason == "stop" and json.loads(ch.text).keys() == {"a"}, ch.text
        with pytest.raises(openai.BadRequestError) as info:
            await c.completions.create(model=srv.engine.model_name, prompt="x", max_tokens=4,
                                       extra_body={"structured_outputs": {
                                           "json": schema, "disable_any_whitespace": "yes"}})
    assert info.value.body["param"] == "structured_outputs.disable_any_whitespace"


async def test_a_number_without_a_fraction_is_an_integer(srv):
    whole = {"max_tokens": 3.0, "n": 2.0, "seed": 7.0, "top_k": 5.0, "min_tokens": 1.0,
             "logprobs": 1.0, "prompt_logprobs": 1.0, "priority": 0.0,
             "truncate_prompt_tokens": 4.0}
    status, body = await post(srv, "/v1/completions", {"prompt": "one two three four five",
                                                       **whole})
    assert status == 200, body
    assert [c["index"] for c in body["choices"]] == [0, 1] and body["usage"]["prompt_tokens"] == 4
    assert all(len(c["logprobs"]["tokens"]) == 3 for c in body["choices"])
    chat = {"messages": [USER], "max_completion_tokens": 2.0, "logprobs": True,
            "top_logprobs": 2.0}
    status, body = await post(srv, "/v1/chat/completions", chat)
    assert status == 200 and body["usage"]["completion_tokens"] == 2, body
    status, body = await post(srv, "/v1/completions", {"prompt": "hi", "max_tokens": 3.5})
    assert status == 400 and body["error"]["param"] == "max_tokens"


async def prompt_used(srv, path: str, body: dict) -> list[int]:
    status, out = await post(srv, path, {"max_tokens": 1, "prompt_logprobs": 1, **body})
    assert status == 200, out
    pl = out["prompt_logprobs"] if path.endswith("chat/completions") else \
        out["choices"][0]["prompt_logprobs"]
    assert len(pl) == out["usage"]["prompt_tokens"] and pl[0] is None
    return [{int(k) for k in entry} for entry in pl[1:]]


def scored(ids: list[int], used: list[set[int]]) -> bool:
    """Whether ``used`` (each prompt position's scored ids) has ``ids`` as the prompt."""
    return len(used) == len(ids) - 1 and all(i in u for i, u in zip(ids[1:], used))


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
async def test_truncation_side_picks_the_end_truncate_prompt_tokens_keeps(srv, path):
    """vLLM's truncation_side: "left" (the default, also for null) keeps the last N prompt
    tokens, "right" the first N; given without truncate_prompt_tokens it cuts nothing."""
    words = " ".join(f"w{i}" for i in range(40))
    if path == "/v1/completions":
        status, tok = await post(srv, "/tokenize", {"prompt": words})
        body = {"prompt": tok["tokens"]}
    else:
        body = {"messages": [{"role": "user", "content": words}]}
        status, tok = await post(srv, "/tokenize", body)
    assert status == 200, tok
    full, keep = tok["tokens"], 12
    assert len(full) > 2 * keep
    for side, want in (("right", full[:keep]), ("left", full[-keep:]), (None, full[-keep:])):
        used = await prompt_used(srv, path, {**body, "truncate_prompt_tokens": keep,
                                             "truncation_side": side})
        assert scored(want, used), side
        assert not scored(full[-keep:] if side == "right" else full[:keep], used)
    assert scored(full, await prompt_used(srv, path, {**body, "truncation_side": "right"}))


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
@pytest.mark.parametrize("side", ["middle", "LEFT", "", 1, True, ["left"], {"side": "left"}])
async def test_a_truncation_side_that_is_not_left_or_right_is_a_400(srv, path, side):
    body = {"prompt": "Hello there"} if path == "/v1/completions" else {"messages": [USER]}
    status, out = await post(srv, path, {**body, "max_tokens": 1, "truncate_prompt_tokens": 2,
                                         "truncation_side": side})
    assert status == 400, out
    assert set(out["error"]) == {"message", "type", "param", "code"}
    assert out["error"]["param"] == "truncation_side" and out["error"]["type"]
    status, out = await post(srv, path, {**body, "max_tokens": 1})  # the server goes on
    assert status == 200, out


async def test_model_cards_carry_vllms_permission_list(srv):
    async with client(srv) as c:
        listed = (await c.models.list()).data[0].model_dump()
        one = (await c.models.retrieve(listed["id"])).model_dump()
    for card in (listed, one):
        assert {"id", "object", "created", "owned_by", "root", "parent",
                "max_model_len"} <= set(card)
        (perm,) = card["permission"]
        assert perm["object"] == "model_permission" and perm["id"].startswith("modelperm-")
        assert perm["allow_sampling"] and perm["allow_logprobs"] and perm["allow_view"]
        assert not perm["allow_fine_tuning"] and perm["organization"] == "*"
        assert perm["group"] is None and perm["is_blocking"] is False


async def test_model_card_root_is_the_model_as_given_not_the_served_name(make_server, tmp_path):
    from kvpool.runtime.model import save_tiny_model

    d = str(save_tiny_model(tmp_path / "tiny"))
    # vLLM: root is --model (the path), whatever --served-model-name says; parent null
    async with make_server(model=d, served_model_name="alias") as srv, client(srv) as c:
        listed = (await c.models.list()).data
        one = (await c.models.retrieve("alias")).model_dump()
    assert [m.id for m in listed] == ["alias"]
    for card in (listed[0].model_dump(), one):
        assert card["root"] == d and card["parent"] is None


async def test_a_model_dir_is_served_under_model_as_given_its_basename_an_alias(make_server,
                                                                                 tmp_path,
                                                                                 caplog):
    """NOTE(served-name): vLLM serves --model DIR under DIR as given (kvpool served it under
    the basename: a vLLM client's model=DIR was a 404). The basename, kvpool's old name, is
    still served, answered as DIR: never listed, never in an answer or the metrics; its use
    is logged once, with the fix."""
    from kvpool.runtime.model import save_tiny_model

    d = str(save_tiny_model(tmp_path / "tiny")) + "/"  # as given: the trailing slash kept
    async with make_server(model=d) as srv, client(srv) as c:
        assert [m.id for m in (await c.models.list()).data] == [d]
        for asked in (d, "tiny"):
            r = await c.completions.create(model=asked, prompt="hi", max_tokens=1)
            assert r.model == d
            assert (await c.models.retrieve(asked)).id == d
        status, toks = await post(srv, "/tokenize", {"model": "tiny", "prompt": "hi"})
        assert status == 200 and toks["count"] > 0, toks
        with pytest.raises(openai.NotFoundError):
            await c.completions.create(model="tmp", prompt="hi", max_tokens=1)
        async with aiohttp.ClientSession() as s, s.get(srv.url + "/metrics") as r:
            labels = set(re.findall(r'model_name="([^"]*)"', await r.text()))
    assert srv.engine.model_name == d and labels == {d}
    said = [r.getMessage() for r in caplog.records if "kvpool's old name" in r.getMessage()]
    assert len(said) == 1 and "--served-model-name tiny" in said[0], said


@pytest.mark.parametrize("shape", ["prompt", "messages"])
async def test_tokenize_never_truncates_as_vllms_tokenize_request_has_no_such_field(srv, shape):
    """vLLM's TokenizeCompletionRequest / TokenizeChatRequest have no truncate_prompt_tokens
    or truncation_side: they are extra fields, ignored, and count is the whole prompt."""
    words = " ".join(f"w{i}" for i in range(40))
    body = {"prompt": words} if shape == "prompt" else \
        {"messages": [{"role": "user", "content": words}]}
    status, full = await post(srv, "/tokenize", body)
    assert status == 200 and full["count"] > 12, full
    for extra in ({"truncate_prompt_tokens": 12}, {"truncate_prompt_tokens": -1},
                  {"truncate_prompt_tokens": 12, "truncation_side": "right"},
                  {"truncate_prompt_tokens": 0, "truncation_side": "middle"}):
        status, out = await post(srv, "/tokenize", {**body, **extra})
        assert status == 200 and out == full, (extra, out)
