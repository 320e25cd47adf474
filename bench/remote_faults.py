"""Redis faults under live load: N ``kvpool serve --remote-url`` replicas behind ``kvpool
router``, a ``kvpool stress http`` run through the router, and Redis SIGSTOPped, SIGCONTed,
killed (-9) and restarted empty on a schedule.

    python -m bench.remote_faults [--replicas 3] [--clients 6] [--json out/remote_faults.json]
                                  [--cluster | --sentinel]

``--cluster``: the replicas share a 3-master Redis Cluster with a replica per master instead;
SIGSTOP hits one master (stopped past the node timeout: its replica takes over, and it
rejoins as a replica on SIGCONT) and kill -9 another (its replica takes over; the restart
rejoins it as a replica). Recovery then counts from the mark, the cluster's own failover
inside it. ``--sentinel``: a master and its replica watched by one sentinel
(``redis+sentinel://``); SIGSTOP hits the current master past the sentinel's down-after (the
replica is promoted; the old master rejoins as a replica on SIGCONT), kill -9 then hits the
master of that moment (promoted back), and the restart rejoins it as a replica.

Timeline (seconds from the start of the load)::

    0 ........ baseline ... SIGSTOP --stop-- SIGCONT --after-- kill -9 --down-- restart --after--
               TTFT base    breaker opens,   recovery         breaker opens   recovery
                            TTFT "open"                       TTFT "down"

What is measured, and where from:

- failures: the stress report through the router (HttpStress with ``url=ROUTER``), plus the
  TTFT probe's own requests. The stress harness itself is unchanged.
- leaks: NOTE(leaks) the router's /metrics has no engine series (a missing series reads as 0 in
  stress.http.metrics, so the stress report's leak figures say nothing through the router); the
  bench drains and sums ``kvpool_cache_usage_ratio * kvpool_blocks`` over every replica's own
  /metrics, with its request gauges and invariant violations.
- TTFT: a probe thread streams a fresh 4-block prompt (a remote probe miss each time) with
  max_tokens=1 through the router every ``--probe-interval``; "added p99" is the p99 of the
  probes started while every breaker was open minus the baseline p99.
- hits (``--cluster``, 2+ replicas): bench/fault_hits.py's cross-replica pairs, a hit only
  through Redis, per fault window: the live masters' keys while one is lost
  (kvpool/remote/node_breakers.py NOTE(node-breaker)).
- breaker: each replica's ``kvpool_remote_breaker_state`` and ``errors_total{kind=timeout}``
  polled every 50 ms: timeouts while it opens, seconds until it is closed again.

Everything started here is stopped by pid at the end (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Sequence

import aiohttp

from bench.common import machine, write_json
from stress.http.mode import HttpConfig, HttpStress
from stress.http.workload import WorkloadConfig
from stress.http.metrics import MetricsScrape, wait_drained
from stress.report import percentile
from stress.http.servers import ROOT, SpawnedServer
from bench.redis_faults import fault_target
from bench.fault_hits import HitProbe

ROUTER_READY = "kvpool router: listening on http://"
REPLICA_ARGS = ["--num-device-blocks", "256", "--num-host-blocks", "256", "--max-model-len",
                "512", "--max-num-seqs", "64", "--enable-prefix-caching",
                "--invariant-check-interval", "4", "--remote-write-policy", "write_through",
                "--remote-prefetch-timeout-ms", "500", "--log-level", "warning"]
# the stress report's figures the result keeps
STRESS_KEYS = ("requests", "ok", "failed", "unexpected_5xx", "failure_details", "disconnected",
               "busy_or_quota_rejected", "greedy_checked", "greedy_mismatches", "ttft_p50_s",
               "ttft_p99_s")


class RouterProcess:
    """``python -m kvpool router`` on a free loopback port; stopped by pid."""

    def __init__(self, replicas: list[str], extra_args: Sequence[str] = (),
                 root: str | None = None) -> None:
        """``root``: run the kvpool of another checkout (bench.route_live --baseline)."""
        self.replicas = replicas
        self.extra_args = list(extra_args)  # e.g. --policy round_robin (bench/route_live.py)
        self.root = root
        self.proc: subprocess.Popen | None = None
        self.url: str | None = None

    def start(self, timeout: float = 60.0) -> str:
        cmd = [sys.executable, "-m", "kvpool", "router", "--host", "127.0.0.1", "--port", "0",
               "--log-level", "warning"]
        for r in self.replicas:
            cmd += ["--replica", r]
        cmd += self.extra_args
        env = None if self.root is None else {**os.environ, "PYTHONPATH": self.root}
        self.proc = subprocess.Popen(cmd, cwd=self.root or ROOT, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, bufsize=1)
        ready = threading.Event()
        lines: list[str] = []

        def read() -> None:
            for line in self.proc.stdout:
                lines.append(line)
                if line.startswith(ROUTER_READY) and self.url is None:
                    self.url = "http://" + line[len(ROUTER_READY):].split()[0]
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True, name="router-log").start()
        if not ready.wait(timeout) or self.url is None:
            self.stop()
            raise RuntimeError("kvpool router did not start:\n" + "".join(lines[-20:]))
        return self.url

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def start_replicas(servers: list[SpawnedServer]) -> list[str]:
    """Start every replica at once (one thread each: startups overlap); their URLs."""
    threads = [threading.Thread(target=s.start) for s in servers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if any(s.url is None for s in servers):
        raise RuntimeError("a replica did not start:\n" + "\n".join(s.tail() for s in servers))
    return [s.url for s in servers]


def scrape_sync(url: str) -> MetricsScrape | None:
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=2) as r:
            return MetricsScrape.parse(r.read().decode())
    except OSError:
        return None


class BreakerWatch(threading.Thread):
    """Polls every replica's breaker state and timeout count (t, [state], [timeouts])."""

    def __init__(self, replicas: list[str], interval: float = 0.05) -> None:
        super().__init__(daemon=True, name="breaker-watch")
        self.replicas, self.interval = replicas, interval
        self.samples: list[tuple[float, list[int], list[float]]] = []
        self.stop_evt = threading.Event()

    def run(self) -> None:
        while not self.stop_evt.is_set():
            t = time.monotonic()
            ms = [scrape_sync(u) for u in self.replicas]
            if all(m is not None for m in ms):
                self.samples.append((t, [int(m.get("kvpool_remote_breaker_state")) for m in ms],
                                     [m.get("kvpool_remote_errors_total", kind="timeout")
                                      for m in ms]))
            self.stop_evt.wait(self.interval)

    def opened(self, since: float) -> tuple[float | None, list[float] | None]:
        """(first time every breaker had left CLOSED after ``since``, timeouts then)."""
        for t, states, tos in self.samples:
            if t >= since and all(s != 0 for s in states):
                return t, tos
        return None, None

    def closed(self, since: float) -> float | None:
        for t, states, _ in self.samples:
            if t >= since and all(s == 0 for s in states):
                return t
        return None

    def timeouts_at(self, at: float) -> list[float] | None:
        """Timeout counts of the last sample at or before ``at``."""
        last = None
        for t, _, tos in self.samples:
            if t > at:
                break
            last = tos
        return last


