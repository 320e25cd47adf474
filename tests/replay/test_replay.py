"""Trace replay: token synthesis keeps the prefix structure, the timed replay is
deterministic and leak-free, instant mode equals an OrderedDict LRU written from
trace_hits.py's semantics, and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.common import TRACE
from kvpool.cli import COMMANDS, main
from kvpool.config import CacheConfig
from kvpool.core import BlockSpaceManager
from kvpool.core.eviction import POLICIES, make_policy
from kvpool.replay.instant import InstantReplay
from kvpool.replay.loop import simulate
from kvpool.replay.timed import TimedOptions, TimedReplay
from kvpool.replay.trace import TokenSynth, TraceRequest, load_trace
from tests.replay.traces import write_trace
from tests.trace_reference import reference_lru as lru_hits

REPO = Path(__file__).resolve().parents[2]


def test_token_synthesis_keeps_the_prefix_structure():
    synth = TokenSynth(seed=3)
    a = TraceRequest(0, 0.0, 3 * 512, 1, (5, 6, 7))
    b = TraceRequest(1, 0.0, 2 * 512 + 100, 1, (5, 6, 9))
    c = TraceRequest(2, 0.0, 2 * 512 + 100, 1, (5, 6, 9))
    pa, pb, pc = synth.prompt(a), synth.prompt(b), synth.prompt(c)
    assert len(pa) == 3 * 512 and len(pb) == 2 * 512 + 100
    assert pa[:1024] == pb[:1024] and pa[1024:1124] != pb[1024:]
    assert pb[1024:] != pc[1024:]  # partial tails are unique per request
    assert synth.prompt(a) == pa and TokenSynth(seed=4).prompt(a) != pa
    m = BlockSpaceManager(CacheConfig(num_device_blocks=8, block_size=16))
    ha, hb = m.hasher.hash_blocks(pa), m.hasher.hash_blocks(pb)
    assert ha[:64] == hb[:64] and ha[64] != hb[64]


def test_load_trace_errors_name_the_line(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [0]}\n'
                 '{"timestamp": 1}\n')
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        load_trace(p)
    assert len(load_trace(p, limit=1)) == 1


def _timed(path: Path, **kw) -> dict:
    opts = dict(block_size=16, num_blocks=260, num_host_blocks=512, max_num_seqs=8,
                max_num_batched_tokens=1024, max_model_len=4096, seed=5)
    opts.update(kw)
    r = TimedReplay(TimedOptions(**opts))
    rep = r.run(load_trace(path))
    assert not r.scheduler.has_unfinished() and r.manager.stats().device.num_used == 0
    return rep


def test_timed_replay_is_deterministic_and_complete(tmp_path):
    p = tmp_path / "t.jsonl"
    rows = write_trace(p, max_out=300)
    a, b = _timed(p), _timed(p)
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert a["completed"] + a["ignored"] == len(rows)
    assert a["prefix_hit_rate"] > 0
    assert a["ttft_s"]["p50"] <= a["ttft_s"]["p99"]
    assert a["preemptions"]["swap"] + a["preemptions"]["recompute"] > 0  # a tight pool
    assert 0 < a["peak_usage"] <= 1
    for mode in ("swap", "recompute"):
        forced = _timed(p, preemption_mode=mode)
        other = "recompute" if mode == "swap" else "swap"
        assert forced["preemptions"][mode] > 0
        if mode == "recompute":
            assert forced["preemptions"][other] == 0


def test_instant_equals_an_ordereddict_lru_on_a_generated_trace(tmp_path):
    p = tmp_path / "t.jsonl"
    rows = write_trace(p, n=300, seed=7)
    reqs = load_trace(p)
    for cap in (3, 20, 80):
        rep = InstantReplay(cap, "lru").run(reqs)
        hit, tot = lru_hits([r["hash_ids"] for r in rows], cap)
        assert (rep["hits"], rep["blocks"]) == (hit, tot)


def test_instant_equals_an_ordereddict_lru_on_the_real_trace():
    reqs = load_trace(TRACE, limit=3000)
    ids = [list(r.hash_ids) for r in reqs]
    for cap in (500, 4000):
        rep = InstantReplay(cap, "lru").run(reqs)
        assert (rep["hits"], rep["blocks"]) == lru_hits(ids, cap)
        assert rep["hit_rate"] == round(rep["hits"] / rep["blocks"], 6)


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_instant_replays_each_product_policy_as_simulate_does(name):
    """`kvpool replay --instant --policy NAME` is the policy alone, for adaptive and classlru
    (their tuners, windows and ghosts) as for LRU."""
    reqs = load_trace(TRACE, limit=3000)
    rep = InstantReplay(400, name).run(reqs)
    hits, blocks = simulate([list(r.hash_ids) for r in reqs], make_policy(name, 400), 400)
    assert (rep["hits"], rep["blocks"], rep["policy"]) == (hits, blocks, name)


def test_cli_instant_and_timed_in_process(tmp_path, capsys):
    p = tmp_path / "t.jsonl"
    rows = write_trace(p, n=60)
    out = tmp_path / "out" / "i.json"  # --json out/x.json creates out/
    assert main(["replay", str(p), "--instant", "--capacity-blocks", "20", "--json",
                 str(out), "--no-progress"]) == 0
    rep = json.loads(out.read_text())
    hit, tot = lru_hits([r["hash_ids"] for r in rows], 20)
    assert rep["hit_rate"] == round(hit / tot, 6) and rep["policy"] == "lru"
    tj, png = tmp_path / "timed" / "t.json", tmp_path / "plots" / "t.png"
    assert main(["replay", str(p), "--limit", "30", "--num-blocks", "600", "--json", str(tj),
                 "--plot", str(png), "--no-progress", "--seed", "2"]) == 0
    rep = json.loads(tj.read_text())
    assert rep["requests"] == 30 and rep["mode"] == "timed" and rep["seed"] == 2
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "TTFT" in capsys.readouterr().out
    assert main(["replay", str(tmp_path / "missing.jsonl"), "--instant"]) == 2


def test_cli_registry_lists_commands_without_importing_them(capsys):
    assert "replay" in COMMANDS
    assert main([]) == 2
    assert "replay" in capsys.readouterr().out


def test_python_m_kvpool_replay_instant(tmp_path):
    p = tmp_path / "t.jsonl"
    rows = write_trace(p, n=80, seed=3)
    out = tmp_path / "o.json"
    r = subprocess.run([sys.executable, "-m", "kvpool", "replay", str(p), "--instant",
                        "--capacity-blocks", "25", "--json", str(out), "--progress"],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    hit, tot = lru_hits([x["hash_ids"] for x in rows], 25)
    assert json.loads(out.read_text())["hit_rate"] == round(hit / tot, 6)
    assert "80/80 requests" in r.stderr  # progress, forced (stderr is a pipe here)


def test_cli_cost_model_and_arrival_scale(tmp_path, capsys):
    p = tmp_path / "t.jsonl"
    write_trace(p, n=60, max_out=40)
    base, fast, bad = tmp_path / "b.json", tmp_path / "f.json", tmp_path / "x.json"
    common = ["replay", str(p), "--num-blocks", "2000", "--no-progress", "--json"]
    assert main(common + [str(base), "--prefill-tokens-per-s", "2000"]) == 0
    assert main(common + [str(fast), "--prefill-tokens-per-s", "200000", "--arrival-scale",
                          "3", "--step-overhead-s", "0.001", "--copy-gbps", "5",
                          "--kv-bytes-per-token", "1024", "--decode-s-per-seq", "0"]) == 0
    b, f = json.loads(base.read_text()), json.loads(fast.read_text())
    assert f["cost_model"] == {"step_overhead_s": 0.001, "prefill_tokens_per_s": 200000.0,
                               "decode_s_per_seq": 0.0, "kv_bytes_per_block": 1024 * 16,
                               "copy_bytes_per_s": 5e9}
    assert b["cost_model"]["prefill_tokens_per_s"] == 2000.0
    assert f["options"]["arrival_scale"] == 3.0
    # a 100x faster prefill and a third of the request rate: requests stop queueing
    assert f["ttft_s"]["p50"] < b["ttft_s"]["p50"] / 5
    one = tmp_path / "one.json"  # the same fast engine at the trace's own rate
    assert main(common + [str(one), "--prefill-tokens-per-s", "200000"]) == 0
    assert f["makespan_s"] > 2.5 * json.loads(one.read_text())["makespan_s"]  # 3x the span
    for flag, value in (("--copy-gbps", "0"), ("--arrival-scale", "-1"),
                        ("--prefill-tokens-per-s", "nan"), ("--step-overhead-s", "-0.1")):
        capsys.readouterr()
        assert main(common + [str(bad), flag, value]) == 2
        assert "kvpool replay:" in capsys.readouterr().err and not bad.exists()


def test_plot_without_matplotlib_is_a_clear_error_before_the_replay(tmp_path):
    """matplotlib is the optional ``plot`` extra: without it ``--plot`` exits 2 at once, naming
    the install command, and writes nothing (no replay is run first)."""
    p = tmp_path / "t.jsonl"
    write_trace(p, n=10)
    out = tmp_path / "out.json"
    code = ("import sys; sys.modules['matplotlib'] = None; from kvpool.cli import main; "
            f"sys.exit(main(['replay', {str(p)!r}, '--instant', '--json', {str(out)!r}, "
            f"'--plot', {str(tmp_path / 'x.png')!r}, '--no-progress']))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2, r.stderr
    assert "pip install 'kvpool[plot]'" in r.stderr
    assert not out.exists()
