"""Replicas given one secret (``--kv-events-salt-key-file PATH`` or
``$KVPOOL_KV_EVENTS_SALT_KEY``) publish one salt per (tenant, cache_salt) in their KV events,
so a token-keyed indexer (llm-d's) sees a tenant's prefix held on every replica that holds it,
across restarts too; without one, each start draws its own key (kvpool/server/salt_key.py
NOTE(shared-salt-key), docs/kv_events.md "Salts in extra_keys"). Real replicas and publishers,
real SUB / DEALER sockets on 127.0.0.1, the llm-d-like index of tests/events/helpers.py."""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys

import aiohttp
import pytest

from kvpool.core.block import Device
from kvpool.errors import ConfigError
from kvpool.router.kv_prompt import PromptKeys
from kvpool.server import serve
from kvpool.server.kv_events_route import NO_CACHE, NOT_ENABLED, KVEventsRoute
from kvpool.server.cache_namespace import CacheNamespace
from kvpool.server.salt_key import CLEAR_TOKENS, SALT_KEY_ENV, SaltKey
from stress.http.servers import ROOT, SpawnedServer
from tests.events.helpers import (SERVED_EVENTS, Sub, TokenIndex, plain, publisher, replayed, stored_events,
                                  wait_subscribed)

BS = 16
SECRET = "a-shared-secret-of-32-bytes-XXXX"
EVENTS = SERVED_EVENTS
ARGS = ["--block-size", str(BS), "--num-device-blocks", "64", "--num-host-blocks", "8",
        "--max-model-len", "512", "--seed", "0", "--num-threads", "1",
        "--tenant-header", "X-Tenant", "--kv-events-config", EVENTS]
PROMPT = list(range(20, 70))  # 3 full blocks
TENANTS = ("tenant-a", "tenant-b")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != SALT_KEY_ENV}
    return {**env, **extra}


def _published(key: SaltKey | None, chains: list[tuple[str, dict]]) -> list[dict]:
    """What a publisher of its own (a KVEventsRoute on a real PUB, as a start builds it)
    publishes for each (tenant, BlockStored) of ``chains``: the same blocks and tokens stored
    under the tenant's salt, the key ``key`` (None: the default, one of its own start)."""
    route = KVEventsRoute(publisher(), BS, key)
    sub = Sub(route.publisher)
    try:
        wait_subscribed(route.publisher, sub)
        for tenant, e in chains:
            route.recorder.stored(Device.DEVICE, e["block_hashes"], None, e["token_ids"],
                                  salt=CacheNamespace(identity=True).salt(tenant, None))
        got = sub.until(lambda evs: sum(e["type"] == "BlockStored" for e in evs) == len(chains))
        return [e for m in got for e in plain(m[2])[1] if e["type"] == "BlockStored"]
    finally:
        sub.close()
        route.publisher.close()


def _salt(e: dict) -> str:
    return e["extra_keys"][0][0]


CHAIN = {"block_hashes": [bytes([i]) * 32 for i in range(3)], "token_ids": PROMPT[:3 * BS]}


async def test_a_replica_given_the_key_file_publishes_what_any_holder_of_the_key_does(tmp_path):
    key_file = tmp_path / "salt.key"
    key_file.write_text(SECRET + "\n")
    srv = SpawnedServer([*ARGS, "--kv-events-salt-key-file", str(key_file)],
                        startup_timeout=120, env=_env())
    url = srv.start()
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(url + "/v1/kvpool/kv_events") as r:
                info = await r.json()
            for tenant in TENANTS:  # one after the other: the replay's order is theirs
                body = {"prompt": PROMPT, "max_tokens": 1, "temperature": 0}
                async with http.post(url + "/v1/completions", json=body,
                                     headers={"X-Tenant": tenant}) as r:
                    assert r.status == 200, await r.text()
        starts = [e for e in stored_events(replayed(info, b"r1"))
                  if e["parent_block_hash"] is None]
    finally:
        srv.stop(timeout=20)
    assert len(starts) == 2 and all(_salt(e).startswith("kvpool-ns-") for e in starts), starts
    assert _salt(starts[0]) != _salt(starts[1])  # tenants still apart
    for tenant, e in zip(TENANTS, starts):  # kvpool router's keys take no salt key
        assert PromptKeys(info).keys({"prompt": PROMPT}, [("X-Tenant", tenant)]) == \
            (e["block_hashes"], 3)
    # another replica (a publisher) given the same secret: the very same events, so a
    # token-keyed index gives a tenant's blocks one key whichever of the two holds them
    key = SaltKey.from_secret(SECRET.encode(), "another replica's")
    assert _published(key, list(zip(TENANTS, starts))) == starts
    assert info["tenant_salt_key_id"] == key.key_id is not None
    said = [ln for ln in srv.lines if "shared key from --kv-events-salt-key-file" in ln]
    assert len(said) == 1 and f"{key_file} (key id {key.key_id})" in said[0], srv.tail()
    assert not any(SECRET in ln for ln in srv.lines) and SECRET not in json.dumps(info)


