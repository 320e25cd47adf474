"""Signed values (a shared secret, ``--remote-secret-file``) on a real redis-server: anyone who
can write to Redis used to be able to plant KV a replica served as another prompt's cache (a
forged header over valid bytes). With the secret set, unsigned and forged values are misses,
deleted and counted; correctly signed ones hit."""

from __future__ import annotations

import argparse
import dataclasses
import logging

import pytest
import redis

from kvpool.errors import ConfigError
from kvpool.remote import ValueCodec, ValueSigner
from kvpool.remote.codec import FLAG_SIGNED, HEADER_SIZE, ForgedValueError, UnsignedValueError
from kvpool.remote.signer import TRAILER
from kvpool.server.serve import add_serve_args
from kvpool.server.serve_options import ServeOptions
from tests.remote.chains import chain
from tests.remote.conftest import NS
from tests.remote.engines import (PROMPT, engine, fresh_tokens, run, settle, stop,
                                  tokens)

SECRET = b"correct horse battery staple 0123456789"


def signed_codec(secret: bytes = SECRET) -> ValueCodec:
    return ValueCodec(NS, signer=ValueSigner(secret))


def test_signed_values_round_trip_and_tampering_is_named():
    codec = signed_codec()
    h = chain(2)
    v = codec.encode(h[0], [b"\x07" * 256])
    assert len(v) == HEADER_SIZE + 256 + TRAILER and v[22] & FLAG_SIGNED
    assert bytes(codec.decode(v, h[0]).blocks[0]) == b"\x07" * 256
    assert [bytes(b) for b in codec.split(v)] == [b"\x07" * 256]
    # the payload under another key's header (the attack), signed or not by the attacker
    plain = ValueCodec(NS)
    with pytest.raises(UnsignedValueError):
        codec.decode(plain.encode(h[1], [b"\x07" * 256]), h[1])
    forged = bytearray(plain.encode(h[1], [b"\x07" * 256]))
    forged[22] |= FLAG_SIGNED
    forged += v[-TRAILER:]  # a real tag, of another key
    with pytest.raises(ForgedValueError):
        codec.decode(bytes(forged), h[1])
    with pytest.raises(ForgedValueError):  # another secret
        signed_codec(b"another secret, 16 bytes or more").decode(v, h[0])
    flipped = bytearray(v)
    flipped[HEADER_SIZE + 3] ^= 1  # one payload bit, CRC left as it was
    with pytest.raises(ForgedValueError):
        codec.decode(bytes(flipped), h[0])
    # a replica without the secret still reads signed values (its CRC check stands)
    assert bytes(plain.decode(v, h[0]).blocks[0]) == b"\x07" * 256
    ns2 = dataclasses.replace(NS, blocks_per_object=2)  # a value of several blocks
    two = ValueCodec(ns2, signer=ValueSigner(SECRET))
    v2 = two.encode(h[1], [b"a" * 64, b"b" * 64])
    assert [bytes(b) for b in two.decode(v2, h[1]).blocks] == [b"a" * 64, b"b" * 64]


def test_a_short_or_unreadable_secret_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="at least 16"):
        ValueSigner(b"short")
    with pytest.raises(ConfigError, match="--remote-secret-file"):
        ValueSigner.from_file(tmp_path / "missing")
    f = tmp_path / "secret"
    f.write_bytes(SECRET + b"\n")
    trailer = ValueSigner(SECRET).trailer(b"k", b"h", b"p")
    assert ValueSigner.from_file(f).valid(b"k", b"h", b"p", trailer)  # whitespace dropped
    assert not ValueSigner.from_file(f).valid(b"k", b"h", b"q", trailer)
    args = add_serve_args(argparse.ArgumentParser()).parse_args(
        ["--remote-url", "redis://127.0.0.1:1", "--remote-secret-file", str(f)])
    assert ServeOptions.from_args(args).remote_secret_file == str(f)


