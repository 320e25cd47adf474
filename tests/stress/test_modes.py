"""Short runs of both modes as a user runs them (``python -m stress ...`` in a subprocess), the
report's must-be-zero figures, and proof that the pool checks are not vacuous (a deliberately
broken manager is caught)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import fields

import pytest

from kvpool.core.slots import SlotWriter
from stress import cli
from stress.http.mode import HttpConfig, check_loopback
from stress.http.workload import WorkloadConfig
from stress.pool.mode import PoolConfig, PoolStress
from stress.report import StressReport, percentile
from stress.http.servers import ROOT


def run_stress(*argv: str, timeout: float = 90) -> tuple[int, dict, str]:
    proc = subprocess.run([sys.executable, "-m", "stress", *argv, "--json", "-", "--quiet"],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    report = json.loads(proc.stdout) if proc.stdout.strip() else {}
    return proc.returncode, report, proc.stderr


def test_pool_mode_short_run(tmp_path):
    png = tmp_path / "pool.png"
    code, rep, err = run_stress("pool", "--duration", "5", "--threads", "4", "--coroutines",
                                "100", "--blocks", "1024", "--plot", str(png))
    assert code == 0, err[-3000:]
    f = rep["figures"]
    assert rep["ok"] and not rep["failures"]
    for name in ("violations", "errors", "leaked_device_blocks", "leaked_host_blocks",
                 "leaked_sequences"):
        assert f[name] == 0, name
    assert f["ops"] > 1000 and f["invariant_checks"] > 3
    counts = f["op_counts"]
    for op in ("allocate", "append_slots", "fork", "free", "swap_out", "swap_in",
               "defrag", "abort"):
        assert counts.get(op, 0) > 0, f"{op} never ran"
    assert f["prefix_hit_tokens"] > 0 and f["cow_copies"] > 0 and f["swap_out_blocks"] > 0
    assert png.stat().st_size > 10_000


def test_http_mode_short_run_with_its_own_server(tmp_path):
    png = tmp_path / "http.png"
    # 5 s of load: ~360 ok, ~20 hostile, ~15 disconnects, ~70 preemptions alone on 2 cores
    code, rep, err = run_stress("http", "--duration", "5", "--clients", "16",
                                "--num-device-blocks", "96", "--plot", str(png),
                                # no timed verdict in a test: /health p99 is measured, not bounded
                                "--health-p99-ms", "1e9", timeout=110)
    assert code == 0, err[-3000:]
    f = rep["figures"]
    assert rep["ok"] and not rep["failures"], rep["failures"]
    for name in ("failed", "unexpected_5xx", "hostile_unexpected", "post_hostile_failures",
                 "leaked_device_blocks", "leaked_host_blocks", "requests_in_flight_after_drain",
                 "invariant_violations", "greedy_mismatches", "reference_failures",
                 "server_exit_code"):
        assert f[name] == 0, (name, f[name])
    assert f["greedy_all_matched"] is True and f["greedy_checked"] > 0
    assert f["ok"] > 50 and f["hostile_sent"] > 0 and f["disconnected"] > 0
    assert f["latency_p99_s"] > 0 and f["tokens_per_s"] > 0
    assert sum(f["preemptions"].values()) > 0, "96 blocks under 16 clients should preempt"
    assert f["server_healthy_after"] is True
    assert f["health_samples"] > 0 and f["health_failures"] == 0
    assert f["queue_slots_after_drain"] == 0
    assert png.stat().st_size > 10_000


def test_broken_manager_is_caught(monkeypatch):
    """Copy-on-write skipped: a forked sequence writes into the block its sibling reads. The
    fake-KV content check must flag it (and the run must fail)."""
    original = SlotWriter.append_locked  # the manager's append path (kvpool/core/slots.py)

    def no_cow(self, t, toks):
        pool = self.device_pool
        last = t.blocks[-1]
        saved = pool._ref[last]
        pool._ref[last] = 1  # hide the sharing: the copy-on-write branch is skipped
        try:
            return original(self, t, toks)
        finally:
            pool._ref[last] = saved

    monkeypatch.setattr(SlotWriter, "append_locked", no_cow)
    rep = PoolStress(PoolConfig(threads=2, coroutines=20, duration=1.5, blocks=512,
                                progress=False)).run()
    assert rep.figures["violations"] > 0
    assert not rep.ok and any("violations" in f for f in rep.failures())


def test_url_must_be_loopback():
    assert check_loopback("http://127.0.0.1:8000/") == "http://127.0.0.1:8000"
    for bad in ("http://10.0.0.1:8000", "https://127.0.0.1:8000", "http://example.com"):
        with pytest.raises(ValueError, match="loopback"):
            check_loopback(bad)
    assert cli.main(["http", "--url", "http://192.0.2.1:80", "--duration", "1",
                     "--quiet"]) == 2


def test_cli_flags():
    args = cli.build_parser().parse_args(
        ["pool", "--threads", "8", "--coroutines", "1000", "--duration", "60", "--max-ops",
         "10", "--blocks", "64", "--seed", "3"])
    assert (args.threads, args.coroutines, args.duration, args.max_ops, args.blocks,
            args.seed) == (8, 1000, 60.0, 10, 64, 3)
    args = cli.build_parser().parse_args(
        ["http", "--clients", "200", "--duration", "60", "--max-requests", "5",
         "--disconnect-rate", "0.1", "--hostile-rate", "0.2", "--tenants", "3", "--seed", "1",
         "--url", "http://127.0.0.1:1"])
    assert (args.clients, args.max_requests, args.disconnect_rate, args.hostile_rate,
            args.tenants, args.url) == (200, 5, 0.1, 0.2, 3, "http://127.0.0.1:1")
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["http", "--hostile-rate", "1.5"])
    assert cli.run is cli.main and callable(cli.add_arguments)


# flags that are not config fields: output and the two spelled as their negation / plural
NOT_FIELDS = {"mode", "json", "plot", "quiet", "no_prefix_caching", "server_arg"}


def test_every_flag_reaches_the_config():
    """Each mode's flags land in its config (http: the workload's in the nested WorkloadConfig),
    so no flag is parsed and then dropped."""
    args = cli.build_parser().parse_args(
        ["http", "--clients", "7", "--duration", "9", "--seed", "5", "--hostile-rate", "0.2",
         "--greedy-rate", "0.4", "--stream-rate", "0.6", "--slow-rate", "0.1",
         "--disconnect-rate", "0.3", "--tenants", "3", "--num-device-blocks", "77",
         "--server-arg=--foo", "--slow-readers", "2", "--quiet"])
    cfg = cli.http_config(args)
    w = cfg.workload
    assert (w.seed, w.hostile_rate, w.greedy_rate, w.stream_rate, w.slow_rate,
            w.disconnect_rate, w.tenants) == (5, 0.2, 0.4, 0.6, 0.1, 0.3, 3)
    assert (cfg.clients, cfg.duration, cfg.num_device_blocks, cfg.server_args,
            cfg.slow_readers, cfg.progress, cfg.seed) == (7, 9.0, 77, ("--foo",), 2, False, 5)
    taken = {f.name for f in fields(HttpConfig)} | {f.name for f in fields(WorkloadConfig)}
    assert set(vars(args)) - NOT_FIELDS <= taken, set(vars(args)) - NOT_FIELDS - taken
    args = cli.build_parser().parse_args(["pool", "--threads", "3", "--no-prefix-caching",
                                          "--seed", "4"])
    cfg = cli.pool_config(args)
    assert (cfg.threads, cfg.prefix_caching, cfg.seed, cfg.progress) == (3, False, 4, True)
    assert set(vars(args)) - NOT_FIELDS <= {f.name for f in fields(PoolConfig)}


def test_report_verdict_and_percentiles():
    rep = StressReport("x", {})
    rep.set("leaks", 0, must_be_zero=True)
    rep.set("matched", True, must_be_true=True)
    assert rep.ok
    rep.set("leaks", 2, must_be_zero=True)
    rep.set("by_kind", {"a": 0, "b": 1}, must_be_zero=True)
    assert [f.split()[0] for f in rep.failures()] == ["leaks", "by_kind"]
    assert percentile([], 50) is None
    assert percentile(range(1, 101), 99) == 99 and percentile([5.0], 50) == 5.0


def test_report_files_create_their_folders(tmp_path):
    rep = StressReport("x", {"seed": 1})
    rep.set("leaks", 0, must_be_zero=True)
    rep.sample("usage:device", 0.0, 0.5)
    rep.sample("usage:device", 1.0, 0.25)
    rep.write_json(tmp_path / "out" / "deep" / "r.json")
    assert json.loads((tmp_path / "out" / "deep" / "r.json").read_text())["ok"] is True
    rep.plot(tmp_path / "plots" / "r.png")
    assert (tmp_path / "plots" / "r.png").read_bytes()[:4] == b"\x89PNG"


def test_the_shared_fixture_runs_this_folder_on_one_torch_thread():
    import torch  # the conftest imports tests.torch_threads.one_torch_thread (autouse)

    assert torch.get_num_threads() == 1
