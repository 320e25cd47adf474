"""A real Prometheus (/usr/bin/prometheus) scrapes a real server on 127.0.0.1 every second:
the pool gauges arrive, a swap-forcing load shows up as swap-out blocks, and every dashboard
expression evaluates on the live data."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
import time
from pathlib import Path

import aiohttp
import pytest

from bench.redis_ports import reserve_port
from tests.server.grafana import dashboard_exprs, load_dashboard, plain
from tests.server.helpers import stop_process

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
pytestmark = pytest.mark.skipif(
    not Path(PROMETHEUS).is_file(),
    reason="the prometheus binary is not installed (apt-get install prometheus; .ci/run does)")

WAIT = 30.0  # seconds any one Prometheus condition may take


@contextlib.asynccontextmanager
async def prometheus(target: str, tmp: Path):
    """Prometheus on 127.0.0.1:<free port> scraping ``target`` (host:port) every second."""
    config = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                         "evaluation_interval": "1s"},
              "scrape_configs": [{"job_name": "kvpool", "metrics_path": "/metrics",
                                  "static_configs": [{"targets": [target]}]}]}
    (tmp / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    # held until Prometheus is stopped: Go's listeners set SO_REUSEADDR on Linux, so it binds
    # there all the same, and no other process draws the port first (bench/redis_ports.py
    # NOTE(port-hold))
    port, held = reserve_port()
    log = open(tmp / "prometheus.log", "wb")
    proc = subprocess.Popen(
        [PROMETHEUS, f"--config.file={tmp / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}",
         "--log.level=warn"], stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as s:
            deadline = time.monotonic() + WAIT
            while True:
                assert proc.poll() is None, (tmp / "prometheus.log").read_text()
                with contextlib.suppress(aiohttp.ClientError):
                    async with s.get(base + "/-/ready") as r:
                        if r.status == 200:
                            break
                assert time.monotonic() < deadline, "prometheus did not become ready"
                await asyncio.sleep(0.1)
        yield base
    finally:
        stop_process(proc, timeout=10)
        log.close()
        for sock in held:
            sock.close()


async def query(base: str, expr: str) -> dict:
    async with aiohttp.ClientSession() as s:
        async with s.get(base + "/api/v1/query", params={"query": expr}) as r:
            body = await r.json()
    assert body["status"] == "success", (expr, body)
    return body["data"]


async def wait_for_value(base: str, expr: str, predicate, what: str) -> float:
    deadline = time.monotonic() + WAIT
    last = None
    while time.monotonic() < deadline:
        result = (await query(base, expr))["result"]
        if result:
            last = float(result[0]["value"][1])
            if predicate(last):
                return last
        await asyncio.sleep(0.25)
    raise AssertionError(f"{what}: {expr} never satisfied the check in {WAIT}s (last {last})")


@pytest.mark.timeout(90)  # a wedged engine (a swap that never completes) fails, not hangs
async def test_prometheus_scrapes_pool_gauges_and_swap_counters(make_server, tmp_path):
    # 8 device blocks of 16 tokens; four 110-token generations need ~28: the scheduler must
    # preempt, and with preemption_mode=swap that copies blocks out to the 64 host blocks
    async with make_server(num_device_blocks=8, num_host_blocks=64, preemption_mode="swap",
                           max_num_seqs=8, enable_prefix_caching=False) as srv:
        target = srv.url.removeprefix("http://")
        async with prometheus(target, tmp_path) as prom:
            await wait_for_value(prom, 'kvpool_free_blocks{tier="device"}',
                                 lambda v: v == 8, "idle device pool")
            body = {"prompt": [65 + i for i in range(40)], "max_tokens": 70,
                    "ignore_eos": True, "temperature": 0}
            async with aiohttp.ClientSession() as s:
                async def one(i: int) -> dict:
                    async with s.post(srv.url + "/v1/completions",
                                      json={**body, "seed": i}) as r:
                        assert r.status == 200, await r.text()
                        return await r.json()

                # bounded: a wedged engine (e.g. a swap that never completes) fails here
                results = await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(4))),
                                                 timeout=WAIT)
            assert all(r["usage"]["completion_tokens"] == 70 for r in results)
            await wait_for_value(prom, 'kvpool_swap_blocks_total{direction="out"}',
                                 lambda v: v > 0, "swap-out blocks")
            await wait_for_value(prom, 'kvpool_preemptions_total{mode="swap"}',
                                 lambda v: v > 0, "swap preemptions")
            await wait_for_value(prom, "kvpool_e2e_request_latency_seconds_count",
                                 lambda v: v >= 4, "e2e latency observations")
            # vLLM's labels and vllm:iteration_tokens_total: each request computes its 40
            # prompt tokens and 69 decodes (a swap moves blocks, it recomputes none)
            model = f'{{model_name="{srv.engine.model_name}"}}'
            await wait_for_value(prom, f"kvpool_time_to_first_token_seconds_count{model}",
                                 lambda v: v == 4, "TTFT observations labelled model_name")
            await wait_for_value(prom, f"kvpool_iteration_tokens_sum{model}",
                                 lambda v: v == 4 * (40 + 69), "tokens computed per step")
            await wait_for_value(prom, 'kvpool_free_blocks{tier="device"}',
                                 lambda v: v == 8, "device pool drained again")
            # the real PromQL parser accepts every dashboard expression, on live data
            for expr in dashboard_exprs(load_dashboard()):
                await query(prom, plain(expr))