async def test_forged_and_unsigned_values_are_misses_deleted_and_counted(make_tier,
                                                                         redis_server, caplog):
    """And said once per kind, with the fix (diagnose.py NOTE(secret-mismatch)): replicas
    given different secrets, or one none, delete each other's values; only a counter moved."""
    caplog.set_level(logging.WARNING, "kvpool.remote")
    tier = make_tier(NS)
    tier.codec = signed_codec()  # this replica holds the secret
    h = chain(3)
    keys = NS.group_keys(h)
    good = tier.codec.encode(h[0], [b"a" * 4096])
    assert await tier.put_many([(keys[0], good)]) == 1
    plain = ValueCodec(NS)
    forged = bytearray(plain.encode(h[1], [b"a" * 4096]))  # valid bytes, another key
    forged[22] |= FLAG_SIGNED
    forged += good[-TRAILER:]
    r = redis.Redis.from_url(redis_server.url)
    try:
        r.set(keys[1], bytes(forged))
        r.set(keys[2], plain.encode(h[2], [b"a" * 4096]))  # unsigned
        assert await tier.get_many(keys) == [good, None, None]
        st = tier.stats()
        assert st.errors.get("forged") == 1 and st.errors.get("unsigned") == 1, st.errors
        assert st.deleted_invalid == 2
        assert r.exists(keys[0]) == 1 and r.exists(keys[1], keys[2]) == 0
        r.set(keys[1], bytes(forged))
        assert await tier.get_many(keys) == [good, None, None]  # again: said once
    finally:
        r.close()
    said = [m.getMessage() for m in caplog.records]
    assert len([m for m in said if "fail the MAC" in m]) == 1, said
    assert len([m for m in said if "carry no MAC" in m]) == 1, said
    assert all("give every replica the same secret file" in m for m in said if "MAC" in m)


async def test_a_forged_prefix_is_not_served_as_another_prompts_cache(redis_server, tmp_path):
    secret = tmp_path / "secret"
    secret.write_bytes(SECRET)
    other = [(i * 11 + 5) % 500 + 1 for i in range(len(PROMPT))]  # another prompt
    want = await fresh_tokens(other)
    e1 = await engine(redis_server.url, secret_file=str(secret))
    await run(e1, PROMPT)
    await settle(e1)
    mgr = e1.core.manager
    src, dst = mgr.hasher.hash_blocks(PROMPT), mgr.hasher.hash_blocks(other)
    link = e1.remote_link
    await stop(e1)
    # the attacker re-labels PROMPT's stored bytes as `other`'s prefix (no secret: unsigned)
    r = redis.Redis.from_url(redis_server.url)
    forger = ValueCodec(link.tier.codec.namespace)
    planted = 0
    for hd, ks, kd in zip(dst[:20], link.group_keys(src[:20]), link.group_keys(dst[:20])):
        v = r.get(ks)
        if v is not None:
            r.set(kd, forger.encode(hd, forger.split(v)))
            planted += 1
    assert planted >= 18
    e2 = await engine(redis_server.url, secret_file=str(secret))
    assert tokens(await run(e2, other)) == want  # computed, not served from planted KV
    assert e2.reader.stats.fetched_blocks == 0
    assert e2.remote_link.tier.stats().errors.get("unsigned", 0) >= 1
    await settle(e2)
    await stop(e2)
    r.close()


async def test_with_a_secret_redis_names_no_prompt(redis_server, tmp_path):
    """keys.py NOTE(keyed-names): anyone who could read Redis computed a guessed prompt's
    chain hashes (BlockHasher) and found its keys, or its values' headers: which prompts were
    sent, secret or not. With one, no key or value carries a chain hash, and a replica with
    the same secret still reads the blocks."""
    secret = tmp_path / "secret"
    secret.write_bytes(SECRET)
    e1 = await engine(redis_server.url, secret_file=str(secret))
    want = tokens(await run(e1, PROMPT))
    await settle(e1)
    hashes = e1.core.manager.hasher.hash_blocks(PROMPT)
    await stop(e1)
    r = redis.Redis.from_url(redis_server.url)
    try:
        keys = list(r.scan_iter("kvp:*"))
        values = r.mget(keys)
        assert len(keys) >= 20
        assert not [h for h in hashes for k in keys if h.hex()[:16].encode() in k]
        assert not [h for h in hashes for v in values if h in v]
    finally:
        r.close()
    e2 = await engine(redis_server.url, secret_file=str(secret))
    assert tokens(await run(e2, PROMPT)) == want
    assert e2.reader.stats.fetched_blocks >= 20
    await settle(e2)
    await stop(e2)
