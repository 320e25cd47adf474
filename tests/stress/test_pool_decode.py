"""``stress pool``'s decode_step intent: workers append one token to several of their sequences
through the scheduler's batched path (``slots.append_decodes``: the ``_append_each`` fast path,
``_open_block`` / ``_give_blocks``, copy-on-write through ``append_locked``), checked by the
shadow runtime (stress/pool/shadow.py ``decode_step``). A short run, and proof that the checks
are not vacuous: broken copies of the batched path, patched in at run time, fail the run."""

from __future__ import annotations

import pytest

from kvpool.core.slots import SlotWriter
from stress.pool.mode import PoolConfig, PoolStress
from tests.stress.test_modes import run_stress


def test_pool_mode_short_run_decodes_through_the_batched_path():
    code, rep, err = run_stress("pool", "--duration", "2", "--threads", "2", "--coroutines",
                                "50", "--verify-hits")
    assert code == 0, err[-3000:]
    f = rep["figures"]
    assert rep["ok"] and not rep["failures"], rep["failures"]
    for name in ("violations", "errors", "leaked_device_blocks", "leaked_host_blocks",
                 "leaked_sequences"):
        assert f[name] == 0, name
    assert f["op_counts"]["decode_step"] > 0 and f["cow_copies"] > 0


def _stale_view(self, tables, opened, copies):
    """_give_blocks that appends the new block but hands out (and keeps) the old view."""
    for i, b in zip(opened, self.device_pool.take(len(opened))):
        tables[i].blocks.append(b)


_append_each = SlotWriter._append_each


def _no_tail_check(self, tables, token_ids, n):
    """_append_each believing no table shares its tail: a fork's shared partial block is
    written in place instead of copied first."""
    c = self.counters
    saved, c.tail_sharers = c.tail_sharers, 0
    try:
        return _append_each(self, tables, token_ids, n)
    finally:
        c.tail_sharers = saved


@pytest.mark.parametrize("name,broken", [("_give_blocks", _stale_view),
                                         ("_append_each", _no_tail_check)])
def test_a_broken_batched_path_fails_the_run(monkeypatch, name, broken):
    monkeypatch.setattr(SlotWriter, name, broken)
    rep = PoolStress(PoolConfig(threads=2, coroutines=20, duration=1.0, blocks=512,
                                progress=False)).run()
    assert rep.figures["violations"] > 0
    assert not rep.ok and any("violations" in f for f in rep.failures())
    assert any("decode_step" in m for m in rep.figures["violation_messages"])