class TtftProbe(threading.Thread):
    """Streams one fresh prompt at a time through the router: (start, ttft or None, ok)."""

    def __init__(self, url: str, interval: float, seed: int = 1) -> None:
        super().__init__(daemon=True, name="ttft-probe")
        self.host, _, port = url.removeprefix("http://").rpartition(":")
        self.port = int(port)
        self.interval = interval
        self.rng = random.Random(seed)
        self.samples: list[tuple[float, float | None, bool]] = []
        self.stop_evt = threading.Event()

    def one(self) -> tuple[float | None, bool]:
        prompt = [self.rng.randrange(1, 500) for _ in range(16 * 4 + 3)]
        body = json.dumps({"prompt": prompt, "max_tokens": 1, "temperature": 0,
                           "ignore_eos": True, "stream": True}).encode()
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        t0 = time.monotonic()
        try:
            conn.request("POST", "/v1/completions", body,
                         {"Content-Type": "application/json"})
            resp = conn.getresponse()
            if resp.status != 200:
                return None, False
            ttft = None
            done = False
            for line in resp:
                if ttft is None and line.startswith(b"data: {"):
                    ttft = time.monotonic() - t0
                if line.startswith(b"data: [DONE]"):
                    done = True
            return ttft, done and ttft is not None
        except OSError:
            return None, False
        finally:
            conn.close()

    def run(self) -> None:
        while not self.stop_evt.is_set():
            t0 = time.monotonic()
            ttft, ok = self.one()
            self.samples.append((t0, ttft, ok))
            self.stop_evt.wait(max(0.0, self.interval - (time.monotonic() - t0)))

    def ttfts(self, lo: float, hi: float) -> list[float]:
        return [x for t, x, ok in self.samples if lo <= t < hi and ok and x is not None]


