"""A step's decodes as columns (``DecodeBatch``): the entries read like a list of
ScheduledDecode built from the columns, and a decode step makes no object per sequence that
the garbage collector tracks (NOTE(columns) in kvpool/sched/output.py)."""

from __future__ import annotations

import gc

from kvpool.sched import DecodeBatch, RequestParams, ScheduledDecode
from tests.sched.helpers import make, prompt


def _decoding(n: int):
    """A scheduler with ``n`` single-sequence requests past their prefill."""
    s = make(blocks=n * 8, max_num_seqs=n, max_num_batched_tokens=n * 8, max_model_len=64)
    for i in range(n):
        s.add_request(f"r{i}", prompt(5 + i % 3, base=100 * i),
                      RequestParams(max_tokens=40, ignore_eos=True))
    out = s.schedule()
    s.on_step_done(out, {i: 7 for p in out.prefills for i in p.seq_ids})
    return s


def test_the_entries_are_the_columns_row_by_row():
    s = _decoding(6)
    out = s.schedule()
    d = out.decodes
    assert isinstance(d, DecodeBatch) and len(d) == 6 and len(out.entries) == 6
    rows = list(zip(d.request_ids, d.seq_ids, d.token_ids, d.positions, d.block_ids))
    assert [(e.request_id, e.seq_id, e.token_id, e.position, e.block_ids) for e in d] == rows
    assert all(isinstance(e, ScheduledDecode) for e in d) and d[-1] is list(d)[-1]
    assert d == list(d) and d != [] and len(d[1:3]) == 2
    for e in d:
        assert e.token_id == 7 and e.block_ids == s.manager.get_block_table(e.seq_id)
        assert e.position == s.manager.get_num_tokens(e.seq_id) - 1
    s.on_step_done(out, dict.fromkeys(d.seq_ids, 8))
    nxt = s.schedule()
    assert nxt.decodes.token_ids == [8] * 6 and d.token_ids == [7] * 6  # each step its own


def test_a_decode_step_tracks_no_object_per_sequence():
    """300 decodes: the step tracks its output's few lists and a new table view for each
    sequence that opened a block (a quarter of them at 4-token blocks), not an object per
    sequence (a ScheduledDecode each did: a collection per step at 1024)."""
    s = _decoding(300)
    for _ in range(2):  # the tables' views settle (a new one only when blocks change)
        out = s.schedule()
        s.on_step_done(out, dict.fromkeys(out.decodes.seq_ids, 7))
    gc.collect()
    gc.disable()
    try:
        before = len(gc.get_objects())
        step = s.schedule()  # ``out``, the step before, stays alive, as in a runtime's loop
        grown = len(gc.get_objects()) - before
        s.on_step_done(step, dict.fromkeys(step.decodes.seq_ids, 7))
    finally:
        gc.enable()
    assert len(step.decodes) == 300 and len(out.decodes) == 300
    assert grown < 300 // 4 + 50, f"{grown} tracked objects for a 300-sequence decode step"
