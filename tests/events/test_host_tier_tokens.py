"""Swapped-out (``CPU``) BlockStored events carry their blocks' token ids and, at a chain's
start, the chain's published salt, as ``GPU`` ones do (kvpool/core/swap.py NOTE(host-tokens)),
so an indexer keying blocks on their tokens (llm-d's) gives a block the same key on both tiers,
whether or not it saw the GPU event. A real replica with ``--api-key`` (one tenant, named by
the key's digest) crowded into swapping, a real SUB on 127.0.0.1, and the llm-d-like index of
tests/events/helpers.py; neither the key nor its digest is ever published
(kvpool/server/salt_key.py NOTE(tenant-salt))."""

from __future__ import annotations

import asyncio
import hashlib

import aiohttp

from stress.http.servers import SpawnedServer
from tests.events.helpers import SERVED_EVENTS, TokenIndex, replayed, stored_events

BS = 4
KEY = "sk-host-tier-secret"
EVENTS = SERVED_EVENTS
ARGS = ["--block-size", str(BS), "--num-device-blocks", "24", "--num-host-blocks", "64",
        "--preemption-mode", "swap", "--max-model-len", "64", "--seed", "0",
        "--num-threads", "1", "--api-key", KEY, "--kv-events-config", EVENTS]
AUTH = {"Authorization": f"Bearer {KEY}"}


async def _crowd_and_replay() -> list[bytes]:
    """Four sequences growing to 15 blocks each on a device pool of 24 (any two at once
    swap); then the replay."""
    srv = SpawnedServer(ARGS, startup_timeout=120)
    url = srv.start()
    try:
        async with aiohttp.ClientSession(headers=AUTH) as s:
            async with s.get(url + "/v1/kvpool/kv_events") as r:
                info = await r.json()

            async def one(i: int) -> None:
                body = {"prompt": list(range(10 + 20 * i, 30 + 20 * i)), "max_tokens": 40,
                        "temperature": 0, "ignore_eos": True, "cache_salt": "cs"}
                async with s.post(url + "/v1/completions", json=body) as r:
                    assert r.status == 200, await r.text()

            await asyncio.gather(*(one(i) for i in range(4)))
        return replayed(info, b"r1")
    finally:
        srv.stop(timeout=20)


async def test_swapped_out_blocks_are_published_with_tokens_under_the_gpu_keys():
    payloads = await _crowd_and_replay()
    digest = hashlib.sha256(KEY.encode()).hexdigest()[:16].encode()
    assert not any(KEY.encode() in p or digest in p for p in payloads)
    stored = stored_events(payloads)
    gpu = [e for e in stored if e["medium"] == "GPU"]
    cpu = [e for e in stored if e["medium"] == "CPU"]
    assert cpu, "no swap-out was published"
    idx, keys = TokenIndex(BS), {}
    for e in gpu:
        keys.update(zip(e["block_hashes"], idx.add(e)))
    fresh = TokenIndex(BS)  # an indexer that never saw the GPU events
    both = 0
    for e in cpu:
        assert len(e["token_ids"]) == BS * len(e["block_hashes"]), e
        got = idx.add(e)
        both += sum(h in keys for h in e["block_hashes"])
        # the same key a block's GPU event gave it (a block the device had not yet
        # registered when it swapped out has none)
        assert all(k == keys[h] for h, k in zip(e["block_hashes"], got) if h in keys)
        if e["parent_block_hash"] is None:
            assert fresh.add(e) == got
            assert e["extra_keys"][0][0].startswith("kvpool-ns-"), e
            assert e["extra_keys"][1:] == [None] * (len(got) - 1)
        else:
            assert "extra_keys" not in e
    assert both and any(e["parent_block_hash"] is None for e in cpu)
