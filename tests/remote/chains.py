"""Block hashes for the remote-tier tests: ``chain(n)`` is the BlockHasher chain of n full
blocks of a fixed token run (optionally salted); ``chain_items`` a chain's encoded values
under the test namespace's keys; ``one_prefix_per_master`` one such prefix on each cluster
master."""

from __future__ import annotations

from kvpool.core.hashing import BlockHasher
from tests.remote.conftest import NS


def chain(n_blocks: int, salt: str | None = None, block_size: int = 16) -> list[bytes]:
    tokens = list(range(7, 7 + n_blocks * block_size))
    return BlockHasher(block_size, "tiny").hash_blocks(tokens, cache_salt=salt)


def chain_items(codec, salt: str, n: int = 8, size: int = 256) -> list[tuple]:
    """(key, encoded value) of an ``n``-block chain salted ``salt``, ``size`` bytes a block."""
    hashes = chain(n, salt=salt)
    return [(k, codec.encode(h, [bytes([i]) * size]))
            for i, (k, h) in enumerate(zip(NS.group_keys(hashes), hashes))]


def one_prefix_per_master(cluster, codec, salt: str) -> dict:
    """master port -> the items of one 8-block prefix whose slot it serves."""
    out: dict = {}
    for i in range(200):
        got = chain_items(codec, f"{salt}{i}")
        out.setdefault(cluster.master_of(got[0][0]).port, got)
        if len(out) == 3:
            return out
    raise AssertionError("no prefix for every master")
