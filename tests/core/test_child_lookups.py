"""NOTE(child-lookups) in kvpool/core/prompt_alloc.py: an allocation of n sequences sharing
one prompt counts as vLLM's n child requests would, each looking the prompt up: n queries,
the first sequence's hits, and for each further one the prompt's full blocks under the hit cap
(one token left to compute), which the first's allocation cached in the same step."""

from kvpool.config import CacheConfig
from kvpool.core import BlockSpaceManager

BS = 16


def mgr(caching: bool = True) -> BlockSpaceManager:
    return BlockSpaceManager(CacheConfig(num_device_blocks=64, num_host_blocks=0,
                                         block_size=BS, watermark=0.0,
                                         enable_prefix_caching=caching))


def counted(m: BlockSpaceManager) -> tuple[int, int]:
    s = m.stats()
    return s.prefix_query_tokens, s.prefix_hit_tokens


def test_the_probe_case_n2_37_tokens_reads_as_vllm():
    m = mgr()
    assert m.allocate([0, 1], list(range(1, 38))) == 0  # nothing cached before
    assert counted(m) == (74, 32)  # vLLM: 37 + 37 queried, 0 + 32 hit


def test_the_cap_leaves_a_token_to_compute_and_the_first_keeps_its_hits():
    m = mgr()
    whole = list(range(1, 49))  # 3 full blocks: the cap (48 - 1) // 16 keeps 2
    assert m.allocate([0, 1], whole) == 0
    assert counted(m) == (96, 32)
    m.mark_computed(0)
    assert m.allocate([2, 3, 4], list(range(1, 41))) == 32  # the first hits 2 blocks too
    assert counted(m) == (96 + 3 * 40, 32 + 32 + 2 * 32)


def test_one_sequence_and_no_lookup_count_as_before():
    m = mgr()
    m.allocate([0], list(range(1, 38)))
    assert counted(m) == (37, 0)
    m.allocate([1, 2], list(range(1, 38)), skip_read=True)  # looks nothing up
    assert counted(m) == (37, 0)
    off = mgr(caching=False)
    off.allocate([0, 1], list(range(1, 38)))
    assert counted(off) == (0, 0)