def inject(redis, args, marks: dict[str, float]) -> None:
    """The fault schedule (its own thread): marks[name] = monotonic time of each step."""
    time.sleep(args.baseline)
    marks["sigstop"] = time.monotonic()
    redis.pause()
    time.sleep(args.stop)
    marks["sigcont"] = time.monotonic()
    redis.resume()
    time.sleep(args.after)
    marks["kill"] = time.monotonic()
    redis.kill()
    time.sleep(args.down)
    redis.start()  # same port, empty (no persistence)
    marks["restart"] = time.monotonic()
    time.sleep(args.after)
    marks["end"] = time.monotonic()


async def drain_all(replicas: list[str]) -> dict:
    out = {"leaked_device_blocks": 0, "leaked_host_blocks": 0, "requests_after_drain": 0,
           "queue_slots_after_drain": 0, "invariant_violations": 0}
    async with aiohttp.ClientSession() as s:
        for u in replicas:
            m, _ = await wait_drained(s, u, timeout=30)
            out["leaked_device_blocks"] += m.used_blocks("device")
            out["leaked_host_blocks"] += m.used_blocks("host")
            out["requests_after_drain"] += m.requests_in_flight()
            out["queue_slots_after_drain"] += m.queue_slots()
            out["invariant_violations"] += m.invariant_violations()
    return out


def ms(v: float | None) -> float | None:
    return None if v is None else round(v * 1000, 3)


def figures(marks, watch: BreakerWatch, probe: TtftProbe) -> dict:
    out: dict = {}
    for fault, start, end in (("stop", "sigstop", "sigcont"), ("kill", "kill", "restart")):
        opened, tos_open = watch.opened(marks[start])
        before = watch.timeouts_at(marks[start])
        at_end = watch.timeouts_at(marks[end])
        closed = watch.closed(marks[end])
        out[f"{fault}_breaker_open_after_s"] = None if opened is None else round(
            opened - marks[start], 3)
        if before is not None and tos_open is not None:
            out[f"{fault}_timeouts_while_opening"] = [int(b - a) for a, b in
                                                      zip(before, tos_open)]
        if before is not None and at_end is not None:
            out[f"{fault}_timeouts_total"] = [int(b - a) for a, b in zip(before, at_end)]
        out[f"{fault}_recovery_s"] = None if closed is None else round(closed - marks[end], 3)
        # a request caught while the breaker opens waits for its call's deadline, once
        opening = probe.ttfts(marks[start], opened if opened is not None else marks[end])
        out[f"{fault}_opening_ttft_max_ms"] = ms(max(opening, default=None))
        window = probe.ttfts(opened, marks[end]) if opened is not None else []
        out[f"{fault}_open_probes"] = len(window)
        out[f"{fault}_open_ttft_p50_ms"] = ms(percentile(window, 50))
        out[f"{fault}_open_ttft_p99_ms"] = ms(percentile(window, 99))
    base = probe.ttfts(0.0, marks["sigstop"])
    out["baseline_probes"] = len(base)
    out["baseline_ttft_p50_ms"] = ms(percentile(base, 50))
    out["baseline_ttft_p99_ms"] = ms(percentile(base, 99))
    for fault in ("stop", "kill"):
        p99 = out[f"{fault}_open_ttft_p99_ms"]
        out[f"{fault}_added_ttft_p99_ms"] = (None if p99 is None or not base
                                             else round(p99 - out["baseline_ttft_p99_ms"], 3))
    out["probe_failures"] = sum(1 for _, _, ok in probe.samples if not ok)
    return out


