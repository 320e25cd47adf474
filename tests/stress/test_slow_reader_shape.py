"""The slow readers' request fits the server the harness starts (stress/http/slow_reader.py
NOTE(fit)): the server's own admission rule (RequestChecker on a real block pool) accepts it
for every small setting, where the fixed 4 x 400 drew its 400 and failed the run."""

from __future__ import annotations

import pytest

from kvpool.config import CacheConfig
from kvpool.core.manager import BlockSpaceManager
from kvpool.errors import RequestError
from kvpool.sched.request_checker import RequestChecker
from kvpool.sched.sequence import RequestParams
from stress.http.slow_reader import stream_shape

PROMPT = 3  # "hello" with its special tokens, within slow_reader.PROMPT_ROOM


def checker(blocks: int, max_num_seqs: int, max_model_len: int) -> RequestChecker:
    mgr = BlockSpaceManager(CacheConfig(num_device_blocks=blocks, num_host_blocks=0,
                                        block_size=16))
    return RequestChecker(1000, max_model_len, mgr, max_seqs=max_num_seqs)


@pytest.mark.parametrize("blocks,seqs,ctx", [(256, 64, 512), (48, 16, 512), (24, 64, 384),
                                             (96, 2, 512), (8, 1, 128), (5, 8, 64)])
def test_the_slow_readers_request_is_one_the_server_runs(blocks, seqs, ctx):
    n, max_tokens = stream_shape(seqs, blocks, ctx)
    checker(blocks, seqs, ctx).check_pool(PROMPT, RequestParams(max_tokens=max_tokens, n=n))
    assert 1 <= n <= 4 and 1 <= max_tokens <= 400
    if (blocks, seqs) == (256, 64):
        assert (n, max_tokens) == (4, 400)  # a roomy server gets the full-size stream


@pytest.mark.parametrize("blocks,seqs", [(48, 16), (96, 2)])
def test_the_fixed_request_was_refused_by_small_servers(blocks, seqs):
    with pytest.raises(RequestError) as e:
        checker(blocks, seqs, 512).check_pool(PROMPT, RequestParams(max_tokens=400, n=4))
    assert e.value.code in ("n_too_large_for_pool", "n_too_large_for_batch")
