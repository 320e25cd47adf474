"""The server's one engine contract and its one request gate, over the real engine and app.

- AsyncEngine offers every call of EngineClient (the contract the server types against);
- the tenant quota charges the pool's own block count: ``n`` sequences hold the prompt's full
  blocks once, so a request the pool counts as fitting the quota is admitted;
- a request of several prompts reserves their sum at once, and every reservation comes back;
- an empty prompt is refused at the edge, once, for every kind of prompt (the engine trusts
  the edge and never sees it).
"""

from __future__ import annotations

import inspect
import logging

import aiohttp
import pytest

from kvpool.server.app import GATE_KEY
from kvpool.server.engine_client import EngineClient


def test_async_engine_offers_every_call_of_the_contract():
    from kvpool.runtime.engine.async_engine import AsyncEngine

    engine_fields = AsyncEngine.__init__.__code__.co_names
    for name in EngineClient.__annotations__:  # attributes: set in AsyncEngine.__init__
        assert name in engine_fields, f"AsyncEngine has no attribute {name}"
    for name, fn in vars(EngineClient).items():
        if name.startswith("_") or not callable(fn):
            continue
        real = getattr(AsyncEngine, name, None)
        assert real is not None, f"AsyncEngine has no {name}()"
        want = inspect.signature(fn).parameters
        got = inspect.signature(real).parameters
        assert list(want) == [p for p in got if p in want], (name, list(want), list(got))
        assert inspect.iscoroutinefunction(fn) == inspect.iscoroutinefunction(real), name


async def _post(url: str, body: dict) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as s, s.post(url, json=body) as r:
        return r.status, await r.json()


async def test_quota_charges_the_pools_count_for_n_sequences(make_server):
    # 33 prompt tokens (2 full blocks of 16) + 16 new, n=2: the pool holds the 2 full prompt
    # blocks once and one block per sequence after them: 2 + 2 * 1 = 4 blocks. A quota of 5
    # admits it (charging each sequence a whole table, 2 * ceil(49 / 16) = 8, refused it).
    async with make_server(app_options={"tenant_block_quota": 5}) as srv:
        gate = srv.app[GATE_KEY]
        assert srv.engine.core.checker.blocks_held(33, 16, 2) == 4
        status, out = await _post(srv.v1 + "/completions", {
            "prompt": list(range(5, 38)), "max_tokens": 16, "n": 2, "ignore_eos": True,
            "temperature": 0})
        assert status == 200, out
        assert [c["finish_reason"] for c in out["choices"]] == ["length", "length"]
        assert gate.quota.reserved("") == 0
        # 4 sequences need 2 + 4 * 1 = 6 blocks: more than the quota, never admitted
        status, out = await _post(srv.v1 + "/completions", {
            "prompt": list(range(5, 38)), "max_tokens": 16, "n": 4, "ignore_eos": True})
        assert status == 400 and out["error"]["code"] == "tenant_quota_exceeded", out
        assert "6 KV blocks" in out["error"]["message"] and gate.quota.reserved("") == 0


async def test_several_prompts_reserve_their_sum_and_give_it_back(make_server):
    async with make_server(app_options={"tenant_block_quota": 6}) as srv:
        gate = srv.app[GATE_KEY]
        two = {"prompt": [[5, 6, 7], [8, 9, 10]], "max_tokens": 30, "ignore_eos": True}
        status, out = await _post(srv.v1 + "/completions", two)  # 2 + 2 blocks <= 6
        assert status == 200 and len(out["choices"]) == 2, out
        assert gate.quota.reserved("") == 0 and gate.live == 0
        # 4 prompts of 2 blocks: 8 > 6 can never be admitted, so a 400 (not a 429 forever)
        status, out = await _post(srv.v1 + "/completions",
                                  {**two, "prompt": [[5, 6, 7]] * 4})
        assert status == 400 and out["error"]["code"] == "tenant_quota_exceeded", out
        assert gate.quota.reserved("") == 0 and gate.live == 0


@pytest.mark.parametrize("prompt, message", [
    ("", "prompt: must not be empty"),
    ([], "prompt: must not be empty"),
    (["hello", ""], "prompt: prompt 1: must not be empty"),
    ([[5, 6], []], "prompt: prompt 1: must not be empty"),
])
async def test_an_empty_prompt_is_refused_at_the_edge(srv, prompt, message):
    status, out = await _post(srv.v1 + "/completions", {"prompt": prompt, "max_tokens": 2})
    assert status == 400, out
    err = out["error"]
    assert (err["message"], err["param"], err["type"]) == (
        message, "prompt", "invalid_request_error")
    assert srv.engine.requests_in_flight() == 0


async def test_a_quota_below_one_whole_context_is_said_at_start(make_server, caplog):
    """request_gate.py NOTE(short-quota): a quota under what one request of the whole context
    holds refuses every chat request without max_tokens; the start says so once, with the
    number to raise it to. A quota that holds one such request says nothing."""
    caplog.set_level(logging.WARNING, "kvpool.server")
    async with make_server(app_options={"tenant_block_quota": 5}) as srv:
        whole = srv.engine.core.checker.blocks_held(1, srv.engine.max_model_len - 1, 1)
        status, out = await _post(srv.v1 + "/chat/completions", {
            "messages": [{"role": "user", "content": "hi"}]})
        assert status == 400 and out["error"]["code"] == "tenant_quota_exceeded", out
    said = [r.getMessage() for r in caplog.records if "--tenant-block-quota" in r.getMessage()]
    assert len(said) == 1 and f"raise the quota to {whole} or more" in said[0], said
    caplog.clear()
    async with make_server(app_options={"tenant_block_quota": whole}):
        pass
    assert not [r for r in caplog.records if "--tenant-block-quota" in r.getMessage()]
