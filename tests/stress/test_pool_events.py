"""``stress pool --verify-hits --kv-events``: a short run as a user runs it, the flags reaching
the PoolConfig, and proof that the KV-event check is not vacuous (a manager whose BlockStored
shifts its tokens by one is caught). The observer: stress/pool/events.py."""

from __future__ import annotations

from kvpool.core.prefix_index import PrefixIndex
from stress import cli
from stress.pool.mode import PoolConfig, PoolStress
from tests.stress.test_modes import run_stress


def test_pool_mode_short_run_with_verify_hits_and_kv_events():
    code, rep, err = run_stress("pool", "--duration", "2", "--threads", "2", "--coroutines",
                                "50", "--verify-hits", "--kv-events")
    assert code == 0, err[-3000:]
    f = rep["figures"]
    assert rep["ok"] and not rep["failures"], rep["failures"]
    assert rep["config"]["verify_hits"] and rep["config"]["kv_events"]
    for name in ("violations", "errors", "kv_event_errors", "leaked_device_blocks",
                 "leaked_host_blocks", "leaked_sequences"):
        assert f[name] == 0, name
    assert f["kv_events_stored_blocks"] > 0 and f["kv_events_removed_blocks"] > 0
    assert f["kv_events_host_stored_blocks"] > 0  # swap-outs were heard too
    assert f["op_counts"]["append_slots"] > 0 and f["prefix_hit_tokens"] > 0


def test_flags_reach_the_pool_config():
    args = cli.build_parser().parse_args(["pool", "--verify-hits", "--kv-events"])
    cfg = cli.pool_config(args)
    assert (cfg.verify_hits, cfg.kv_events) == (True, True)
    cfg = cli.pool_config(cli.build_parser().parse_args(["pool"]))
    assert (cfg.verify_hits, cfg.kv_events) == (False, False)


def test_a_stored_event_with_wrong_tokens_is_caught(monkeypatch):
    original = PrefixIndex.register_run

    def shifted(self, blocks, hashes, lo, hi, tokens=None, salt=None):  # tokens one off
        original(self, blocks, hashes, lo, hi, None if tokens is None else tokens[1:], salt)

    monkeypatch.setattr(PrefixIndex, "register_run", shifted)
    stress = PoolStress(PoolConfig(threads=1, coroutines=10, duration=1.0, kv_events=True,
                                   progress=False))
    rep = stress.run()
    f = rep.figures
    assert f["kv_event_errors"] > 0 and not rep.ok
    assert any("do not hash" in m for m in f["kv_event_error_messages"])