def test_publishers_given_one_key_agree_per_tenant_others_differ():
    key = SaltKey.from_secret(SECRET.encode(), "one")
    one = _published(key, [("tenant-a", CHAIN), ("tenant-b", CHAIN)])
    two = _published(SaltKey.from_secret(SECRET.encode(), "two"), [("tenant-a", CHAIN)])
    assert two == one[:1]  # the same tenant and prompt: the same event, extra_keys and all
    assert _salt(one[0]) != _salt(one[1])  # another tenant: another salt
    keys = [TokenIndex(BS).keys_of(e) for e in one]
    assert not set(keys[0]) & set(keys[1])
    other = _published(SaltKey.from_secret(b"another secret, 16+ bytes", "x"),
                       [("tenant-a", CHAIN)])
    assert _salt(other[0]) != _salt(one[0])  # another key: another salt
    # no key: each start draws its own, so two starts differ (and differ from the shared one)
    first, second = (_published(None, [("tenant-a", CHAIN)])[0] for _ in "12")
    assert len({_salt(first), _salt(second), _salt(one[0])}) == 3


def test_what_the_start_says_of_the_key(caplog):
    caplog.set_level(logging.INFO, "kvpool.server")
    SaltKey.per_start().announce(publishing=True, per_tenant=True)
    SaltKey.per_start().announce(publishing=True, per_tenant=False)  # no digest: nothing said
    SaltKey.per_start().announce(publishing=False, per_tenant=True)
    shared = SaltKey.from_secret(SECRET.encode(), f"${SALT_KEY_ENV}")
    shared.announce(publishing=False, per_tenant=True)
    shared.announce(publishing=True, per_tenant=False)
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 4, said
    assert said[0] == CLEAR_TOKENS and caplog.records[0].levelno == logging.WARNING
    assert "tenants, can connect" in said[0]  # tenants' events must not reach tenants
    assert "a key drawn at this start" in said[1] and "--kv-events-salt-key-file PATH" in said[1]
    assert f"${SALT_KEY_ENV}" in said[1]
    assert said[2] == (f"${SALT_KEY_ENV} has no effect: no KV events are published "
                       "(--kv-events-config)")
    assert said[3].startswith(f"${SALT_KEY_ENV} has no effect: no tenant's salt")
    assert not any(SECRET in m for m in said)


def test_tenants_sharing_one_cache_are_warned_of_clear_tokens_too():
    """NOTE(clear-tokens): with --shared-prefix-cache tenants have no cache of their own, but
    the events still carry what each sends; the warning was tied to per-tenant caches."""
    srv = SpawnedServer([*ARGS, "--shared-prefix-cache"], startup_timeout=120, env=_env())
    srv.start()
    srv.stop(timeout=20)
    assert sum(CLEAR_TOKENS in ln for ln in srv.lines) == 1, srv.tail()


def _options(monkeypatch, argv: list[str], env: dict[str, str]) -> serve.ServeOptions:
    args = serve.add_serve_args(argparse.ArgumentParser()).parse_args(argv)
    with monkeypatch.context() as m:
        m.delenv(SALT_KEY_ENV, raising=False)
        for k, v in env.items():
            m.setenv(k, v)
        return serve.ServeOptions.from_args(args)


def test_bad_keys_are_refused_naming_the_flag_or_variable(tmp_path, monkeypatch):
    short = tmp_path / "short"
    short.write_text("  fifteen-bytes!!\n")
    flag = "--kv-events-salt-key-file"
    for argv, env, message in [
            ([flag, str(tmp_path / "missing")], {}, f"{flag} {tmp_path / 'missing'}: No such"),
            ([flag, str(tmp_path)], {}, f"{flag} {tmp_path}: Is a directory"),
            ([flag, str(short)], {}, f"{flag} {short}: the key has 15 bytes: use at least 16"),
            ([], {SALT_KEY_ENV: "short"}, f"${SALT_KEY_ENV}: the key has 5 bytes"),
            ([], {SALT_KEY_ENV: ""}, f"${SALT_KEY_ENV}: the key has 0 bytes")]:
        with pytest.raises(ConfigError) as err:
            _options(monkeypatch, argv, env)
        assert message in str(err.value), err.value
    good = tmp_path / "good"
    good.write_text(SECRET)  # the file wins over the variable, as --api-key does
    chosen = _options(monkeypatch, [flag, str(good)], {SALT_KEY_ENV: "x" * 16})
    assert chosen.kv_events_salt_key.source == f"{flag} {good}"
    by_env = _options(monkeypatch, [], {SALT_KEY_ENV: f" {SECRET}\n"}).kv_events_salt_key
    assert by_env.key == chosen.kv_events_salt_key.key and by_env.source == f"${SALT_KEY_ENV}"
    assert _options(monkeypatch, [], {}).kv_events_salt_key is None


def test_kvpool_serve_fails_to_start_on_a_bad_key(tmp_path):
    missing = tmp_path / "missing"
    done = subprocess.run([sys.executable, "-m", "kvpool.server.serve", "--port", "0", *ARGS,
                           "--kv-events-salt-key-file", str(missing)], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done
    assert f"kvpool serve: --kv-events-salt-key-file {missing}: No such file" in done.stderr


@pytest.mark.parametrize("config, prefix_caching, said", [
    (EVENTS, False, NO_CACHE), ('{"publisher": "zmq"}', True, NOT_ENABLED),
    (EVENTS, True, None), ('{"publisher": "null"}', True, None)])
def test_a_configuration_that_publishes_nothing_says_so(caplog, config, prefix_caching, said):
    """NOTE(events-config) in kv_events_route.py: as vLLM's start says them; both were
    silent, the info route saying events were on."""
    caplog.set_level(logging.WARNING, "kvpool.server")
    route = KVEventsRoute.start(config, BS, None, prefix_caching)
    if route.publisher is not None:
        route.publisher.close()
    assert [r.getMessage() for r in caplog.records] == ([said] if said else [])
