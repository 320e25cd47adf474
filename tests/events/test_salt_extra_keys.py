"""A salted chain's first BlockStored carries its salt in ``extra_keys``, where vLLM puts its
cache_salt, so an indexer that keys blocks on their tokens (llm-d's: its key for block 0 folds
that block's bare extra-key strings in, and its scorer folds a request's cache_salt into the
same block) keeps two tenants' identical prompts apart (docs/kv_events.md "Salts in
extra_keys"): the client's cache_salt, and for a tenant named by header an opaque keyed digest
(kvpool/server/salt_key.py NOTE(tenant-salt)), so tenants told apart by header alone are
apart there too. A real replica with a tenant header, a real SUB on 127.0.0.1, a decoder and a
small llm-d-like index (tests/events/helpers.py); the header's value is never published."""

from __future__ import annotations


import aiohttp

from stress.http.servers import SpawnedServer
from tests.events.helpers import SERVED_EVENTS, TokenIndex, replayed, stored_events

BS = 16
EVENTS = SERVED_EVENTS
ARGS = ["--block-size", str(BS), "--num-device-blocks", "64", "--num-host-blocks", "8",
        "--max-model-len", "512", "--seed", "0", "--num-threads", "1",
        "--tenant-header", "X-Tenant", "--kv-events-config", EVENTS]
PROMPT = list(range(20, 70))  # 3 full blocks
OTHER = list(range(120, 170))


async def _serve_and_replay(sends: list[tuple], extra: dict | None = None,
                            args: list[str] = ARGS) -> list[bytes]:
    """Each (tenant, cache_salt, prompt) of ``sends`` completed on a replica of its own
    (``args``; each body with ``extra`` too, and with a send's own fourth item, a dict, when it
    has one), every answer a 200; what its replay socket gives from 0."""
    srv = SpawnedServer(args, startup_timeout=120)
    url = srv.start()
    try:
        async with aiohttp.ClientSession() as s:
            async with s.get(url + "/v1/kvpool/kv_events") as r:
                info = await r.json()
            for tenant, salt, prompt, *own in sends:
                body = {"prompt": prompt, "max_tokens": 1, "temperature": 0,
                        **({"cache_salt": salt} if salt else {}), **(extra or {}),
                        **(own[0] if own else {})}
                async with s.post(url + "/v1/completions", json=body,
                                  headers={"X-Tenant": tenant} if tenant else {}) as r:
                    assert r.status == 200, await r.text()
        return replayed(info, b"r1")
    finally:
        srv.stop(timeout=20)


async def test_two_tenants_identical_prompts_stay_apart_in_a_token_keyed_index():
    payloads = await _serve_and_replay([("tenant-a-secret", "sa", PROMPT),
                                        ("tenant-b-secret", "sb", PROMPT),
                                        ("tenant-a-secret", None, OTHER),
                                        ("tenant-b-secret", None, OTHER),
                                        ("", "sa", OTHER), ("", None, OTHER)])
    assert not any(b"secret" in p or b"tenant\x00" in p for p in payloads)
    stored = stored_events(payloads)
    starts = [e for e in stored if e["parent_block_hash"] is None]
    firsts = [e for e in starts if e["token_ids"][0] == 20]
    assert len(firsts) == 2, stored  # each tenant's chain is its own (kvpool's namespaces)
    assert len(starts) == 6 and len({e["block_hashes"][0] for e in starts}) == 6
    # the published salt of a named tenant's chain: opaque, one per (tenant, cache_salt), the
    # client's own nowhere (NOTE(tenant-salt)); the anonymous tenant's is its cache_salt
    salts = [e["extra_keys"][0][0] for e in starts[:4]]
    assert all(x.startswith("kvpool-ns-") and len(x) == 42 for x in salts), salts
    assert len(set(salts)) == 4 and not {"sa", "sb"} & set(salts)
    assert [e.get("extra_keys") for e in starts[4:]] == [[["sa"], None, None], None]
    assert all(e.get("extra_keys") is None for e in stored if e not in starts)
    idx = TokenIndex(BS)
    for e in stored:
        idx.add(e)
    # two tenants' identical prompts, with or without a cache_salt, are 4 chains to a
    # token-keyed index too, and no request without the tenant's key hits them
    assert len(idx.keys) == 6 * 3
    assert idx.hits(PROMPT, "sa") == idx.hits(PROMPT, "sb") == idx.hits(PROMPT, None) == 0
    assert idx.hits(OTHER, "sa") == idx.hits(OTHER, None) == 3  # the anonymous tenant's


async def test_prompt_logprobs_requests_publish_their_chains_under_their_own_salt():
    """A prompt-logprobs request (lm-eval's echo + logprobs too) reads no cache but caches
    its blocks under its own salt (NOTE(skip-read) in kvpool/core/block_table.py): each
    tenant's chain is published once, as a plain request's, under that tenant's salt; the
    repeat computes duplicates, published no more. The engine serves on (reading a private
    salt for the event once raised on the step thread: NOTE(private-salt)). Both request
    shapes share one replica (a start is seconds of CI time), each on a prompt of its own."""
    shapes = (({"prompt_logprobs": 1}, PROMPT), ({"echo": True, "logprobs": 1}, OTHER))
    payloads = await _serve_and_replay([(tenant, None, prompt, extra) for extra, prompt in shapes
                                        for tenant in ("tenant-a-secret", "", "tenant-a-secret")])
    stored = stored_events(payloads)
    assert sum(e["parent_block_hash"] is None for e in stored) == 2 * len(shapes), stored
    for _, prompt in shapes:
        starts = [e for e in stored if e["parent_block_hash"] is None
                  and e["token_ids"][0] == prompt[0]]
        salts = [(e.get("extra_keys") or [[None]])[0][0] for e in starts]
        assert len(starts) == 2 and salts[0].startswith("kvpool-ns-"), salts
        assert salts[1] is None, salts  # the anonymous tenant's chain, unsalted


async def test_a_prompt_logprobs_chain_publishes_the_clients_salt_as_sent():
    """Without tenant namespaces a prompt-logprobs request's chain carries the client's
    cache_salt as any request's does; no engine request id is ever published (the private
    salt it was prefilled under before carried one)."""
    args = [a for a in ARGS if a not in ("--tenant-header", "X-Tenant")]
    payloads = await _serve_and_replay([("", "c1", PROMPT), ("", None, OTHER)],
                                       {"prompt_logprobs": 1}, args)
    starts = [e for e in stored_events(payloads) if e["parent_block_hash"] is None]
    salts = [(e.get("extra_keys") or [[None]])[0][0] for e in starts]
    assert salts == ["c1", None], salts
    assert not any(b"prompt_logprobs" in p or b"cmpl-" in p for p in payloads)
