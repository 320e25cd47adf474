"""Block hashes for the remote-tier tests: ``chain(n)`` is the BlockHasher chain of n full
blocks of a fixed token run (optionally salted)."""

from __future__ import annotations

from kvpool.core.hashing import BlockHasher


def chain(n_blocks: int, salt: str | None = None, block_size: int = 16) -> list[bytes]:
    tokens = list(range(7, 7 + n_blocks * block_size))
    return BlockHasher(block_size, "tiny").hash_blocks(tokens, cache_salt=salt)
