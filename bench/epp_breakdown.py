"""Where the endpoint picker path's added latency goes: one Envoy hop at a time.

    python -m bench.epp_breakdown [--rounds 300] [--repeats 3] [--baseline DIR] [--json F]

Two ``kvpool serve`` replicas (KV events on, as bench.route_live runs them), then these arms in
interleaved rounds of one small cached request each (bench.route_epp's request):

    direct      the first replica
    envoy_hdr   Envoy, the shipped config without its ext_proc filter; the client sends
                x-gateway-destination-endpoint itself (ORIGINAL_DST, no picker)
    envoy_noop  Envoy, the shipped config, in front of a picker that answers a fixed endpoint
                (kvpool.epp's service and gRPC server, no decision)
    epp         Envoy, the shipped config, in front of ``kvpool epp`` (KV-event decisions)

So envoy_hdr - direct is Envoy's own proxying, envoy_noop - envoy_hdr the ext_proc exchange,
epp - envoy_noop the decision. Per arm and repeat the p50 added over direct; across repeats the
median [min-max]. Everything started here is stopped by pid.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from argparse import Namespace
from pathlib import Path

import aiohttp
import yaml

from bench.common import write_json
from bench.envoy_proc import Envoy
from bench.remote_faults import start_replicas
from bench.route_epp import EppFront, start_all
from bench.route_live import replica_args, router_args
from bench.route_workload import block_tokens
from kvpool.router.cli import event_loop_factory
from stress.http.servers import SpawnedServer
from stress.report import percentile

__all__ = ["main"]

DEST = "x-gateway-destination-endpoint"


def without_ext_proc(envoy: Envoy) -> None:
    """Rewrite ``envoy``'s config: the shipped one with its ext_proc filter removed."""
    conf = yaml.safe_load(envoy.config.read_text())
    hcm = conf["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
    filters = hcm["typed_config"]["http_filters"]
    hcm["typed_config"]["http_filters"] = [f for f in filters if "ext_proc" not in f["name"]]
    envoy.config.write_text(json.dumps(conf))


class NoopFront(EppFront):
    """A picker answering one fixed endpoint (``python -m bench.epp_breakdown noop``)."""

    def __init__(self, endpoint: str, root: str | None = None) -> None:
        """``root``: another checkout's kvpool serves it (this file runs as a script there:
        the checkout need not have it)."""
        super().__init__([], [], root=root)
        self.cmd = [sys.executable, "-m", "bench.epp_breakdown", "noop", endpoint]
        if root:  # run_path: the script's own folder stays off sys.path (bench/copy.py)
            self.cmd[1:3] = ["-c", _RUN_PATH, str(Path(__file__).resolve())]


_RUN_PATH = ("import runpy, sys; f = sys.argv[1]; sys.argv = sys.argv[1:]; "
             "runpy.run_path(f, run_name='__main__')")


async def _one(session, url: str, body: dict, headers: dict) -> float:
    t0 = time.perf_counter()
    async with session.post(url + "/v1/completions", json=body, headers=headers) as resp:
        await resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{url}: {resp.status}")
    return time.perf_counter() - t0


async def rounds(arms: dict[str, tuple[str, dict]], body: dict, n: int) -> dict[str, list]:
    names = list(arms)
    out: dict[str, list[float]] = {k: [] for k in names}
    async with aiohttp.ClientSession() as session:
        for k in names:
            for _ in range(5):
                await _one(session, arms[k][0], body, arms[k][1])
        for i in range(n):
            for k in names[i % len(names):] + names[:i % len(names)]:
                out[k].append(await _one(session, arms[k][0], body, arms[k][1]))
    return out


def start_arms(urls: list[str], fronts: list, workdir: str,
               baseline: str | None) -> dict[str, tuple[str, dict]]:
    endpoint = urls[0].split("//", 1)[1]
    hdr = Envoy(1, Path(workdir))  # the picker's cluster stays, never asked
    without_ext_proc(hdr)
    fronts.append(hdr)
    hdr.start()
    flags = router_args("kv_events", Namespace(lookup_timeout_ms=1000.0))
    pickers = {"envoy_noop": NoopFront(endpoint), "epp": EppFront(urls, flags)}
    if baseline:  # the same arms on another checkout's kvpool, in the same rounds
        pickers |= {"envoy_noop@base": NoopFront(endpoint, baseline),
                    "epp@base": EppFront(urls, flags, root=baseline)}
    fronts += pickers.values()
    return {"direct": (urls[0], {}), "envoy_hdr": (hdr.url, {DEST: endpoint}),
            **{k: (u, {}) for k, u in start_all(pickers).items()}}


def breakdown(urls: list[str], n: int, repeats: int, baseline: str | None = None) -> dict:
    ids = [t for h in range(8) for t in block_tokens(h, "epp", 16)] + [11]
    body = {"prompt": ids, "max_tokens": 1, "temperature": 0}
    fronts: list = []
    workdir = tempfile.TemporaryDirectory(prefix="epp_breakdown-")
    try:
        arms = start_arms(urls, fronts, workdir.name, baseline)
        runs = []
        for _ in range(repeats):
            lat = asyncio.run(rounds(arms, body, n))
            p50 = {k: percentile(sorted(1000 * x for x in v), 50) for k, v in lat.items()}
            runs.append({k: round(v - p50["direct"], 3) for k, v in p50.items()}
                        | {"direct_p50_ms": round(p50["direct"], 3),
                           "load": os.getloadavg()[0]})
    finally:
        for f in fronts:
            f.stop()
        workdir.cleanup()
    keys = [k for k in runs[0] if k != "load"]
    return {"rounds": n, "runs": runs,
            "added_p50_ms": {k: [statistics.median(r[k] for r in runs),
                                 min(r[k] for r in runs), max(r[k] for r in runs)]
                             for k in keys}}


async def noop_picker(endpoint: str) -> None:
    """The epp service and server of kvpool.epp, its decision replaced by ``endpoint``."""
    from kvpool.epp.cli import READY_PREFIX, picking

    from kvpool.epp import picker as real

    pick = getattr(real, "Pick", None)  # a checkout before it (--baseline): a pair

    class Fixed:
        router = Namespace(max_body_bytes=1 << 22, replicas=Namespace(replicas=[]))
        picks = full_duplex = fallbacks = 0
        errors: Counter[int] = Counter()
        no_endpoint: Counter[str] = Counter()
        retries = None  # no --fallbacks: Envoy's retries unchecked

        async def start(self): ...

        async def close(self): ...

        async def pick_body(self, path, raw, headers, method="POST", subset=None):
            return (endpoint, raw) if pick is None else pick(endpoint, raw)

    async with picking(Fixed(), "127.0.0.1", 0) as port:
        print(f"{READY_PREFIX}127.0.0.1:{port} (noop)", flush=True)
        await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["noop"]:  # on kvpool epp's own loop (uvloop where installed)
        with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
            runner.run(noop_picker(argv[1]))
        return 0
    p = argparse.ArgumentParser(prog="python -m bench.epp_breakdown", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=300)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--baseline", default=None, metavar="DIR",
                   help="another checkout: its picker as envoy_noop@base and epp@base")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    opts = Namespace(block_size=16, device_blocks=256, host_blocks=64, kv_events=True)
    fleet = [SpawnedServer(replica_args(opts, i, None), startup_timeout=120) for i in range(2)]
    try:
        res = breakdown(start_replicas(fleet), args.rounds, args.repeats, args.baseline)
    finally:
        for s in fleet:
            s.stop(timeout=20)
    for k, (med, lo, hi) in res["added_p50_ms"].items():
        print(f"  {k:<14} {med:8.3f} [{lo:.3f}-{hi:.3f}] ms")
    print("loads:", [r["load"] for r in res["runs"]])
    write_json(args.json, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
