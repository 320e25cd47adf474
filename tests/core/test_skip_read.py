"""NOTE(skip-read) in kvpool/core/block_table.py: an allocation with ``skip_read`` (a request
that needs every prompt position's logits) takes no prefix-cache hit and is not counted as a
query, yet its full blocks are cached under its salt once computed, as vLLM's
``skip_reading_prefix_cache`` stores what it computed: a plain request for the same prompt hits
them next. Prompts from four token streams of random lengths share prefixes, so some skip
allocations compute blocks already cached (duplicates); the pool's invariants hold throughout."""

from hypothesis import given, settings
from hypothesis import strategies as st

from kvpool.config import CacheConfig
from kvpool.core import BlockSpaceManager, SeqAlloc

BS = 4
BLOCKS = 96  # 12 live prompts of <= 5 blocks and a probe: nothing is ever evicted


def mgr() -> BlockSpaceManager:
    return BlockSpaceManager(CacheConfig(num_device_blocks=BLOCKS, num_host_blocks=0,
                                         block_size=BS, watermark=0.0,
                                         enable_prefix_caching=True))


def prompt_of(stream: int, n: int) -> list[int]:
    return [(stream * 13 + j * 7) % 50 + 1 for j in range(n)]


def counted(m: BlockSpaceManager) -> tuple[int, int]:
    s = m.stats()
    return s.prefix_query_tokens, s.prefix_hit_tokens


STEPS = st.lists(st.tuples(st.integers(0, 3), st.integers(1, 5 * BS),
                           st.sampled_from([None, "a"]), st.booleans()),
                 min_size=1, max_size=12)


@settings(max_examples=80, deadline=None)
@given(STEPS)
def test_a_skip_read_allocation_reads_nothing_and_caches_its_full_blocks(steps):
    m = mgr()
    index = m.device_pool.index
    live = []
    for i, (stream, n, salt, keep) in enumerate(steps):
        prompt, seq, probe = prompt_of(stream, n), 2 * i, 2 * i + 1
        hashes = m.hasher.hash_blocks(prompt, salt)
        was_cached = {index.lookup(h) for h in hashes[:m.prompts.prefix_hits(hashes)]}
        before = counted(m)
        assert m.allocate([seq], prompt, cache_salt=salt, skip_read=True) == 0
        assert counted(m) == before  # no query, no hit
        assert was_cached.isdisjoint(m.get_block_table(seq))  # every block its own
        m.check_invariants()
        m.mark_computed(seq)
        assert m.prompts.prefix_hits(hashes) == n // BS  # its chain is cached (or already was)
        if not keep:
            m.free(seq)
        else:
            live.append(seq)
        full = min(n // BS, (n - 1) // BS) * BS  # the cap leaves one token to compute
        assert m.allocate([probe], prompt, cache_salt=salt) == full  # a plain request hits it
        assert counted(m) == (before[0] + n, before[1] + full)
        m.free(probe)
        m.check_invariants()
    m.free(*live)
    m.check_invariants()
    assert m.device_pool.num_free_blocks == BLOCKS


def test_a_skip_read_unit_still_shares_its_first_units_blocks():
    """A recomputed request whose sequences diverged (``share_with``) and reads no cache: the
    follower reuses the first unit's leading blocks (not a cache read: that unit computes
    them), and neither unit reports a hit though the prompt is cached."""
    m = mgr()
    a, b = prompt_of(0, 17) + [1] * 3, prompt_of(0, 17) + [2] * 3
    m.allocate([9], a)
    m.mark_computed(9)
    m.free(9)
    allocs = [SeqAlloc([1], a, m.hasher.hash_blocks(a), skip_read=True),
              SeqAlloc([2], b, m.hasher.hash_blocks(b), share_with=1, num_shared=4,
                       skip_read=True)]
    before = counted(m)
    assert m.prompts.allocate_batch(allocs) == [0, 0]
    assert counted(m) == before
    t1, t2 = m.get_block_table(1), m.get_block_table(2)
    assert t1[:4] == t2[:4] and not set(t1[4:]) & set(t2[4:])
    m.check_invariants()
    m.free(1, 2)
    m.check_invariants()
