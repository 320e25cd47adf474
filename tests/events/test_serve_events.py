"""``kvpool serve --kv-events-config``: a real replica publishes its cache in vLLM's format."""

from __future__ import annotations

import json

import aiohttp
import pytest

from kvpool.core.hashing import BlockHasher
from kvpool.server import serve
from stress.http.servers import SpawnedServer
from tests.events.helpers import Sub, plain
from tests.server.helpers import parse_metrics

EVENTS = json.dumps({"enable_kv_cache_events": True, "publisher": "zmq",
                     "endpoint": "tcp://127.0.0.1:0", "replay_endpoint": "tcp://127.0.0.1:0",
                     "topic": "r1"})
ARGS = ["--block-size", "16", "--num-device-blocks", "64", "--num-host-blocks", "8",
        "--max-model-len", "512", "--seed", "0", "--num-threads", "1"]


class _Info:
    def __init__(self, info):
        self.endpoint, self.replay_endpoint = info["endpoint"], info["replay_endpoint"]


@pytest.mark.parametrize("text, named", [
    ("{not json", "not JSON"), ('{"enable_kv_cache_events": true, "bogus": 1}', "bogus"),
    ('{"publisher": "kafka"}', "kafka"), ('{"endpoint": "inproc://x"}', "tcp://"),
])
def test_a_bad_events_config_exits_2_naming_it(text, named, capsys):
    assert serve.main(["--kv-events-config", text]) == 2
    err = capsys.readouterr().err
    assert "--kv-events-config" in err and named in err, err


NAMED_EVENTS = ["--kv-events-config", EVENTS, "--served-model-name", "a", "b"]
# the info route's fields: every served name (it listed the first alone)
WANT = {"enabled": True, "topic": "r1", "block_size": 16, "endpoint_mode": "bind",
        "model_names": ["a", "b"]}


async def test_a_served_prompt_is_published_with_the_replicas_hashes():
    srv = SpawnedServer([*ARGS, *NAMED_EVENTS], startup_timeout=120)
    url = srv.start()
    try:
        async with aiohttp.ClientSession() as s:
            async with s.get(url + "/v1/kvpool/kv_events") as r:
                info = await r.json()
            assert {k: info[k] for k in WANT} == WANT and "connects_to" not in info
            assert isinstance(info["instance"], str) and len(info["instance"]) == 16
            async with s.get(url + "/kv_event_sources") as r:  # vLLM's route
                assert r.status == 200
                sources = await r.json()
            ids = list(range(20, 70))  # 3 full blocks
            async with s.post(url + "/v1/completions", json={
                    "prompt": ids, "max_tokens": 1, "temperature": 0}) as r:
                assert r.status == 200, await r.text()
            # a subscriber that finds the publisher where vLLM's say it is follows it
            sub = Sub(_Info(sources["0"]), topic=b"r1")
            try:
                out = sub.replay([b"", (0).to_bytes(8, "big")])
            finally:
                sub.close()
            async with s.get(url + "/metrics") as r:
                m = parse_metrics(await r.text())
    finally:
        srv.stop(timeout=20)
    assert sources == {"0": {
        "enable_kv_cache_events": True, "publisher": "zmq", "endpoint": info["endpoint"],
        "replay_endpoint": info["replay_endpoint"], "buffer_steps": 10_000, "hwm": 100_000,
        "max_queue_size": 100_000, "topic": "r1"}}
    assert info["endpoint"].startswith("tcp://127.0.0.1:") and not info["endpoint"].endswith(":0")
    events = [e for msg in out[:-1] for e in plain(msg[3])[1]]
    assert events[0] == {"type": "AllBlocksCleared"}
    stored = [h for e in events if e["type"] == "BlockStored" for h in e["block_hashes"]]
    h = info["hash"]
    want = BlockHasher(info["block_size"], h["model_id"], h["algo"]).hash_blocks(ids)
    assert stored[:3] == want
    assert m["kvpool_kv_events_published_total"][()] >= 2
    assert m["kvpool_kv_events_dropped_total"][()] == 0


async def test_without_the_flag_the_route_says_disabled():
    srv = SpawnedServer(ARGS, startup_timeout=120)
    url = srv.start()
    try:
        async with aiohttp.ClientSession() as s:
            async with s.get(url + "/v1/kvpool/kv_events") as r:
                assert r.status == 200 and await r.json() == {"enabled": False}
            async with s.get(url + "/kv_event_sources") as r:  # vLLM's: no source
                assert r.status == 200 and await r.json() == {}
    finally:
        srv.stop(timeout=20)
