"""A fetch lands its values with no warning (kvpool/runtime/remote/reader.py
NOTE(read-only-source)): the values' blocks are views of read-only bytes, and making tensors of
them printed torch's "The given buffer is not writable" UserWarning on each process's first
fetch. Two real engines on one real redis-server: the first stores PROMPT, the second fetches
it. torch says that warning once per process, so the test asks torch to warn always."""

from __future__ import annotations

import warnings

import torch

from tests.remote.engines import PROMPT, engine, run, stop, stored


async def test_a_fetch_lands_without_a_read_only_buffer_warning(redis_server):
    await stop(await stored(redis_server.url))
    e2 = await engine(redis_server.url, policy="off", fetch_bias=0.0)
    was = torch.is_warn_always_enabled()
    torch.set_warn_always(True)  # else only a process's first such warning is said
    try:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            await run(e2, PROMPT)  # its prefix fetched, landed in a worker thread
        assert e2.reader.stats.fetched_blocks > 0, e2.reader.stats
        assert not [w for w in said if "not writable" in str(w.message)], [
            str(w.message)[:80] for w in said]
    finally:
        torch.set_warn_always(was)
        await stop(e2)
