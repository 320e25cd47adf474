"""One prefix-cache namespace per tenant (cache_namespace.py) on the real server: where the server
tells tenants apart (``--tenant-header`` or ``--api-key``), tenant B's lookup and B's
``cached_tokens`` never show tenant A's prompt, even under the same ``cache_salt``; A's own
repeats still hit, and the lookup predicts each tenant's own ``cached_tokens``. With
``--shared-prefix-cache`` B sees A's hits; with no identity configured nothing changes (the
client salt alone, exactly as before)."""

from __future__ import annotations

import logging

import aiohttp

PROMPT = "the quick brown fox jumps over the lazy dog, " * 3  # ~135 byte tokens: 8 blocks
TENANT_HEADER = "X-Tenant-Id"
PER_TENANT = {"tenant_header": TENANT_HEADER}


def who(tenant: str | None) -> dict[str, str]:
    return {} if tenant is None else {TENANT_HEADER: tenant}


async def post(url: str, body: dict, headers: dict[str, str]) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as s, s.post(url, json=body, headers=headers) as r:
        return r.status, await r.json()


async def lookup(srv, body: dict, headers: dict[str, str]) -> int:
    status, out = await post(srv.v1 + "/kvpool/lookup", body, headers)
    assert status == 200, out
    return out["device_hit_tokens"]


async def cached(srv, body: dict, headers: dict[str, str], path: str = "/completions") -> int:
    status, out = await post(srv.v1 + path, {**body, "max_tokens": 1, "temperature": 0},
                             headers)
    assert status == 200, out
    return out["usage"]["prompt_tokens_details"]["cached_tokens"]


async def predicted_then_cached(srv, body: dict, headers: dict[str, str],
                                path: str = "/completions") -> int:
    """The lookup's prediction, checked against what the request then reports."""
    hit = await lookup(srv, body, headers)
    assert await cached(srv, body, headers, path) == hit, "lookup mispredicted cached_tokens"
    return hit


async def test_another_tenant_sees_no_hits_on_a_tenants_prompt(make_server):
    async with make_server(app_options=PER_TENANT) as srv:
        a, b = who("a"), who("b")
        body = {"prompt": PROMPT}
        assert await predicted_then_cached(srv, body, a) == 0  # A sends the prompt
        assert await predicted_then_cached(srv, body, b) == 0  # B guesses it: no oracle
        assert await predicted_then_cached(srv, body, who(None)) == 0  # anonymous too
        own = await predicted_then_cached(srv, body, a)  # A's repeat still hits
        assert own > 0
        assert await predicted_then_cached(srv, body, b) == own  # what B itself sent
        # the same client salt does not join two tenants' namespaces
        salted = {**body, "cache_salt": "team"}
        assert await predicted_then_cached(srv, salted, a) == 0
        assert await predicted_then_cached(srv, salted, b) == 0
        assert await predicted_then_cached(srv, salted, a) == own
        chat = {"messages": [{"role": "user", "content": PROMPT}]}
        await cached(srv, chat, a, "/chat/completions")
        assert await lookup(srv, chat, b) == 0
        assert await predicted_then_cached(srv, chat, b, "/chat/completions") == 0
        assert await predicted_then_cached(srv, chat, a, "/chat/completions") > 0


async def test_shared_prefix_cache_opts_into_one_namespace(make_server):
    async with make_server(app_options={**PER_TENANT, "shared_prefix_cache": True}) as srv:
        body = {"prompt": PROMPT}
        assert await predicted_then_cached(srv, body, who("a")) == 0
        shared = await predicted_then_cached(srv, body, who("b"))  # A's blocks
        assert shared > 0 and await predicted_then_cached(srv, body, who("a")) == shared


async def test_an_api_key_is_an_identity_and_the_lookup_sees_it(make_server):
    async with make_server(api_key="sk-test", app_options={}) as srv:
        key = {"Authorization": "Bearer sk-test"}
        body = {"prompt": PROMPT}
        assert await predicted_then_cached(srv, body, key) == 0
        hit = await predicted_then_cached(srv, body, key)
        assert hit > 0
        # the key's namespace, not the anonymous one of a server without identities
        mgr = srv.engine.core.manager
        ids = srv.engine.encode_prompt(PROMPT)
        assert mgr.prompts.prefix_hits(mgr.hasher.hash_blocks(ids, None)) == 0


async def test_without_an_identity_the_namespace_is_the_client_salt_alone(srv):
    body = {"prompt": PROMPT}
    await cached(srv, body, who("a"))  # no tenant header configured: the header means nothing
    assert await predicted_then_cached(srv, body, who("b")) > 0
    mgr = srv.engine.core.manager
    ids = srv.engine.encode_prompt(PROMPT)
    assert mgr.prompts.prefix_hits(mgr.hasher.hash_blocks(ids, None)) > 0  # as before
    await cached(srv, {**body, "cache_salt": "s"}, {})
    assert mgr.prompts.prefix_hits(mgr.hasher.hash_blocks(ids, "s")) > 0


async def test_a_client_salt_with_nul_is_refused(make_server):
    async with make_server(app_options=PER_TENANT) as srv:
        for path in ("/completions", "/kvpool/lookup"):
            status, out = await post(srv.v1 + path, {"prompt": "x", "cache_salt": "\x00t"},
                                     who("a"))
            assert status == 400, out
            assert out["error"]["param"] == "cache_salt"
            assert set(out["error"]) == {"message", "type", "param", "code"}


async def test_shared_prefix_cache_without_an_identity_is_logged_once(make_server, caplog):
    with caplog.at_level(logging.WARNING, logger="kvpool.server"):
        async with make_server(app_options={"shared_prefix_cache": True}) as srv:
            await cached(srv, {"prompt": PROMPT}, {})
            await cached(srv, {"prompt": PROMPT}, {})
    lines = [r.getMessage() for r in caplog.records if "--shared-prefix-cache" in r.getMessage()]
    assert len(lines) == 1 and "drop the flag" in lines[0], lines