def _duration(args) -> float:
    """Seconds of load: the baseline, every fault and its aftermath, and a second to spare."""
    return args.baseline + args.stop + args.after * 2 + args.down + 1.0


def _stress(router_url: str, args) -> HttpStress:
    return HttpStress(HttpConfig(url=router_url, clients=args.clients,
                                 duration=_duration(args), request_timeout=60.0, progress=False,
                                 workload=WorkloadConfig(hostile_rate=0.0, seed=args.seed)))


def _fill(result: dict, report: dict, urls: list[str], marks: dict[str, float],
          watch: BreakerWatch, probe: TtftProbe) -> dict:
    """The result's figures from the stress report, the replicas' drain and the fault marks."""
    figs = report.get("figures", report)
    result["stress"] = {k: figs.get(k) for k in STRESS_KEYS}
    result["drain"] = asyncio.run(drain_all(urls))
    result["faults"] = figures(marks, watch, probe)
    result["failed_requests"] = (figs.get("failed") or 0) + result["faults"]["probe_failures"]
    result["leaked_blocks"] = (result["drain"]["leaked_device_blocks"]
                               + result["drain"]["leaked_host_blocks"])
    return result


def run(args) -> dict:
    redis = fault_target(args)
    replicas = [SpawnedServer([*REPLICA_ARGS, "--remote-url", redis.url, "--replica-id",
                               f"r{i + 1}"]) for i in range(args.replicas)]
    router = None
    watch = probe = hits = None
    result: dict = {"bench": "remote_faults", "machine": machine(), "config": vars(args)}
    try:
        redis.start()
        urls = start_replicas(replicas)
        router = RouterProcess(urls)
        router_url = router.start()
        stress = _stress(router_url, args)
        watch = BreakerWatch(urls)
        probe = TtftProbe(router_url, args.probe_interval)
        # NOTE(node-breaker)'s case: hits on the live masters' keys (bench/fault_hits.py)
        hits = HitProbe(urls) if getattr(args, "cluster", False) and len(urls) > 1 else None
        marks: dict[str, float] = {}
        faults = threading.Thread(target=inject, args=(redis, args, marks), daemon=True)
        for th in (watch, probe, faults, *([hits] if hits is not None else [])):
            th.start()
        report = stress.run().to_dict()
        faults.join(_duration(args) + 30)
        probe.stop_evt.set()
        probe.join(60)
        watch.stop_evt.set()
        watch.join(10)
        if hits is not None:
            result["hits"] = hits.finish(marks)
        return _fill(result, report, urls, marks, watch, probe)
    finally:
        for th in (probe, watch, hits):
            if th is not None:
                th.stop_evt.set()
        if router is not None:
            router.stop()
        for r in replicas:
            r.stop()
        redis.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.remote_faults", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--clients", type=int, default=6, help="stress http clients")
    p.add_argument("--baseline", type=float, default=4.0, help="seconds before SIGSTOP")
    p.add_argument("--stop", type=float, default=3.0, help="seconds Redis stays SIGSTOPped")
    p.add_argument("--after", type=float, default=3.0, help="seconds after SIGCONT / restart")
    p.add_argument("--down", type=float, default=2.0, help="seconds Redis stays killed")
    p.add_argument("--probe-interval", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="write the figures here")
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("--cluster", action="store_true",
                      help="a 3-master cluster with a replica per master instead of one Redis")
    kind.add_argument("--sentinel", action="store_true",
                      help="a sentinel-managed master and replica instead of one Redis")
    args = p.parse_args(argv)
    result = run(args)
    print(json.dumps(result, indent=1, sort_keys=True))
    write_json(args.json, result)
    return 0 if result["failed_requests"] == 0 and result["leaked_blocks"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
