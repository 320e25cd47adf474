"""Paged forward properties on the built-in tiny model: chunking, batching, cache hygiene, input
validation."""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kvpool.runtime.model import (PagedBatch, SeqChunk, allocate_kv_cache, build_tiny_model)

ATOL = 2e-4


@pytest.fixture(scope="module")
def tiny():
    cfg, model, tok = build_tiny_model()
    return cfg, model


def one_shot(model, cfg, ids, block_size=16):
    kv = allocate_kv_cache(-(-len(ids) // block_size) + 1, cfg, block_size, torch.float32, "cpu")
    table = list(range(kv.shape[0]))
    return model(PagedBatch([SeqChunk(ids, 0, table)]), kv)[0]


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_random_chunking_equals_one_shot_prefill(tiny, data):
    cfg, model = tiny
    n = data.draw(st.integers(2, 70), label="prompt_len")
    ids = data.draw(st.lists(st.integers(3, 511), min_size=n, max_size=n), label="ids")
    block_size = data.draw(st.sampled_from([1, 3, 8, 16, 64]), label="block_size")
    cuts = sorted(data.draw(st.sets(st.integers(1, n - 1), max_size=6), label="cuts"))
    num_blocks = -(-n // block_size) + 3
    kv = allocate_kv_cache(num_blocks, cfg, block_size, torch.float32, "cpu")
    table = data.draw(st.permutations(range(num_blocks)), label="table")
    bounds = [0, *cuts, n]
    for a, b in zip(bounds, bounds[1:]):
        got = model(PagedBatch([SeqChunk(ids[a:b], a, table)]), kv)[0]
        # After each chunk: the logits of a one-shot prefill of the prefix read so far.
        torch.testing.assert_close(got, one_shot(model, cfg, ids[:b]), atol=ATOL, rtol=1e-4)


def test_batch_composition_does_not_change_a_sequence(tiny):
    cfg, model = tiny
    rng = random.Random(0)
    block_size = 4
    kv = allocate_kv_cache(200, cfg, block_size, torch.float32, "cpu")
    target = [rng.randrange(3, 512) for _ in range(23)]
    alone_kv = allocate_kv_cache(10, cfg, block_size, torch.float32, "cpu")
    alone = model(PagedBatch([SeqChunk(target[:20], 0, list(range(10)))]), alone_kv)[0]
    alone_dec = model(PagedBatch([SeqChunk(target[20:21], 20, list(range(10)))]), alone_kv)[0]
    # Same work inside a busy batch: other prefills, chunks and decodes around it.
    others = [[rng.randrange(3, 512) for _ in range(rng.randrange(1, 40))] for _ in range(6)]
    free = list(range(10, 200))
    rng.shuffle(free)
    tables = [[free.pop() for _ in range(12)] for _ in range(7)]
    batch = [SeqChunk(o, 0, t) for o, t in zip(others[:3], tables)]
    batch.insert(1, SeqChunk(target[:20], 0, tables[6]))
    out = model(PagedBatch(batch), kv)
    torch.testing.assert_close(out[1], alone, atol=ATOL, rtol=1e-4)
    batch = [SeqChunk(o[-1:], len(o) - 1, t) for o, t in zip(others[:3], tables)]
    batch.append(SeqChunk(target[20:21], 20, tables[6]))
    batch.append(SeqChunk(others[4], 0, tables[4]))
    out = model(PagedBatch(batch), kv)
    torch.testing.assert_close(out[3], alone_dec, atol=ATOL, rtol=1e-4)


def test_stale_bytes_are_never_read(tiny):
    """Slots past a sequence's length, and padding blocks of the batched decode, hold stale K/V
    of earlier owners (freed blocks are reused without clearing): they must not count."""
    cfg, model = tiny
    block_size = 8
    clean = allocate_kv_cache(12, cfg, block_size, torch.float32, "cpu")
    dirty = allocate_kv_cache(12, cfg, block_size, torch.float32, "cpu")
    dirty.copy_(torch.randn(dirty.shape, generator=torch.Generator().manual_seed(0)) * 30)
    seqs = [([5, 9, 200, 31, 7], [3, 4]), (list(range(40, 61)), [0, 6, 11, 2]),
            ([77], [9])]
    results = []
    for kv in (clean, dirty):
        outs = [model(PagedBatch([SeqChunk(ids, 0, t) for ids, t in seqs]), kv)]
        for step in range(4):  # batched decodes of different lengths
            outs.append(model(PagedBatch([SeqChunk([100 + step], len(ids) + step, t)
                                          for ids, t in seqs]), kv))
        # A prefill chunk over a cached prefix (start > 0) reads the pool as well.
        outs.append(model(PagedBatch([SeqChunk([1, 2, 3], len(seqs[1][0]) + 4, seqs[1][1])]), kv))
        results.append(torch.cat(outs))
    assert torch.isfinite(results[1]).all()
    torch.testing.assert_close(results[0], results[1], atol=0, rtol=0)


def test_logits_rows_follow_batch_order(tiny):
    cfg, model = tiny
    kv = allocate_kv_cache(8, cfg, 16, torch.float32, "cpu")
    a, b = SeqChunk([5, 6, 7], 0, [0]), SeqChunk([9], 0, [1])
    ab = model(PagedBatch([a, b]), kv)
    ba = model(PagedBatch([b, a]), kv)
    torch.testing.assert_close(ab, ba.flip(0), atol=ATOL, rtol=1e-4)
    assert ab.shape == (2, cfg.vocab_size) and ab.dtype == torch.float32


def test_writes_land_in_the_right_slots(tiny):
    cfg, model = tiny
    kv = allocate_kv_cache(6, cfg, 4, torch.float32, "cpu")
    model(PagedBatch([SeqChunk([10, 11, 12, 13, 14, 15], 0, [5, 2])]), kv)
    used = kv.abs().sum(dim=(1, 2, 4, 5)) > 0  # [block, slot]
    expected = torch.zeros(6, 4, dtype=torch.bool)
    expected[5, :] = True
    expected[2, :2] = True
    assert torch.equal(used, expected)


@pytest.mark.parametrize("chunk,match", [
    (SeqChunk([], 0, [0]), "empty"),
    (SeqChunk([1, 2], -1, [0]), "start"),
    (SeqChunk([1] * 5, 0, [0]), "block_table has 1 blocks"),
    (SeqChunk([1], 0, [7]), r"block ids must lie in \[0, 4\)"),
    (SeqChunk([512], 0, [0]), r"token ids must lie in \[0, 512\)"),
])
def test_invalid_batches(tiny, chunk, match):
    cfg, model = tiny
    kv = allocate_kv_cache(4, cfg, 4, torch.float32, "cpu")
    with pytest.raises(ValueError, match=match):
        model(PagedBatch([chunk]), kv)


def test_kv_cache_must_match_model(tiny):
    cfg, model = tiny
    with pytest.raises(ValueError, match="layout"):
        model(PagedBatch([SeqChunk([1], 0, [0])]),
              allocate_kv_cache(4, cfg, 4, torch.bfloat16, "cpu"))
    with pytest.raises(ValueError, match="no sequences"):
        model(PagedBatch([]), allocate_kv_cache(4, cfg, 4, torch.float32, "cpu"))


def test_from_lists(tiny):
    b = PagedBatch.from_lists([[1, 2], [3]], [0, 5], [[0], [1, 2]])
    assert b.num_tokens == 3 and b.seqs[1].context_len == 6
    with pytest.raises(ValueError):
        PagedBatch.from_lists([[1]], [0, 1], [[0]])


def naive_attention(q, k, v, q_pos, group, scale):
    """Reference: explicit repeat_interleave of KV heads and an explicit causal softmax."""
    k = k.repeat_interleave(group, dim=1)  # [L, H, D]
    v = v.repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, k) * scale
    k_pos = torch.arange(k.shape[0])
    scores = scores.masked_fill(k_pos[None, None, :] > q_pos[None, :, None], float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v)


def test_paged_attention_matches_naive_gqa():
    from kvpool.runtime.model.attention import PagedAttention
    from kvpool.runtime.model.batch import PreparedBatch

    torch.manual_seed(0)
    heads, kv_heads, dim, block_size, layers = 6, 2, 8, 4, 2
    kernel = PagedAttention(heads, kv_heads, dim)
    kv = torch.zeros(20, layers, 2, block_size, kv_heads, dim)
    # Full K/V histories per sequence; the batch sends their tails as queries.
    lengths, starts = [9, 1, 14, 6], [0, 0, 10, 5]
    tables = [[3, 7, 1], [0], [19, 4, 11, 8], [2, 5]]
    hist = [(torch.randn(n, kv_heads, dim), torch.randn(n, kv_heads, dim)) for n in lengths]
    for (k, v), table in zip(hist, tables):  # pre-fill the cached prefixes
        for p in range(k.shape[0]):
            kv[table[p // block_size], 1, 0, p % block_size] = k[p]
            kv[table[p // block_size], 1, 1, p % block_size] = v[p]
    batch = PagedBatch([SeqChunk([0] * (n - s), s, t) for n, s, t in zip(lengths, starts, tables)])
    prep = PreparedBatch.build(batch, block_size=block_size, num_blocks=20, vocab_size=1,
                               device=torch.device("cpu"))
    q = torch.randn(prep.input_ids.shape[0], heads, dim)
    new_k = torch.cat([k[s:] for (k, _), s in zip(hist, starts)])
    new_v = torch.cat([v[s:] for (_, v), s in zip(hist, starts)])
    kernel.write(kv, 1, new_k, new_v, prep)
    out = kernel.attend(q, new_k, new_v, kv, 1, prep)
    row = 0
    for (k, v), n, s in zip(hist, lengths, starts):
        ref = naive_attention(q[row:row + n - s], k, v, torch.arange(s, n), heads // kv_heads,
                              kernel.scale)
        torch.testing.assert_close(out[row:row + n - s], ref, atol=1e-5, rtol=1e-5)
        row += n - s


@settings(max_examples=60, deadline=None)
@given(widths=st.lists(st.integers(1, 70), min_size=1, max_size=80),
       prefill_rows=st.integers(0, 3))
@example(widths=[1] * 7 + [2] + [3] * 7 + [4, 8], prefill_rows=0)  # two small parts in a row
def test_decode_groups_partition_the_decodes(widths, prefill_rows):
    from kvpool.runtime.model.batch import GROUP_RATIO, MIN_GROUP_ROWS, _decode_groups
    bs = 4
    rows = [prefill_rows + i for i in range(len(widths))]  # decodes after the prefill rows
    tables = [list(range(w)) for w in widths]
    ctx = [w * bs - 1 for w in widths]
    groups = _decode_groups(rows, tables, ctx, prefill_rows + len(widths), bs, None,
                            torch.device("cpu"), torch.float32)
    seen = []
    for g in groups:
        got = list(range(len(widths))) if g.rows is None else [r - prefill_rows
                                                               for r in g.rows.tolist()]
        seen += got
        width = g.block_table.shape[1]
        assert width == max(widths[i] for i in got)  # padded exactly to the widest member
        assert g.key_bias.shape == (len(got), 1, 1, width * bs)
        for k, i in enumerate(got):  # each row sees exactly its own context
            assert int((g.key_bias[k, 0, 0] == 0).sum()) == ctx[i]
        if len(groups) > 1:  # groups are apart: nothing narrower than max / ratio unless small
            narrow = [i for i in got if widths[i] * GROUP_RATIO <= width]
            assert not narrow or len(got) - len(narrow) < MIN_GROUP_ROWS or len(narrow) \
                < MIN_GROUP_ROWS
    assert sorted(seen) == list(range(len(widths)))
    assert (groups[0].rows is None) == (len(groups) == 1 and prefill_rows == 0)


def test_grouped_decodes_match_each_sequence_alone(tiny):
    """Decodes of very different lengths land in several width groups, mixed with prefills;
    each row's logits equal that sequence's decode run alone."""
    cfg, model = tiny
    rng = random.Random(3)
    bs = 4
    lens = [60, 1, 2, 3, 5, 9, 17, 33, 61, 62, 3, 4, 30, 31, 2, 1, 8, 16, 17, 18, 40, 41,
            58, 59, 57, 63, 56, 55, 7, 6, 3, 2]
    seqs = [[rng.randrange(3, 512) for _ in range(n + 1)] for n in lens]
    kv = allocate_kv_cache(400, cfg, bs, torch.float32, "cpu")
    free = list(range(400))
    rng.shuffle(free)
    tables = [[free.pop() for _ in range(-(-len(s) // bs))] for s in seqs]
    model(PagedBatch([SeqChunk(s[:-1], 0, t) for s, t in zip(seqs, tables)]), kv)  # prefill
    prompt = [rng.randrange(3, 512) for _ in range(7)]
    ptable = [free.pop() for _ in range(2)]
    batch = [SeqChunk(s[-1:], len(s) - 1, t) for s, t in zip(seqs, tables)]
    batch.insert(5, SeqChunk(prompt, 0, ptable))
    out = model(PagedBatch(batch), kv)
    for i, (s, t) in enumerate(zip(seqs, tables)):
        alone_kv = allocate_kv_cache(len(t) + 1, cfg, bs, torch.float32, "cpu")
        own = list(range(len(t)))
        model(PagedBatch([SeqChunk(s[:-1], 0, own)]), alone_kv)
        alone = model(PagedBatch([SeqChunk(s[-1:], len(s) - 1, own)]), alone_kv)[0]
        torch.testing.assert_close(out[i if i < 5 else i + 1], alone, atol=ATOL, rtol=1e-4)
    assert len(model.prepare(PagedBatch(batch), kv).decode_groups) >= 2  # the case under test
